"""Retention: time, size and log-start-offset rules over real segments, with exact surviving offsets."""

from __future__ import annotations

from pathlib import Path

from test_storage_helpers import FakeClock, all_offsets, append, batch, open_log

from klamm.storage.log import Log, LogConfig
from klamm.storage.log_manager import LogManager
from klamm.storage.retention import RetentionPolicy, delete_segments, enforce_retention

DELETE_ALL_TIME = RetentionPolicy(retention_ms=2000, retention_bytes=-1, delete=True)
UNLIMITED = RetentionPolicy(retention_ms=-1, retention_bytes=-1, delete=True)


def four_segments(tmp_path: Path, clock: FakeClock | None = None) -> Log:
    """Segments [0-2] ts 1000, [3-5] ts 2000, [6-8] ts 3000 and the active [9-11] ts 4000."""
    log = open_log(tmp_path, LogConfig(), time_ms=clock or FakeClock())
    for n in range(4):
        if n:
            log.roll()
        append(log, batch(3, timestamp=1000 * (n + 1)))
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    return log


def files(log: Log) -> set[str]:
    return {p.name for p in log.directory.iterdir() if p.name.endswith((".log", ".deleted"))}


def test_time_retention_deletes_segments_older_than_retention_ms(tmp_path):
    log = four_segments(tmp_path)
    removed = enforce_retention(log, DELETE_ALL_TIME, now_ms=4500, high_watermark=log.log_end_offset)
    # 4500-1000 and 4500-2000 exceed 2000 ms; 4500-3000 does not
    assert [s.base_offset for s in removed] == [0, 3]
    assert log.log_start_offset == 6
    assert all_offsets(log) == [6, 9]  # batch base offsets: records 6..11 remain
    assert [s.base_offset for s in log.segments] == [6, 9]
    # renamed at once, removed later
    assert "00000000000000000000.log.deleted" in files(log)
    delete_segments(removed)
    assert files(log) == {"00000000000000000006.log", "00000000000000000009.log"}


def test_time_retention_at_the_exact_boundary_keeps_the_segment(tmp_path):
    log = four_segments(tmp_path)
    removed = enforce_retention(log, DELETE_ALL_TIME, now_ms=4000, high_watermark=log.log_end_offset)
    assert [s.base_offset for s in removed] == [0]  # 4000-2000 == 2000 is not > 2000
    delete_segments(removed)


def test_everything_expired_rolls_a_new_active_segment_first(tmp_path):
    log = four_segments(tmp_path)
    removed = enforce_retention(log, DELETE_ALL_TIME, now_ms=100_000, high_watermark=log.log_end_offset)
    assert [s.base_offset for s in removed] == [0, 3, 6, 9]
    assert [s.base_offset for s in log.segments] == [12]
    assert log.log_start_offset == log.log_end_offset == 12
    assert all_offsets(log) == []
    assert append(log, batch(1)).first_offset == 12
    delete_segments(removed)


def test_an_empty_active_segment_is_never_deleted(tmp_path):
    log = four_segments(tmp_path)
    log.roll()  # empty active segment at 12
    removed = enforce_retention(log, DELETE_ALL_TIME, now_ms=100_000, high_watermark=log.log_end_offset)
    assert [s.base_offset for s in removed] == [0, 3, 6, 9]
    assert [s.base_offset for s in log.segments] == [12]
    again = enforce_retention(log, DELETE_ALL_TIME, now_ms=200_000, high_watermark=log.log_end_offset)
    assert again == [] and log.log_start_offset == 12
    delete_segments(removed)


def test_size_retention_deletes_oldest_while_the_excess_covers_them(tmp_path):
    log = four_segments(tmp_path)
    size = log.segments[0].size
    assert all(s.size == size for s in log.segments)
    policy = RetentionPolicy(retention_ms=-1, retention_bytes=2 * size + 1, delete=True)
    removed = enforce_retention(log, policy, now_ms=0, high_watermark=log.log_end_offset)
    # excess 2*size-1: covers the first segment, not the second as well
    assert [s.base_offset for s in removed] == [0]
    assert all_offsets(log) == [3, 6, 9]
    policy = RetentionPolicy(retention_ms=-1, retention_bytes=size, delete=True)
    removed += enforce_retention(log, policy, now_ms=0, high_watermark=log.log_end_offset)
    assert log.log_start_offset == 9 and all_offsets(log) == [9]
    delete_segments(removed)


def test_size_retention_below_the_limit_deletes_nothing(tmp_path):
    log = four_segments(tmp_path)
    policy = RetentionPolicy(retention_ms=-1, retention_bytes=log.size_in_bytes(), delete=True)
    assert enforce_retention(log, policy, now_ms=0, high_watermark=log.log_end_offset) == []


def test_compact_only_policy_ignores_time_and_size(tmp_path):
    log = four_segments(tmp_path)
    policy = RetentionPolicy(retention_ms=0, retention_bytes=0, delete=False)
    assert enforce_retention(log, policy, now_ms=100_000, high_watermark=log.log_end_offset) == []
    assert log.log_start_offset == 0


def test_segments_above_the_high_watermark_stay(tmp_path):
    log = four_segments(tmp_path)
    removed = enforce_retention(log, DELETE_ALL_TIME, now_ms=100_000, high_watermark=7)
    assert [s.base_offset for s in removed] == [0, 3]  # [6-8] is not wholly below 7
    assert log.log_start_offset == 6
    delete_segments(removed)


def test_log_start_offset_breach_deletes_segments_below_it_whatever_the_policy(tmp_path):
    log = four_segments(tmp_path)
    assert log.maybe_increment_log_start_offset(7)
    assert not log.maybe_increment_log_start_offset(5)  # never moves back
    removed = enforce_retention(log, RetentionPolicy(-1, -1, delete=False), now_ms=0,
                                high_watermark=log.log_end_offset)
    assert [s.base_offset for s in removed] == [0, 3]
    assert log.log_start_offset == 7  # not lowered to the segment base 6
    assert all_offsets(log)[0] == 6  # the first readable batch holds 7
    delete_segments(removed)


def test_unlimited_retention_deletes_nothing(tmp_path):
    log = four_segments(tmp_path)
    assert enforce_retention(log, UNLIMITED, now_ms=10**12, high_watermark=log.log_end_offset) == []


def test_deleted_segments_and_start_offset_survive_a_restart(tmp_path):
    clock = FakeClock()
    manager = LogManager([tmp_path], LogConfig(), time_ms=clock)
    manager.startup()
    log = manager.create_log("t", 0)
    for n in range(3):
        if n:
            log.roll()
        append(log, batch(2, timestamp=1000 * (n + 1)))
    removed = enforce_retention(log, DELETE_ALL_TIME, now_ms=4500, high_watermark=log.log_end_offset)
    assert [s.base_offset for s in removed] == [0, 2]
    manager.checkpoint()
    manager.shutdown()  # the delayed delete never ran: the .deleted files are left behind
    reopened = LogManager([tmp_path], LogConfig(), time_ms=clock)
    reopened.startup()
    log = reopened.get_log("t", 0)
    assert log.log_start_offset == 4 and all_offsets(log) == [4] and log.log_end_offset == 6
    assert not [p for p in log.directory.iterdir() if p.name.endswith(".deleted")]
    reopened.shutdown()
