"""Without klamm.spark.register(spark): PySpark finds the `pyspark_klamm*` packages' DefaultSource on its own.

PySpark registers every importable `pyspark_*` package's DefaultSource in a new
session. A session of its own (a child process) shows it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import os, sys
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
    empty = sys.argv[1]
    print("segments rows:", spark.read.format("klamm-segments").load(empty).count())
    try:
        spark.read.format("klamm").option("subscribe", "t").load().collect()
    except Exception as exc:
        print("klamm:", "kafka.bootstrap.servers" in str(exc))
    spark.stop()
""")


def test_pyspark_registers_both_formats_by_itself(spark, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert "segments rows: 0" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "klamm: True" in done.stdout, done.stdout + done.stderr[-3000:]
