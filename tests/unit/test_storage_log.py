"""Log: append/read across segments, read bounds, timestamps, restart, truncation, rolling."""

from __future__ import annotations

import os

import pytest
from test_storage_helpers import FakeClock, all_offsets, append, batch, open_log

from klamm.protocol.batch import read_batch_header, split_batches
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.storage.log import InvalidAppendOffset, Log, LogConfig

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def fill(log: Log, count: int, records: int = 3, value_size: int = 20, timestamp: int = 1000) -> list[tuple[int, int]]:
    """Append `count` batches; return (first_offset, last_offset) of each."""
    ranges = []
    for n in range(count):
        result = append(log, batch(records, value_size=value_size, timestamp=timestamp + n))
        ranges.append((result.first_offset, result.last_offset))
    return ranges


def test_append_assigns_consecutive_offsets(tmp_path):
    log = open_log(tmp_path)
    first = append(log, batch(3))
    second = append(log, batch(2))
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert not first.duplicate and first.log_append_time == -1 and first.log_start_offset == 0
    assert log.log_end_offset == 5
    assert (log.topic, log.partition) == ("topic", 0)


def test_append_patches_offsets_and_leader_epoch_without_breaking_crc(tmp_path):
    from klamm.protocol.batch import crc_ok

    log = open_log(tmp_path)
    append(log, batch(2), leader_epoch=7)
    append(log, batch(2), leader_epoch=7)
    data = log.read_bytes(0, 1 << 20)
    headers = split_batches(data)
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 7), (2, 7)]
    assert all(crc_ok(data, h) for h in headers)


def test_log_append_time_is_stamped(tmp_path):
    log = open_log(tmp_path)
    result = append(log, batch(2, timestamp=5), log_append_time_ms=123456)
    assert result.log_append_time == 123456
    header = read_batch_header(log.read_bytes(0, 1000))
    assert header.max_timestamp == 123456 and header.attributes & 0x08


def test_round_trip_across_many_segments(tmp_path):
    log = open_log(tmp_path, SMALL)
    ranges = fill(log, 60)
    assert len(log.segments) > 5
    assert all_offsets(log) == [first for first, _ in ranges]
    # Every offset, including ones inside a batch, returns the whole batch holding it.
    for first, last in ranges:
        for offset in range(first, last + 1):
            data = log.read_bytes(offset, 1 << 20)
            assert read_batch_header(data).base_offset == first
    # Segment files use 20-digit names.
    names = sorted(p.name for p in (tmp_path / "topic-0").glob("*.log"))
    assert names[0] == "00000000000000000000.log"
    assert all(len(n) == 24 for n in names)


def test_read_returns_only_one_segment(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 30)
    data = log.read_bytes(0, 1 << 20)
    assert len(data) <= SMALL.segment_bytes
    headers = split_batches(data)
    assert headers[-1].next_offset == log.segments[1].base_offset


def test_read_result_fields(tmp_path):
    log = open_log(tmp_path, SMALL)
    ranges = fill(log, 10)
    first, last = ranges[4]
    result = log.read(first + 1, 1 << 20, max_offset=log.log_end_offset, min_one=False)
    assert result.first_offset == first
    data = os.pread(result.fd, result.length, result.position)
    assert read_batch_header(data).base_offset == first


