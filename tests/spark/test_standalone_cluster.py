"""format("klamm") on a Spark standalone cluster, not only local mode: a master and a worker started from
PySpark's own distribution, executors in their own JVMs whose Python workers read and write klamm. The
executors also read a stopped broker's files with klamm-segments' JVM reader, whose jar Spark ships to them.

The driver is a child process (one SparkSession per process; the test session's own is local).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from klamm.protocol.records import NewRecord, build_batch
from tests.conftest import free_port
from tests.integration.conftest import BrokerThread, create_topic
from tests.integration.conftest import produce as raw_produce
from tests.spark.test_klamm_source import create, produce

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
RECORDS, PARTITIONS = 3000, 3

DRIVER = textwrap.dedent("""
    import os, sys
    import klamm.spark
    import klamm.spark.segments_jar
    from pyspark.sql import SparkSession
    master, bootstrap, source, sink, log_dirs = sys.argv[1:6]
    builder = (SparkSession.builder.master(master).appName("klamm-standalone")
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m")
               .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
               .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1"))
    try:
        builder = klamm.spark.configure(builder)
    except klamm.spark.segments_jar.JarUnavailable:  # no JDK: the Python reader reads the files
        pass
    spark = builder.getOrCreate()
    klamm.spark.register(spark)
    segments = spark.read.format("klamm-segments").load(log_dirs)
    print("segment rows:", segments.count(), "(Python)" in segments._jdf.queryExecution().executedPlan().toString())
    df = spark.read.format("klamm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source).load()
    print("rows:", df.count())
    print("executor:", spark.sparkContext.master, spark.sparkContext.getConf().get("spark.executor.memory"))
    pids = set(df.rdd.mapPartitions(lambda rows: [os.getpid()]).collect())
    print("driver pid among the workers:", os.getpid() in pids, len(pids))
    (df.selectExpr("key", "upper(cast(value as string)) as value").write.format("klamm")
       .option("kafka.bootstrap.servers", bootstrap).option("topic", sink).mode("append").save())
    spark.stop()
""")


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _start(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([str(_spark_home() / "bin" / "spark-class"), *args], stdout=log.open("wb"),
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _wait_for(log: Path, pattern: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not re.search(pattern, log.read_text(errors="replace")):
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
        time.sleep(0.2)


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark://host:port of a master with one worker (2 cores, 1 GB) registered."""
    base = tmp_path_factory.mktemp("standalone")
    env = {**os.environ, "SPARK_HOME": str(_spark_home()), "PYSPARK_PYTHON": sys.executable,
           "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false", "SPARK_LOG_DIR": str(base)}
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(free_port())], base / "master.log", env)
    processes = [master]
    try:
        _wait_for(base / "master.log", r"Starting Spark master at", master)
        worker = _start(["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                         "--memory", "1g", "--webui-port", str(free_port()), "--work-dir", str(base / "work"),
                         master_url], base / "worker.log", env)
        processes.append(worker)
        _wait_for(base / "worker.log", r"Successfully registered with master", worker)
        yield master_url
    finally:
        for process in reversed(processes):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_read_and_write_on_a_standalone_cluster(standalone, spark_broker, topic_name, tmp_path):
    stopped = BrokerThread(tmp_path / "data").start()
    try:
        with stopped.connect() as client:
            create_topic(client, "at-rest")
            for n in range(4):
                raw_produce(client, "at-rest", build_batch([NewRecord(None, b"%d" % i, []) for i in range(250)]))
    finally:
        stopped.close()
    bs = spark_broker.bootstrap_servers
    source, sink = topic_name, f"{topic_name}-out"
    create(bs, source, PARTITIONS)
    create(bs, sink, 1)
    produce(bs, source, RECORDS)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", DRIVER, standalone, bs, source, sink, str(tmp_path / "data")], env=env,
                          capture_output=True, text=True, timeout=240)
    output = done.stdout + done.stderr[-3000:]
    assert done.returncode == 0, output
    in_python = shutil.which("javac") is None  # else the executors' JVMs read them
    assert f"segment rows: 1000 {in_python}" in done.stdout, output
    assert f"\nrows: {RECORDS}" in done.stdout, output
    assert f"executor: {standalone} 512m" in done.stdout, output
    assert f"driver pid among the workers: False {PARTITIONS}" in done.stdout, output  # one task per partition
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "standalone-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(sink, 0, 0)])
    values = []
    deadline = time.monotonic() + 30
    while len(values) < RECORDS and time.monotonic() < deadline:
        values += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
    consumer.close()
    assert len(values) == RECORDS and all(v == v.upper() for v in values)
