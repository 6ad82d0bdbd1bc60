"""format("klamm-segments") without klamm.spark.register(spark): PySpark registers `pyspark_*` packages' DefaultSource."""

from klamm.spark.segments import KlammSegmentsDataSource as DefaultSource

__all__ = ["DefaultSource"]
