"""PySpark data sources for Kafka topics (any Kafka-compatible broker), with the options of Spark's Kafka source.

    import klamm.spark
    spark = klamm.spark.configure(SparkSession.builder).getOrCreate()  # optional: the JVM segment reader
    klamm.spark.register(spark)
    df = (spark.read.format("klamm").option("kafka.bootstrap.servers", bs)
          .option("subscribe", "clicks").load())

`klamm` reads (batch and streaming) and writes (batch and streaming) through
confluent-kafka; `klamm-segments` reads a broker's log directories directly, in
the JVM when `configure` put its reader on the session's class path
(klamm/spark/segments_jar.py), otherwise in Python. PySpark is an optional
dependency (`pip install klamm[spark]`); Spark's Python workers must run an
interpreter that can import klamm, so set PYSPARK_PYTHON to it before the
session starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["configure", "register"]


def configure(builder: Any) -> Any:
    """`builder` (a SparkSession.Builder, before getOrCreate) with klamm-segments' JVM reader on its class path.

    Raises klamm.spark.segments_jar.JarUnavailable where no JDK can build it.
    """
    from klamm.spark.segments_jar import configure as add_jar

    return add_jar(builder)


def register(spark: Any) -> None:
    """Make formats "klamm" (read, readStream, write, writeStream) and "klamm-segments" available in `spark`.

    The Python segment reader is also "klamm-segments-python", and "klamm-segments" only where the JVM
    reader is not on the class path (Spark refuses a name claimed twice).
    """
    from klamm.spark.segments import KlammSegmentsDataSource, PythonSegmentsDataSource
    from klamm.spark.segments_jar import on_class_path
    from klamm.spark.source import KlammDataSource

    spark.dataSource.register(KlammDataSource)
    spark.dataSource.register(PythonSegmentsDataSource)
    if not on_class_path(spark):
        spark.dataSource.register(KlammSegmentsDataSource)
