"""Resident memory and open descriptors held by the offset and time indexes of many segments.

Writes `partitions x segments` pairs of index files in Kafka's format (`--entries`
entries each), then loads every one as a broker does at start-up (load, sanity
check, last entry), looks an offset and a timestamp up in each, and prints the
process's RSS and open descriptors after each step. Run it against another tree
to compare (PYTHONPATH decides which klamm is measured):

    PYTHONPATH=$PWD .venv/bin/python bench/index_memory.py
    PYTHONPATH=/path/to/other/tree .venv/bin/python bench/index_memory.py
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

import klamm.storage.index as index_module
from klamm.storage.index import OffsetIndex, TimeIndex


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def write_files(root: Path, partitions: int, segments: int, entries: int) -> list[tuple[Path, int]]:
    offset_bytes = b"".join(struct.pack(">ii", n * 10 + 9, n * 4096) for n in range(entries))
    time_bytes = b"".join(struct.pack(">qi", 1_700_000_000_000 + n, n * 10 + 9) for n in range(entries))
    made = []
    for p in range(partitions):
        directory = root / f"topic-{p}"
        directory.mkdir()
        for s in range(segments):
            base = s * entries * 10
            (directory / f"{base:020d}.index").write_bytes(offset_bytes)
            (directory / f"{base:020d}.timeindex").write_bytes(time_bytes)
            made.append((directory, base))
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--segments", type=int, default=100)
    parser.add_argument("--entries", type=int, default=128, help="entries per index file")
    parser.add_argument("--dir", default=None, help="where to write the files (default: a temp dir)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="klamm-index-bench-", dir=args.dir))
    try:
        made = write_files(root, args.partitions, args.segments, args.entries)
        gc.collect()
        rows = [("before loading", rss_mib(), open_fds(), 0.0)]
        started = time.perf_counter()
        indexes = []
        for directory, base in made:
            offsets = OffsetIndex(directory / f"{base:020d}.index", base, 10 << 20)
            times = TimeIndex(directory / f"{base:020d}.timeindex", base, 10 << 20)
            offsets.load()
            times.load()
            offsets.sanity_check(args.entries * 4096 + 1)
            times.sanity_check(base + args.entries * 10 + 10)
            times.last_entry()
            offsets.close()
            times.close()
            indexes.append((offsets, times))
        gc.collect()
        rows.append(("loaded", rss_mib(), open_fds(), time.perf_counter() - started))
        started = time.perf_counter()
        middle = args.entries // 2
        for offsets, times in indexes:
            assert offsets.lookup(offsets.base_offset + middle * 10 + 9)[1] == middle * 4096
            assert times.lookup(1_700_000_000_000 + middle)[1] == offsets.base_offset + middle * 10 + 9
        gc.collect()
        rows.append(("after one lookup each", rss_mib(), open_fds(), time.perf_counter() - started))
        count = len(indexes)
        print(f"klamm.storage.index from {index_module.__file__}")
        print(f"{args.partitions} partitions x {args.segments} segments = {count} segments, "
              f"{args.entries} entries per index ({args.entries * 20 * count / (1 << 20):.0f} MiB of index files)")
        print(f"{'step':<24} | {'RSS MiB':>8} | {'open fds':>8} | {'seconds':>8}")
        for name, rss, fds, seconds in rows:
            print(f"{name:<24} | {rss:8.1f} | {fds:8d} | {seconds:8.2f}")
        lookups = 2 * count
        print(f"lookup cost: {rows[2][3] / lookups * 1e6:.1f} us per lookup ({lookups} lookups)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
