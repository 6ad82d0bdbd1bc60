"""`klamm serve` leaves the objects start-up built out of the cyclic collector's full passes (gc.freeze), so a
full collection scans only what came after (bench/gc_pauses.py: 24 ms → 2 ms pauses); while it serves, a slow
full collection freezes what it kept (bench/gc_partitions.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import asyncio, gc, os, signal, sys
    from klamm.broker.broker import Broker
    from klamm.cli.collector import SlowCollectionFreezer
    from klamm.cli.main import serve
    from klamm.config.broker import BrokerConfig

    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": sys.argv[1]})
    frozen, freezers = [], []

    def freezing() -> int:
        return sum(isinstance(c, SlowCollectionFreezer) for c in gc.callbacks)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        def look() -> None:  # once serve() has started the broker
            frozen.append(gc.get_freeze_count())
            freezers.append(freezing())
            os.kill(os.getpid(), signal.SIGTERM)
        loop.call_later(1.0, look)
        await serve(Broker(config))

    assert gc.get_freeze_count() == 0
    asyncio.run(main())
    print(freezers[0], freezing())
    print(frozen[0])
""")


def test_serve_freezes_what_start_up_built(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "data")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    *_, freezers, frozen = result.stdout.strip().splitlines()
    assert int(frozen) > 10_000  # modules, configs, the image, the broker
    assert freezers == "1 0"  # slow full collections freeze their survivors while it serves (collector.py)


LOADING = textwrap.dedent("""
    import asyncio, gc
    import klamm.broker.background, klamm.protocol.api  # imported by serve's start-up, before its freeze
    from klamm.cli.main import _load_message_types

    gc.collect()
    gc.freeze()
    largest = [0]

    def watch(phase, info):
        if phase == "stop":
            largest[0] = max(largest[0], len(gc.get_objects(generation=2)))

    gc.callbacks.append(watch)
    asyncio.run(_load_message_types({0: (3, 11), 1: (4, 17), 3: (0, 12), 8: (2, 9), 9: (1, 9)}))
    gc.callbacks.remove(watch)
    print(largest[0])
""")


def test_serve_freezes_each_message_type_as_it_is_made(tmp_path: Path) -> None:
    """The message types made after start-up (in a thread) are frozen a version at a time: a full collection
    walks what the collector's oldest generation holds, and it never holds the types made so far."""
    result = subprocess.run([sys.executable, "-c", LOADING], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.strip()) < 3_000
