"""spark.read / readStream / write / writeStream with format("klamm") against a broker, as with Spark's Kafka source."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 3


def create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def produce(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS, first: int = 0,
            **config: Any) -> list[tuple[int, bytes, bytes, list[tuple[str, bytes]]]]:
    """Records i = first..first+count-1, to partition i % partitions: (partition, key, value, headers)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    sent = []
    for i in range(first, first + count):
        record = (i % partitions, f"k{i}".encode(), f"value-{i}".encode() * (1 + i % 3),
                  [("n", str(i).encode()), ("empty", b"")])
        producer.produce(topic, key=record[1], value=record[2], partition=record[0], headers=record[3],
                         timestamp=1_700_000_000_000 + i)
        sent.append(record)
    assert producer.flush(30) == 0
    return sent


def reader(spark: Any, bootstrap: str, **options: Any) -> Any:
    read = spark.read.format("klamm").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def rows(df: Any) -> list[tuple]:
    return sorted((r.partition, r.offset, r.key, r.value) for r in df.collect())


def expected(sent: list, partitions: int = PARTITIONS) -> list[tuple]:
    offsets = [0] * partitions
    result = []
    for partition, key, value, _ in sent:
        result.append((partition, offsets[partition], key, value))
        offsets[partition] += 1
    return sorted(result)


def test_batch_read_has_the_kafka_source_schema_and_every_record(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name)
    sent = produce(bs, topic_name, 60)
    df = reader(spark, bs, subscribe=topic_name)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"),
        ("timestamp", "timestamp"), ("timestampType", "int")]
    got = df.collect()
    assert sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in got) == expected(sent)
    assert {r.topic for r in got} == {topic_name}
    assert {r.timestampType for r in got} == {0}
    by_key = {bytes(r.key): r for r in got}
    stamp = by_key[b"k7"].timestamp
    assert stamp.replace(tzinfo=None) == datetime.datetime.fromtimestamp(1_700_000_000.007)
    assert df.rdd.getNumPartitions() == PARTITIONS


