"""ListOffsets on a new leader whose high watermark lags the start of its leader epoch: OFFSET_NOT_AVAILABLE
(LEADER_NOT_AVAILABLE before v5) for the latest offset and for a timestamp found past the HW, as Kafka's
Partition.fetchOffsetForTimestamp and ReplicaManager.fetchOffset; answers as usual once a follower's fetch
moves the HW there."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from klamm.broker.handlers import list_offsets
from klamm.broker.partition import Partition, log_config
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.protocol.batch import split_batches
from klamm.protocol.errors import ErrorCode
from klamm.protocol.records import build_batch
from klamm.storage.log import Log

NOW_MS = int(time.time() * 1000)


def new_leader(tmp_path: Path) -> Partition:
    """Three records taken as a follower in epoch 1 with the leader's HW at 0, then leader of epoch 2 with
    node 2 in its ISR: its epoch starts at 3, its HW stays 0 until node 2 fetches from 3."""
    config = TopicConfig.resolve(BrokerConfig.from_properties({}), {})
    partition = Partition("t", 0, uuid.uuid4(), Log.open(tmp_path / "t-0", log_config(config)), config)
    partition.become_follower(2, 1, [1, 2], [1, 2])
    buf = bytearray(build_batch([(None, b"a"), (None, b"b"), (None, b"c")], timestamp_ms=NOW_MS,
                                partition_leader_epoch=1))
    partition.append_as_follower(buf, split_batches(buf), leader_high_watermark=0)
    partition.become_leader(2, node_id=1, replicas=[1, 2], isr=[1, 2])
    assert (partition.high_watermark, partition.log_end_offset) == (0, 3)
    return partition


def list_offset(partition: Partition, timestamp: int, version: int = 7) -> tuple[ErrorCode, int]:
    broker = SimpleNamespace(authorizer=SimpleNamespace(enabled=False),
                             replicas=SimpleNamespace(get=lambda topic, index: partition))
    body = SimpleNamespace(replica_id=-1, isolation_level=0, topics=[SimpleNamespace(name="t", partitions=[
        SimpleNamespace(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])])
    request: Any = SimpleNamespace(body=body, api_version=version)
    response = asyncio.run(list_offsets.handle(broker, request))
    answer = response["topics"][0]["partitions"][0]
    return answer["error_code"], answer["offset"]


def test_a_new_leader_with_a_lagging_hw_answers_offset_not_available(tmp_path: Path) -> None:
    partition = new_leader(tmp_path)
    assert list_offset(partition, list_offsets.LATEST) == (ErrorCode.offset_not_available, -1)
    assert list_offset(partition, NOW_MS) == (ErrorCode.offset_not_available, -1)
    assert list_offset(partition, NOW_MS + 60_000) == (ErrorCode.none, -1)  # no record that late: none
    assert list_offset(partition, list_offsets.EARLIEST) == (ErrorCode.none, 0)
    # OFFSET_NOT_AVAILABLE came with v5: older versions are told LEADER_NOT_AVAILABLE, as by Kafka
    assert list_offset(partition, list_offsets.LATEST, version=4) == (ErrorCode.leader_not_available, -1)
    assert list_offset(partition, NOW_MS, version=1) == (ErrorCode.leader_not_available, -1)
    partition.on_follower_fetch(2, 3)
    assert partition.high_watermark == 3
    assert list_offset(partition, list_offsets.LATEST) == (ErrorCode.none, 3)
    assert list_offset(partition, NOW_MS) == (ErrorCode.none, 0)


def test_a_leader_whose_hw_reached_its_epoch_start_answers_past_the_hw_with_no_offset(tmp_path: Path) -> None:
    partition = new_leader(tmp_path)
    partition.on_follower_fetch(2, 3)
    partition.append(build_batch([(None, b"d")], timestamp_ms=NOW_MS + 1000))  # past the HW: node 2 lacks it
    assert (partition.high_watermark, partition.log_end_offset) == (3, 4)
    assert list_offset(partition, NOW_MS + 1000) == (ErrorCode.none, -1)
    assert list_offset(partition, list_offsets.LATEST) == (ErrorCode.none, 3)
