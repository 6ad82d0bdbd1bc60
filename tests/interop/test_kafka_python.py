"""kafka-python against the broker: producer + assign/seek consumer, every codec."""

from __future__ import annotations

import pytest

from .helpers import create_topic, kp_consume, kp_produce, kp_recs
from .records import CODECS, diff, expected

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("acks", [1, "all"])
@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(broker, topic, codec, acks):
    create_topic(broker.bootstrap, topic)
    want = expected("kp", 40, size=120, null_header=False, both_null=False)
    offsets = kp_produce(broker.bootstrap, topic, want, codec=codec, acks=acks)
    assert offsets == list(range(len(want)))
    msgs = kp_consume(broker.bootstrap, topic, 0, 0, len(want))
    assert [m.offset for m in msgs] == list(range(len(want)))
    got = kp_recs(msgs)
    assert got == want, diff(got, want)
    assert all(m.timestamp_type == 0 and m.timestamp > 0 for m in msgs)


def test_seek_into_middle(broker, topic):
    create_topic(broker.bootstrap, topic)
    want = expected("kpm", 30, null_header=False, both_null=False)
    kp_produce(broker.bootstrap, topic, want[:15], codec="gzip")
    kp_produce(broker.bootstrap, topic, want[15:], codec="lz4")
    msgs = kp_consume(broker.bootstrap, topic, 0, 12, 10)
    assert [m.offset for m in msgs] == list(range(12, 22))
    assert kp_recs(msgs) == want[12:22]


def test_acks_0(broker, topic):
    create_topic(broker.bootstrap, topic)
    want = expected("kp0", 20, null_header=False, both_null=False)
    kp_produce(broker.bootstrap, topic, want, codec="zstd", acks=0)
    assert kp_recs(kp_consume(broker.bootstrap, topic, 0, 0, 20)) == want


@pytest.mark.parametrize("api_version", [(0, 11), (1, 0), (1, 1)])
def test_pinned_older_protocol_versions(broker, topic, api_version):
    """A client pinned to an older release speaks Fetch v4-v6 (no fetch sessions) and older Produce."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create_topic(broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version)
    offsets = [producer.send(topic, f"v{i}".encode(), partition=0).get(30).offset for i in range(10)]
    producer.close()
    assert offsets == list(range(10))
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(topic, 0)])
    try:
        got = [m.value for m in consumer]
    finally:
        consumer.close()
    assert got == [f"v{i}".encode() for i in range(10)]


def test_admin_describe_topic_partitions_and_list_config_resources(broker, make_topic):
    """kafka-python's admin calls DescribeTopicPartitions (KIP-966) and ListConfigResources (KIP-1142)."""
    from kafka.admin import KafkaAdminClient

    topic = make_topic("dtp")
    create_topic(broker.bootstrap, topic, partitions=3)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        first = admin.describe_topic_partitions([topic], response_partition_limit=2)
        assert [p["partition_index"] for p in first["topics"][0]["partitions"]] == [0, 1]
        assert first["next_cursor"] == {"topic_name": topic, "partition_index": 2}
        rest = admin.describe_topic_partitions([topic], response_partition_limit=2, cursor=first["next_cursor"])
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [2]
        assert rest["next_cursor"] is None
        replicas = len(broker.bootstrap.split(","))  # one node, or each node of a test cluster
        assert all(len(p["replica_nodes"]) == min(3, replicas) for p in first["topics"][0]["partitions"])
        listed = admin.list_config_resources()
        assert topic in listed["topic"] and len(listed["broker"]) == replicas
        assert admin.list_config_resources(["TOPIC"]).keys() == {"topic"}
    finally:
        admin.close()