def test_headers_when_asked_for(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 1)
    produce(bs, topic_name, 5, partitions=1)
    df = reader(spark, bs, subscribe=topic_name, includeHeaders="true")
    assert df.schema["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    got = {r.offset: [(h.key, bytes(h.value)) for h in r.headers] for r in df.collect()}
    assert got == {i: [("n", str(i).encode()), ("empty", b"")] for i in range(5)}


def test_offset_ranges_assign_and_pattern(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name)
    sent = produce(bs, topic_name, 90)  # 30 per partition
    want = expected(sent)
    starting = json.dumps({topic_name: {"0": 5, "1": -2, "2": 29}})
    ending = json.dumps({topic_name: {"0": 10, "1": 3, "2": -1}})
    got = rows(reader(spark, bs, subscribe=topic_name, startingOffsets=starting, endingOffsets=ending))
    assert got == [r for r in want if (r[0] == 0 and 5 <= r[1] < 10) or (r[0] == 1 and r[1] < 3)
                   or (r[0] == 2 and r[1] == 29)]
    got = rows(reader(spark, bs, assign=json.dumps({topic_name: [1]}),
                      endingOffsets=json.dumps({topic_name: {"1": 4}})))
    assert got == [r for r in want if r[0] == 1 and r[1] < 4]
    prefix = topic_name[: len(topic_name) - 3]
    got = rows(reader(spark, bs, subscribePattern=prefix.replace("-", "\\-") + ".*"))
    assert got == want


def test_min_partitions_splits_ranges(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 2)
    sent = produce(bs, topic_name, 100, partitions=2)
    df = reader(spark, bs, subscribe=topic_name, minPartitions="7")
    assert df.rdd.getNumPartitions() >= 7
    assert rows(df) == expected(sent, 2)


def test_starting_timestamp(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 1)
    sent = produce(bs, topic_name, 20, partitions=1)
    got = rows(reader(spark, bs, subscribe=topic_name, startingTimestamp=str(1_700_000_000_000 + 12)))
    assert got == expected(sent, 1)[12:]
    by_partition = json.dumps({topic_name: {"0": 1_700_000_000_000 + 15}})
    got = rows(reader(spark, bs, subscribe=topic_name, startingOffsetsByTimestamp=by_partition))
    assert got == expected(sent, 1)[15:]
    with pytest.raises(Exception, match="no offset matched the starting timestamp"):
        reader(spark, bs, subscribe=topic_name, startingTimestamp=str(1_900_000_000_000)).collect()


def test_fail_on_data_loss(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 1)
    sent = produce(bs, topic_name, 20, partitions=1)
    admin = AdminClient({"bootstrap.servers": bs})
    admin.delete_records([TopicPartition(topic_name, 0, 8)])[TopicPartition(topic_name, 0, 8)].result(30)
    starting = json.dumps({topic_name: {"0": 2}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, bs, subscribe=topic_name, startingOffsets=starting).collect()
    got = rows(reader(spark, bs, subscribe=topic_name, startingOffsets=starting, failOnDataLoss="false"))
    assert got == expected(sent, 1)[8:]


def test_read_committed_skips_aborted_records_and_markers(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 1)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{topic_name}"})
    producer.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic_name, value=f"{outcome}-{i}".encode(), partition=0)
        producer.flush(30)  # an abort drops what is not sent yet: these must reach the log first
        getattr(producer, f"{outcome}_transaction")(30)
    producer.begin_transaction()  # left open: its records are past the last stable offset
    producer.produce(topic_name, value=b"open", partition=0)
    producer.flush(30)
    try:
        got = [bytes(r.value) for r in reader(spark, bs, subscribe=topic_name).orderBy("offset").collect()]
        assert got == [b"commit-0", b"commit-1", b"commit-2"] * 2
        uncommitted = reader(spark, bs, subscribe=topic_name, **{"kafka.isolation.level": "read_uncommitted"})
        assert sorted(r.offset for r in uncommitted.collect()) == [0, 1, 2, 4, 5, 6, 8, 9, 10, 12]
    finally:
        producer.abort_transaction(30)


def test_options_are_checked_as_spark_does(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    for options, message in [({}, "exactly one of"), ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of"),
                             ({"subscribe": "a", "startingOffsets": "latest"}, "can't be latest"),
                             ({"subscribe": "a", "kafka.group.id": "g"}, "kafka.group.id"),
                             ({"subscribe": "a", "failOnDataLoss": "maybe"}, "true or false")]:
        with pytest.raises(Exception, match=message):
            reader(spark, bs, **options).collect()


def test_java_client_options_of_a_spark_kafka_pipeline_carry_over(spark, spark_broker, topic_name):
    """Options written for Spark's own Kafka source (Java client names) read and write here unchanged."""
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 1)
    java = {"kafka.max.poll.records": "500", "kafka.fetch.max.wait.ms": "100", "kafka.receive.buffer.bytes": "65536",
            "kafka.default.api.timeout.ms": "60000", "kafka.client.dns.lookup": "use_all_dns_ips",
            "kafka.partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor"}
    df = spark.createDataFrame([("k", "v")], "key string, value string")
    (df.write.format("klamm").mode("append").option("kafka.bootstrap.servers", bs).option("topic", topic_name)
       .option("kafka.max.request.size", "2000000").option("kafka.buffer.memory", "33554432").save())
    got = reader(spark, bs, subscribe=topic_name, **java).collect()
    assert [(bytes(r.key), bytes(r.value)) for r in got] == [(b"k", b"v")]
    with pytest.raises(Exception, match="JKS truststore"):
        reader(spark, bs, subscribe=topic_name, **{"kafka.ssl.truststore.location": "/x.jks"}).collect()


def test_write_then_read_back_byte_for_byte(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 2)
    data = [(f"k{i}".encode() if i % 4 else None, bytes([i % 256]) * (i + 1), i % 2,
             [(f"h{i}", f"v{i}".encode())]) for i in range(50)]
    df = spark.createDataFrame(data, "key binary, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("klamm").mode("append").option("kafka.bootstrap.servers", bs).option("topic", topic_name).save()
    got = reader(spark, bs, subscribe=topic_name, includeHeaders="true").collect()
    assert sorted(repr((None if r.key is None else bytes(r.key), bytes(r.value), r.partition,
                        [(h.key, bytes(h.value)) for h in r.headers])) for r in got) == sorted(map(repr, data))


def test_write_takes_the_topic_column_and_string_values(spark, spark_broker, topic_name):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 1)
    df = spark.createDataFrame([(topic_name, "a", "x"), (topic_name, None, "y")],
                               "topic string, key string, value string")
    df.write.format("klamm").mode("append").option("kafka.bootstrap.servers", bs).save()
    got = {(None if r.key is None else bytes(r.key), bytes(r.value))
           for r in reader(spark, bs, subscribe=topic_name).collect()}
    assert got == {(b"a", b"x"), (None, b"y")}
    with pytest.raises(Exception, match="topic option required"):
        spark.createDataFrame([("v",)], "value string").write.format("klamm").mode("append") \
            .option("kafka.bootstrap.servers", bs).save()


def test_stream_resumes_from_its_checkpoint_without_gaps_or_duplicates(spark, spark_broker, topic_name, tmp_path):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name)
    sent = produce(bs, topic_name, 60)

    def run_until_caught_up() -> Any:
        stream = (spark.readStream.format("klamm").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", topic_name).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "25").load()
                  .selectExpr("partition", "offset", "key", "value"))
        query = (stream.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .option("path", str(tmp_path / "out")).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()
        return query

    first = run_until_caught_up()
    sizes = [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]]
    assert sizes and max(sizes) <= 25 and sum(sizes) == 60
    sent += produce(bs, topic_name, 45, first=60)
    run_until_caught_up()
    out = spark.read.parquet(str(tmp_path / "out"))
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in out.collect())
    assert got == expected(sent)  # every record once: no gap, no duplicate


