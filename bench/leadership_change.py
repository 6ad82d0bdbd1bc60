"""What a leadership change holds the event loop for: ReplicaManager.apply_image making this broker the leader
of N partitions again, at a new leader epoch (what a fail-over or a preferred-leader election hands a broker).

    .venv/bin/python bench/leadership_change.py [--partitions 1000,3000] [--rounds 5]

For each N: an image of N/10 topics of 10 partitions led by this node (logs created in a temporary directory),
then `rounds` times an image handing every leadership to node 2 and one handing it back; the second is timed,
on the calling thread, as on the broker's event loop. Prints the median and largest in milliseconds, and how
long the replica manager's shutdown then takes (every log closed: flushed, its producer state snapshotted).
Run it with PYTHONPATH pointing at another checkout's tree for a before and after.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from apply_image import NODE, image_of, replay  # bench/ is the script's directory: first on sys.path

from klamm.broker.partition import log_config
from klamm.broker.replica_manager import ReplicaManager
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.controller.records import MetadataRecord
from klamm.storage.log_manager import LogManager


def leaders(image, partitions: int, leader: int):  # type: ignore[no-untyped-def]
    return replay(image, [MetadataRecord("PartitionChangeRecord", {
        "topic_id": uuid.UUID(int=t + 1), "partition_id": i, "leader": leader})
        for t in range(partitions // 10) for i in range(10)])


def measure(partitions: int, rounds: int) -> tuple[list[float], float]:
    image = image_of(partitions)
    image = replay(image, [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": 2, "incarnation_id": uuid.UUID(int=2), "broker_epoch": 11, "end_points": [],
        "features": [], "rack": None, "fenced": False})])
    times = []
    with tempfile.TemporaryDirectory(prefix="klamm-leadership-") as tmp:
        config = BrokerConfig.from_properties({"node.id": str(NODE), "log.dirs": tmp})
        replicas = ReplicaManager(NODE, config, LogManager([Path(tmp)], log_config(TopicConfig.resolve(config, {}))))
        try:
            replicas.apply_image(image)
            for _ in range(rounds):
                image = leaders(image, partitions, 2)
                replicas.apply_image(image)
                image = leaders(image, partitions, NODE)
                started = time.perf_counter()
                replicas.apply_image(image)
                times.append(time.perf_counter() - started)
        finally:
            started = time.perf_counter()
            replicas.shutdown()
            shutdown = time.perf_counter() - started
    return times, shutdown


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="1000,3000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import klamm
    print(f"klamm from {Path(klamm.__file__).parent}")
    print("| partitions | leadership back, median | largest | shutdown |")
    print("|---|---|---|---|")
    for partitions in (int(p) for p in args.partitions.split(",")):
        times, shutdown = measure(partitions, args.rounds)
        print(f"| {partitions:,} | {statistics.median(times) * 1000:.1f} ms | {max(times) * 1000:.1f} ms "
              f"| {shutdown * 1000:.0f} ms |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
