"""What a Metadata request for every topic costs the broker, as a client refreshing all its topics sends it.

    .venv/bin/python bench/metadata_all.py [--partitions 1000,10000] [--requests 50] [--version 12]

For each size, starts `klamm serve` (bench/scale.py's Serve: its own data directory, PLAINTEXT on loopback),
creates the partitions in topics of 100, then sends `--requests` Metadata requests for every topic, one at a
time on one connection, reading each answer's bytes without decoding them (a client's own decoding is not the
broker's cost). Printed per size: the answer's size, the median and worst round trip, and the broker's CPU per
request (user + system time of the process from /proc over the requests). Run a before and an after by
putting another tree first on PYTHONPATH (the broker runs from it).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import Serve, create_topics  # noqa: E402

from klamm.protocol.envelope import encode_request  # noqa: E402

METADATA = 3
_SIZE = struct.Struct(">i")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def read_frame(sock: socket.socket) -> int:
    """Read one response; its size."""
    header = b""
    while len(header) < 4:
        header += sock.recv(4 - len(header))
    size = _SIZE.unpack(header)[0]
    left = size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("closed")
        left -= len(chunk)
    return size


def measure(partitions: int, requests: int, version: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="klamm-metadata-all-") as base:
        broker = Serve(Path(base))
        broker.start()
        try:
            create_topics(broker, [f"t{i:05d}" for i in range(partitions // 100)], 100)
            assert broker.process is not None
            with socket.create_connection(("127.0.0.1", broker.port)) as sock:
                rounds, size = [], 0
                for n in range(requests + 1):  # the first answer warms up, uncounted
                    payload = encode_request(METADATA, version, {"topics": None, "allow_auto_topic_creation": False},
                                             "klamm-bench-metadata", n)
                    if n == 1:
                        cpu_before = cpu_s(broker.process.pid)
                    began = time.perf_counter()
                    sock.sendall(_SIZE.pack(len(payload)) + payload)
                    size = read_frame(sock)
                    if n:
                        rounds.append(time.perf_counter() - began)
                cpu = cpu_s(broker.process.pid) - cpu_before
        finally:
            broker.stop()
    return {"bytes": size, "median ms": statistics.median(rounds) * 1000, "worst ms": max(rounds) * 1000,
            "CPU ms/request": cpu / requests * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="1000,10000")
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--version", type=int, default=12)
    args = parser.parse_args()
    for partitions in (int(p) for p in args.partitions.split(",")):
        row = measure(partitions, args.requests, args.version)
        print(f"{partitions:,} partitions: answer {row['bytes']:,} bytes, round trip median {row['median ms']:.2f} "
              f"ms, worst {row['worst ms']:.2f} ms, broker CPU {row['CPU ms/request']:.2f} ms a request")


if __name__ == "__main__":
    main()