def test_max_bytes_returns_whole_batches_only(tmp_path):
    log = open_log(tmp_path)
    fill(log, 10)
    size = len(batch(3, value_size=20))
    data = log.read_bytes(0, size * 3 + size // 2)
    assert len(data) == size * 3
    assert len(split_batches(data)) == 3


def test_min_one_returns_an_oversized_first_batch(tmp_path):
    log = open_log(tmp_path)
    append(log, batch(5, value_size=500))
    append(log, batch(1))
    big = log.read(0, 100, max_offset=log.log_end_offset, min_one=True)
    assert big.length == len(batch(5, value_size=500))
    none = log.read(0, 100, max_offset=log.log_end_offset, min_one=False)
    assert none.length == 0


def test_max_offset_bounds_the_read(tmp_path):
    log = open_log(tmp_path)
    ranges = fill(log, 5)  # batches of 3: 0-2, 3-5, 6-8, ...
    result = log.read(0, 1 << 20, max_offset=6, min_one=True)
    data = os.pread(result.fd, result.length, result.position)
    assert [h.base_offset for h in split_batches(data)] == [0, 3]
    # A batch straddling the bound is not returned.
    assert log.read(0, 1 << 20, max_offset=2, min_one=True).length == 0
    assert log.read(6, 1 << 20, max_offset=6, min_one=True).length == 0
    assert ranges[-1][1] == 14


def test_out_of_range_reads(tmp_path):
    log = open_log(tmp_path)
    fill(log, 2)
    with pytest.raises(KafkaError) as error:
        log.read(7, 100, max_offset=10, min_one=True)
    assert error.value.code == ErrorCode.offset_out_of_range
    with pytest.raises(KafkaError):
        log.read(-1, 100, max_offset=10, min_one=True)
    at_end = log.read(6, 100, max_offset=6, min_one=True)
    assert at_end.length == 0 and at_end.first_offset == 6


def test_restart_finds_every_batch(tmp_path):
    log = open_log(tmp_path, SMALL)
    ranges = fill(log, 40)
    log.close()
    reopened = open_log(tmp_path, SMALL)
    assert reopened.log_end_offset == ranges[-1][1] + 1
    assert all_offsets(reopened) == [first for first, _ in ranges]
    assert append(reopened, batch(1)).first_offset == ranges[-1][1] + 1


def test_size_in_bytes(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 20)
    total = sum(p.stat().st_size for p in (tmp_path / "topic-0").glob("*.log"))
    assert log.size_in_bytes() == total > 0


def test_roll_on_segment_ms_by_record_timestamps(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path, LogConfig(segment_ms=1000), time_ms=clock)
    append(log, batch(1, timestamp=10_000))
    append(log, batch(1, timestamp=10_500))
    assert len(log.segments) == 1
    append(log, batch(1, timestamp=11_001))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_segment_ms_by_wall_clock_without_timestamps(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path, LogConfig(segment_ms=1000), time_ms=clock)
    append(log, batch(1, timestamp=-1))
    clock.now += 1001
    append(log, batch(1, timestamp=-1))
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_roll_when_offset_index_is_full(tmp_path):
    config = LogConfig(index_interval_bytes=1, segment_index_bytes=8 * 3)
    log = open_log(tmp_path, config)
    fill(log, 12, records=1)
    assert len(log.segments) > 2
    for segment in log.segments:
        assert segment.offset_index.entries <= 3
    assert all_offsets(log) == list(range(12))


def test_flush_messages_asks_for_a_flush_and_the_flush_advances_recovery_point(tmp_path):
    log = open_log(tmp_path, LogConfig(flush_messages=4))
    first = append(log, batch(2))
    assert not first.flush_due and not log.flush_wanted(0)
    second = append(log, batch(2))
    assert second.flush_due and log.flush_wanted(0)
    assert log.recovery_point == 0  # appends never fsync; the owner runs the flush
    log.flush()
    assert log.recovery_point == 4 and not log.flush_wanted(0)


def test_flush_ms(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path, LogConfig(flush_ms=100), time_ms=clock)
    append(log, batch(1))
    assert not log.flush_wanted(clock.now)
    clock.now += 100
    assert log.flush_wanted(clock.now)
    job = log.begin_flush()
    assert not log.flush_wanted(clock.now)  # covered by the job begun
    job.run()
    log.complete_flush(job)
    assert log.recovery_point == 1


def test_a_roll_asks_for_a_flush_of_the_finished_segment(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 20)
    assert log.flush_wanted(0)
    assert log.recovery_point < log.segments[-1].base_offset  # not durable until flushed
    job = log.begin_flush()
    assert [s.base_offset for s in job.segments] == [s.base_offset for s in log.segments]
    assert job.snapshots  # the producer snapshots the rolls wrote, fsynced by the job
    job.run()
    log.complete_flush(job)
    assert log.recovery_point == log.log_end_offset


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=600, index_interval_bytes=50))
    # Batch n holds records with timestamps 100n, 100n+10, 100n+20 (non-decreasing overall).
    for n in range(30):
        append(log, batch(timestamps=[100 * n, 100 * n + 10, 100 * n + 20]))
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(0) == (0, 0)
    assert log.offset_for_timestamp(5) == (1, 10)
    assert log.offset_for_timestamp(1010) == (31, 1010)
    assert log.offset_for_timestamp(1015) == (32, 1020)
    assert log.offset_for_timestamp(1021) == (33, 1100)
    assert log.offset_for_timestamp(2920) == (89, 2920)
    assert log.offset_for_timestamp(2921) is None
    for target in range(0, 2921, 7):
        offset, found = log.offset_for_timestamp(target)
        assert found >= target
        assert found - target < 80


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path):
    log = open_log(tmp_path)
    append(log, batch(timestamps=[500, 100, 300]))
    append(log, batch(timestamps=[200, 600]))
    assert log.offset_for_timestamp(150) == (0, 500)
    assert log.offset_for_timestamp(550) == (4, 600)


