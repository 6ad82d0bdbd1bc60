"""One local SparkSession for the whole test session (it takes ~9 s to start), and a broker in this process.

Spark's Python workers must import klamm and pyarrow: they run this interpreter.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import klamm.spark
import klamm.testing
from klamm.spark.segments_jar import JarUnavailable, on_class_path
from tests.conftest import skip_or_fail, strict_tools


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        skip_or_fail("PySpark is not installed (pip install klamm[spark])")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    builder = (SparkSession.builder.master("local[2]").appName("klamm-tests")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1"))
    try:
        builder = klamm.spark.configure(builder)  # klamm-segments in the JVM, the Python reader as -python
    except JarUnavailable as exc:  # both names read in Python: the tests of the JVM reader skip
        if strict_tools():
            pytest.fail(f"{exc} (required because CI/KLAMM_REQUIRE_INTEROP_TOOLS is set)")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    klamm.spark.register(session)
    yield session
    session.stop()


@pytest.fixture
def jvm_reader(spark: Any) -> None:
    """klamm-segments' JVM reader is on the session's class path (a JDK built it)."""
    if not on_class_path(spark):
        skip_or_fail("klamm-segments' JVM reader could not be built here (no JDK's javac)")


@pytest.fixture(scope="module")
def spark_broker() -> Iterator[Any]:
    with klamm.testing.run_broker(num_partitions=1) as broker:
        yield broker


@pytest.fixture
def topic_name() -> str:
    return f"spark-{uuid.uuid4().hex[:8]}"
