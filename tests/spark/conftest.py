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
from tests.conftest import skip_or_fail


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
    session = klamm.spark.configure(builder).getOrCreate()  # klamm-segments in the JVM; Python's as -python
    session.sparkContext.setLogLevel("ERROR")
    klamm.spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def spark_broker() -> Iterator[Any]:
    with klamm.testing.run_broker(num_partitions=1) as broker:
        yield broker


@pytest.fixture
def topic_name() -> str:
    return f"spark-{uuid.uuid4().hex[:8]}"
