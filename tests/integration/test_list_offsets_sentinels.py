"""ListOffsets' sentinel timestamps by version, repeated partitions, and v11 (KIP-1023).

kafka-python's own suite (scripts/kafka_python_suite.sh, test_kafka_version_infer)
names a broker 4.2 when it serves ListOffsets v11. v11 adds the -6 sentinel
(earliest offset pending upload to tiered storage); without tiered storage Kafka
answers it, like -5 (latest tiered), with no offset: -1, timestamp -1, epoch -1,
whatever the log start. A sentinel older than the request's version, or a negative
timestamp that is no sentinel, is UNSUPPORTED_VERSION for that partition; a
partition named twice is INVALID_REQUEST at each mention (v1+).
"""

from __future__ import annotations

from typing import Any

import pytest

from klamm.protocol.records import build_batch
from tests.integration.conftest import LIST_OFFSETS, RawClient, create_topic, produce

NONE, INVALID_REQUEST, UNSUPPORTED_VERSION = 0, 42, 35
DELETE_RECORDS = 21
TOPIC = "sentinels"


def list_offsets(client: RawClient, version: int, *timestamps: int, partition: int = 0) -> list[Any]:
    body = {"replica_id": -1, "isolation_level": 0, "timeout": 1000, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": t}
                                       for t in timestamps]}]}
    response = client.request(LIST_OFFSETS, version, body)
    [topic] = response.topics
    return list(topic.partitions)


@pytest.fixture
def topic(client: RawClient) -> RawClient:
    create_topic(client, TOPIC)
    for _ in range(3):
        assert produce(client, TOPIC, build_batch([(None, b"v")])).error_code == NONE
    response = client.request(DELETE_RECORDS, 2, {"topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "offset": 2}]}], "timeout": 10_000})
    assert response.topics[0].partitions[0].error_code == NONE
    return client


def test_tiered_sentinels_answer_no_offset(topic: RawClient) -> None:
    # The log starts at 2 after DeleteRecords: -5 and -6 are still "nothing tiered", not log start - 1.
    [earliest] = list_offsets(topic, 11, -2)
    assert (earliest.error_code, earliest.offset) == (NONE, 2)
    for timestamp in (-5, -6):
        [p] = list_offsets(topic, 11, timestamp)
        assert (p.error_code, p.offset, p.timestamp, p.leader_epoch) == (NONE, -1, -1, -1), timestamp


@pytest.mark.parametrize(("timestamp", "since"), [(-3, 7), (-4, 8), (-5, 9), (-6, 11)])
def test_sentinel_before_its_version_is_unsupported(topic: RawClient, timestamp: int, since: int) -> None:
    [old] = list_offsets(topic, since - 1, timestamp)
    assert (old.error_code, old.offset) == (UNSUPPORTED_VERSION, -1)
    [new] = list_offsets(topic, since, timestamp)
    assert new.error_code == NONE


def test_unknown_negative_timestamp_is_unsupported(topic: RawClient) -> None:
    [p] = list_offsets(topic, 11, -7)
    assert (p.error_code, p.offset) == (UNSUPPORTED_VERSION, -1)
    # Checked before the partition is looked up, as Kafka does.
    [missing] = list_offsets(topic, 11, -7, partition=5)
    assert missing.error_code == UNSUPPORTED_VERSION


def test_repeated_partition_is_invalid_at_each_mention(topic: RawClient) -> None:
    first, second = list_offsets(topic, 7, -1, -2)
    assert (first.error_code, second.error_code) == (INVALID_REQUEST, INVALID_REQUEST)
    [single] = list_offsets(topic, 7, -1)
    assert (single.error_code, single.offset) == (NONE, 3)