def test_offset_for_timestamp_with_log_append_time(tmp_path):
    log = open_log(tmp_path)
    append(log, batch(3), log_append_time_ms=1000)
    append(log, batch(3), log_append_time_ms=2000)
    assert log.offset_for_timestamp(1500) == (3, 2000)
    assert log.offset_for_timestamp(0) == (0, 1000)


def test_offset_for_timestamp_survives_restart(tmp_path):
    config = LogConfig(segment_bytes=600, index_interval_bytes=50)
    log = open_log(tmp_path, config)
    for n in range(30):
        append(log, batch(timestamps=[100 * n, 100 * n + 10, 100 * n + 20]))
    log.close()
    log = open_log(tmp_path, config)
    assert log.offset_for_timestamp(1015) == (32, 1020)
    assert log.max_timestamp_offset() == (89, 2920)


def test_max_timestamp_offset(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=200))
    assert log.max_timestamp_offset() is None
    append(log, batch(timestamps=[10, 20]))
    append(log, batch(timestamps=[50, 40, 50]))  # offsets 2..4: first record with the max is 2
    append(log, batch(timestamps=[30]))
    assert len(log.segments) > 1
    assert log.max_timestamp_offset() == (2, 50)


def test_truncate_to(tmp_path):
    log = open_log(tmp_path, SMALL)
    ranges = fill(log, 40)
    cut = ranges[20][0]
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert all_offsets(log) == [first for first, _ in ranges[:20]]
    assert append(log, batch(1)).first_offset == cut
    # Truncating inside a batch removes that whole batch.
    log.truncate_to(ranges[10][0] + 1)
    assert log.log_end_offset == ranges[10][0]
    log.close()
    reopened = open_log(tmp_path, SMALL)
    assert all_offsets(reopened) == [first for first, _ in ranges[:10]]


def test_truncate_to_segment_boundary(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 30)
    boundary = log.segments[2].base_offset
    log.truncate_to(boundary)
    assert log.log_end_offset == boundary
    assert log.segments[-1].base_offset < boundary
    assert append(log, batch(1)).first_offset == boundary
    assert all_offsets(log)[-1] == boundary


def test_truncate_fully_and_start_at(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 30)
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert append(log, batch(1)).first_offset == 500
    with pytest.raises(KafkaError):
        log.read(10, 100, max_offset=501, min_one=True)
    log.close()
    assert open_log(tmp_path, SMALL).log_start_offset == 500


def test_log_start_offset_on_open(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 10)
    log.close()
    log = open_log(tmp_path, SMALL, log_start_offset=4)
    assert log.log_start_offset == 4
    with pytest.raises(KafkaError):
        log.read(3, 100, max_offset=30, min_one=True)
    assert read_batch_header(log.read_bytes(4, 1000)).base_offset == 3


