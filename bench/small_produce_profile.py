"""Profile `klamm serve` under many small produce requests: where a request's CPU goes on the networked path.

    .venv/bin/python bench/small_produce_profile.py --out profile.txt [--seconds 15] [--producers 10] [--svg f.svg]

Starts a broker on loopback, creates a topic of 10 partitions, and has `--producers` librdkafka producers
(one process, linger.ms=1, batch.num.messages=10, acks=1) send 100 B records round-robin over the partitions
for `--seconds`, while `py-spy record --format raw` samples the broker (500 Hz). Prints records/s and the
broker's CPU per record (inflated by the profiler: compare runs with each other, not with bench/run.py), then
the frames holding the most samples, inclusive and self. The raw file feeds flamegraph.pl or speedscope;
`--svg` also draws it as a flame graph (an SVG a browser opens; hover a frame for its name and share).
"""

from __future__ import annotations

import argparse
import html
import os
import zlib
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


def flamegraph(raw: Path, title: str, width: int = 1200, row: int = 16, min_share: float = 0.001) -> str:
    """The folded stacks of `raw` as a flame graph: callers below, callees above, widths in samples."""
    root: dict = {"n": 0, "kids": {}}
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        node = root
        node["n"] += int(count)
        for frame in stack.split(";"):
            node = node["kids"].setdefault(frame, {"n": 0, "kids": {}})
            node["n"] += int(count)
    total = root["n"] or 1
    rects: list[str] = []
    depth_max = 0

    def draw(node: dict, name: str, x: float, depth: int) -> None:
        nonlocal depth_max
        w = node["n"] / total * width
        if node["n"] / total < min_share:
            return
        depth_max = max(depth_max, depth)
        y = -(depth + 1) * row  # shifted once the height is known
        hue = zlib.crc32(name.split(" (")[0].encode()) % 60  # red to yellow, stable per function
        label = html.escape(name)
        share = f"{100 * node['n'] / total:.1f} %"
        text = html.escape(name[: max(0, int(w / 7))]) if w > 35 else ""
        rects.append(f'<g><title>{label}: {node["n"]} samples, {share}</title>'
                     f'<rect x="{x:.1f}" y="{y}" width="{max(w - 0.5, 0.1):.1f}" height="{row - 1}" '
                     f'fill="hsl({hue},85%,60%)"/>'
                     f'<text x="{x + 3:.1f}" y="{y + row - 4}">{text}</text></g>')
        for kid_name, kid in sorted(node["kids"].items()):
            draw(kid, kid_name, x, depth + 1)
            x += kid["n"] / total * width

    x = 0.0
    for name, kid in sorted(root["kids"].items()):
        draw(kid, name, x, 0)
        x += kid["n"] / total * width
    height = (depth_max + 1) * row + 40
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'font-family="monospace" font-size="11">'
            f'<text x="4" y="16" font-size="13">{html.escape(title)} ({total} samples)</text>'
            f'<g transform="translate(0,{height})">{"".join(rects)}</g></svg>\n')


def main() -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="py-spy's raw output")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--producers", type=int, default=10)
    parser.add_argument("--svg", type=Path, help="also draw the samples as a flame graph here")
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
    if args.svg is not None:
        args.svg.write_text(flamegraph(args.out, f"klamm serve, {args.producers} producers of small batches: "
                                       f"{sent / elapsed:,.0f} records/s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
