"""Controller start-up time: replaying the whole metadata log against loading a snapshot plus the tail.

Builds a metadata log of `--topics` topics with `--partitions` partitions each
(10k topics and 100k PartitionRecords by default), created in batches of 100
topics after `--churn` rounds of creating and deleting them all (a cluster's
history: what the log holds and a snapshot does not), then times Controller.load() over the whole log, writes a snapshot,
appends a small tail, and times load() again:

    PYTHONPATH=$PWD .venv/bin/python bench/metadata_startup.py
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from klamm.controller.controller import Controller, CreateTopicSpec
from klamm.controller.metadata_log import FileMetadataLog
from klamm.controller.snapshot import list_snapshots, snapshot_path

CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"


def timed_load(log_dir: Path) -> tuple[float, Controller]:
    started = time.perf_counter()
    controller = Controller(FileMetadataLog.open(log_dir), 1, CLUSTER)
    controller.load()
    return time.perf_counter() - started, controller


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--tail-topics", type=int, default=10, help="topics created after the snapshot")
    parser.add_argument("--churn", type=int, default=1, help="rounds of creating and deleting every topic first")
    args = parser.parse_args()

    log_dir = Path(tempfile.mkdtemp(prefix="klamm-metadata-bench-"))
    try:
        controller = Controller(FileMetadataLog.open(log_dir), 1, CLUSTER)
        controller.load()
        controller.register_broker(1, "localhost", 9092)
        started = time.perf_counter()
        for round_ in range(args.churn + 1):
            for first in range(0, args.topics, 100):
                names = [f"topic-{n}" for n in range(first, min(first + 100, args.topics))]
                controller.create_topics([CreateTopicSpec(name, args.partitions, 1) for name in names])
                if round_ < args.churn:
                    controller.delete_topics(names)
        build_s = time.perf_counter() - started
        records = controller.log.end_offset
        log_bytes = controller.log.log.size_in_bytes()  # type: ignore[attr-defined]
        controller.close()

        full_s, controller = timed_load(log_dir)
        started = time.perf_counter()
        snapshot_id = controller.snapshot()
        snapshot_s = time.perf_counter() - started
        assert snapshot_id is not None
        snapshot_bytes = snapshot_path(controller.log.directory, snapshot_id).stat().st_size  # type: ignore[attr-defined]
        for n in range(args.tail_topics):
            controller.create_topics([CreateTopicSpec(f"tail-{n}", args.partitions, 1)])
        expected = controller.image
        controller.close()

        snap_s, restarted = timed_load(log_dir)
        assert restarted.image == expected, "snapshot + tail differs from the image before the restart"
        assert list_snapshots(restarted.log.directory) == [snapshot_id]  # type: ignore[attr-defined]
        restarted.close()

        print(f"{args.topics} topics x {args.partitions} partitions after {args.churn} create/delete round(s): "
              f"{records} metadata records, "
              f"log {log_bytes / (1 << 20):.1f} MiB, snapshot {snapshot_bytes / (1 << 20):.1f} MiB "
              f"(built in {build_s:.1f} s)")
        print(f"{'start-up':<40} | {'seconds':>8}")
        print(f"{'replay the whole log':<40} | {full_s:8.2f}")
        print(f"{'snapshot + tail of ' + str(args.tail_topics) + ' topics':<40} | {snap_s:8.2f}")
        print(f"{'(writing the snapshot)':<40} | {snapshot_s:8.2f}")
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
