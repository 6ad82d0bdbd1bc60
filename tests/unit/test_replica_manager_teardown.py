"""A removed partition leaves ReplicaManager.partitions at once and is torn down a slice per turn of the loop; a
name recreated meanwhile never finds the old log, and shutdown finishes what is left."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from klamm.broker import replica_manager
from klamm.broker.partition import log_config
from klamm.broker.replica_manager import ReplicaManager
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.controller.image import MetadataImage, apply_batch, empty_image
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.protocol.batch import split_batches
from klamm.protocol.records import build_batch
from klamm.storage.log_manager import LogManager

pytestmark = pytest.mark.asyncio

NODE = 1
PARTITIONS = 6


def replay(image: MetadataImage, records: list[MetadataRecord]) -> MetadataImage:
    return apply_batch(image, enumerate((decode_record(encode_record(r)) for r in records), start=image.offset + 1))


def manager(path: Path) -> ReplicaManager:
    config = BrokerConfig.from_properties({"node.id": str(NODE), "log.dirs": str(path)})
    logs = LogManager([path], log_config(TopicConfig.resolve(config, {})))
    return ReplicaManager(NODE, config, logs)


def topic(name: str, topic_id: int) -> list[MetadataRecord]:
    tid = uuid.UUID(int=topic_id)
    return [MetadataRecord("TopicRecord", {"name": name, "topic_id": tid})] + [
        MetadataRecord("PartitionRecord", {"partition_id": i, "topic_id": tid, "replicas": [NODE], "isr": [NODE],
                                           "leader": NODE, "leader_epoch": 0, "partition_epoch": 0})
        for i in range(PARTITIONS)]


def removed(topic_id: int) -> list[MetadataRecord]:
    return [MetadataRecord("RemoveTopicRecord", {"topic_id": uuid.UUID(int=topic_id)})]


def start(path: Path) -> tuple[ReplicaManager, MetadataImage]:
    replicas = manager(path)
    image = replay(empty_image("c", 0), [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": NODE, "incarnation_id": uuid.UUID(int=NODE), "broker_epoch": 10, "end_points": [],
        "features": [], "rack": None, "fenced": False})] + topic("t", 1))
    replicas.apply_image(image)
    for index in range(PARTITIONS):
        buf = bytearray(build_batch([(b"k", b"old")]))
        replicas.partitions[("t", index)].log.append(buf, split_batches(buf), leader_epoch=0)
    return replicas, image


def attached(replicas: ReplicaManager) -> int:
    return sum(replicas.logs.get_log("t", index) is not None for index in range(PARTITIONS))


async def test_a_deleted_topic_is_torn_down_over_several_turns(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager, "SLICE_S", 0.0)  # one partition a turn
    replicas, image = start(tmp_path)
    replicas.apply_image(replay(image, removed(1)))
    assert not replicas.partitions and attached(replicas) == PARTITIONS  # gone from requests, not torn down yet
    seen = []
    for _ in range(PARTITIONS + 2):
        await asyncio.sleep(0)
        seen.append(attached(replicas))
    assert seen[:PARTITIONS] == list(range(PARTITIONS - 1, -1, -1)), seen
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("t-")] == []  # removed (no delay here)
    replicas.shutdown()


async def test_a_name_recreated_before_its_teardown_gets_a_new_log(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager, "SLICE_S", 0.0)
    replicas, image = start(tmp_path)
    old = replicas.partitions[("t", 0)]
    image = replay(image, removed(1))
    replicas.apply_image(image)
    replicas.apply_image(replay(image, topic("t", 2)))  # before any turn of the loop
    for index in range(PARTITIONS):
        partition = replicas.partitions[("t", index)]
        assert partition.topic_id == uuid.UUID(int=2) and partition.log.log_end_offset == 0
    assert old.leader is None and old.log is not replicas.partitions[("t", 0)].log
    await asyncio.sleep(0.2)
    assert all(replicas.logs.get_log("t", i) is replicas.partitions[("t", i)].log for i in range(PARTITIONS))
    replicas.shutdown()


async def test_shutdown_finishes_the_teardown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager, "SLICE_S", 0.0)
    replicas, image = start(tmp_path)
    replicas.apply_image(replay(image, removed(1)))
    replicas.shutdown()  # no turn of the loop in between
    assert attached(replicas) == 0
    restarted = manager(tmp_path)
    restarted.logs.startup()
    assert list(restarted.logs.all_logs()) == []  # the deleted topic does not come back
    restarted.shutdown()
