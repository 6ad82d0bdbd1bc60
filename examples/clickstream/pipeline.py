#!/usr/bin/env python3
"""Clickstream: click events into klamm, per-minute page counts out of a Spark Structured Streaming job.

    make pipeline        # or: .venv/bin/python examples/clickstream/pipeline.py [--events N]

1. starts a klamm broker in this process and creates the topics `clicks` and `page-counts`
2. a generator produces click events ({"page": ..., "ts": ...} JSON) spread over a few minutes of event
   time, and remembers how many clicks each page got in each minute
3. a streaming job reads `clicks` (format "klamm"), counts clicks per page per one-minute window with a
   watermark, and writes each closed window to the `page-counts` topic and to Parquet
4. a checker compares the Parquet counts, and those in `page-counts`, with the generator's: they must
   be exact
5. the counts are drawn as a PNG (examples/clickstream/page-counts.png) when matplotlib is installed
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

PAGES = ["/", "/search", "/product", "/cart", "/checkout"]
WEIGHTS = [40, 25, 20, 10, 5]
START = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.timezone.utc)
CLOSING_PAGE = "/closing"  # one late-enough event that moves the watermark past the last real window

Counts = dict[tuple[str, str], int]  # (window start, ISO 8601 UTC, page) -> clicks


def minute(ts: datetime.datetime) -> str:
    return ts.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def generate(bootstrap: str, topic: str, events: int, minutes: int, seed: int = 7) -> Counts:
    """Produce `events` clicks over `minutes` minutes of event time; return the true counts."""
    from confluent_kafka import Producer

    rnd = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10})
    counts: Counts = collections.Counter()
    for i in range(events):
        ts = START + datetime.timedelta(seconds=minutes * 60 * (i + rnd.random()) / events)
        page = rnd.choices(PAGES, WEIGHTS)[0]
        counts[(minute(ts), page)] += 1
        event = {"page": page, "user": f"u{rnd.randrange(1000)}", "ts": ts.isoformat()}
        producer.produce(topic, key=event["user"].encode(), value=json.dumps(event).encode())
        producer.poll(0)
    closing = START + datetime.timedelta(minutes=minutes + 10)
    producer.produce(topic, value=json.dumps({"page": CLOSING_PAGE, "user": "-", "ts": closing.isoformat()}).encode())
    assert producer.flush(60) == 0
    return dict(counts)


def run_job(spark: Any, bootstrap: str, source: str, sink: str, out: Path, checkpoint: Path) -> None:
    """The streaming job: closed one-minute windows of clicks per page, to `sink` and to Parquet at `out`."""
    from pyspark.sql import functions as F

    clicks = (spark.readStream.format("klamm").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 2000).load()
              .select(F.from_json(F.col("value").cast("string"), "page string, user string, ts timestamp")
                      .alias("click"))
              .select("click.*"))
    counts = (clicks.withWatermark("ts", "30 seconds")
              .groupBy(F.window("ts", "1 minute"), "page").count()
              .select(F.date_format("window.start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("minute"), "page", "count"))

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("append").parquet(str(out))
        (batch.select(F.to_json(F.struct("minute", "page", "count")).alias("value"))
         .write.format("klamm").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink).save())

    query = (counts.writeStream.outputMode("append").foreachBatch(write)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()


def check(spark: Any, bootstrap: str, sink: str, out: Path, expected: Counts) -> Counts:
    """The job's counts, from Parquet and from the sink topic; raise unless both equal `expected`."""
    from_parquet = {(r.minute, r.page): r["count"] for r in spark.read.parquet(str(out)).collect()}
    from_topic = {}
    rows = (spark.read.format("klamm").option("kafka.bootstrap.servers", bootstrap).option("subscribe", sink)
            .load().collect())
    for row in rows:
        value = json.loads(bytes(row.value))
        from_topic[(value["minute"], value["page"])] = value["count"]
    if len(rows) != len(from_topic):
        raise AssertionError(f"topic {sink}: {len(rows) - len(from_topic)} windows written more than once")
    for name, got in (("Parquet", from_parquet), (f"topic {sink}", from_topic)):
        if got != expected:
            wrong = sorted(set(got.items()) ^ set(expected.items()))[:5]
            raise AssertionError(f"{name}: counts differ from the generator's, e.g. {wrong}")
    return from_parquet


def plot(counts: Counts, png: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    minutes = sorted({m for m, _ in counts})
    figure, axes = plt.subplots(figsize=(8, 4))
    for page in PAGES:
        axes.plot([m[11:16] for m in minutes], [counts.get((m, page), 0) for m in minutes], marker="o", label=page)
    axes.set_xlabel("minute (event time, UTC)")
    axes.set_ylabel("clicks")
    axes.set_title("Clicks per page per minute, counted by Spark from klamm")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    figure.tight_layout()
    figure.savefig(png, dpi=100)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--minutes", type=int, default=10)
    ap.add_argument("--png", default=str(Path(__file__).with_name("page-counts.png")))
    opts = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql import SparkSession

    import klamm.spark
    import klamm.testing

    work = Path(tempfile.mkdtemp(prefix="klamm-clickstream-"))
    with klamm.testing.run_broker(num_partitions=3) as broker:
        bootstrap = broker.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic("clicks", 3, 1), NewTopic("page-counts", 1, 1)]).values():
            future.result(30)
        print(f"broker on {bootstrap}; generating {opts.events:,} clicks over {opts.minutes} minutes")
        expected = generate(bootstrap, "clicks", opts.events, opts.minutes)
        spark = (SparkSession.builder.master("local[2]").appName("clickstream")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        klamm.spark.register(spark)
        try:
            run_job(spark, bootstrap, "clicks", "page-counts", work / "counts.parquet", work / "checkpoint")
            counts = check(spark, bootstrap, "page-counts", work / "counts.parquet", expected)
        finally:
            spark.stop()
    print(f"{len(counts)} (minute, page) counts, all equal to the generator's: "
          f"{sum(counts.values()):,} clicks (Parquet in {work / 'counts.parquet'})")
    if plot(counts, Path(opts.png)):
        print(f"plot: {opts.png}")
    else:
        print("plot skipped (pip install matplotlib)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