def test_append_as_follower_keeps_offsets(tmp_path):
    log = open_log(tmp_path, SMALL)
    buf = bytearray()
    for base in (0, 2, 10):  # a gap, as after compaction
        b = batch(2)
        from klamm.protocol.batch import patch_offsets

        patch_offsets(b, read_batch_header(b), base, 3)
        buf += b
    log.append_as_follower(buf, split_batches(buf))
    assert log.log_end_offset == 12
    assert all_offsets(log) == [0, 2, 10]
    assert read_batch_header(log.read_bytes(5, 1000)).base_offset == 10
    assert log.leader_epoch_cache.latest_epoch == 3
    with pytest.raises(InvalidAppendOffset):
        log.append_as_follower(buf, split_batches(buf))


def test_leader_epoch_cache_follows_appends(tmp_path):
    log = open_log(tmp_path)
    append(log, batch(2), leader_epoch=1)
    append(log, batch(2), leader_epoch=1)
    append(log, batch(2), leader_epoch=3)
    assert log.leader_epoch_cache.end_offset_for(1) == (1, 4)
    assert log.leader_epoch_cache.end_offset_for(2) == (1, 4)
    assert log.leader_epoch_cache.end_offset_for(3) == (3, 6)
    log.truncate_to(4)
    assert log.leader_epoch_cache.latest_epoch == 1
    log.close()
    assert (tmp_path / "topic-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n1 0\n"


def test_retention_writes_no_epoch_checkpoint_and_a_reopened_log_agrees(tmp_path):
    """Deleting the oldest segments moves the epoch entries up to the new log start without writing the
    checkpoint (no fsync per retention step); a log reopened after a crash truncates the file's stale entries
    itself, and a closed log has them written."""
    log = open_log(tmp_path, SMALL)
    for epoch in (1, 2):
        for _ in range(10):
            append(log, batch(3, value_size=20), leader_epoch=epoch)
    log.flush()
    checkpoint = tmp_path / "topic-0" / "leader-epoch-checkpoint"
    written = checkpoint.read_text()
    assert written == "0\n2\n1 0\n2 30\n"
    removed = log.delete_oldest_segments(next(n for n, s in enumerate(log.segments) if s.base_offset > 30))
    start = log.log_start_offset
    assert start > 30 and removed
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(2, start)]
    assert checkpoint.read_text() == written
    for segment in removed:
        segment.delete()
    reopened = open_log(tmp_path, SMALL, clean_shutdown=False)  # as after a crash: `log` never closed
    assert reopened.log_start_offset == start
    assert reopened.leader_epoch_cache.entries == log.leader_epoch_cache.entries
    reopened.close()
    assert checkpoint.read_text() == f"0\n1\n2 {start}\n"
    log.close()


def test_close_is_idempotent(tmp_path):
    log = open_log(tmp_path)
    append(log, batch(1))
    log.close()
    log.close()


def test_delete(tmp_path):
    log = open_log(tmp_path, SMALL)
    fill(log, 5)
    log.delete()
    assert not (tmp_path / "topic-0").exists()


def test_truncating_at_the_end_drops_an_epoch_begun_without_records(tmp_path):
    # A replica that became leader (its epoch assigned at the log end) and appended nothing
    # before losing leadership must forget that epoch, or every fetch it sends as a follower
    # names it, and the new leader answers the same diverging epoch forever.
    log = open_log(tmp_path)
    fill(log, 3)
    end = log.log_end_offset
    log.leader_epoch_cache.assign(5, end)
    log.truncate_to(end)
    assert log.leader_epoch_cache.latest_epoch != 5
    assert log.log_end_offset == end


def _epochs_on_disk(log: Log) -> list[tuple[int, int]]:
    path = log.directory / "leader-epoch-checkpoint"
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()[2:]]


