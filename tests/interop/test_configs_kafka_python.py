"""Configs through kafka-python's KafkaAdminClient: describe_configs, alter_configs (incremental and
legacy), delete_records, and the effect of a change on a kafka-python producer."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient
from kafka.errors import MessageSizeTooLargeError

from .helpers import create_topic, wait_for

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def kp_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    yield admin
    admin.close()


def topic_configs(admin: KafkaAdminClient, topic: str, **kwargs) -> dict:
    return admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], **kwargs)["topic"][topic]


def test_describe_configs_reports_overrides_with_synonyms(kp_admin, broker, make_topic):
    topic = create_topic(broker.bootstrap, make_topic(), config={"retention.ms": "5000"})
    modified = topic_configs(kp_admin, topic, include_synonyms=True)
    assert set(modified) == {"retention.ms"}
    assert modified["retention.ms"]["value"] == "5000"
    assert modified["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert modified["retention.ms"]["synonyms"] == [
        {"name": "retention.ms", "value": "5000", "source": "DYNAMIC_TOPIC_CONFIG"}]
    everything = topic_configs(kp_admin, topic, config_filter="all")
    assert everything["cleanup.policy"]["value"] == "delete"
    assert everything["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"


@pytest.mark.parametrize("incremental", [True, False])
def test_alter_configs_changes_config_and_behaviour(kp_admin, broker, make_topic, incremental):
    topic = create_topic(broker.bootstrap, make_topic(), config={"retention.ms": "5000"})
    result = kp_admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"max.message.bytes": "1000"})],
        incremental=incremental)
    assert result == {"topic": {topic: "OK"}}
    expected = {"retention.ms": "5000", "max.message.bytes": "1000"}
    # In a cluster the broker asked may learn of the change a moment after the controller committed it.
    wait_for(lambda: {name: c["value"] for name, c in topic_configs(kp_admin, topic).items()} == expected,
             timeout=15, what="the altered config described")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, linger_ms=0)
    try:
        assert producer.send(topic, b"x" * 100, partition=0).get(30).offset == 0
        wait_for(lambda: refused_as_too_large(producer, topic), timeout=15, what="a record over the new limit refused")
    finally:
        producer.close(5)


def refused_as_too_large(producer: KafkaProducer, topic: str) -> bool:
    try:
        producer.send(topic, b"x" * 3000, partition=0).get(30)
    except MessageSizeTooLargeError:
        return True
    return False


def test_alter_configs_refuses_a_bad_value(kp_admin, broker, make_topic):
    topic = create_topic(broker.bootstrap, make_topic())
    result = kp_admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"cleanup.policy": "shred"})])
    error = result["topic"][topic]
    assert error != "OK" and "shred" in str(error)
    assert topic_configs(kp_admin, topic) == {}


def test_delete_records_returns_the_low_watermark(kp_admin, broker, make_topic):
    topic = create_topic(broker.bootstrap, make_topic())
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    try:
        for _ in range(4):
            producer.send(topic, b"v", partition=0).get(30)
    finally:
        producer.close(5)
    result = kp_admin.delete_records({TopicPartition(topic, 0): 2})
    assert result[TopicPartition(topic, 0)]["low_watermark"] == 2
