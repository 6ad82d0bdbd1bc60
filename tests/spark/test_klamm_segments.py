"""format("klamm-segments"): a broker's segment files read directly give the rows the `klamm` source gives."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klamm.protocol.records import NewRecord, build_batch
from tests.integration.conftest import BrokerThread, create_topic, produce

pytestmark = pytest.mark.timeout(300)

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# The JVM reader (klamm.spark.configure put it on the session's class path) and the Python one
READERS = ["klamm-segments", "klamm-segments-python"]


def row_tuples(df: Any, headers: bool = False) -> list[tuple]:
    result = []
    for r in df.collect():
        row = (r.topic, r.partition, r.offset, None if r.key is None else bytes(r.key),
               None if r.value is None else bytes(r.value), r.timestamp, r.timestampType)
        if headers:
            row += (tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers),)
        result.append(row)
    return sorted(result, key=repr)


def fill(bootstrap: str, prefix: str) -> list[str]:
    """A topic per codec (segments roll often, so several per partition), a compacted one, a transactional one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = {f"{prefix}-{codec}": {"segment.ms": "100"} for codec in CODECS}
    topics[f"{prefix}-compacted"] = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                     "segment.ms": "100"}
    topics[f"{prefix}-txn"] = {}
    for future in admin.create_topics([NewTopic(t, 2, 1, config=c) for t, c in topics.items()]).values():
        future.result(30)
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 2})
        for i in range(300):
            producer.produce(f"{prefix}-{codec}", key=None if i % 7 == 0 else f"k{i}".encode(),
                             value=None if i % 11 == 0 else f"{codec}-{i}".encode() * (i % 5 + 1),
                             partition=i % 2, headers=[("i", str(i).encode()), ("nil", None)])
            if i % 100 == 99:
                producer.flush(30)
                time.sleep(0.15)  # the next append rolls the segment (segment.ms)
        assert producer.flush(30) == 0
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(400):
        producer.produce(f"{prefix}-compacted", key=f"key{i % 20}".encode(), value=f"v{i}".encode(), partition=i % 2)
        if i % 50 == 0:
            producer.flush(30)
            time.sleep(0.15)  # let segments roll, so the cleaner has something to clean
    assert producer.flush(30) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{prefix}-tx"})
    txn.init_transactions(30)
    for n, outcome in enumerate(["commit", "abort", "commit", "abort", "commit"]):
        txn.begin_transaction()
        for i in range(10):
            txn.produce(f"{prefix}-txn", value=f"{outcome}-{n}-{i}".encode(), partition=i % 2)
        txn.flush(30)
        getattr(txn, f"{outcome}_transaction")(30)
    return sorted(topics)


