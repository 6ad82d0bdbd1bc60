"""ListOffsets by who asks (its replica_id), as Kafka's ReplicaManager.fetchOffset: a consumer (-1) reads up to
the high watermark or, read_committed, the last stable offset, from the leader; a follower (its broker id) reads
up to the log end from the leader; a debugging tool (-2) reads up to the log end from any replica. Neither of the
last two is told OFFSET_NOT_AVAILABLE by a new leader whose HW lags its epoch start."""

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
LATEST, EARLIEST, MAX_TIMESTAMP = list_offsets.LATEST, list_offsets.EARLIEST, list_offsets.MAX_TIMESTAMP
CONSUMER, DEBUGGING, FOLLOWER = -1, -2, 2


def partition_of(tmp_path: Path) -> Partition:
    config = TopicConfig.resolve(BrokerConfig.from_properties({}), {})
    return Partition("t", 0, uuid.uuid4(), Log.open(tmp_path / "t-0", log_config(config)), config)


def as_follower(partition: Partition, leader_hw: int) -> Partition:
    """Follower of node 2 in epoch 1: offsets 0-2 (timestamps NOW, +1 s, +2 s), the leader's HW given."""
    partition.become_follower(2, 1, [1, 2], [1, 2])
    buf = bytearray(b"".join(build_batch([(None, b"v")], base_offset=n, timestamp_ms=NOW_MS + 1000 * n,
                                         partition_leader_epoch=1) for n in range(3)))
    partition.append_as_follower(buf, split_batches(buf), leader_high_watermark=leader_hw)
    return partition


def leader_past_hw(tmp_path: Path) -> Partition:
    """Leader of epoch 2 with HW 3 (node 2 has offsets 0-2) and LEO 5: offsets 3 and 4 (NOW+3 s, +4 s) unreplicated."""
    partition = as_follower(partition_of(tmp_path), leader_hw=0)
    partition.become_leader(2, node_id=1, replicas=[1, 2], isr=[1, 2])
    partition.on_follower_fetch(2, 3)
    for n in (3, 4):
        partition.append(build_batch([(None, b"w")], timestamp_ms=NOW_MS + 1000 * n))
    assert (partition.high_watermark, partition.log_end_offset) == (3, 5)
    return partition


def list_offset(partition: Partition, timestamp: int, replica_id: int, *, isolation: int = 0, version: int = 7,
                epoch: int = -1) -> tuple[ErrorCode, int]:
    broker = SimpleNamespace(authorizer=SimpleNamespace(enabled=False),
                             replicas=SimpleNamespace(get=lambda topic, index: partition))
    body = SimpleNamespace(replica_id=replica_id, isolation_level=isolation, topics=[SimpleNamespace(
        name="t", partitions=[SimpleNamespace(partition_index=0, current_leader_epoch=epoch, timestamp=timestamp,
                                              max_num_offsets=10)])])
    request: Any = SimpleNamespace(body=body, api_version=version)
    answer = asyncio.run(list_offsets.handle(broker, request))["topics"][0]["partitions"][0]
    if version == 0:
        return answer["error_code"], answer["old_style_offsets"]
    return answer["error_code"], answer["offset"]


def test_a_consumer_reads_to_the_hw_a_follower_and_a_debugging_tool_to_the_log_end(tmp_path: Path) -> None:
    partition = leader_past_hw(tmp_path)
    for isolation in (0, 1):
        assert list_offset(partition, LATEST, CONSUMER, isolation=isolation) == (ErrorCode.none, 3)
        assert list_offset(partition, LATEST, FOLLOWER, isolation=isolation) == (ErrorCode.none, 5)
        assert list_offset(partition, LATEST, DEBUGGING, isolation=isolation) == (ErrorCode.none, 5)
    # a timestamp found past the HW: none for a consumer, the record's offset for the others
    assert list_offset(partition, NOW_MS + 3500, CONSUMER) == (ErrorCode.none, -1)
    assert list_offset(partition, NOW_MS + 3500, FOLLOWER) == (ErrorCode.none, 4)
    assert list_offset(partition, NOW_MS + 3500, DEBUGGING) == (ErrorCode.none, 4)
    assert list_offset(partition, MAX_TIMESTAMP, CONSUMER) == (ErrorCode.none, -1)
    assert list_offset(partition, MAX_TIMESTAMP, DEBUGGING) == (ErrorCode.none, 4)
    assert list_offset(partition, EARLIEST, DEBUGGING) == (ErrorCode.none, 0)


