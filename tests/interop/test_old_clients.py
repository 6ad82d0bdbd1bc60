"""Clients that speak the protocol of Kafka 0.8-0.10: Produce v0-2 and Fetch v0-3 with message sets, ListOffsets v0.

kafka-python pinned to an old `api_version`, and librdkafka told not to ask for
versions (`api.version.request=false`) with an old `broker.version.fallback`.
The Java client (3.9.1) reads what kafka-python 0.9/0.10 writes, and kafka-python
0.9/0.10 what the Java client writes (with headers, which old clients never see).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from .helpers import create_topic, wait_for
from .records import Rec, diff, expected, from_java
from .records import key as stream_key
from .records import value as stream_value

pytestmark = pytest.mark.timeout(120)

RECORDS = 30


def poll_all(consumer: KafkaConsumer, timeout: float = 30) -> list:
    """Every record up to RECORDS, or what came within `timeout`."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < RECORDS and time.monotonic() < deadline:
        for records in consumer.poll(200).values():
            got += records
    return sorted(got, key=lambda m: (m.partition, m.offset))


def values(prefix: str) -> list[bytes]:
    return [f"{prefix}-{i}".encode() * (1 + i % 4) for i in range(RECORDS)]


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4"])
@pytest.mark.parametrize("api_version", [(0, 8, 2), (0, 9), (0, 10)], ids=["0.8.2", "0.9", "0.10"])
def test_kafka_python_of_an_old_release(broker, topic, api_version, codec):
    create_topic(broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version, compression_type=codec)
    want = values("kp")
    offsets = [producer.send(topic, value, key=b"key", partition=0).get(30).offset for value in want]
    producer.close()
    assert offsets == list(range(RECORDS))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, 0)])
    try:
        got = [(m.offset, m.key, m.value) for m in poll_all(consumer)]
    finally:
        consumer.close()
    assert got == [(i, b"key", v) for i, v in enumerate(want)]


@pytest.mark.parametrize("api_version", [(0, 9), (0, 10), (0, 11), (1, 0)], ids=["0.9", "0.10", "0.11", "1.0"])
def test_kafka_python_of_an_old_release_in_a_group(broker, topic, api_version):
    create_topic(broker.bootstrap, topic, 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version)
    for i, value in enumerate(values("g")):
        producer.send(topic, value, partition=i % 2)
    producer.flush()
    producer.close()
    group = f"old-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, api_version=api_version, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got = sorted(m.value for m in poll_all(consumer))
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        consumer.close()
    assert got == sorted(values("g"))
    assert committed == {0: RECORDS // 2, 1: RECORDS // 2}


@pytest.mark.parametrize("api_version", [
    # 0.8.1 has no FindCoordinator: it commits to whichever broker it picks (offsets were ZooKeeper's then).
    # In a cluster only the group's coordinator keeps them, as in Kafka without ZooKeeper.
    pytest.param((0, 8, 1), marks=pytest.mark.single_node, id="0.8.1"),
    pytest.param((0, 8, 2), id="0.8.2")])
def test_kafka_python_of_0_8_commits_offsets(broker, topic, api_version):
    """OffsetCommit v0/v1 and OffsetFetch v0/v1, without group membership (0.8 had none)."""
    create_topic(broker.bootstrap, topic)
    group = f"old-{uuid.uuid4().hex[:6]}"
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, group_id=group,
                             enable_auto_commit=False)
    partition = TopicPartition(topic, 0)
    try:
        consumer.assign([partition])
        consumer.commit({partition: OffsetAndMetadata(17, "meta", -1)})
        assert consumer.committed(partition) == 17
    finally:
        consumer.close()


