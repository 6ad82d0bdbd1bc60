"""ListOffsets v0, the old Offset API: up to max_num_offsets offsets, newest first, at segment boundaries; and
OffsetCommit and OffsetFetch v0, the ZooKeeper-era offsets API."""

from __future__ import annotations

import time
from typing import Any

from klamm.protocol.records import build_batch
from tests.integration.conftest import LIST_OFFSETS, BrokerThread, create_topic, produce
from tests.integration.test_coordinator_failures import OFFSET_COMMIT, OFFSET_FETCH


def offsets_v0(client: Any, topic: str, timestamp: int, max_num: int) -> list[int]:
    response = client.request(LIST_OFFSETS, 0, {"replica_id": -1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp, "max_num_offsets": max_num}]}]})
    [partition] = response.topics[0].partitions
    assert partition.error_code == 0
    return list(partition.old_style_offsets)


def test_offset_lists_by_segment(broker: BrokerThread) -> None:
    with broker.connect() as client:
        create_topic(client, "legacy", configs={"segment.ms": "50"})
        for n in range(3):  # three segments of 4, 4 and 4 records: an append after segment.ms rolls
            produce(client, "legacy", build_batch([(None, b"x")] * 4))
            time.sleep(0.12)
        assert offsets_v0(client, "legacy", -1, 10) == [12, 8, 4, 0]
        assert offsets_v0(client, "legacy", -1, 2) == [12, 8]
        assert offsets_v0(client, "legacy", -2, 10) == [0]
        assert offsets_v0(client, "legacy", 0, 10) == []  # no segment is that old
        assert offsets_v0(client, "legacy", int(time.time() * 1000) + 60_000, 1) == [12]
        unknown = client.request(LIST_OFFSETS, 0, {"replica_id": -1, "topics": [
            {"name": "nope", "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}]}]})
        assert unknown.topics[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_message_downconversion_enable_false_refuses_fetches_that_need_it(broker_factory: Any) -> None:
    """Kafka 3.x's message.downconversion.enable: Fetch v0-3 of such a topic is UNSUPPORTED_VERSION, v4+ reads."""
    from tests.integration.conftest import FETCH, fetch_body

    def fetch(client: Any, topic: str, offset: int, version: int) -> Any:
        [answer] = client.request(FETCH, version, fetch_body(topic, offset)).responses
        return answer.partitions[0]

    broker = broker_factory(**{"log.message.downconversion.enable": "false"})
    with broker.connect() as client:
        create_topic(client, "no-conversion")
        create_topic(client, "conversion", configs={"message.downconversion.enable": "true"})
        for topic in ("no-conversion", "conversion"):
            produce(client, topic, build_batch([(None, b"x")] * 3))
        assert fetch(client, "no-conversion", 0, version=3).error_code == 35  # UNSUPPORTED_VERSION
        assert fetch(client, "no-conversion", 0, version=4).error_code == 0
        converted = fetch(client, "conversion", 0, version=3)
        assert converted.error_code == 0 and converted.records
        assert fetch(client, "no-conversion", 3, version=1).error_code == 0  # nothing to convert at the end


def test_offsets_v0_on_a_broker_no_group_used_yet(broker: BrokerThread) -> None:
    """A 0.8.1 client commits and fetches offsets (v0) without ever asking for a coordinator: the first v0 request
    creates __consumer_offsets, as FindCoordinator does, and the offsets are kept."""
    with broker.connect() as client:
        create_topic(client, "zk-era")
        committed = client.request(OFFSET_COMMIT, 0, {"group_id": "old", "topics": [
            {"name": "zk-era", "partitions": [{"partition_index": 0, "committed_offset": 17,
                                               "committed_metadata": "meta"}]}]})
        assert committed.topics[0].partitions[0].error_code == 0
        fetched = client.request(OFFSET_FETCH, 0, {"group_id": "old", "topics": [
            {"name": "zk-era", "partition_indexes": [0]}]})
        [partition] = fetched.topics[0].partitions
        assert (partition.error_code, partition.committed_offset, partition.metadata) == (0, 17, "meta")
