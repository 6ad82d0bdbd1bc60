"""The file-backed metadata log, restart from disk, and meta.properties."""

from __future__ import annotations

from pathlib import Path

import pytest

from klamm.controller.controller import Controller, CreatePartitionsSpec, CreateTopicSpec
from klamm.controller.meta_properties import (
    MetaProperties,
    MetaPropertiesError,
    ensure_meta_properties,
    random_base64_uuid,
    read_meta_properties,
    write_meta_properties,
)
from klamm.controller.metadata_log import FileMetadataLog, InMemoryMetadataLog
from klamm.controller.records import decode_record
from klamm.protocol.records import iter_records
from klamm.storage.config import LogConfig
from klamm.storage.log_manager import LogManager

CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"


def populate(controller: Controller) -> None:
    controller.register_broker(1, "localhost", 9092)
    controller.create_topics([CreateTopicSpec("a", 3, 1, configs={"retention.ms": "1"}), CreateTopicSpec("b")],
                             default_partitions=2, default_replication_factor=1)
    controller.create_partitions([CreatePartitionsSpec("b", 4)])
    controller.delete_topics(["a"])
    controller.alter_topic_configs("b", {"cleanup.policy": "compact"})


def test_file_log_append_and_replay(tmp_path: Path) -> None:
    log = FileMetadataLog.open(tmp_path)
    assert log.end_offset == 0
    assert log.append([b"one", b"two"]) == 1
    assert log.append([b"three"]) == 2
    assert list(log.replay()) == [(0, b"one"), (1, b"two"), (2, b"three")]
    assert list(log.replay(2)) == [(2, b"three")]
    log.close()
    assert (tmp_path / "__cluster_metadata-0").is_dir()


def test_file_log_holds_kafka_batches_with_framed_values(tmp_path: Path) -> None:
    log = FileMetadataLog.open(tmp_path)
    controller = Controller(log, node_id=1, cluster_id=CLUSTER)
    controller.load()
    populate(controller)
    raw = log.log.read_bytes(0, 1 << 20)
    records = list(iter_records(raw))
    assert [r.offset for r in records] == list(range(log.end_offset))
    assert all(r.key is None for r in records)
    types = [decode_record(r.value).type for r in records]
    assert types[:2] == ["FeatureLevelRecord", "RegisterBrokerRecord"]
    assert "RemoveTopicRecord" in types
    log.close()


def test_restart_from_disk_gives_the_same_image(tmp_path: Path) -> None:
    log = FileMetadataLog.open(tmp_path)
    controller = Controller(log, node_id=1, cluster_id=CLUSTER)
    controller.load()
    populate(controller)
    image = controller.image
    controller.close()

    for clean in (True, False):
        reopened = FileMetadataLog.open(tmp_path, clean_shutdown=clean)
        restarted = Controller(reopened, node_id=1, cluster_id=CLUSTER)
        assert restarted.load() == image
        reopened.close()


def test_restart_after_more_changes(tmp_path: Path) -> None:
    controller = Controller(FileMetadataLog.open(tmp_path), node_id=1, cluster_id=CLUSTER)
    controller.load()
    populate(controller)
    controller.close()
    controller = Controller(FileMetadataLog.open(tmp_path), node_id=1, cluster_id=CLUSTER)
    controller.load()
    controller.register_broker(1, "localhost", 9092)  # unchanged: no record
    controller.create_topics([CreateTopicSpec("c", 2, 1)], default_partitions=1, default_replication_factor=1)
    image = controller.image
    controller.close()
    again = Controller(FileMetadataLog.open(tmp_path), node_id=1, cluster_id=CLUSTER)
    assert again.load() == image
    assert set(image.topics_by_name) == {"b", "c"}
    again.close()


def test_in_memory_and_file_logs_replay_alike(tmp_path: Path) -> None:
    memory = Controller(InMemoryMetadataLog(), node_id=1, cluster_id=CLUSTER)
    memory.load()
    populate(memory)
    disk = Controller(FileMetadataLog.open(tmp_path), node_id=1, cluster_id=CLUSTER)
    disk.load()
    populate(disk)
    # Topic ids and incarnation ids are random: compare the shape.
    assert sorted(memory.image.topics_by_name) == sorted(disk.image.topics_by_name)
    assert memory.image.offset == disk.image.offset
    disk.close()