@pytest.mark.parametrize("fallback", ["0.8.2", "0.9.0", "0.10.0"])
def test_librdkafka_without_api_versions(broker, topic, fallback):
    create_topic(broker.bootstrap, topic)
    config = {"bootstrap.servers": broker.bootstrap, "api.version.request": False,
              "broker.version.fallback": fallback}
    producer = Producer({**config, "compression.type": "gzip", "message.timeout.ms": 20000})
    want = values("rd")
    for value in want:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({**config, "group.id": f"rd-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([ConfluentPartition(topic, 0)])
    got = []
    try:
        for _ in range(20):
            got += [m.value() for m in consumer.consume(RECORDS, 1) if m.error() is None]
            if len(got) >= RECORDS:
                break
    finally:
        consumer.close()
    assert got == want


@pytest.mark.parametrize("api_version", [(0, 10, 1), (0, 10, 2), (0, 11)], ids=["0.10.1", "0.10.2", "0.11"])
def test_kafka_python_admin_of_an_old_release(broker, api_version):
    """CreateTopics v0/v1, DeleteTopics v0, and DescribeConfigs v0 (is_default instead of config_source)."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, api_version=api_version)
    name = f"old-admin-{uuid.uuid4().hex[:6]}"
    try:
        created = admin.create_topics([NewTopic(name, 2, 1,
                                                topic_configs={"retention.ms": "12345"})])
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(name, 0)]
        if api_version >= (0, 11):
            def described() -> str:  # any broker may answer: in a cluster, one may not know the topic yet
                text = str(admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)]))
                return text if "retention.ms" in text else ""

            configs = wait_for(described, what="the topic's configs")
            assert "'retention.ms': {'value': '12345'" in configs and "'is_default': False" in configs
        deleted = admin.delete_topics([name])
        assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(name, 0)]
    finally:
        admin.close()


@pytest.mark.parametrize("codec", ["gzip", "lz4"])
@pytest.mark.parametrize("api_version", [(0, 9), (0, 10)], ids=["0.9", "0.10"])
def test_old_and_new_clients_read_each_other(broker, api_version, codec):
    """An old client's message sets read by librdkafka in full, and librdkafka's batches by the old client."""
    old_topic, new_topic = f"old-w-{uuid.uuid4().hex[:6]}", f"new-w-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, old_topic)
    create_topic(broker.bootstrap, new_topic)
    stamps = [1_700_000_000_000 + i for i in range(RECORDS)]
    keys = [None if i % 5 == 0 else f"k{i}".encode() for i in range(RECORDS)]
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version, compression_type=codec)
    for key, value, stamp in zip(keys, values("old"), stamps):
        producer.send(old_topic, value, key=key, partition=0, timestamp_ms=stamp)
    producer.flush()
    producer.close()
    new_producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5})
    for key, value, stamp in zip(keys, values("new"), stamps):
        new_producer.produce(new_topic, value, key=key, partition=0, timestamp=stamp, headers=[("h", b"v")])
    assert new_producer.flush(30) == 0

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"x-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([ConfluentPartition(old_topic, 0, 0)])
    got = []
    try:
        for _ in range(20):
            got += [m for m in consumer.consume(RECORDS, 1) if m.error() is None]
            if len(got) >= RECORDS:
                break
    finally:
        consumer.close()
    assert [(m.key(), m.value()) for m in got] == list(zip(keys, values("old")))
    # magic 1 carries each message's timestamp; magic 0 has none (-1 after the conversion)
    assert [m.timestamp()[1] for m in got] == (stamps if api_version >= (0, 10) else [-1] * RECORDS)

    old_consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                                 auto_offset_reset="earliest")
    old_consumer.assign([TopicPartition(new_topic, 0)])
    try:
        read = poll_all(old_consumer)
    finally:
        old_consumer.close()
    assert [(m.key, m.value) for m in read] == list(zip(keys, values("new")))
    if api_version >= (0, 10):
        assert [m.timestamp for m in read] == stamps


# ------------------------------------------------------------------ the Java client with old clients ---
JAVA_CODECS = ["none", "gzip", "snappy", "lz4"]
JAVA_OLD_VERSIONS = {"0.9": (0, 9), "0.10": (0, 10)}
TS_BASE = 1_700_000_000_000


def old_record(prefix: str, i: int) -> Rec:
    """Record i of records.py's stream as an old client writes it: no headers (they came with 0.11)."""
    return Rec(stream_key(prefix, i), stream_value(prefix, i), ())


@pytest.fixture(scope="module")
def java_cross_read(broker, java_client):
    """Per old version and codec: kafka-python writes message sets to one topic, the Java client (3.9.1,
    idempotent, headers) writes v2 batches to another; one JVM reads every old topic and writes every new one."""
    suffix = uuid.uuid4().hex[:6]
    runs, commands = {}, []
    for name, api_version in JAVA_OLD_VERSIONS.items():
        for codec in JAVA_CODECS:
            tag = f"{name}-{codec}"
            old_topic, new_topic = f"kp{tag}-to-java-{suffix}", f"java-to-kp{tag}-{suffix}"
            create_topic(broker.bootstrap, old_topic)
            create_topic(broker.bootstrap, new_topic)
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                                     compression_type=None if codec == "none" else codec)
            futures = [producer.send(old_topic, rec.value, key=rec.key, partition=0, timestamp_ms=TS_BASE + i)
                       for i, rec in enumerate(old_record(f"kp{tag}", i) for i in range(RECORDS))]
            offsets = [f.get(30).offset for f in futures]
            producer.close()
            assert offsets == list(range(RECORDS)), (tag, offsets)
            runs[tag] = (old_topic, new_topic, len(commands))
            commands += [["consume", broker.bootstrap, old_topic, 0, 0, RECORDS],
                         ["produce", broker.bootstrap, new_topic, RECORDS, codec, f"prefix=j{tag}", f"ts={TS_BASE}"]]
    results = java_client.batch(commands, timeout=240)
    return {tag: (old_topic, new_topic, results[k], results[k + 1]) for tag, (old_topic, new_topic, k) in runs.items()}


@pytest.mark.java
@pytest.mark.parametrize("codec", JAVA_CODECS)
@pytest.mark.parametrize("version", list(JAVA_OLD_VERSIONS))
def test_java_reads_the_message_sets_of_an_old_client(java_cross_read, version, codec):
    """kafka-python 0.9/0.10 message sets (magic 0/1, each codec) read by the Java client record for record."""
    tag = f"{version}-{codec}"
    consumed = java_cross_read[tag][2].ok()
    assert [o["offset"] for o in consumed.lines] == list(range(RECORDS))
    got = [from_java(o) for o in consumed.lines]
    want = [old_record(f"kp{tag}", i) for i in range(RECORDS)]
    assert got == want, diff(got, want)
    # magic 1 (0.10) carries each message's CreateTime; magic 0 has none: -1 after the conversion, as in Kafka
    stamps = [TS_BASE + i for i in range(RECORDS)] if version == "0.10" else [-1] * RECORDS
    assert [(o["timestamp"], o["timestampType"]) for o in consumed.lines] == [(t, "CreateTime") for t in stamps]


@pytest.mark.java
@pytest.mark.parametrize("codec", JAVA_CODECS)
@pytest.mark.parametrize("version", list(JAVA_OLD_VERSIONS))
def test_an_old_client_reads_the_batches_of_java(broker, java_cross_read, version, codec):
    """The Java client's v2 batches (with headers) read by kafka-python 0.9/0.10: headers dropped,
    key and value byte-equal, the CreateTime of each record in magic 1 (0.10)."""
    tag = f"{version}-{codec}"
    _, new_topic, _, produced = java_cross_read[tag]
    produced.ok()
    assert sorted((o["i"], o["offset"]) for o in produced.lines) == [(i, i) for i in range(RECORDS)]
    want = expected(f"j{tag}", RECORDS)
    assert any(r.headers for r in want)  # the Java records have headers: they must not reach an old client
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=JAVA_OLD_VERSIONS[version],
                             auto_offset_reset="earliest")
    consumer.assign([TopicPartition(new_topic, 0)])
    try:
        read = poll_all(consumer)
    finally:
        consumer.close()
    assert [m.offset for m in read] == list(range(RECORDS))
    got = [Rec(m.key, m.value, tuple(m.headers or ())) for m in read]
    want = [Rec(r.key, r.value, ()) for r in want]
    assert got == want, diff(got, want)
    if version == "0.10":
        assert [m.timestamp for m in read] == [TS_BASE + i for i in range(RECORDS)]
