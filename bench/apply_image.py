"""What one metadata change costs the replica manager: ReplicaManager.apply_image on a broker hosting N partitions.

    .venv/bin/python bench/apply_image.py [--partitions 3000,10000] [--against REV]

For each N: a metadata image of N/10 topics of 10 partitions, all led by this node, is applied once (the logs
are created in a temporary directory), then 20 images each changing one partition's ISR are applied one by
one; prints the median milliseconds of those 20. `--against REV` also runs the ReplicaManager of git
revision REV (klamm/broker/replica_manager.py as it was there, with today's other modules), for a before and
after. Everything runs on the calling thread, as on the broker's event loop: this is how long the loop stalls.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: a before/after run puts the other tree first

from klamm.broker import replica_manager
from klamm.broker.partition import log_config
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.controller.image import MetadataImage, apply_batch, empty_image
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.storage.log_manager import LogManager

NODE = 1


def replay(image: MetadataImage, records: list[MetadataRecord]) -> MetadataImage:
    return apply_batch(image, enumerate((decode_record(encode_record(r)) for r in records), start=image.offset + 1))


def image_of(partitions: int) -> MetadataImage:
    records = [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": NODE, "incarnation_id": uuid.UUID(int=NODE), "broker_epoch": 10, "end_points": [],
        "features": [], "rack": None, "fenced": False})]
    for t in range(partitions // 10):
        topic_id = uuid.UUID(int=t + 1)
        records.append(MetadataRecord("TopicRecord", {"name": f"t{t:05d}", "topic_id": topic_id}))
        records += [MetadataRecord("PartitionRecord", {
            "partition_id": i, "topic_id": topic_id, "replicas": [NODE], "isr": [NODE], "leader": NODE,
            "leader_epoch": 0, "partition_epoch": 0}) for i in range(10)]
    return replay(empty_image("bench", 0), records)


def measure(module: ModuleType, base: MetadataImage) -> float:
    with tempfile.TemporaryDirectory(prefix="klamm-apply-image-") as tmp:
        config = BrokerConfig.from_properties({"node.id": str(NODE), "log.dirs": tmp})
        replicas = module.ReplicaManager(NODE, config, LogManager([Path(tmp)], log_config(TopicConfig.resolve(config, {}))))
        try:
            replicas.apply_image(base)
            image, times = base, []
            for k in range(20):
                image = replay(image, [MetadataRecord("PartitionChangeRecord", {
                    "topic_id": uuid.UUID(int=k + 1), "partition_id": 0, "isr": [NODE]})])
                started = time.perf_counter()
                replicas.apply_image(image)
                times.append(time.perf_counter() - started)
        finally:
            replicas.shutdown()
    return statistics.median(times) * 1000


def revision(rev: str) -> ModuleType:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:klamm/broker/replica_manager.py"],
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="klamm-apply-image-rev-")) / "replica_manager_rev.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("replica_manager_rev", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="3000,10000")
    parser.add_argument("--against", metavar="REV", help="also measure replica_manager.py of this git revision")
    args = parser.parse_args()
    modules = [("now", replica_manager)] + ([(args.against, revision(args.against))] if args.against else [])
    print("| partitions | " + " | ".join(f"apply_image, {name}" for name, _ in modules) + " |")
    print("|---|" + "---|" * len(modules))
    for partitions in (int(p) for p in args.partitions.split(",")):
        base = image_of(partitions)
        print(f"| {partitions:,} | " + " | ".join(f"{measure(module, base):.3f} ms" for _, module in modules) + " |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