def test_segments_agree_with_the_broker_source_on_every_codec_compaction_and_transactions(spark, tmp_path: Path):
    broker = BrokerThread(tmp_path / "data", {"log.cleaner.backoff.ms": "100"}).start()
    bootstrap = f"127.0.0.1:{broker.port}"
    try:
        topics = fill(bootstrap, "seg")
        time.sleep(1.5)  # the cleaner's pass over the compacted topic
        through_broker = {}
        for topic in topics:
            df = (spark.read.format("klamm").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("includeHeaders", "true").load())
            through_broker[topic] = row_tuples(df, headers=True)
    finally:
        broker.close()  # a clean shutdown: the segments are read to their last batch
    for reader in READERS:
        for topic in topics:
            df = (spark.read.format(reader).option("subscribe", topic).option("includeHeaders", "true")
                  .load(str(tmp_path / "data")))
            assert row_tuples(df, headers=True) == through_broker[topic], (reader, topic)
        without_headers = (spark.read.format(reader).option("subscribe", "seg-zstd")
                           .load(str(tmp_path / "data")))
        assert row_tuples(without_headers) == [row[:-1] for row in through_broker["seg-zstd"]], reader
        # a query's columns only (the JVM reader decodes no others), and none for a count
        with_headers = (spark.read.format(reader).option("subscribe", "seg-lz4").option("includeHeaders", "true")
                        .load(str(tmp_path / "data")))
        assert with_headers.count() == 300 and without_headers.count() == 300, reader
        picked = with_headers.selectExpr("offset", "partition", "headers[0].key as h", "value").collect()
        assert sorted((r.partition, r.offset, r.h, None if r.value is None else bytes(r.value)) for r in picked) \
            == sorted((row[1], row[2], row[7][0][0], row[4]) for row in through_broker["seg-lz4"]), reader
    txn_values = sorted(row[4] for row in through_broker["seg-txn"])
    assert txn_values == sorted(f"commit-{n}-{i}".encode() for n in (0, 2, 4) for i in range(10))
    assert len(through_broker["seg-none"]) == 300
    for reader in READERS:  # filters on topic, partition and offset (the JVM reader reads only what they leave)
        data = spark.read.format(reader).option("includeHeaders", "true").load(str(tmp_path / "data"))
        some = data.where("topic = 'seg-none' and partition = 1 and offset >= 40 and offset < 120")
        assert row_tuples(some, headers=True) == [r for r in through_broker["seg-none"] if r[1] == 1 and
                                                  40 <= r[2] < 120], reader
        few = data.where("topic in ('seg-gzip', 'seg-zstd') and offset in (5, 70) and partition > 0")
        assert row_tuples(few, headers=True) == [r for r in through_broker["seg-gzip"] + through_broker["seg-zstd"]
                                                 if r[1] == 1 and r[2] in (5, 70)], reader
        if reader == "klamm-segments":  # Spark partitions: the segments holding what the filters leave
            last = data.where("topic = 'seg-none' and partition = 1 and offset >= 149")
            assert last.rdd.getNumPartitions() == 1 and last.count() == 1
            one = data.where("topic = 'seg-none' and partition = 1").rdd.getNumPartitions()
            assert 1 < one < data.where("topic = 'seg-none'").rdd.getNumPartitions()
    for reader in READERS:
        everything = spark.read.format(reader).load(str(tmp_path / "data"))
        assert everything.rdd.getNumPartitions() > 2 * len(topics), reader  # a Spark partition a segment
        assert {r.topic for r in everything.select("topic").distinct().collect()} == set(topics), reader


def test_a_running_broker_is_read_up_to_its_recovery_point(spark, tmp_path: Path):
    broker = BrokerThread(tmp_path / "data", {"log.flush.interval.messages": "1",
                                              "log.flush.offset.checkpoint.interval.ms": "100"}).start()
    bootstrap = f"127.0.0.1:{broker.port}"
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("live", 1, 1)])["live"].result(30)
        producer = Producer({"bootstrap.servers": bootstrap})
        for i in range(50):
            producer.produce("live", value=str(i).encode(), partition=0)
        producer.flush(30)
        deadline = time.monotonic() + 20
        while True:  # the recovery point reaches the file every checkpoint interval
            text = (tmp_path / "data" / "recovery-point-offset-checkpoint").read_text()
            if "live 0 50" in text or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert not (tmp_path / "data" / ".kafka_cleanshutdown").exists()
        for reader in READERS:
            rows = spark.read.format(reader).option("subscribe", "live").load(str(tmp_path / "data")).collect()
            assert sorted(r.offset for r in rows) == list(range(50)), reader
    finally:
        broker.close()


