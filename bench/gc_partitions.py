"""Full garbage collections in a broker that created many partitions after start-up.

    .venv/bin/python bench/gc_partitions.py [--partitions 10000] [--no-freezer]

An embedded broker with `klamm serve`'s collector settings (start-up collected and frozen, then, unless
--no-freezer, klamm.cli.collector's SlowCollectionFreezer) creates topics of 1,000 partitions (one replica)
until it has --partitions more. Printed: the tracked objects this added per partition, every collection over
1 ms while they were created (the broker's thread and the log-creation thread make them), and five full
collections afterwards, as the loop would meet them (each one stops the event loop for as long as it takes).
"""

from __future__ import annotations

import argparse
import gc
import time

from confluent_kafka.admin import AdminClient, NewTopic

from klamm.cli.collector import SlowCollectionFreezer
from klamm.testing import run_broker


class Timings:
    """Every collection's generation and milliseconds (gc.callbacks)."""

    def __init__(self) -> None:
        self.started = 0.0
        self.collections: list[tuple[int, float]] = []

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.collections.append((info["generation"], (time.perf_counter() - self.started) * 1000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=10000)
    parser.add_argument("--no-freezer", action="store_true")
    args = parser.parse_args()
    with run_broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic("warm-up", 1, 1)])["warm-up"].result(30)
        time.sleep(2)
        gc.collect()
        gc.freeze()  # klamm serve's start-up freeze
        freezer = SlowCollectionFreezer()
        if not args.no_freezer:
            freezer.install()
        timings = Timings()
        gc.callbacks.insert(0, timings)  # first: its "stop" is timed before the freezer's freeze
        before = len(gc.get_objects())
        started = time.monotonic()
        for i in range(0, args.partitions, 1000):
            name = f"wide-{i // 1000}"
            admin.create_topics([NewTopic(name, min(1000, args.partitions - i), 1)])[name].result(300)
        took = time.monotonic() - started
        time.sleep(2)
        tracked = len(gc.get_objects()) + gc.get_freeze_count() - before
        during = [(g, ms) for g, ms in timings.collections if ms > 1]
        timings.collections.clear()
        after = []
        for _ in range(5):
            gc.collect()
            after.append(round(timings.collections[-1][1], 1))
        gc.callbacks.remove(timings)
        freezer.uninstall()
        print(f"freezer: {'off' if args.no_freezer else 'on'}; {args.partitions:,} partitions created in "
              f"{took:.1f} s; {tracked / args.partitions:.1f} tracked objects a partition; "
              f"slow full collections frozen: {freezer.freezes}")
        print(f"collections over 1 ms while creating: {len(during)}, {sum(ms for _, ms in during):.0f} ms in all; "
              f"full ones (ms): {[round(ms, 1) for g, ms in during if g == 2]}; longest young one "
              f"{max((ms for g, ms in during if g < 2), default=0):.1f} ms")
        print(f"full collections afterwards (ms): {after}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
