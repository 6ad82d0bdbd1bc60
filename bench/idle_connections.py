"""Broker memory per idle connection: RSS of a `klamm serve` process before and after N clients connect,
each having sent one ApiVersions request (a client's first), then holding the connection open.

    .venv/bin/python bench/idle_connections.py [--connections 5000] [--rounds 3] [--producer-records N]

Prints one line per round and the median KiB per connection. With --producer-records, each round also
measures a librdkafka producer (bench/rdk_worker.py: N records of 100 B, acks=1, on its own connection)
while the idle connections are held and again once they are closed: issue 14 asks its throughput to stay
within 10 %.
The holder of the idle connections needs a file-descriptor limit above N (`ulimit -n`), as does the broker.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KLAMM = Path(sys.executable).parent / "klamm"
# ApiVersions v0, correlation id 1, client id "idle": header v1 and an empty body
API_VERSIONS = struct.pack(">hhih", 18, 0, 1, 4) + b"idle"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settle(pid: int) -> int:
    """RSS once it stops moving (the loop has handled what arrived)."""
    last = rss_kib(pid)
    for _ in range(50):
        time.sleep(0.2)
        now = rss_kib(pid)
        if abs(now - last) < 64:
            return now
        last = now
    return last


def produce_rate(port: int, records: int) -> float:
    """Records per second of one librdkafka producer run (bench/rdk_worker.py) against the broker."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "rdk_worker.py"), "produce",
                          f"bootstrap=127.0.0.1:{port}", "topic=idle-bench", f"records={records}", "size=100",
                          "acks=1"], capture_output=True, text=True, timeout=600, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if not result.get("ok"):
        raise RuntimeError(f"producer failed: {result}")
    return records / result["seconds"]


def one_round(connections: int, producer_records: int = 0) -> tuple[float, float | None, float | None]:
    """KiB of RSS per idle connection; the producer's records/s alone and while they are held (or None)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        broker = subprocess.Popen([str(KLAMM), "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                                   "--override", f"log.dirs={data}"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), 1).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            warm = [_open(port) for _ in range(50)]  # first-use allocations are not per connection
            for s in warm:
                s.close()
            before = settle(broker.pid)
            held = [_open(port) for _ in range(connections)]
            after = settle(broker.pid)
            alone = during = None
            if producer_records:  # after the RSS readings: a producer's buffers would blur them
                produce_rate(port, max(producer_records // 10, 1000))  # creates the topic, warms both sides
                during = produce_rate(port, producer_records)
            for s in held:
                s.close()
            if producer_records:
                time.sleep(1)  # the broker has seen the closes
                alone = produce_rate(port, producer_records)
            return (after - before) / connections, alone, during
        finally:
            broker.terminate()
            broker.wait(20)


def _open(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), 5)
    s.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
    (size,) = struct.unpack(">i", _read(s, 4))
    _read(s, size)
    return s


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--producer-records", type=int, default=0,
                        help="also time a producer of this many records before and while the connections are held")
    args = parser.parse_args()
    results, ratios = [], []
    for n in range(args.rounds):
        per, alone, during = one_round(args.connections, args.producer_records)
        results.append(per)
        line = f"round {n + 1}: {per:.1f} KiB per idle connection ({args.connections} connections)"
        if alone and during:
            ratios.append(during / alone)
            line += (f"; producer {alone:,.0f} rec/s alone, {during:,.0f} rec/s with them held"
                     f" ({during / alone:.2f}x)")
        print(line, flush=True)
    print(f"median: {statistics.median(results):.1f} KiB per idle connection"
          + (f"; producer with them held {statistics.median(ratios):.2f}x its rate alone" if ratios else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