def test_stream_write_to_a_topic(spark, spark_broker, topic_name, tmp_path):
    bs = spark_broker.bootstrap_servers
    source, sink = topic_name, topic_name + "-out"
    create(bs, source, 2)
    create(bs, sink, 1)
    produce(bs, source, 40, partitions=2)
    query = (spark.readStream.format("klamm").option("kafka.bootstrap.servers", bs).option("subscribe", source)
             .option("startingOffsets", "earliest").load()
             .selectExpr("key", "upper(cast(value as string)) as value")
             .writeStream.format("klamm").option("kafka.bootstrap.servers", bs).option("topic", sink)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    got = sorted(bytes(r.value) for r in reader(spark, bs, subscribe=sink).collect())
    assert got == sorted(f"value-{i}".upper().encode() * (1 + i % 3) for i in range(40))


def test_a_failed_micro_batch_is_replayed_from_the_checkpoint_with_the_same_records(spark, spark_broker, topic_name,
                                                                                      tmp_path):
    """The query dies in its third micro-batch; restarted on its checkpoint it reads that batch's offsets again."""
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name)
    sent = produce(bs, topic_name, 90)
    failed_once = tmp_path / "failed-once"

    def sink(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(str(tmp_path / "out" / f"batch={batch_id}"))
        if batch_id == 2 and not failed_once.exists():
            failed_once.touch()
            raise RuntimeError("the job dies after writing batch 2, before its commit")

    def run() -> Any:
        stream = (spark.readStream.format("klamm").option("kafka.bootstrap.servers", bs)
                  .option("subscribe", topic_name).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "20").load().selectExpr("partition", "offset", "key", "value"))
        query = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination(180)
        except Exception as exc:  # the first run ends with the batch's failure
            return exc
        return None

    assert run() is not None and failed_once.exists()
    assert run() is None
    out = spark.read.parquet(str(tmp_path / "out"))
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in out.collect())
    assert got == expected(sent)  # batch 2 written twice over the same rows: each record once


