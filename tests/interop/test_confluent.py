"""confluent-kafka (librdkafka) against the broker."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import NewTopic

from .helpers import (admin, confluent_consume, confluent_consumer, confluent_produce,
                      confluent_recs, create_topic, wait_for)
from .records import CODECS, Rec, diff, expected

pytestmark = pytest.mark.timeout(120)

DEFAULT_MAX_MESSAGE_BYTES = 1048588
RECORD_BATCH_OVERHEAD = 61


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(broker, topic, codec, acks):
    create_topic(broker.bootstrap, topic)
    want = expected("cf", 60, size=150)
    res = confluent_produce(broker.bootstrap, topic, want, codec=codec, acks=acks)
    errors = [(i, e) for i, _, e in res if e is not None]
    assert not errors, errors[:5]
    if acks != "0":
        assert [o for _, o, _ in res] == list(range(len(want)))
    msgs = confluent_consume(broker.bootstrap, topic, 0, 0, len(want))
    assert [m.offset() for m in msgs] == list(range(len(want)))
    got = confluent_recs(msgs)
    assert got == want, diff(got, want)
    for m in msgs:
        assert m.topic() == topic and m.partition() == 0
        ts_type, ts = m.timestamp()
        assert ts_type == 1 and abs(ts / 1000 - time.time()) < 300  # CreateTime, recent


def test_consume_from_middle_and_batches(broker, topic):
    """Several produce batches; seek into the middle of a compressed batch."""
    create_topic(broker.bootstrap, topic)
    want = []
    for n, codec in enumerate(["lz4", "zstd", "gzip"]):
        part = expected(f"b{n}", 25)
        confluent_produce(broker.bootstrap, topic, part, codec=codec)
        want += part
    msgs = confluent_consume(broker.bootstrap, topic, 0, 37, 13)
    assert [m.offset() for m in msgs] == list(range(37, 50))
    assert confluent_recs(msgs) == want[37:50]


def test_multi_partition_keyed(broker, topic):
    create_topic(broker.bootstrap, topic, partitions=3)
    for p in range(3):
        res = confluent_produce(broker.bootstrap, topic, expected(f"p{p}", 10 + p), partition=p,
                                codec="snappy")
        assert [o for _, o, _ in res] == list(range(10 + p))
    for p in range(3):
        got = confluent_recs(confluent_consume(broker.bootstrap, topic, p, 0, 10 + p))
        assert got == expected(f"p{p}", 10 + p)
    c = confluent_consumer(broker.bootstrap)
    try:
        for p in range(3):
            assert c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False) == (0, 10 + p)
    finally:
        c.close()


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_record_near_max_message_bytes(broker, topic, codec):
    create_topic(broker.bootstrap, topic)
    extra = {"message.max.bytes": 2_000_000}
    big = os.urandom(1_000_000)
    # Largest value whose single-record batch (null key, no headers) still fits the
    # default max.message.bytes: 61 bytes batch header + ~15 bytes record framing.
    edge = os.urandom(DEFAULT_MAX_MESSAGE_BYTES - RECORD_BATCH_OVERHEAD - 120)
    recs = [Rec(b"big", big, (("h", b"v"),)), Rec(None, edge, ())]
    for r in recs:  # one record per request: never batch two of them together
        res = confluent_produce(broker.bootstrap, topic, [r], codec=codec, extra=extra)
        assert res[0][2] is None, res
    msgs = confluent_consume(broker.bootstrap, topic, 0, 0, 2)
    assert [len(m.value()) for m in msgs] == [len(big), len(edge)]
    assert confluent_recs(msgs) == recs


def test_record_over_max_message_bytes_rejected(broker, topic):
    create_topic(broker.bootstrap, topic)
    too_big = os.urandom(DEFAULT_MAX_MESSAGE_BYTES + 100)
    res = confluent_produce(broker.bootstrap, topic, [Rec(None, too_big, ())],
                            extra={"message.max.bytes": 2_000_000, "batch.size": 2_000_000})
    err = res[0][2]
    assert err is not None, "broker accepted a record batch over max.message.bytes"
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    # the partition stays usable and empty of the rejected record
    ok = confluent_produce(broker.bootstrap, topic, [Rec(b"k", b"small", ())])
    assert ok[0][1:] == (0, None)


def test_admin_create_list_delete(broker, make_topic):
    a = admin(broker.bootstrap)
    t1, t2 = make_topic("a"), make_topic("b")
    fs = a.create_topics([NewTopic(t1, 3, 1), NewTopic(t2, 1, 1, config={"retention.ms": "3600000"})],
                         request_timeout=15)
    for f in fs.values():
        f.result(30)
    md = wait_for(lambda: (m := a.list_topics(timeout=10)) and t1 in m.topics and t2 in m.topics and m,
                  what="created topics in metadata")
    assert len(md.topics[t1].partitions) == 3
    assert {f"{b.host}:{b.port}" for b in md.brokers.values()} == set(broker.bootstrap.split(","))

    dup = a.create_topics([NewTopic(t1, 1, 1)], request_timeout=15)[t1]
    with pytest.raises(KafkaException) as ei:
        dup.result(30)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS

    bad = a.create_topics([NewTopic(make_topic("bad"), 1, 4)], request_timeout=15)  # more than the brokers
    with pytest.raises(KafkaException) as ei:
        list(bad.values())[0].result(30)
    assert ei.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR

    for f in a.delete_topics([t1], request_timeout=15).values():
        f.result(30)
    wait_for(lambda: t1 not in a.list_topics(timeout=10).topics, what=f"{t1} gone from metadata")
    assert t2 in a.list_topics(timeout=10).topics

    missing = a.delete_topics([make_topic("never")], request_timeout=15)
    with pytest.raises(KafkaException) as ei:
        list(missing.values())[0].result(30)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_list_offsets_watermarks_and_times(broker, topic):
    create_topic(broker.bootstrap, topic)
    c = confluent_consumer(broker.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 0)
        base = 1_700_000_000_000
        recs = expected("ts", 10)
        confluent_produce(broker.bootstrap, topic, recs, codec="lz4",
                          timestamps=[base + i * 1000 for i in range(10)])
        assert c.get_watermark_offsets(tp, timeout=10, cached=False) == (0, 10)
        q = [TopicPartition(topic, 0, base - 1), TopicPartition(topic, 0, base + 2500),
             TopicPartition(topic, 0, base + 9000), TopicPartition(topic, 0, base + 9001)]
        got = [c.offsets_for_times([x], timeout=10)[0] for x in q]
        assert [g.error for g in got] == [None] * 4
        assert [g.offset for g in got] == [0, 3, 9, -1]
        msgs = confluent_consume(broker.bootstrap, topic, 0, 0, 10)
        assert [m.timestamp() for m in msgs] == [(1, base + i * 1000) for i in range(10)]
    finally:
        c.close()


@pytest.mark.persistence
def test_data_survives_restart(fresh_broker, topic):
    b = fresh_broker
    create_topic(b.bootstrap, topic, partitions=2)
    want = {p: expected(f"r{p}", 40 + p, size=300) for p in range(2)}
    for p in range(2):
        confluent_produce(b.bootstrap, topic, want[p], partition=p, codec=["zstd", "none"][p])
    b.stop()
    b.start()
    for p in range(2):
        got = confluent_recs(confluent_consume(b.bootstrap, topic, p, 0, len(want[p])))
        assert got == want[p], diff(got, want[p])
    c = confluent_consumer(b.bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 40)
    finally:
        c.close()
    # the log keeps appending at the right offset after the restart
    res = confluent_produce(b.bootstrap, topic, expected("after", 3), partition=0)
    assert [o for _, o, _ in res] == [40, 41, 42]
