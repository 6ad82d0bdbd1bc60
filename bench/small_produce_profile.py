"""Profile `klamm serve` under many small produce requests: where a request's CPU goes on the networked path.

    .venv/bin/python bench/small_produce_profile.py --out profile.txt [--seconds 15] [--producers 10]

Starts a broker on loopback, creates a topic of 10 partitions, and has `--producers` librdkafka producers
(one process, linger.ms=1, batch.num.messages=10, acks=1) send 100 B records round-robin over the partitions
for `--seconds`, while `py-spy record --format raw` samples the broker (500 Hz). Prints records/s and the
broker's CPU per record (inflated by the profiler: compare runs with each other, not with bench/run.py), then
the frames holding the most samples, inclusive and self. The raw file feeds flamegraph.pl or speedscope.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".venv" / "bin"


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def summarize(raw: Path, top: int = 30) -> str:
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples = int(count)
        total += samples
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] += samples
        own[frames[-1]] += samples
    out = [f"{total} samples", "inclusive:"]
    out += [f"  {100 * n / total:5.1f} % {frame}" for frame, n in inclusive.most_common(top)]
    out += ["self:"] + [f"  {100 * n / total:5.1f} % {frame}" for frame, n in own.most_common(top)]
    return "\n".join(out)


def main() -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="py-spy's raw output")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--producers", type=int, default=10)
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    data = Path(tempfile.mkdtemp(prefix="klamm-small-produce-"))
    broker = subprocess.Popen([str(BIN / "klamm"), "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                               "--override", f"log.dirs={data}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bootstrap = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
                admin.create_topics([NewTopic("small", 10, 1)])["small"].result(10)
                break
            except Exception:  # not listening yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        time.sleep(1)
        spy = subprocess.Popen([str(BIN / "py-spy"), "record", "-r", "500", "--format", "raw", "-o", str(args.out),
                                "-p", str(broker.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        producers = [Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.num.messages": 10, "acks": 1,
                               "log_level": 0}) for _ in range(args.producers)]
        value = b"x" * 100
        ticks = cpu_ticks(broker.pid)
        started, sent = time.perf_counter(), 0
        while time.perf_counter() - started < args.seconds:
            for i, producer in enumerate(producers):
                for k in range(10):
                    try:
                        producer.produce("small", value, partition=(i + k) % 10)
                        sent += 1
                    except BufferError:
                        producer.poll(0.001)
                producer.poll(0)
        for producer in producers:
            producer.flush(60)
        elapsed = time.perf_counter() - started
        cpu = (cpu_ticks(broker.pid) - ticks) / os.sysconf("SC_CLK_TCK")
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    finally:
        broker.send_signal(signal.SIGTERM)
        broker.wait(60)
        shutil.rmtree(data, ignore_errors=True)
    print(f"{sent:,} records in {elapsed:.1f} s ({sent / elapsed:,.0f}/s); broker CPU {cpu:.2f} s, "
          f"{cpu / sent * 1e6:.2f} µs a record (under the profiler)")
    print(summarize(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
