"""The event loop's time in ReplicaManager.apply_image for a new topic of many partitions, on one broker.

    .venv/bin/python bench/apply_image_new_topic.py [--topics 3] [--partitions 1000] [--profile]

Starts an embedded broker (klamm.testing.run_broker), wraps apply_image with a wall-clock timer, creates
`--topics` topics one after the other with confluent-kafka's AdminClient (the garbage collector off meanwhile),
and prints the milliseconds of each apply_image over 0.2 ms. `--profile` also prints a cProfile of those calls.
Run a before and an after by putting another tree first on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import pstats
import time
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

import klamm.broker.replica_manager as replica_manager_module
from klamm.testing import run_broker


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    original = replica_manager_module.ReplicaManager.apply_image
    profile = cProfile.Profile()
    times: list[float] = []

    def timed(self: Any, image: Any) -> None:
        wide = args.profile and any(len(t.partitions) >= args.partitions for t in image.topics_by_name.values())
        started = time.perf_counter()
        if wide:
            profile.enable()
        try:
            original(self, image)
        finally:
            if wide:
                profile.disable()
            times.append((time.perf_counter() - started) * 1000)
    replica_manager_module.ReplicaManager.apply_image = timed  # type: ignore[method-assign]

    with run_broker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        for n in range(args.topics):
            times.clear()
            gc.disable()
            try:
                admin.create_topics([NewTopic(f"wide-{n}", args.partitions, 1)])[f"wide-{n}"].result(120)
                time.sleep(0.5)
            finally:
                gc.enable()
            print(f"topic {n}: apply_image ms", [round(t, 2) for t in times if t > 0.2])
    if args.profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
