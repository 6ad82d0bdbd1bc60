"""Where a CreateTopics of many partitions spends the event loop's time, phase by phase, in one process.

    .venv/bin/python bench/create_topic_phases.py [--partitions 1000] [--rounds 3]

Starts an embedded broker (klamm.testing.run_broker), wraps the functions a creation goes through with a
wall-clock timer, creates one topic of `--partitions` partitions with confluent-kafka's AdminClient, and prints
the milliseconds each phase took in all (the garbage collector off meanwhile, so that a collection is not
charged to whichever phase it fell in). `_commit` is the controller's commit (encoding what it was not given
encoded, the metadata log's append, the image builder), `apply_image` the replica manager applying the
published image; `become_leader` and `encode_record` count wherever they run, ahead of the commit included.
Run a before and an after by putting another tree first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import functools
import gc
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

import klamm.broker.partition as partition_module
import klamm.broker.replica_manager as replica_manager_module
import klamm.controller.controller as controller_module
import klamm.controller.metadata_log as metadata_log_module
from klamm.testing import run_broker

PHASES: list[tuple[Any, str]] = [
    (controller_module, "encode_record"), (controller_module, "complete_record"),
    (controller_module.ImageBuilder, "apply"), (metadata_log_module.FileMetadataLog, "append"),
    (controller_module.Controller, "_commit"), (replica_manager_module.ReplicaManager, "apply_image"),
    (replica_manager_module.ReplicaManager, "_create"), (partition_module.Partition, "become_leader"),
]


def timed(owner: Any, name: str, totals: dict[str, float]) -> None:
    original: Callable[..., Any] = getattr(owner, name)
    label = f"{getattr(owner, '__name__', '?').rsplit('.', 1)[-1]}.{name}"

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            totals[label] = totals.get(label, 0.0) + (time.perf_counter() - started) * 1000
    setattr(owner, name, wrapper)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import klamm  # noqa: PLC0415  # which tree runs (PYTHONPATH)
    print(f"klamm from {klamm.__file__}")
    totals: dict[str, float] = {}
    for owner, name in PHASES:
        timed(owner, name, totals)
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        with run_broker() as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
            admin.create_topics([NewTopic("warm-up", 1, 1)])["warm-up"].result(60)
            time.sleep(0.5)
            totals.clear()
            gc.disable()
            try:
                admin.create_topics([NewTopic("wide", args.partitions, 1)])["wide"].result(120)
                time.sleep(0.5)
            finally:
                gc.enable()
            rounds.append(dict(totals))
            del admin
    print(f"| phase ({args.partitions:,} partitions) | " + " | ".join(f"round {i + 1} ms" for i in range(len(rounds)))
          + " |")
    print("|---|" + "---|" * len(rounds))
    for label in sorted({label for r in rounds for label in r}):
        print(f"| {label} | " + " | ".join(f"{r.get(label, 0.0):.2f}" for r in rounds) + " |")


if __name__ == "__main__":
    main()
