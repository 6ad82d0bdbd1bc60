"""What an fsync costs its caller's CPU on this machine: the price of a flush.messages=1 row.

    .venv/bin/python bench/fsync_cost.py [--rounds 2000] [--kb 1,4,32,128] [--dir DIR]

A broker that fsyncs every batch (flush.messages=1) appends the batch to the segment's .log, an entry to its
.index and .timeindex now and then, and fsyncs the three (Kafka's LogSegment.flush; klamm's FlushJob). The
kernel's work for an fsync (writeback of the dirty pages, the journal commit, the block device's requests) is
charged to the thread that calls it, where without fsync the kernel's flusher threads do it later, charged to
no broker. Printed, per round: the process's CPU time (user + system) and the wall time of a write of `--kb`
KB, then (1) no fsync, (2) an fsync of the file, (3) an index entry appended to two small files beside it and
all three fsynced. Divide by the records of a batch for the per-record price of a flush row.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time
from pathlib import Path

KB = 1024
INDEX_ENTRY, TIME_INDEX_ENTRY = b"\0" * 8, b"\0" * 12


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_mode(directory: Path, chunk: bytes, rounds: int, mode: str) -> tuple[float, float]:
    """CPU and wall seconds per round of `mode`: "write", "fsync" or "fsync+indexes"."""
    names = ("segment.log", "segment.index", "segment.timeindex")
    fds = [os.open(directory / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC) for name in names]
    try:
        cpu, wall = cpu_seconds(), time.perf_counter()
        for _ in range(rounds):
            os.write(fds[0], chunk)
            if mode == "fsync+indexes":
                os.write(fds[1], INDEX_ENTRY)
                os.write(fds[2], TIME_INDEX_ENTRY)
            if mode != "write":
                os.fsync(fds[0])
            if mode == "fsync+indexes":
                os.fsync(fds[1])
                os.fsync(fds[2])
        return (cpu_seconds() - cpu) / rounds, (time.perf_counter() - wall) / rounds
    finally:
        for fd in fds:
            os.close(fd)
        for name in names:
            (directory / name).unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--kb", default="1,4,32,128", help="write sizes in KB, comma-separated")
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (default: under /tmp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for kb in (int(k) for k in args.kb.split(",")):
            chunk = os.urandom(kb * KB)
            cells = []
            for mode in ("write", "fsync", "fsync+indexes"):
                cpu, wall = one_mode(Path(tmp), chunk, args.rounds, mode)
                cells.append(f"{mode} {cpu * 1e6:.0f} µs CPU / {wall * 1e6:.0f} µs wall")
            print(f"{kb:>4} KB: " + ", ".join(cells))


if __name__ == "__main__":
    main()
