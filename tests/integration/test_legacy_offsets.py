"""ListOffsets v0, the old Offset API: up to max_num_offsets offsets, newest first, at segment boundaries."""

from __future__ import annotations

import time
from typing import Any

from klamm.protocol.records import build_batch
from tests.integration.conftest import LIST_OFFSETS, BrokerThread, create_topic, produce


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