def test_many_headers_and_keys_that_are_not_utf8_read_as_spark_kafka_source_shows_them(spark, tmp_path: Path):
    # Spark's Kafka source shows a header key as Java's new String(bytes, UTF_8): one U+FFFD for an encoded
    # surrogate (ED A0 80), one for a 4-byte sequence cut short by the end of the key (F0 90 80)
    keys = [b"\xed\xa0\x80", b"h\xff", b"\xf0\x90\x80", b"", "\u00e9t\u00e9".encode()] + [b"h%d" % j for j in range(45)]
    java = ["\ufffd", "h\ufffd", "\ufffd", "", "\u00e9t\u00e9"] + [f"h{j}" for j in range(45)]
    broker = BrokerThread(tmp_path / "data").start()
    try:
        with broker.connect() as client:
            create_topic(client, "headers")
            for codec in range(5):
                recs = [NewRecord(b"k", b"%d" % i, [(k, None if j % 3 else b"%d" % j) for j, k in enumerate(keys)])
                        for i in range(100)]
                produce(client, "headers", build_batch(recs, compression=codec))
    finally:
        broker.close()
    for reader in READERS:
        rows = (spark.read.format(reader).option("subscribe", "headers").option("includeHeaders", "true")
                .load(str(tmp_path / "data")).collect())
        assert len(rows) == 500, reader
        for r in rows:
            assert [(h.key, h.value) for h in r.headers] == [(k, None if j % 3 else b"%d" % j)
                                                             for j, k in enumerate(java)], reader


@pytest.mark.parametrize("reader", READERS)
def test_bad_options(spark, tmp_path: Path, reader: str):
    with pytest.raises(Exception, match="log.dirs"):
        spark.read.format(reader).load().collect()
    with pytest.raises(Exception, match="not a directory"):
        spark.read.format(reader).load(str(tmp_path / "missing")).collect()
    with pytest.raises(Exception, match="read_committed or read_uncommitted"):
        spark.read.format(reader).option("kafka.isolation.level", "dirty").load(str(tmp_path)).collect()


def test_klamm_segments_reads_in_the_jvm_once_configure_put_its_reader_on_the_class_path(spark, jvm_reader,
                                                                                         tmp_path: Path):
    def plan(reader: str) -> str:
        return spark.read.format(reader).load(str(tmp_path))._jdf.queryExecution().executedPlan().toString()

    assert "(Python)" not in plan("klamm-segments")
    assert "klamm-segments [" in plan("klamm-segments")  # SegmentsSource's scan description
    assert "(Python)" in plan("klamm-segments-python")


@pytest.mark.parametrize("reader", READERS)
def test_log_start_offset_isolation_and_a_corrupt_batch(spark, tmp_path: Path, reader: str):
    data = tmp_path / "data"
    broker = BrokerThread(data).start()
    try:
        with broker.connect() as client:
            create_topic(client, "plain")
            produce(client, "plain", build_batch([NewRecord(b"k%d" % i, b"v%d" % i, []) for i in range(100)]))
            create_topic(client, "broken")
            produce(client, "broken", build_batch([NewRecord(None, b"x" * 50, []) for i in range(10)]))
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
        gone = admin.delete_records([TopicPartition("plain", 0, 30)])
        for future in gone.values():
            future.result(30)
        fill_transactions(f"127.0.0.1:{broker.port}")
    finally:
        broker.close()

    def offsets(topic: str, **options: str) -> list[int]:
        df = spark.read.format(reader).option("subscribe", topic).options(**options).load(str(data))
        return sorted(r.offset for r in df.select("offset").collect())

    assert offsets("plain") == list(range(30, 100))  # DeleteRecords moved the log start into the batch
    committed = offsets("txn")
    everything = offsets("txn", **{"kafka.isolation.level": "read_uncommitted"})
    assert len(committed) == 10 and len(everything) == 20  # an aborted transaction's records, markers never
    segment = next((data / "broken-0").glob("*.log"))
    with open(segment, "r+b") as f:  # one record more than the batch holds (a reader does not check CRCs)
        f.seek(57)
        f.write((11).to_bytes(4, "big"))
    with pytest.raises(Exception, match="truncated record"):
        spark.read.format(reader).option("subscribe", "broken").load(str(data)).collect()


def fill_transactions(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("txn", 1, 1)])["txn"].result(30)
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "segments-isolation"})
    txn.init_transactions(30)
    for outcome in ("commit", "abort"):
        txn.begin_transaction()
        for i in range(10):
            txn.produce("txn", value=f"{outcome}-{i}".encode())
        txn.flush(30)
        getattr(txn, f"{outcome}_transaction")(30)