def test_an_assigned_epoch_is_written_by_the_flush_job_that_covers_it(tmp_path) -> None:
    """Assigning writes nothing (no fsync where an election or a follower's batch happens: the event loop);
    the flush job that moves the recovery point past the epoch's batches writes it, in its thread."""
    log = open_log(tmp_path, SMALL)
    append(log, batch(2), leader_epoch=3)
    assert log.leader_epoch_cache.latest_epoch == 3 and _epochs_on_disk(log) == []
    job = log.begin_flush()
    assert job is not None and job.epochs is not None
    assert _epochs_on_disk(log) == []
    job.run()
    assert _epochs_on_disk(log) == [(3, 0)]
    log.complete_flush(job)
    append(log, batch(2), leader_epoch=3)
    later = log.begin_flush()
    assert later is not None and later.epochs is None  # nothing new to write
    log.close()


def test_a_job_does_not_overwrite_a_later_write(tmp_path) -> None:
    log = open_log(tmp_path, SMALL)
    append(log, batch(2), leader_epoch=1)
    append(log, batch(2), leader_epoch=2)
    stale = log.begin_flush()
    assert stale is not None and stale.epochs is not None
    log.truncate_to(2)  # written at once: [(1, 0)]
    assert _epochs_on_disk(log) == [(1, 0)]
    stale.run()  # a job begun before, finishing after
    assert _epochs_on_disk(log) == [(1, 0)]
    log.close()


def test_a_crash_before_the_flush_rebuilds_the_epochs_from_the_batches(tmp_path) -> None:
    log = open_log(tmp_path, SMALL)
    fill_at = [append(log, batch(3), leader_epoch=1) for _ in range(5)]
    log.flush()
    recovery_point = log.recovery_point
    assert _epochs_on_disk(log) == [(1, 0)]
    second = append(log, batch(3), leader_epoch=4)
    append(log, batch(3), leader_epoch=4)
    assert _epochs_on_disk(log) == [(1, 0)] and fill_at
    reopened = open_log(tmp_path, SMALL, recovery_point=recovery_point, clean_shutdown=False)  # `log` never closed
    expected = [(1, 0), (4, second.first_offset)]
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == expected
    assert _epochs_on_disk(reopened) == expected  # recovery moved the recovery point past them: written
    reopened.close()
    log.close()


def test_a_log_stopped_for_deletion_gets_no_epoch_write(tmp_path) -> None:
    log = open_log(tmp_path, SMALL)
    append(log, batch(2), leader_epoch=2)
    job = log.begin_flush()
    assert job is not None
    log.stop_writes()  # about to be renamed: a new log may take its name
    job.run()
    assert _epochs_on_disk(log) == []
    log.delete()


def test_closing_writes_the_epochs(tmp_path) -> None:
    log = open_log(tmp_path)
    log.leader_epoch_cache.assign(7, 0)  # a leader that appended nothing yet
    log.close()
    assert _epochs_on_disk(log) == [(7, 0)]



def test_closing_writes_a_producer_snapshot_only_past_the_last_one(tmp_path) -> None:
    """As Kafka's takeSnapshot: an empty log gets none, and a log reopened and closed without appends keeps the
    snapshot it has (a restart without traffic rewrites nothing); an append makes the next close write one."""
    directory = tmp_path / "topic-0"
    log = open_log(tmp_path)
    log.close()
    assert not list(directory.glob("*.snapshot"))
    log = open_log(tmp_path)
    append(log, batch(2))
    log.close()
    snapshot = directory / "00000000000000000002.snapshot"
    written = snapshot.stat().st_mtime_ns
    os.utime(snapshot, ns=(written - 10**9, written - 10**9))  # a rewrite would show as a new mtime
    log = open_log(tmp_path)
    log.close()
    assert snapshot.stat().st_mtime_ns == written - 10**9
    log = open_log(tmp_path)
    append(log, batch(1))
    log.close()
    assert sorted(p.name for p in directory.glob("*.snapshot"))[-1] == "00000000000000000003.snapshot"
