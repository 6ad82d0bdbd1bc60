"""`klamm serve` leaves the objects start-up built out of the cyclic collector's full passes (gc.freeze), so a
full collection scans only what came after (bench/gc_pauses.py: 24 ms → 2 ms pauses)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import asyncio, gc, os, signal, sys
    from klamm.broker.broker import Broker
    from klamm.cli.main import serve
    from klamm.config.broker import BrokerConfig

    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": sys.argv[1]})
    frozen = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        def look() -> None:  # once serve() has started the broker
            frozen.append(gc.get_freeze_count())
            os.kill(os.getpid(), signal.SIGTERM)
        loop.call_later(1.0, look)
        await serve(Broker(config))

    assert gc.get_freeze_count() == 0
    asyncio.run(main())
    print(frozen[0])
""")


def test_serve_freezes_what_start_up_built(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "data")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip().splitlines()[-1]) > 10_000  # modules, configs, the image, the broker
