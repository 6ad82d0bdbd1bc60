"""A roll's producer snapshot: encoded at the roll, its file written and fsynced by the flush job.

Creating a file on the event loop can wait for the filesystem's journal while other logs
fsync (issue 14), so a roll creates only its new segment's files. These tests pin what
that must not cost: the snapshot describes the state at the roll offset whenever it is
written, it is fsynced before the recovery point passes it, and a snapshot that a
truncation, retention or the log's deletion dropped while its write was pending never
reappears on disk.
"""

from __future__ import annotations

import os

import pytest
from test_storage_helpers import append, batch, open_log

from klamm.storage.log import Log, LogConfig
from klamm.storage.producer_state import ProducerStateManager, snapshot_name

SMALL = LogConfig(segment_bytes=300, index_interval_bytes=50)
PRODUCER = 7


def produce(log: Log, sequence: int, records: int = 3, producer_id: int = PRODUCER):
    """3 records make a batch of about 260 bytes: two do not fit in one SMALL segment."""
    return append(log, batch(records, value_size=60, producer_id=producer_id, epoch=0, sequence=sequence))


def files(log: Log) -> set[str]:
    return {path.name for path in log.directory.iterdir()}


def test_a_roll_creates_only_the_new_segment_files_and_the_job_writes_the_snapshot(tmp_path, monkeypatch):
    log = open_log(tmp_path, SMALL)
    produce(log, 0)
    before = files(log)
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    produce(log, 3)  # rolls
    assert len(log.segments) == 2 and synced == []
    base = log.segments[-1].base_offset
    assert {name for name in files(log) - before} <= {f"{base:020d}{s}" for s in (".log", ".index", ".timeindex",
                                                                                    ".txnindex")}
    produce(log, 6)  # the state moves on before the job writes the snapshot
    job = log.begin_flush()
    job.run()
    monkeypatch.setattr(os, "fsync", real_fsync)
    snapshot = log.directory / snapshot_name(base)
    assert snapshot.exists() and not any(name.endswith(".tmp") for name in files(log))
    # Fsynced under its temporary name before the rename, then the directory.
    assert any(path.startswith(str(snapshot) + ".") and path.endswith(".tmp") for path in synced)
    assert synced[-1] == str(log.directory)
    log.complete_flush(job)
    assert log.recovery_point == log.log_end_offset
    state = ProducerStateManager(log.directory)
    assert state.load(0, base) == base
    assert state.producers[PRODUCER].last_seq == 2  # the state at the roll, not the later one
    log.close()


def test_load_uses_a_pending_snapshot_before_its_file_exists(tmp_path):
    log = open_log(tmp_path, SMALL)
    produce(log, 0)
    produce(log, 3)  # rolls: a snapshot pending at the new base
    base = log.segments[-1].base_offset
    state = log.producer_state
    assert state.pending_snapshot_offsets() == [base] and state.snapshot_offsets() == []
    assert state.load(0, log.log_end_offset) == base
    assert state.producers[PRODUCER].last_seq == 2
    log.close()


def test_truncation_below_a_pending_snapshot_cancels_its_write(tmp_path):
    log = open_log(tmp_path, SMALL)
    produce(log, 0, records=1)
    produce(log, 1, records=1)
    produce(log, 2)  # rolls at 2
    assert log.segments[-1].base_offset == 2
    job = log.begin_flush()  # the job holding the snapshot at 2, not run yet
    log.truncate_to(1)  # a new leader's log diverges below the roll
    job.run()  # the worker gets to it only now
    log.complete_flush(job)
    assert not (log.directory / snapshot_name(2)).exists()
    assert not any(name.endswith((".snapshot", ".tmp")) for name in files(log))
    # The log grows differently past the old roll offset: no stale snapshot may describe it.
    appended = produce(log, 0, records=2, producer_id=PRODUCER + 1)
    log.flush()
    recovery_point = log.recovery_point
    for segment in log.segments:
        segment.close()  # crash
    reopened = open_log(tmp_path, SMALL, clean_shutdown=False, recovery_point=recovery_point)
    assert reopened.log_end_offset == appended.last_offset + 1
    assert PRODUCER + 1 in reopened.producer_state.producers
    assert reopened.producer_state.producers[PRODUCER].last_seq == 0
    reopened.close()


def test_a_snapshot_written_before_a_truncation_is_deleted_by_it(tmp_path):
    log = open_log(tmp_path, SMALL)
    produce(log, 0)
    produce(log, 3)
    base = log.segments[-1].base_offset
    job = log.begin_flush()
    job.run()  # written, but the job not yet completed on the owner's thread
    assert (log.directory / snapshot_name(base)).exists()
    log.truncate_to(2)
    log.complete_flush(job)
    assert not (log.directory / snapshot_name(base)).exists()
    log.close()


def test_retention_cancels_pending_snapshots_below_the_new_start(tmp_path):
    log = open_log(tmp_path, SMALL)
    for sequence in range(0, 18, 3):
        produce(log, sequence)
    bases = [segment.base_offset for segment in log.segments]
    assert len(bases) >= 4
    job = log.begin_flush()
    removed = log.delete_oldest_segments(2)
    job.run()
    log.complete_flush(job)
    on_disk = ProducerStateManager(log.directory).snapshot_offsets()
    assert on_disk and min(on_disk) >= bases[2]
    for segment in removed:
        segment.delete()
    log.close()


def test_a_failed_job_writes_the_snapshot_on_the_next_one(tmp_path, monkeypatch):
    log = open_log(tmp_path, SMALL)
    produce(log, 0)
    produce(log, 3)
    base = log.segments[-1].base_offset
    job = log.begin_flush()

    def broken(fd):
        raise OSError(5, "I/O error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError):
        job.run()
    log.fail_flush(job)
    monkeypatch.undo()
    assert log.recovery_point == 0 and not (log.directory / snapshot_name(base)).exists()
    retry = log.begin_flush()
    assert [snapshot.offset for snapshot in retry.snapshots] == [base]
    retry.run()
    log.complete_flush(retry)
    assert (log.directory / snapshot_name(base)).exists() and log.recovery_point == log.log_end_offset
    assert log.producer_state.pending_snapshot_offsets() == []
    log.close()
