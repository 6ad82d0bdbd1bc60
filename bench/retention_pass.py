"""What one retention pass holds the event loop for: enforce_retention over N logs, each losing one segment.

    .venv/bin/python bench/retention_pass.py [--logs 500,2000] [--passes 3]

For each N: N logs (one partition each, leader epoch 0, in a temporary directory under --dir) of
passes + 1 segments each; then `passes` retention passes (retention.bytes lets one segment go per log
per pass), each timed as a whole, on the calling thread, as the broker's RetentionTask runs it on the loop.
Prints the median and largest pass in milliseconds and per log in microseconds. Run it with PYTHONPATH
pointing at another checkout's tree for a before and after.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: a before/after run puts the other tree first

from klamm.protocol.batch import split_batches
from klamm.protocol.records import NewRecord, build_batch
from klamm.storage.log import Log, LogConfig
from klamm.storage.retention import RetentionPolicy, delete_segments, enforce_retention

SEGMENT_BYTES = 4096


def fill(log: Log, segments: int) -> None:
    """`segments` full segments of ~4 KiB, then an empty active one."""
    record = NewRecord(key=None, value=b"v" * 1000, timestamp=1_700_000_000_000)
    while len(log.segments) <= segments:
        buf = bytearray(build_batch([record] * 3))
        log.append(buf, split_batches(buf), leader_epoch=0, log_append_time_ms=None)


def one_size(directory: Path, logs: int, passes: int) -> list[float]:
    config = LogConfig(segment_bytes=SEGMENT_BYTES)
    opened = [Log.open(directory / f"t{n:05d}-0", config) for n in range(logs)]
    for log in opened:
        fill(log, passes + 1)
    times = []
    for done in range(passes):
        # Keep all but the oldest segment of each log: one deletion per log per pass.
        policy = RetentionPolicy(retention_ms=-1, retention_bytes=SEGMENT_BYTES * (passes - done), delete=True)
        started = time.perf_counter()
        removed = [enforce_retention(log, policy, now_ms=0, high_watermark=log.log_end_offset) for log in opened]
        times.append(time.perf_counter() - started)
        assert all(len(r) == 1 for r in removed), [len(r) for r in removed][:10]
        for segments in removed:
            delete_segments(segments)  # the broker's DelayedDeletes does this later, off the loop
    for log in opened:
        log.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--logs", default="500,2000")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--dir", default=None, help="parent of the temporary directory (default: the system's)")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # every log keeps its active segment open
    import klamm
    print(f"klamm from {Path(klamm.__file__).parent}")
    print("| logs | pass, median | pass, largest | per log |")
    print("|---|---|---|---|")
    for logs in (int(n) for n in args.logs.split(",")):
        with tempfile.TemporaryDirectory(prefix="klamm-retention-pass-", dir=args.dir) as tmp:
            times = one_size(Path(tmp), logs, args.passes)
        median = statistics.median(times)
        print(f"| {logs:,} | {median * 1000:.1f} ms | {max(times) * 1000:.1f} ms | {median / logs * 1e6:.0f} us |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
