"""Checkpoint files, the leader epoch cache and the LogManager."""

from __future__ import annotations

import pytest
from test_storage_helpers import all_offsets, append, batch

from klamm.storage.checkpoint import (
    CorruptCheckpoint,
    read_checkpoint,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from klamm.storage.leader_epoch import LeaderEpochCache
from klamm.storage.log import LogConfig
from klamm.storage.log_manager import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)

SMALL = LogConfig(segment_bytes=500)

# -- checkpoints -----------------------------------------------------------------


def test_offset_checkpoint_format_and_round_trip(tmp_path):
    path = tmp_path / "recovery-point-offset-checkpoint"
    offsets = {("orders", 1): 42, ("orders", 0): 7, ("__cluster_metadata", 0): 100}
    write_offset_checkpoint(path, offsets)
    assert path.read_text() == "0\n3\norders 1 42\norders 0 7\n__cluster_metadata 0 100\n"  # the mapping's order
    assert read_offset_checkpoint(path) == offsets
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_offset_checkpoint_missing_and_empty(tmp_path):
    path = tmp_path / "cp"
    assert read_offset_checkpoint(path) == {}
    write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offset_checkpoint(path) == {}


@pytest.mark.parametrize(
    "text",
    ["", "1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "zero\n0\n"],
)
def test_corrupt_checkpoints_are_reported(tmp_path, text):
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CorruptCheckpoint):
        read_offset_checkpoint(path)


def test_reads_kafka_written_file_with_extra_whitespace(tmp_path):
    path = tmp_path / "cp"
    path.write_text("0\n2\nfoo 0 10\nbar  3  20\n")
    assert read_offset_checkpoint(path) == {("foo", 0): 10, ("bar", 3): 20}


# -- leader epoch cache -------------------------------------------------------------


def test_leader_epoch_cache_assign_and_end_offsets(tmp_path):
    end = [100]
    cache = LeaderEpochCache(tmp_path, lambda: end[0])
    assert cache.end_offset_for(0) == (-1, -1)
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch, later offset: ignored
    cache.assign(2, 40)
    cache.assign(4, 70)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(0, 0), (2, 40), (4, 70)]
    assert cache.end_offset_for(0) == (0, 40)
    assert cache.end_offset_for(1) == (0, 40)
    assert cache.end_offset_for(3) == (2, 70)
    assert cache.end_offset_for(4) == (4, 100)
    assert cache.end_offset_for(5) == (-1, -1)
    assert cache.epoch_for_offset(50) == 2
    assert not (tmp_path / "leader-epoch-checkpoint").exists()  # assigned: written by the log's next flush
    cache.write()
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n0 0\n2 40\n4 70\n"
    reloaded = LeaderEpochCache(tmp_path, lambda: end[0])
    assert reloaded.entries == cache.entries


def test_leader_epoch_cache_assign_removes_conflicting_entries(tmp_path):
    cache = LeaderEpochCache(tmp_path, lambda: 0)
    cache.assign(1, 10)
    cache.assign(3, 30)
    cache.assign(2, 20)  # a lower epoch replaces the entries after it
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(1, 10), (2, 20)]


def test_leader_epoch_cache_truncation(tmp_path):
    cache = LeaderEpochCache(tmp_path, lambda: 0)
    for epoch, offset in [(1, 0), (2, 10), (3, 20)]:
        cache.assign(epoch, offset)
    cache.write()
    cache.truncate_from_end(15)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(1, 0), (2, 10)]
    assert LeaderEpochCache(tmp_path, lambda: 0).entries == cache.entries  # truncated from the end: written
    cache.truncate_from_start(12)
    assert [(e.epoch, e.start_offset) for e in cache.entries] == [(2, 12)]
    # From the start: written later (retention must not fsync on the event loop).
    assert [(e.epoch, e.start_offset) for e in LeaderEpochCache(tmp_path, lambda: 0).entries] == [(1, 0), (2, 10)]
    cache.write()
    assert LeaderEpochCache(tmp_path, lambda: 0).entries == cache.entries


# -- log manager -----------------------------------------------------------------------