def test_file_log_through_log_manager(tmp_path: Path) -> None:
    manager = LogManager([tmp_path], LogConfig())
    manager.startup()
    controller = Controller(FileMetadataLog(manager), node_id=1, cluster_id=CLUSTER)
    controller.load()
    populate(controller)
    image = controller.image
    metadata_log = manager.get_log("__cluster_metadata", 0)
    assert metadata_log is not None and metadata_log.config.retention_ms == -1
    controller.close()
    manager.shutdown()

    manager = LogManager([tmp_path], LogConfig())
    manager.startup()
    assert Controller(FileMetadataLog(manager), node_id=1, cluster_id=CLUSTER).load() == image
    manager.shutdown()


# --- meta.properties -------------------------------------------------------------------------


def test_meta_properties_round_trip(tmp_path: Path) -> None:
    props = MetaProperties(cluster_id=CLUSTER, node_id=3, directory_id=random_base64_uuid())
    write_meta_properties(tmp_path, props)
    text = (tmp_path / "meta.properties").read_text()
    assert "version=1" in text and "node.id=3" in text and f"cluster.id={CLUSTER}" in text
    assert read_meta_properties(tmp_path) == props


def test_reads_kafka_written_meta_properties(tmp_path: Path) -> None:
    (tmp_path / "meta.properties").write_text(
        "#\n#Thu Jan 01 00:00:00 UTC 2024\nnode.id=1\ndirectory.id=Ab3Fz9RBS5eTu1p2q3r4sQ\n"
        "version=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n")
    props = read_meta_properties(tmp_path)
    assert props == MetaProperties("MkU3OEVBNTcwNTJENDM2Qk", 1, "Ab3Fz9RBS5eTu1p2q3r4sQ")


def test_ensure_meta_properties_generates_then_keeps_cluster_id(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    cluster_id = ensure_meta_properties(dirs, node_id=1)
    assert len(cluster_id) == 22 and not cluster_id.startswith("-")
    first, second = (read_meta_properties(d) for d in dirs)
    assert first.cluster_id == second.cluster_id == cluster_id
    assert first.directory_id != second.directory_id and len(first.directory_id) == 22
    assert ensure_meta_properties(dirs, node_id=1) == cluster_id
    assert ensure_meta_properties(dirs, node_id=1, cluster_id=cluster_id) == cluster_id
    # A dir added later joins the same cluster.
    assert ensure_meta_properties(dirs + [tmp_path / "d3"], node_id=1) == cluster_id
    assert read_meta_properties(tmp_path / "d3").cluster_id == cluster_id


def test_ensure_meta_properties_uses_configured_cluster_id(tmp_path: Path) -> None:
    assert ensure_meta_properties([tmp_path], node_id=2, cluster_id=CLUSTER) == CLUSTER


@pytest.mark.parametrize("problem", ["node", "cluster", "mixed"])
def test_ensure_meta_properties_refuses_foreign_dirs(tmp_path: Path, problem: str) -> None:
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    ensure_meta_properties([d1], node_id=1, cluster_id=CLUSTER)
    with pytest.raises(MetaPropertiesError):
        if problem == "node":
            ensure_meta_properties([d1], node_id=2)
        elif problem == "cluster":
            ensure_meta_properties([d1], node_id=1, cluster_id="BBBBBBBBBBBBBBBBBBBBBB")
        else:
            ensure_meta_properties([d2], node_id=1, cluster_id="BBBBBBBBBBBBBBBBBBBBBB")
            ensure_meta_properties([d1, d2], node_id=1)


def test_torn_tail_is_dropped_after_unclean_shutdown(tmp_path: Path) -> None:
    controller = Controller(FileMetadataLog.open(tmp_path), node_id=1, cluster_id=CLUSTER)
    controller.load()
    populate(controller)
    image = controller.image
    controller.close()
    segment = next((tmp_path / "__cluster_metadata-0").glob("*.log"))
    with open(segment, "ab") as f:  # half a batch: a crash in the middle of an append
        f.write(b"\x00" * 8 + b"\x00\x00\x01\x00" + b"\x01" * 30)
    reopened = FileMetadataLog.open(tmp_path, clean_shutdown=False)
    assert Controller(reopened, node_id=1, cluster_id=CLUSTER).load() == image
    assert reopened.end_offset == image.offset + 1
    reopened.close()
