"""format("klamm-segments") without klamm.spark.register(spark): PySpark registers `pyspark_*` packages' DefaultSource.

Not where klamm.spark.configure put the JVM reader, which holds the name then
(klamm/spark/segments_jar.py): Spark refuses a name claimed twice.
"""

import os

from klamm.spark.segments_jar import ENV

if not os.environ.get(ENV):
    from klamm.spark.segments import KlammSegmentsDataSource as DefaultSource

    __all__ = ["DefaultSource"]
