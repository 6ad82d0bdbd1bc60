"""Stray logs at startup (Kafka's stray replicas): a log directory the metadata gives this broker no replica of,
left by a topic deleted or made again while the broker was down or by a crash before a deletion's rename, is set
aside once the broker has its metadata: renamed to `<name>.<uuid>-stray` with its records, never served, never
deleted. A recreated topic never takes one."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from klamm.storage import partition_metadata
from tests.integration.conftest import create_topic

pytestmark = pytest.mark.timeout(120)


def produce(port: int, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
    for i in range(count):
        producer.produce(topic, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0


def consumed(port: int, topic: str) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "g", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        values: list[bytes] = []
        while len(values) < high - low:
            message = consumer.poll(10)
            assert message is not None and not message.error()
            values.append(message.value())
        return values
    finally:
        consumer.close()


def test_a_log_of_no_topic_of_the_metadata_is_set_aside_at_startup(broker_factory: Any, tmp_path: Path) -> None:
    broker = broker_factory()
    with broker.connect() as client:
        create_topic(client, "kept")
        create_topic(client, "recreated")
    produce(broker.port, "kept", 5)
    data = Path(broker.log_dir)
    broker.stop()
    # what a crash before DeleteTopics' rename leaves, and a topic's log deleted and made again under a new id
    shutil.copytree(data / "kept-0", data / "ghost-0")
    partition_metadata.write(data / "ghost-0", uuid.uuid4())
    shutil.rmtree(data / "recreated-0")
    shutil.copytree(data / "kept-0", data / "recreated-0")
    partition_metadata.write(data / "recreated-0", uuid.uuid4())
    broker.start()
    aside = sorted(path.name.split(".")[0] for path in data.iterdir() if path.name.endswith("-stray"))
    assert aside == ["ghost-0", "recreated-0"]
    assert not (data / "ghost-0").exists()
    assert broker.call(lambda: broker.broker.logs.get_log("ghost", 0)) is None
    assert consumed(broker.port, "kept") == [b"%d" % i for i in range(5)]
    assert consumed(broker.port, "recreated") == []  # a fresh log, not the stray's records
    broker.restart()  # set aside for good: not loaded again
    assert sorted(path.name.split(".")[0] for path in data.iterdir() if path.name.endswith("-stray")) == aside
    assert consumed(broker.port, "kept") == [b"%d" % i for i in range(5)]
