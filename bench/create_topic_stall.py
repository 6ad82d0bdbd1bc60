"""How long the event loop stalls while a topic of many partitions is created, and deleted.

    .venv/bin/python bench/create_topic_stall.py [--partitions 100,1000] [--topics 500] [--rounds 2] [--no-gc]

Each round starts `klamm serve` under bench/loop_stalls.py (threshold 1 ms), creates one topic of each size with
confluent-kafka's AdminClient (one replica each, all on this node), then deletes them, and prints, per topic and
operation: how long CreateTopics or DeleteTopics took (`--topics N`: also one request creating, and one
deleting, N topics of one partition), and the loop's stalls between the request and its answer
(count, total and longest milliseconds, and where the longest spent most of its time). `--no-gc` runs the
broker with its garbage collector off, leaving the creation's own callbacks. Run a before and an after by
putting another tree first on PYTHONPATH (the broker runs from it).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(log: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while "klamm ready" not in (log.read_text() if log.exists() else ""):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"klamm did not start: {log.read_text()[-2000:]}")
        time.sleep(0.1)


# `--no-gc`: the broker's collector off from its start, so that the stalls are the creation's own callbacks
NO_GC = ["-c", "import gc, runpy, sys; gc.disable(); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], "
         "run_name='__main__')"]


def one_round(sizes: list[int], topics: int = 0, no_gc: bool = False) -> list[dict]:
    work = Path(tempfile.mkdtemp(prefix="klamm-create-stall-"))
    port, stalls, log = free_port(), work / "stalls.json", work / "broker.log"
    env = {**os.environ, "LOOP_STALLS_WRITE_EVERY_S": "0.5"}
    python = [sys.executable, *NO_GC] if no_gc else [sys.executable]
    with open(log, "wb") as out:
        proc = subprocess.Popen([*python, str(ROOT / "bench" / "loop_stalls.py"), "--threshold-ms", "1",
                                 "--out", str(stalls), "serve", "--override",
                                 f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override",
                                 f"log.dirs={work / 'data'}"], stdout=out, stderr=subprocess.STDOUT, env=env)
    rows = []
    try:
        wait_ready(log, proc)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        admin.create_topics([NewTopic("warm-up", 1, 1)])["warm-up"].result(30)
        time.sleep(1)
        for size in sizes:
            started = time.time()
            admin.create_topics([NewTopic(f"wide-{size}", size, 1)])[f"wide-{size}"].result(120)
            ended = time.time()
            rows.append({"op": "create", "partitions": size, "started": started, "ended": ended})
            time.sleep(1)
        for size in sizes:
            started = time.time()
            admin.delete_topics([f"wide-{size}"])[f"wide-{size}"].result(120)
            ended = time.time()
            rows.append({"op": "delete", "partitions": size, "started": started, "ended": ended})
            time.sleep(1)
        names = [f"many-{i}" for i in range(topics)]
        for op, call in (("create", lambda: admin.create_topics([NewTopic(n, 1, 1) for n in names])),
                         ("delete", lambda: admin.delete_topics(names))):
            if not names:
                break
            started = time.time()
            for future in call().values():
                future.result(120)
            ended = time.time()
            rows.append({"op": f"{op} {topics:,} topics of 1", "partitions": topics, "started": started,
                         "ended": ended})
            time.sleep(1)
        del admin  # gone before the broker is: no reconnection attempts in the output
        time.sleep(1)  # the sampler writes its summary every 0.5 s
        summary = json.loads(stalls.read_text())
        timeline, collections = summary["timeline"], summary["collections"]
    finally:
        proc.terminate()
        proc.wait(30)
    for row in rows:
        # a stall is recorded at its end: one that ends within the request's window, or just after it (the
        # answer is written by the callback that stalled)
        stalled = [s for s in timeline if row["started"] <= s["at"] <= row["ended"] + 0.05]
        within = [s["ms"] for s in stalled]
        collected = [c["ms"] for c in collections if row["started"] <= c["at"] <= row["ended"] + 0.05]
        row.update(answer_ms=round((row["ended"] - row["started"]) * 1000), stalls=len(within),
                   stall_ms=round(sum(within), 1), longest_ms=round(max(within, default=0.0), 1),
                   gc=len(collected), gc_ms=round(sum(collected), 1),
                   gc_longest_ms=round(max(collected, default=0.0), 1),
                   longest_at=max(stalled, key=lambda s: s["ms"])["place"] if stalled else "")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="100,1000")
    parser.add_argument("--topics", type=int, default=0, help="also create and delete this many topics at once")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-gc", action="store_true", help="the broker's garbage collector off")
    args = parser.parse_args()
    sizes = [int(n) for n in args.partitions.split(",") if n]
    import klamm  # noqa: PLC0415  # which tree runs (PYTHONPATH)
    print(f"klamm from {Path(klamm.__file__).parent}")
    print("| round | request | partitions | answered in ms | loop stalls > 1 ms | their total ms | longest ms "
          "| collections > 1 ms | their total ms | longest ms | longest stall's place |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for round_ in range(1, args.rounds + 1):
        for row in one_round(sizes, args.topics, args.no_gc):
            print(f"| {round_} | {row['op']} | {row['partitions']:,} | {row['answer_ms']:,} | {row['stalls']} | "
                  f"{row['stall_ms']:,} | {row['longest_ms']:,} | {row['gc']} | {row['gc_ms']:,} | "
                  f"{row['gc_longest_ms']:,} | {row['longest_at']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
