"""partition.metadata: the topic id a log belongs to, in Kafka's format; a log of a deleted topic whose deletion
never reached the disk is not taken by a new topic of the same name, but set aside (Kafka's stray log)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from klamm.broker.partition import log_config
from klamm.broker.replica_manager import ReplicaManager
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.controller.image import empty_image
from klamm.controller.records import MetadataRecord
from klamm.protocol.batch import split_batches
from klamm.protocol.records import build_batch
from klamm.storage import partition_metadata
from klamm.storage.log import Log, LogConfig
from klamm.storage.log_manager import LogManager
from tests.unit.test_replica_manager_teardown import replay

NODE = 1
OLD, NEW = uuid.UUID(int=1), uuid.UUID(int=2)


def test_the_file_is_kafkas_and_round_trips(tmp_path: Path) -> None:
    partition_metadata.write(tmp_path, OLD)
    assert (tmp_path / "partition.metadata").read_text() == "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n"
    assert partition_metadata.read(tmp_path) == OLD
    topic_id = uuid.uuid4()
    partition_metadata.write(tmp_path, topic_id)
    assert partition_metadata.read(tmp_path) == topic_id
    assert not (tmp_path / "partition.metadata.tmp").exists()


@pytest.mark.parametrize("text", ["", "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n", "version: 0\n",
                                  "version: 0\ntopic_id: AAAA\n", "version: x\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ\n",
                                  "\xff\xfe garbage"])
def test_a_file_that_cannot_be_read_counts_as_absent(tmp_path: Path, text: str) -> None:
    (tmp_path / "partition.metadata").write_bytes(text.encode("latin-1"))
    assert partition_metadata.read(tmp_path) is None
    assert partition_metadata.read(tmp_path / "nowhere") is None


def test_a_log_knows_its_topic_id_when_it_opens(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    assert log.topic_id is None
    log.record_topic_id(OLD)
    log.close()
    (tmp_path / "t-0" / "partition.metadata.tmp").write_text("torn")
    reopened = Log.open(tmp_path / "t-0", LogConfig())
    assert reopened.topic_id == OLD and not (tmp_path / "t-0" / "partition.metadata.tmp").exists()
    reopened.close()


def manager(path: Path) -> ReplicaManager:
    config = BrokerConfig.from_properties({"node.id": str(NODE), "log.dirs": str(path)})
    logs = LogManager([path], log_config(TopicConfig.resolve(config, {})))
    logs.startup()
    return ReplicaManager(NODE, config, logs)


def left_on_disk(path: Path, topic_id: uuid.UUID | None, name: str = "t-0") -> None:
    """A log (of t-0 unless `name`) with one record, as a broker that stopped left it."""
    log = Log.open(path / name, LogConfig())
    buf = bytearray(build_batch([(b"k", b"old")]))
    log.append(buf, split_batches(buf), leader_epoch=0)
    if topic_id is not None:
        log.record_topic_id(topic_id)
    log.close()


def topic_t(topic_id: uuid.UUID) -> list[MetadataRecord]:
    return [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": NODE, "incarnation_id": uuid.UUID(int=NODE), "broker_epoch": 10, "end_points": [],
        "features": [], "rack": None, "fenced": False}),
        MetadataRecord("TopicRecord", {"name": "t", "topic_id": topic_id}),
        MetadataRecord("PartitionRecord", {"partition_id": 0, "topic_id": topic_id, "replicas": [NODE],
                                           "isr": [NODE], "leader": NODE, "leader_epoch": 0, "partition_epoch": 0})]


@pytest.mark.parametrize(("on_disk", "kept"), [(OLD, False), (NEW, True), (None, True)],
                         ids=["another-topic", "this-topic", "no-file"])
def test_a_log_of_another_topic_id_is_set_aside_not_taken(tmp_path: Path, on_disk: uuid.UUID | None,
                                                          kept: bool) -> None:
    left_on_disk(tmp_path, on_disk)
    replicas = manager(tmp_path)
    replicas.apply_image(replay(empty_image("c", 0), topic_t(NEW)))
    log = replicas.partitions[("t", 0)].log
    assert log.log_end_offset == (1 if kept else 0)
    assert log.topic_id == NEW and partition_metadata.read(log.directory) == NEW
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("t-0.")]
    if kept:
        assert aside == []
    else:  # as Kafka keeps a stray log: renamed aside with its records, never loaded again
        assert len(aside) == 1 and aside[0].name.endswith("-stray")
        assert partition_metadata.read(aside[0]) == OLD and (aside[0] / f"{0:020d}.log").stat().st_size > 0
    replicas.shutdown()
    restarted = manager(tmp_path)
    assert [(log.topic, log.partition) for log in restarted.logs.all_logs()] == [("t", 0)]
    assert restarted.logs.get_log("t", 0).topic_id == NEW
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("t-0.")]) == (0 if kept else 1)
    restarted.shutdown()


def test_logs_the_caught_up_image_gives_no_replica_of_are_set_aside_at_startup(tmp_path: Path) -> None:
    """Kafka's stray replicas: a topic deleted, or made again, or a partition moved away, while the broker was
    down (or a crash before a deletion's rename): set aside once the image is caught up, never deleted."""
    moved = uuid.UUID(int=3)
    for name, topic_id in [("t-0", NEW), ("gone-0", OLD), ("old-0", None), ("moved-0", moved), ("t-1", OLD)]:
        left_on_disk(tmp_path, topic_id, name)
    left_on_disk(tmp_path, None, "__cluster_metadata-0")
    replicas = manager(tmp_path)
    elsewhere = [MetadataRecord("TopicRecord", {"name": "moved", "topic_id": moved}),
                 MetadataRecord("PartitionRecord", {"partition_id": 0, "topic_id": moved, "replicas": [NODE + 1],
                                                    "isr": [NODE + 1], "leader": NODE + 1, "leader_epoch": 0,
                                                    "partition_epoch": 0})]
    replicas.apply_image(replay(empty_image("c", 0), topic_t(NEW) + elsewhere))
    aside = replicas.set_aside_strays()
    assert sorted(path.name.split(".")[0] for path in aside) == ["gone-0", "moved-0", "old-0", "t-1"]
    assert all(path.name.endswith("-stray") and (path / f"{0:020d}.log").stat().st_size > 0 for path in aside)
    assert sorted((log.topic, log.partition) for log in replicas.logs.all_logs()) == [
        ("__cluster_metadata", 0), ("t", 0)]
    assert replicas.partitions[("t", 0)].log.log_end_offset == 1
    assert replicas.set_aside_strays() == []
    made = replicas.logs.create_log("later", 0)  # made since startup: never a stray
    assert replicas.set_aside_strays() == [] and replicas.logs.get_log("later", 0) is made
    replicas.shutdown()
