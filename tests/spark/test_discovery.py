"""Without klamm.spark.register(spark): PySpark finds the `pyspark_klamm*` packages' DefaultSource on its own.

PySpark registers every importable `pyspark_*` package's DefaultSource in a new
session. A session of its own (a child process) shows it, with and without
klamm.spark.configure's JVM segment reader (which then holds "klamm-segments").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from klamm.spark.segments_jar import ENV
from tests.conftest import skip_or_fail

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    if sys.argv[2] == "jvm":
        import klamm.spark
        builder = klamm.spark.configure(builder)
    spark = builder.getOrCreate()
    empty = sys.argv[1]
    segments = spark.read.format("klamm-segments").load(empty)
    print("segments rows:", segments.count())
    print("in python:", "(Python)" in segments._jdf.queryExecution().executedPlan().toString())
    try:
        spark.read.format("klamm").option("subscribe", "t").load().collect()
    except Exception as exc:
        print("klamm:", "kafka.bootstrap.servers" in str(exc))
    spark.stop()
""")


@pytest.mark.parametrize("segments_reader", ["python", "jvm"])
def test_pyspark_registers_both_formats_by_itself(spark, tmp_path, segments_reader):
    if segments_reader == "jvm" and shutil.which("javac") is None:
        skip_or_fail("klamm-segments' JVM reader needs a JDK's javac")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop(ENV, None)  # this session's klamm.spark.configure set it
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), segments_reader], env=env,
                          capture_output=True, text=True, timeout=240)
    assert "segments rows: 0" in done.stdout, done.stdout + done.stderr[-3000:]
    assert f"in python: {segments_reader == 'python'}" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "klamm: True" in done.stdout, done.stdout + done.stderr[-3000:]