def test_create_get_and_restart(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, SMALL)
    manager.startup(lambda topic: SMALL)
    first = manager.create_log("orders", 0, SMALL)
    assert manager.create_log("orders", 0, SMALL) is first
    second = manager.create_log("orders", 1, SMALL)
    metadata = manager.create_log("__cluster_metadata", 0, SMALL)
    assert first.directory.parent != second.directory.parent  # spread over log dirs
    for _ in range(10):
        append(first, batch(2, value_size=30))
    append(metadata, batch(1))
    assert manager.get_log("orders", 0) is first
    assert manager.get_log("nope", 0) is None
    assert len(manager.all_logs()) == 3
    manager.shutdown()
    for d in dirs:
        assert (d / CLEAN_SHUTDOWN_FILE).exists()
    recovery = read_offset_checkpoint(dirs[0] / RECOVERY_POINT_CHECKPOINT)
    recovery.update(read_offset_checkpoint(dirs[1] / RECOVERY_POINT_CHECKPOINT))
    assert recovery == {("orders", 0): 20, ("orders", 1): 0, ("__cluster_metadata", 0): 1}

    manager = LogManager(dirs, SMALL)
    manager.startup(lambda topic: SMALL)
    for d in dirs:
        assert not (d / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    log = manager.get_log("orders", 0)
    assert log.log_end_offset == 20
    assert all_offsets(log) == list(range(0, 20, 2))
    assert manager.get_log("__cluster_metadata", 0).log_end_offset == 1
    manager.shutdown()


def test_startup_ignores_foreign_dirs_and_removes_deleted_ones(tmp_path):
    log_dir = tmp_path / "logs"
    (log_dir / "not a partition").mkdir(parents=True)
    (log_dir / "orders-0.0123abcd-delete").mkdir()
    (log_dir / "some-file-3").write_text("x")
    manager = LogManager([log_dir], SMALL)
    manager.startup(lambda topic: SMALL)
    assert manager.all_logs() == []
    assert not (log_dir / "orders-0.0123abcd-delete").exists()
    assert (log_dir / "not a partition").exists()


def test_unclean_startup_recovers_from_recovery_point(tmp_path):
    log_dir = tmp_path / "logs"
    manager = LogManager([log_dir], SMALL)
    manager.startup(lambda topic: SMALL)
    log = manager.create_log("t", 0, SMALL)
    for _ in range(10):
        append(log, batch(2, value_size=30))
    manager.checkpoint()
    log.flush()
    # Crash: a torn tail and no clean-shutdown marker.
    segment_file = log.active_segment.log_path
    for segment in log.segments:
        segment.close()
    size = segment_file.stat().st_size
    with open(segment_file, "r+b") as f:
        f.truncate(size - 5)
    manager = LogManager([log_dir], SMALL)
    manager.startup(lambda topic: SMALL)
    log = manager.get_log("t", 0)
    assert log.log_end_offset == 18
    assert read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 18}


def test_log_start_offset_checkpoint_is_applied(tmp_path):
    log_dir = tmp_path / "logs"
    manager = LogManager([log_dir], SMALL)
    manager.startup()
    log = manager.create_log("t", 0)
    for _ in range(10):
        append(log, batch(2, value_size=30))
    manager.shutdown()
    write_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, {("t", 0): 6})
    manager = LogManager([log_dir], SMALL)
    manager.startup()
    assert manager.get_log("t", 0).log_start_offset == 6


def test_delete_log(tmp_path):
    log_dir = tmp_path / "logs"
    manager = LogManager([log_dir], SMALL)
    manager.startup()
    log = manager.create_log("t", 0)
    append(log, batch(1))
    manager.checkpoint()
    detached = manager.delete_log("t", 0)
    assert manager.get_log("t", 0) is None
    [renamed] = [p for p in log_dir.iterdir() if p.is_dir()]
    assert renamed.name.startswith("t-0.") and renamed.name.endswith("-delete")
    assert read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, 3) == []
    detached.delete()
    assert [p.name for p in log_dir.iterdir() if p.is_dir()] == []
    assert manager.delete_log("t", 0) is None  # idempotent
    recreated = manager.create_log("t", 0)
    assert recreated.log_end_offset == 0
    manager.shutdown()


def test_a_flush_job_in_flight_writes_nothing_into_a_log_recreated_under_the_deleted_ones_name(tmp_path):
    """delete_log renames the directory; a job begun before must not write the old log's epoch entries or
    producer snapshots under the old name, which the recreated log now has."""
    manager = LogManager([tmp_path], SMALL)
    old = manager.create_log("t", 0)
    while len(old.segments) < 3:  # rolls: the job carries their producer snapshots
        append(old, batch(3, value_size=100), leader_epoch=5)
    job = old.begin_flush()
    assert job is not None and job.snapshots and job.epochs is not None
    manager.delete_log("t", 0)
    manager.wait_for_checkpoints()
    new = manager.create_log("t", 0)
    job.run()
    assert sorted(p.name for p in new.directory.iterdir()) == ["00000000000000000000.index",
                                                              "00000000000000000000.log",
                                                              "00000000000000000000.timeindex"]
    manager.shutdown()