def test_read_committed_is_the_consumers_only(tmp_path: Path) -> None:
    partition = leader_past_hw(tmp_path)
    partition.on_follower_fetch(2, 5)
    partition.append(build_batch([(None, b"open")], producer_id=7, producer_epoch=0, base_sequence=0,
                                 transactional=True, timestamp_ms=NOW_MS + 5000))
    partition.on_follower_fetch(2, 6)
    assert (partition.last_stable_offset, partition.high_watermark, partition.log_end_offset) == (5, 6, 6)
    assert list_offset(partition, LATEST, CONSUMER, isolation=1) == (ErrorCode.none, 5)
    assert list_offset(partition, LATEST, CONSUMER, isolation=0) == (ErrorCode.none, 6)
    assert list_offset(partition, LATEST, DEBUGGING, isolation=1) == (ErrorCode.none, 6)
    assert list_offset(partition, LATEST, FOLLOWER, isolation=1) == (ErrorCode.none, 6)


def test_only_a_debugging_tool_is_answered_by_a_follower(tmp_path: Path) -> None:
    partition = as_follower(partition_of(tmp_path), leader_hw=1)
    assert (partition.high_watermark, partition.log_end_offset) == (1, 3)
    assert list_offset(partition, LATEST, CONSUMER) == (ErrorCode.not_leader_or_follower, -1)
    assert list_offset(partition, LATEST, 3) == (ErrorCode.not_leader_or_follower, -1)
    assert list_offset(partition, LATEST, DEBUGGING) == (ErrorCode.none, 3)
    assert list_offset(partition, NOW_MS + 1500, DEBUGGING) == (ErrorCode.none, 2)
    # the current leader epoch is checked on a follower too, before leadership (Kafka's getLocalLog)
    assert list_offset(partition, LATEST, DEBUGGING, epoch=0) == (ErrorCode.fenced_leader_epoch, -1)
    assert list_offset(partition, LATEST, DEBUGGING, epoch=1) == (ErrorCode.none, 3)
    assert list_offset(partition, LATEST, CONSUMER, epoch=0) == (ErrorCode.fenced_leader_epoch, -1)
    # v0 alike: a follower answers -2 only, with its log end
    assert list_offset(partition, LATEST, CONSUMER, version=0) == (ErrorCode.not_leader_or_follower, [])
    code, offsets = list_offset(partition, LATEST, DEBUGGING, version=0)
    assert code == ErrorCode.none and offsets[0] == 3


def test_v0_caps_the_consumers_latest_at_the_hw_only(tmp_path: Path) -> None:
    partition = leader_past_hw(tmp_path)
    assert list_offset(partition, LATEST, CONSUMER, version=0)[1][0] == 3
    assert list_offset(partition, LATEST, DEBUGGING, version=0)[1][0] == 5
    assert list_offset(partition, LATEST, FOLLOWER, version=0)[1][0] == 5


def test_a_new_leader_with_a_lagging_hw_tells_only_a_consumer_to_wait(tmp_path: Path) -> None:
    partition = as_follower(partition_of(tmp_path), leader_hw=0)
    partition.become_leader(2, node_id=1, replicas=[1, 2], isr=[1, 2])
    assert (partition.high_watermark, partition.log_end_offset) == (0, 3)
    assert list_offset(partition, LATEST, CONSUMER) == (ErrorCode.offset_not_available, -1)
    assert list_offset(partition, LATEST, FOLLOWER) == (ErrorCode.none, 3)
    assert list_offset(partition, LATEST, DEBUGGING) == (ErrorCode.none, 3)
    assert list_offset(partition, NOW_MS, DEBUGGING) == (ErrorCode.none, 0)
