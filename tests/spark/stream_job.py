"""A streaming job in a process of its own, for tests that kill it: topic -> topic, exactly-once.

    python tests/spark/stream_job.py BOOTSTRAP SOURCE SINK CHECKPOINT [available-now]

Without `available-now` it runs micro-batches of at most 40 records until killed.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    bootstrap, source, sink, checkpoint = sys.argv[1:5]
    available_now = sys.argv[5:] == ["available-now"]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import klamm.spark

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    klamm.spark.register(spark)
    writer = (spark.readStream.format("klamm").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 40)
              .load().selectExpr("key", "value")
              .writeStream.format("klamm").option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("exactlyOnce", "true").option("checkpointLocation", checkpoint))
    query = (writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="0 seconds")).start()
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
