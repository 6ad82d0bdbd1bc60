"""Metadata snapshots: the file format, the image round trip, restart equivalence and truncation."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.controller.controller import (Controller, CreatePartitionsSpec, CreateTopicSpec, MetadataLogError,
                                         SnapshotPolicy)
from klamm.controller.image import ImageBuilder, MetadataImage, empty_image
from klamm.controller.metadata_log import FileMetadataLog, InMemoryMetadataLog
from klamm.controller.records import decode_record, encode_record
from klamm.controller.snapshot import (SnapshotError, SnapshotId, image_records, list_snapshots, read_snapshot,
                                       snapshot_path, write_snapshot)
from klamm.protocol.batch import split_batches
from klamm.protocol.records import decode_batch
from klamm.protocol.topics import METADATA_TOPIC

CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"
NEVER = SnapshotPolicy(max_bytes_between=1 << 62, max_interval_ms=0, retention_bytes=-1, retention_ms=-1)


def _metadata_dir(log_dir: Path) -> Path:
    return log_dir / f"{METADATA_TOPIC}-0"


def _open(log_dir: Path, policy: SnapshotPolicy | None, segment_bytes: int | None = None) -> Controller:
    controller = Controller(FileMetadataLog.open(log_dir, segment_bytes=segment_bytes), 1, CLUSTER, snapshots=policy)
    controller.load()
    return controller


def _fresh(log_dir: Path, policy: SnapshotPolicy | None, segment_bytes: int | None = None) -> Controller:
    """A new metadata log with broker 1 registered (topics need a live broker)."""
    controller = _open(log_dir, policy, segment_bytes)
    controller.register_broker(1, "localhost", 9092)
    return controller


def _populate(controller: Controller) -> None:
    controller.register_broker(1, "localhost", 9092, rack="r1")
    controller.create_topics([CreateTopicSpec("a", 3, 1, configs={"retention.ms": "1"}), CreateTopicSpec("b")],
                             default_partitions=2, default_replication_factor=1)
    controller.create_partitions([CreatePartitionsSpec("b", 4)])
    controller.alter_topic_configs("b", {"cleanup.policy": "compact"})
    controller.alter_broker_configs(None, {"log.retention.ms": "5"})
    controller.alter_broker_configs(1, {"log.cleaner.threads": "2"})
    controller.allocate_producer_id()
    controller.delete_topics(["a"])


def _rebuilt(image: MetadataImage) -> MetadataImage:
    builder = ImageBuilder(empty_image(image.cluster_id, image.controller_id))
    for record in image_records(image):
        builder.apply(decode_record(encode_record(record)))
    builder.offset = image.offset
    return builder.build()


# -- the file ------------------------------------------------------------------------------


def test_snapshot_file_round_trip_and_format(tmp_path: Path) -> None:
    values = [b"v%d" % n for n in range(10_000)]  # more than one data batch
    path = write_snapshot(tmp_path, SnapshotId(1234, 5), values, 1_700_000_000_000)
    assert path.name == "00000000000000001234-0000000005.checkpoint"
    assert list_snapshots(tmp_path) == [SnapshotId(1234, 5)]
    snapshot = read_snapshot(tmp_path, SnapshotId(1234, 5))
    assert snapshot.values == values and snapshot.last_contained_ms == 1_700_000_000_000
    data = path.read_bytes()
    headers = split_batches(data)
    assert headers[0].is_control and headers[-1].is_control and len(headers) >= 4
    assert [h.base_offset for h in headers] == [0] + [h.last_offset + 1 for h in headers[:-1]]
    assert all(h.partition_leader_epoch == 5 for h in headers)
    header_record = decode_batch(data, 0)[1][0]
    assert header_record.key == b"\x00\x00\x00\x03"  # control key: version 0, SNAPSHOT_HEADER
    footer_record = decode_batch(data, headers[-1].position)[1][0]
    assert footer_record.key == b"\x00\x00\x00\x04"  # SNAPSHOT_FOOTER


@pytest.mark.parametrize("damage", ["flip", "truncate", "no_footer", "empty"])
def test_a_damaged_snapshot_is_refused(tmp_path: Path, damage: str) -> None:
    path = write_snapshot(tmp_path, SnapshotId(10, 0), [b"a", b"b", b"c"], 1)
    data = bytearray(path.read_bytes())
    headers = split_batches(data)
    if damage == "flip":
        data[headers[1].position + 70] ^= 0xFF
    elif damage == "truncate":
        del data[-5:]
    elif damage == "no_footer":
        del data[headers[-1].position:]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError):
        read_snapshot(tmp_path, SnapshotId(10, 0))


def test_image_records_rebuild_the_image() -> None:
    controller = Controller(InMemoryMetadataLog(), 1, CLUSTER)
    controller.load()
    _populate(controller)
    image = controller.image
    assert image.topics_by_name and image.brokers and image.configs and image.next_producer_id
    assert _rebuilt(image) == image


# -- start-up from a snapshot ----------------------------------------------------------------


def test_restart_loads_the_snapshot_and_replays_only_the_tail(tmp_path: Path) -> None:
    controller = _open(tmp_path, NEVER)
    _populate(controller)
    snapshot_id = controller.snapshot()
    assert snapshot_id == SnapshotId(controller.image.offset + 1, 0)
    controller.create_topics([CreateTopicSpec("tail", 2, 1)])
    expected = controller.image
    controller.close()

    replayed: list[int] = []
    metadata_log = FileMetadataLog.open(tmp_path)
    original = metadata_log.replay
    metadata_log.replay = lambda start=0: (replayed.append(start) or original(start))  # type: ignore[method-assign]
    restarted = Controller(metadata_log, 1, CLUSTER, snapshots=NEVER)
    assert restarted.load() == expected
    assert replayed == [snapshot_id.end_offset]
    restarted.close()


def test_a_corrupt_newest_snapshot_falls_back_to_an_older_one_or_the_log(tmp_path: Path) -> None:
    controller = _open(tmp_path, NEVER)
    _populate(controller)
    older = controller.snapshot()
    controller.create_topics([CreateTopicSpec("later", 1, 1)])
    newer = controller.snapshot()
    controller.create_topics([CreateTopicSpec("tail", 1, 1)])
    expected = controller.image
    controller.close()
    directory = _metadata_dir(tmp_path)
    assert older is not None and newer is not None
    snapshot_path(directory, newer).write_bytes(snapshot_path(directory, newer).read_bytes()[:-3])
    assert _open(tmp_path, NEVER).image == expected  # from the older snapshot
    snapshot_path(directory, older).write_bytes(b"garbage")
    assert _open(tmp_path, NEVER).image == expected  # from the whole log


def test_a_partial_snapshot_is_removed_at_start_up(tmp_path: Path) -> None:
    controller = _open(tmp_path, NEVER)
    _populate(controller)
    controller.close()
    partial = _metadata_dir(tmp_path) / "00000000000000000005-0000000000.checkpoint.part"
    partial.write_bytes(b"cut short")
    restarted = _open(tmp_path, NEVER)
    assert not partial.exists() and list_snapshots(_metadata_dir(tmp_path)) == []
    restarted.close()


def test_snapshots_are_taken_after_enough_record_bytes(tmp_path: Path) -> None:
    policy = replace(NEVER, max_bytes_between=300)
    controller = _open(tmp_path, policy)
    _populate(controller)
    taken = list_snapshots(_metadata_dir(tmp_path))
    assert taken, "no snapshot after more than 300 bytes of records"
    assert taken[-1].end_offset <= controller.image.offset + 1
    controller.close()


def test_snapshots_are_taken_after_the_interval(tmp_path: Path) -> None:
    now = [1_000_000]
    policy = replace(NEVER, max_interval_ms=60_000)
    controller = Controller(FileMetadataLog.open(tmp_path), 1, CLUSTER, snapshots=policy, time_ms=lambda: now[0])
    controller.load()
    controller.register_broker(1, "localhost", 9092)
    controller.create_topics([CreateTopicSpec("t", 1, 1)])
    assert list_snapshots(_metadata_dir(tmp_path)) == []
    now[0] += 60_000
    controller.maybe_snapshot()
    assert list_snapshots(_metadata_dir(tmp_path)) == [SnapshotId(controller.image.offset + 1, 0)]
    now[0] += 120_000
    controller.maybe_snapshot()  # nothing new since: no second snapshot
    assert len(list_snapshots(_metadata_dir(tmp_path))) == 1
    controller.close()


# -- truncation ------------------------------------------------------------------------------


def test_log_behind_a_snapshot_is_deleted_once_retention_is_exceeded(tmp_path: Path) -> None:
    policy = SnapshotPolicy(max_bytes_between=400, max_interval_ms=0, retention_bytes=0, retention_ms=-1)
    controller = _fresh(tmp_path, policy, segment_bytes=512)
    for n in range(40):
        controller.create_topics([CreateTopicSpec(f"t{n}", 2, 1, configs={"retention.ms": str(n + 1)})])
    expected = controller.image
    controller.clean()  # as the broker does periodically: segments rolled since are behind the start too
    metadata_log = controller.log
    assert isinstance(metadata_log, FileMetadataLog)
    start = metadata_log.log_start_offset
    snapshots = list_snapshots(_metadata_dir(tmp_path))
    assert start > 0, "nothing was truncated"
    assert len(snapshots) == 1 and snapshots[0].end_offset == start  # only the newest is kept
    assert metadata_log.log.segments[0].base_offset <= start < metadata_log.log.segments[1].base_offset \
        if len(metadata_log.log.segments) > 1 else True
    logs = sorted(p.name for p in _metadata_dir(tmp_path).glob("*.log"))
    assert int(logs[0].split(".")[0]) <= start
    controller.close()
    restarted = _open(tmp_path, policy, segment_bytes=512)
    assert restarted.image == expected
    restarted.close()


def test_log_is_kept_while_within_retention(tmp_path: Path) -> None:
    policy = SnapshotPolicy(max_bytes_between=400, max_interval_ms=0, retention_bytes=-1, retention_ms=-1)
    controller = _fresh(tmp_path, policy, segment_bytes=512)
    for n in range(20):
        controller.create_topics([CreateTopicSpec(f"t{n}", 2, 1)])
    assert len(list_snapshots(_metadata_dir(tmp_path))) > 1
    assert controller.log.log_start_offset == 0
    controller.close()


def test_retention_by_age_deletes_before_the_next_snapshot(tmp_path: Path) -> None:
    now = [10_000_000]
    policy = SnapshotPolicy(max_bytes_between=1 << 40, max_interval_ms=0, retention_bytes=-1, retention_ms=1000)
    controller = Controller(FileMetadataLog.open(tmp_path, segment_bytes=512), 1, CLUSTER, snapshots=policy,
                            time_ms=lambda: now[0])
    controller.load()
    controller.register_broker(1, "localhost", 9092)
    for n in range(10):
        controller.create_topics([CreateTopicSpec(f"a{n}", 2, 1)])
    first = controller.snapshot()
    now[0] += 5000
    for n in range(10):
        controller.create_topics([CreateTopicSpec(f"b{n}", 2, 1)])
    second = controller.snapshot()
    assert first is not None and second is not None
    assert controller.log.log_start_offset == second.end_offset
    assert list_snapshots(_metadata_dir(tmp_path)) == [second]
    controller.close()


def test_a_log_truncated_past_every_valid_snapshot_is_refused(tmp_path: Path) -> None:
    policy = SnapshotPolicy(max_bytes_between=400, max_interval_ms=0, retention_bytes=0, retention_ms=-1)
    controller = _fresh(tmp_path, policy, segment_bytes=512)
    for n in range(40):
        controller.create_topics([CreateTopicSpec(f"t{n}", 2, 1)])
    controller.close()
    for path in _metadata_dir(tmp_path).glob("*.checkpoint"):
        path.write_bytes(b"broken")
    with pytest.raises(MetadataLogError):
        _open(tmp_path, policy, segment_bytes=512)


# -- restart equivalence over random metadata operations ----------------------------------------

NAMES = ["a", "b", "c", "d", "e"]
operations = st.lists(st.one_of(
    st.tuples(st.just("create"), st.sampled_from(NAMES), st.integers(1, 4)),
    st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just(0)),
    st.tuples(st.just("grow"), st.sampled_from(NAMES), st.integers(1, 6)),
    st.tuples(st.just("config"), st.sampled_from(NAMES), st.integers(1, 1000)),
    st.tuples(st.just("broker_config"), st.sampled_from(["", "1"]), st.integers(1, 1000)),
    st.tuples(st.just("register"), st.sampled_from(["r1", "r2", ""]), st.integers(9092, 9094)),
    st.tuples(st.just("producer_ids"), st.just(""), st.just(0)),
    st.tuples(st.just("snapshot"), st.just(""), st.just(0)),
), max_size=40)


def _run(controller: Controller, ops: list[tuple[str, str, int]]) -> None:
    for op, name, n in ops:
        if op == "create":
            controller.create_topics([CreateTopicSpec(name, n, 1)])
        elif op == "delete":
            controller.delete_topics([name])
        elif op == "grow":
            controller.create_partitions([CreatePartitionsSpec(name, n)])
        elif op == "config" and name in controller.image.topics_by_name:
            controller.alter_topic_configs(name, {"retention.ms": str(n)})
        elif op == "broker_config":
            controller.alter_broker_configs(int(name) if name else None, {"log.retention.ms": str(n)})
        elif op == "register":
            controller.register_broker(1, "localhost", n, rack=name or None)
        elif op == "producer_ids":
            controller.allocate_producer_ids(1)
        elif op == "snapshot":
            controller.snapshot()


class _NoSnapshots(FileMetadataLog):
    def snapshots(self) -> list[SnapshotId]:
        return []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, threshold=st.sampled_from([150, 600, 1 << 40]))
def test_restart_equivalence(ops: list[tuple[str, str, int]], threshold: int) -> None:
    log_dir = Path(tempfile.mkdtemp(prefix="klamm-snapshot-test-"))
    try:
        policy = SnapshotPolicy(max_bytes_between=threshold, max_interval_ms=0, retention_bytes=-1, retention_ms=-1)
        controller = _fresh(log_dir, policy, segment_bytes=700)
        _run(controller, ops)
        before = controller.image
        controller.close()
        from_snapshot = _open(log_dir, policy, segment_bytes=700)
        assert from_snapshot.image == before
        from_snapshot.close()
        full_log = _NoSnapshots(FileMetadataLog.open(log_dir).log)
        full_log._owns_log = True
        full = Controller(full_log, 1, CLUSTER)
        assert full.load() == before
        full.close()
        # Truncating behind the newest snapshot keeps the same image on restart.
        truncating = replace(policy, retention_bytes=0)
        cleaned = _open(log_dir, truncating, segment_bytes=700)
        cleaned.snapshot()
        cleaned.close()
        assert _open(log_dir, truncating, segment_bytes=700).image == before
    finally:
        shutil.rmtree(log_dir, ignore_errors=True)
