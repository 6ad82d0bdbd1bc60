"""What the broker's periodic passes over its partitions cost the event loop: a Prometheus scrape, the
producer-id expiration, the periodic ISR check, the log cleaner's pick of the dirtiest log, the snapshot of
the recovery-point and log-start-offset checkpoints, and a retention pass that deletes nothing.

    .venv/bin/python bench/periodic_passes.py [--partitions 3000] [--compacted] [--rounds 5]

Starts an embedded broker (klamm.testing.broker, metrics on, `klamm serve`'s interpreter switch interval: a
background thread's hold on the interpreter lock delays the loop's steps by as much), creates the partitions
in topics of 100 with confluent-kafka's AdminClient, freezes them out of the collector's full passes as
`klamm serve`'s collector does, then runs each pass as the broker's own task would, `--rounds` times, timing
every step the loop runs of it: the pass's total and its longest step, which is how long the loop was held.
A pass that is one plain call (a tree from before the slices) is timed as one step. Run a before and an after
by putting another tree first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from klamm.testing import broker


async def stepped(start: Callable[[], Any]) -> tuple[float, float]:
    """(total ms, longest step ms) of one pass; each resumption of its coroutine is a step."""
    begun = time.perf_counter()
    work = start()
    if not inspect.isawaitable(work):
        ms = (time.perf_counter() - begun) * 1000
        return ms, ms
    steps, coro = [], work.__await__()
    while True:
        began = time.perf_counter()
        try:
            coro.send(None)
        except StopIteration:
            steps.append((time.perf_counter() - began) * 1000)
            break
        steps.append((time.perf_counter() - began) * 1000)
        await asyncio.sleep(0)
    return sum(steps), max(steps)


def passes(b: Any) -> dict[str, Callable[[], Any]]:
    from klamm.broker import producer_expiration

    br = b.broker
    metrics = br.metrics
    scrape = getattr(metrics, "exposition_in_slices", metrics.exposition)
    now = int(time.time() * 1000)
    expire = producer_expiration.expire_producers
    if "in_slices" in vars(producer_expiration):
        def expiration() -> Any:
            return producer_expiration.in_slices(expire(br.replicas.partitions, now, 86_400_000),
                                                 producer_expiration.SLICE_S)
    else:
        def expiration() -> Any:
            return expire(list(br.replicas.partitions.values()), now, 86_400_000)
    def checkpoints() -> Any:  # what the periodic checkpoint takes on the loop; the writing is the writer thread's
        in_slices = getattr(br.logs, "checkpoint_in_slices", None)
        return in_slices() if in_slices is not None else br.logs.checkpoint()

    return {"metrics scrape": scrape, "producer-id expiration": expiration, "ISR check": br.replicas.check_isr,
            "cleaner's pick": lambda: br.log_cleaner._grab_filthiest(now), "offset checkpoints": checkpoints,
            "retention pass": br.retention.run_pass}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=3000)
    parser.add_argument("--compacted", action="store_true", help="cleanup.policy=compact for every topic")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    config = {"cleanup.policy": "compact"} if args.compacted else {}
    try:
        from klamm.cli.main import SWITCH_INTERVAL_S
        sys.setswitchinterval(SWITCH_INTERVAL_S)
    except ImportError:  # a tree from before it
        pass
    async with broker(metrics_port=0) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        for n in range(args.partitions // 100):
            future = admin.create_topics([NewTopic(f"t{n}", 100, 1, config=config)])[f"t{n}"]
            while not future.done():
                await asyncio.sleep(0.01)
            future.result()
        await asyncio.sleep(1)
        # What klamm serve's collector does with long-lived objects (klamm/cli/collector.py freezes them after a
        # slow full collection): otherwise a full collection over the partitions lands in some pass's step.
        gc.collect()
        gc.freeze()
        print(f"{len(b.broker.replicas.partitions)} partitions{' (compacted)' if args.compacted else ''}, "
              f"{args.rounds} rounds: median total / median longest step / worst step, ms")
        for name, start in passes(b).items():
            rows = [await stepped(start) for _ in range(args.rounds)]
            totals, longest = [r[0] for r in rows], [r[1] for r in rows]
            print(f"  {name:24s} {statistics.median(totals):8.2f} / {statistics.median(longest):6.2f} / "
                  f"{max(longest):6.2f}")


if __name__ == "__main__":
    asyncio.run(main())
