"""How long a segment roll holds the thread that appends (the event loop in a broker), while another thread fsyncs.

Each round appends one small batch to a log, runs the flush job that follows a roll in a worker thread (as
klamm.broker.log_flush does) and waits for it, waits --gap-ms (the time a segment takes to fill), then times
`Log.roll()` on the main thread. Meanwhile a thread
writes and fsyncs another file in the same directory tree without pause, as flush jobs of other partitions do
under load: creating a file then waits behind the filesystem's journal. Prints the rolls' p50 / p99 / max.

    .venv/bin/python bench/roll_latency.py [--rolls 500] [--gap-ms 20] [--dir DIR]

Run it with another commit's `klamm` first on PYTHONPATH to compare (it uses only Log.open, append, roll and
the flush job's begin_flush / run / complete_flush).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import klamm
from klamm.protocol.batch import split_batches
from klamm.protocol.records import build_batch
from klamm.storage.log import Log, LogConfig


def fsync_forever(path: Path, stop: threading.Event) -> None:
    """Append 64 KiB and fsync, again and again: the journal stays busy."""
    chunk = os.urandom(64 << 10)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while not stop.is_set():
            os.write(fd, chunk)
            os.fsync(fd)
            written += len(chunk)
            if written >= 64 << 20:  # keep the file small
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                written = 0
    finally:
        os.close(fd)


def measure(directory: Path, rolls: int, gap_ms: float) -> list[float]:
    log = Log.open(directory / "bench-0", LogConfig())
    pool = ThreadPoolExecutor(1)
    record = build_batch([(b"k", b"v" * 100)])
    times = []
    try:
        for _ in range(rolls):
            buf = bytearray(record)
            log.append(buf, split_batches(buf), leader_epoch=0)
            job = log.begin_flush()
            if job is not None:
                pool.submit(job.run).result()
                log.complete_flush(job)
            time.sleep(gap_ms / 1000)
            started = time.perf_counter()
            log.roll()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        log.close()
        pool.shutdown()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rolls", type=int, default=500)
    parser.add_argument("--gap-ms", type=float, default=20.0, help="between a flush job's end and the next roll")
    parser.add_argument("--dir", default=None, help="where the log and the fsynced file go (default: the temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="klamm-roll-", dir=args.dir) as tmp:
        stop = threading.Event()
        noise = threading.Thread(target=fsync_forever, args=(Path(tmp) / "noise", stop), daemon=True)
        noise.start()
        try:
            times = measure(Path(tmp), args.rolls, args.gap_ms)
        finally:
            stop.set()
            noise.join()
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    print(f"klamm from {Path(klamm.__file__).parent}: {len(times)} rolls {args.gap_ms:g} ms apart, p50 {statistics.median(times):.3f} ms, "
          f"p99 {p99:.3f} ms, max {times[-1]:.3f} ms")


if __name__ == "__main__":
    main()
