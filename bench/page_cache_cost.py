"""What this machine's kernel charges for writing a log's bytes: new pages against pages already cached.

    .venv/bin/python bench/page_cache_cost.py [--mb 400] [--rounds 3] [--dir DIR]

A broker appends with buffered `pwrite`: each MB of a new segment takes new page-cache pages, while a rewrite
of the same range copies into pages already there. Per round, a fresh file in DIR (default: a temporary
directory under /tmp, as bench/run.py's brokers use) takes `--mb` MB in 1 MB writes, then the same range is
written again; printed is the process's system CPU time per MB for both. The files stay until the end, so the
page cache grows from round to round as a broker's logs make it grow (a file deleted gives its pages back, and
the next round would take those). Where the first is many times the second, the system time of a produce-heavy
row (one node or three, each writing every record) is the machine's price for new pages, not the broker's work:
a virtual machine whose memory the host has not yet backed pays it on each page the guest touches for the first
time. This one's balloon device reports free memory back to the host (virtio-balloon's free page reporting,
feature bit 5 in /sys/bus/virtio/drivers/virtio_balloon/*/features), so the price is paid again on memory the
guest freed and the host took back; pages freed a moment ago and taken again are cheap. `--delete` removes
each round's file before the next: its new pages are then the ones the previous round freed.

    .venv/bin/python bench/page_cache_cost.py --mb 400 --rounds 3 --delete
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
from pathlib import Path

MB = 1 << 20


def system_seconds() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def write_range(fd: int, chunk: bytes, count: int) -> float:
    """System CPU seconds per MB to write `count` MB at offsets 0, 1 MB, ..."""
    started = system_seconds()
    for n in range(count):
        os.pwrite(fd, chunk, n * MB)
    return (system_seconds() - started) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--delete", action="store_true", help="delete each round's file before the next")
    args = parser.parse_args()
    chunk = os.urandom(MB)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for round_ in range(1, args.rounds + 1):
            path = Path(tmp) / f"segment-{round_}"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                new = write_range(fd, chunk, args.mb)
                cached = write_range(fd, chunk, args.mb)
            finally:
                os.close(fd)
                if args.delete:
                    path.unlink()
            print(f"round {round_}: {new * 1e6:.0f} µs system time per MB into new pages, "
                  f"{cached * 1e6:.0f} µs per MB into cached ones")


if __name__ == "__main__":
    main()
