#!/usr/bin/env python3
"""Spark rows (``make bench``, after bench/run.py): rows per second into and out of DataFrames.

A `klamm serve` process gets N 100-byte records (librdkafka producer, 4
partitions). Then, in one local[2] SparkSession, each row materialises every
column of every record (the `noop` sink):
- format("klamm") reading through the broker
- format("klamm-segments") reading the stopped broker's segment files, in the
  JVM (klamm.spark.configure put its reader on the class path)
- format("klamm-segments-python"), the Python reader of the same files
- spark.read.parquet over the same rows (the yardstick for the segment reader)
- a Python data source handing Spark the same Arrow batch over and over: what
  Spark itself takes to ingest a Python source's rows, the ceiling for both
  klamm sources
- df.write.format("klamm") producing N rows back (the broker running again)

Each read runs more than once in the session: the first pays for the JVM's JIT
and the Python workers' imports, the later ones show the steady state. The
file-based reads take turns (--rounds of each), and their steady state is the
median of their later reads.

    .venv/bin/python bench/spark.py                 # 1,000,000 records
    .venv/bin/python bench/spark.py --records 100000
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KLAMM = [sys.executable, "-m", "klamm", "serve"]
TOPIC = "spark-bench"
PARTITIONS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(data: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(KLAMM + ["--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                                     "--override", f"log.dirs={data}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("broker did not start")


def stop_broker(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)


def fill(bootstrap: str, records: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1_000_000})
    value = b"v" * 100
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value=value, key=b"%08d" % i)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def tree_cpu_seconds(root: int, leave_out: int | None) -> float:
    """User and system CPU of `root` and every process under it but `leave_out`'s subtree (the broker), children
    they have reaped included (/proc/<pid>/stat: utime, stime, cutime, cstime)."""
    parent_of, ticks_of = {}, {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on
        parent_of[int(entry.name)] = int(fields[1])
        ticks_of[int(entry.name)] = sum(int(f) for f in fields[11:15])

    def counted(pid: int) -> bool:
        while pid not in (root, leave_out, 0, 1):
            pid = parent_of.get(pid, 0)
        return pid == root

    return sum(t for pid, t in ticks_of.items() if counted(pid)) / os.sysconf("SC_CLK_TCK")


def timed(label: str, records: int, action, leave_out=lambda: None, runs: int = 2) -> tuple[str, int, list]:
    """(label, records, [(wall seconds, CPU seconds of this process tree but the broker)] a run)."""
    results = []
    for _ in range(runs):
        cpu, started = tree_cpu_seconds(os.getpid(), leave_out()), time.perf_counter()
        action()
        results.append((time.perf_counter() - started, tree_cpu_seconds(os.getpid(), leave_out()) - cpu))
    return label, records, results


def interleaved(reads: list[tuple[str, Any]], records: int, rounds: int) -> list[tuple[str, int, list]]:
    """Each DataFrame of `reads` read in full `rounds` times, one of each in turn, so that the load of the
    shared machine falls on them alike; per path, its first read and the median of the others."""
    results: dict[str, list] = {label: [] for label, _ in reads}
    for _ in range(rounds):
        for label, df in reads:
            results[label] += timed(label, records, lambda: df.write.format("noop").mode("overwrite").save(),
                                    runs=1)[2]
    return [(label, records, [runs[0], median_run(runs[1:])] if len(runs) > 1 else runs)
            for label, runs in results.items()]


def median_run(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The run of median CPU time."""
    return sorted(runs, key=lambda run: run[1])[len(runs) // 2]


def arrow_ceiling_source(records: int, partitions: int) -> type:
    """A data source yielding one prebuilt batch of 10,000 rows (the schema and sizes of the bench's) per step."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from klamm.spark.source import row_schema

    class Reader(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition):
            import pyarrow as pa

            from klamm.spark.reading import arrow_schema

            n = 10_000
            batch = pa.RecordBatch.from_arrays([
                pa.array([b"%08d" % i for i in range(n)], pa.binary()), pa.array([b"v" * 100] * n, pa.binary()),
                pa.array([TOPIC] * n), pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
                pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
            ], schema=arrow_schema(False))
            for _ in range(records // partitions // n):
                yield batch

    class ArrowCeiling(DataSource):
        @classmethod
        def name(cls):
            return "klamm-bench-arrow-ceiling"

        def schema(self):
            return row_schema({})

        def reader(self, schema):
            return Reader()

    return ArrowCeiling


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5, help="reads of each file-based path, taken in turn")
    opts = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import klamm.spark
    from klamm.spark.segments_jar import JarUnavailable

    workdir = Path(tempfile.mkdtemp(prefix="klamm-spark-bench-"))
    data, port = workdir / "data", free_port()
    bootstrap = f"127.0.0.1:{port}"
    broker = start_broker(data, port)
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").config(
        "spark.driver.memory", "2g")
    try:
        builder = klamm.spark.configure(builder)
        jvm = "JVM reader"
    except JarUnavailable as exc:  # the Python reader then serves klamm-segments too
        print(f"no JVM reader: {exc}", file=sys.stderr)
        jvm = "no JDK here: the Python reader"
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    klamm.spark.register(spark)
    rows = []
    try:
        fill(bootstrap, opts.records)
        source = (spark.read.format("klamm").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", TOPIC).load())
        source.write.format("noop").mode("overwrite").save()  # warm the Python workers
        rows.append(timed("read: format(\"klamm\") through the broker", opts.records,
                          lambda: source.write.format("noop").mode("overwrite").save(), lambda: broker.pid))
        source.write.parquet(str(workdir / "parquet"))
        stop_broker(broker)
        segments = spark.read.format("klamm-segments").option("subscribe", TOPIC).load(str(data))
        in_python = spark.read.format("klamm-segments-python").option("subscribe", TOPIC).load(str(data))
        parquet = spark.read.parquet(str(workdir / "parquet"))
        spark.dataSource.register(arrow_ceiling_source(opts.records, PARTITIONS))
        ceiling = spark.read.format("klamm-bench-arrow-ceiling").load()
        rows += interleaved([
            (f"read: format(\"klamm-segments\") from the files ({jvm})", segments),
            ("read: format(\"klamm-segments-python\") from the files", in_python),
            ("read: spark.read.parquet, the same rows", parquet),
            ("read: a Python source yielding prebuilt Arrow batches", ceiling)], opts.records, opts.rounds)
        broker = start_broker(data, port)
        out = parquet.selectExpr("key", "value")
        rows.append(timed("write: format(\"klamm\") to the broker", opts.records,
                          lambda: out.write.format("klamm").mode("append")
                          .option("kafka.bootstrap.servers", bootstrap).option("topic", TOPIC + "-out").save(),
                          lambda: broker.pid, runs=1))
    finally:
        spark.stop()
        if broker.poll() is None:
            stop_broker(broker)
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nSpark local[2], {opts.records:,} records of 100 B ({os.cpu_count()} cores). CPU: Spark's JVM and "
          "Python workers, the broker left out; rows per CPU-second is the per-core rate.\n")
    print(f"The second run of the file-based reads is the median of their {opts.rounds - 1} later reads, taken in "
          "turn.\n")
    print("| path | rows | 1st run s | 1st run rows/s | 1st run rows per CPU-s | 2nd run s | 2nd run rows/s "
          "| 2nd run rows per CPU-s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, n, results in rows:
        runs = " | ".join(f"{wall:.2f} | {n / wall:,.0f} | {n / cpu:,.0f}" for wall, cpu in results)
        print(f"| {label} | {n:,} | {runs} |" + (" | | |" if len(results) == 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