@pytest.mark.parametrize("exactly_once, topic_column", [(True, False), (True, True), (False, False)],
                         ids=["exactly-once", "exactly-once-topic-column", "at-least-once"])
def test_a_batch_replayed_after_a_crash_is_written_once_with_exactly_once(spark, spark_broker, topic_name, tmp_path,
                                                                           exactly_once, topic_column):
    """The job dies after the sink committed batch 0 but before Spark recorded it (its commit file is
    gone): the restarted query writes batch 0 again. Exactly-once skips it; at-least-once duplicates it.
    With topics from a column, exactlyOnceTopic names where the batch ids are kept."""
    bs = spark_broker.bootstrap_servers
    source, sink = topic_name, topic_name + "-out"
    create(bs, source, 2)
    create(bs, sink, 1)
    produce(bs, source, 30, partitions=2)
    checkpoint = tmp_path / "checkpoint"

    def run() -> None:
        rows = (spark.readStream.format("klamm").option("kafka.bootstrap.servers", bs).option("subscribe", source)
                .option("startingOffsets", "earliest").load())
        if topic_column:
            write = (rows.selectExpr("key", "value", f"'{sink}' as topic").writeStream.format("klamm")
                     .option("exactlyOnceTopic", sink))
        else:
            write = rows.selectExpr("key", "value").writeStream.format("klamm").option("topic", sink)
        query = (write.option("kafka.bootstrap.servers", bs).option("exactlyOnce", str(exactly_once).lower())
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None, query.exception()

    run()
    for name in ("0", ".0.crc"):  # as if the driver died between the sink's commit and Spark's
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    run()
    values = [bytes(r.value) for r in reader(spark, bs, subscribe=sink).collect()]
    assert len(set(values)) == 30
    assert len(values) == (30 if exactly_once else 60)


def test_an_empty_topic_or_range_reads_no_rows(spark, spark_broker, topic_name, tmp_path):
    bs = spark_broker.bootstrap_servers
    create(bs, topic_name, 2)
    assert reader(spark, bs, subscribe=topic_name).count() == 0
    assert spark.read.format("klamm-segments").load(str(tmp_path)).count() == 0


def test_a_killed_streaming_job_restarts_from_its_checkpoint_exactly_once(spark, spark_broker, topic_name, tmp_path):
    """kill -9 of the whole job (driver and executors) mid-stream; restarted, it loses and repeats nothing."""
    bs = spark_broker.bootstrap_servers
    source, sink = topic_name, topic_name + "-out"
    create(bs, source, 2)
    create(bs, sink, 1)
    produce(bs, source, 600, partitions=2)
    job = [sys.executable, str(Path(__file__).with_name("stream_job.py")), bs, source, sink, str(tmp_path / "cp")]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    running = subprocess.Popen(job, env=env, start_new_session=True, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True)
    watcher = Consumer({"bootstrap.servers": bs, "group.id": "watch"})
    try:
        deadline = time.monotonic() + 150
        while watcher.get_watermark_offsets(TopicPartition(sink, 0), 10, cached=False)[1] < 150:
            assert running.poll() is None and time.monotonic() < deadline, "the job made no progress"
            time.sleep(0.2)
    finally:
        watcher.close()
        os.killpg(running.pid, signal.SIGKILL)  # driver, JVM and Python workers at once
        running.wait(30)
    done = subprocess.run(job + ["available-now"], env=env, timeout=240, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    values = [bytes(r.value) for r in reader(spark, bs, subscribe=sink).collect()]
    want = sorted(f"value-{i}".encode() * (1 + i % 3) for i in range(600))
    assert sorted(values) == want  # every record once: none lost, none written twice
