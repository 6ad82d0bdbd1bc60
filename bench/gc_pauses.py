"""Pauses of Python's cyclic garbage collector in a broker under load, with and without `klamm serve`'s freeze of
the objects start-up built (klamm/cli/main.py).

    .venv/bin/python bench/gc_pauses.py [--seconds 40]

For each variant it runs a broker in a child process (as `klamm serve` runs one: started, then, in the
"frozen" variant, gc.collect() and gc.freeze()), times every collection with gc.callbacks, and drives it with
a librdkafka producer and a group consumer of 100 B records for `--seconds`. A full (generation 2) collection
stops the event loop for as long as it takes, which every request in flight then waits out.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_broker(port: int, freeze: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from klamm.testing import broker

    durations: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: list[float] = [0.0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            durations[info["generation"]].append(time.perf_counter() - started[0])

    async def serve() -> None:
        async with broker(listeners=f"PLAINTEXT://127.0.0.1:{port}"):
            if freeze:
                gc.collect()
                gc.freeze()
            gc.callbacks.append(timed)
            stop = asyncio.Event()
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
            await stop.wait()
            gc.callbacks.remove(timed)

    asyncio.run(serve())
    for generation, times in durations.items():
        if times:
            print(f"{generation} {len(times)} {max(times) * 1000:.2f} {sum(times) * 1000:.0f}", flush=True)
    print(f"tracked {len(gc.get_objects())} frozen {gc.get_freeze_count()}", flush=True)


def load(port: int, seconds: float) -> None:
    from confluent_kafka import Consumer, Producer

    bootstrap = f"127.0.0.1:{port}"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gc", "auto.offset.reset": "earliest"})
    consumer.subscribe(["gc-load"])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.produce("gc-load", bytes(100))
        producer.poll(0)
        consumer.consume(100, 0.0005)
        time.sleep(0.0005)
    producer.flush(10)
    consumer.close()


def variant(freeze: bool, seconds: float) -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    child = subprocess.Popen([sys.executable, __file__, "--broker", str(port)] + (["--freeze"] if freeze else []),
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    load(port, seconds)
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(60)
    rows = []
    for line in out.splitlines():
        fields = line.split()
        if fields[0].isdigit():
            rows.append(f"| {'frozen' if freeze else 'not frozen'} | {fields[0]} | {fields[1]} | {fields[2]} ms "
                        f"| {fields[3]} ms |")
        else:
            rows.append(f"| {'frozen' if freeze else 'not frozen'} | objects: {line} | | | |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=40)
    parser.add_argument("--broker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--freeze", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.broker:
        run_broker(args.broker, args.freeze)
        return
    print("| start-up objects | generation | collections | longest | total |")
    print("|---|---|---|---|---|")
    for freeze in (False, True):
        print(variant(freeze, args.seconds), flush=True)


if __name__ == "__main__":
    main()
