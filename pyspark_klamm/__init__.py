"""format("klamm") without klamm.spark.register(spark): PySpark registers `pyspark_*` packages' DefaultSource itself."""

from klamm.spark.source import KlammDataSource as DefaultSource

__all__ = ["DefaultSource"]
