"""PySpark data sources for Kafka topics (any Kafka-compatible broker), with the options of Spark's Kafka source.

    import klamm.spark
    klamm.spark.register(spark)
    df = (spark.read.format("klamm").option("kafka.bootstrap.servers", bs)
          .option("subscribe", "clicks").load())

`klamm` reads (batch and streaming) and writes (batch and streaming) through
confluent-kafka; `klamm-segments` reads a broker's log directories directly.
PySpark is an optional dependency (`pip install klamm[spark]`); Spark's Python
workers must run an interpreter that can import klamm, so set PYSPARK_PYTHON to
it before the session starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def register(spark: Any) -> None:
    """Make formats "klamm" (read, readStream, write, writeStream) and "klamm-segments" available in `spark`."""
    from klamm.spark.segments import KlammSegmentsDataSource
    from klamm.spark.source import KlammDataSource

    spark.dataSource.register(KlammDataSource)
    spark.dataSource.register(KlammSegmentsDataSource)
