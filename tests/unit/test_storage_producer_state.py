"""Idempotent producer state: duplicates, sequence and epoch checks, snapshots, rebuild after restart."""

from __future__ import annotations

import pytest
from test_storage_helpers import all_offsets, append, batch, open_log

from klamm.protocol.batch import split_batches
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.storage.log import LogConfig
from klamm.storage.producer_state import ProducerStateManager, snapshot_name

PID = 4242


def produce(log, records: int, sequence: int, epoch: int = 0, pid: int = PID, **kwargs):
    return append(log, batch(records, producer_id=pid, epoch=epoch, sequence=sequence), **kwargs)


def expect_error(code, log, records, sequence, epoch=0, pid=PID):
    end = log.log_end_offset
    with pytest.raises(KafkaError) as error:
        produce(log, records, sequence, epoch, pid)
    assert error.value.code == code
    assert log.log_end_offset == end  # nothing written


def test_in_sequence_batches_are_appended(tmp_path):
    log = open_log(tmp_path)
    assert produce(log, 3, 0).first_offset == 0
    assert produce(log, 2, 3).first_offset == 3
    entry = log.producer_state.last_entry(PID)
    assert (entry.epoch, entry.last_seq) == (0, 4)


def test_duplicate_returns_original_offsets(tmp_path):
    log = open_log(tmp_path)
    produce(log, 3, 0)
    append(log, batch(1))  # another, non-idempotent writer
    produce(log, 2, 3)
    duplicate = produce(log, 3, 0)
    assert duplicate.duplicate
    assert (duplicate.first_offset, duplicate.last_offset) == (0, 2)
    assert log.log_end_offset == 6
    assert all_offsets(log) == [0, 3, 4]


def test_duplicate_with_log_append_time_returns_the_original_time(tmp_path):
    log = open_log(tmp_path)
    produce(log, 1, 0, log_append_time_ms=777)
    duplicate = produce(log, 1, 0, log_append_time_ms=999)
    assert duplicate.duplicate and duplicate.log_append_time == 777


def test_only_the_last_five_batches_are_remembered(tmp_path):
    log = open_log(tmp_path)
    for sequence in range(6):
        produce(log, 1, sequence)
    assert produce(log, 1, 1).duplicate
    # Sequence 0 fell out of the cache: it is now just out of order.
    expect_error(ErrorCode.out_of_order_sequence_number, log, 1, 0)


def test_sequence_gap_is_out_of_order(tmp_path):
    log = open_log(tmp_path)
    produce(log, 2, 0)
    expect_error(ErrorCode.out_of_order_sequence_number, log, 1, 3)
    expect_error(ErrorCode.out_of_order_sequence_number, log, 1, 1)  # overlaps, not a cached range


def test_sequence_wraps_around_int32(tmp_path):
    log = open_log(tmp_path)
    produce(log, 1, 2**31 - 2)  # unknown producer: any first sequence
    produce(log, 1, 2**31 - 1)
    assert not produce(log, 1, 0).duplicate


def test_unknown_producer_may_start_at_any_sequence(tmp_path):
    # Kafka 3.x/4.x (KIP-360): no UNKNOWN_PRODUCER_ID for a producer without state.
    log = open_log(tmp_path)
    assert produce(log, 1, 17).first_offset == 0
    assert produce(log, 1, 18).first_offset == 1


def test_fenced_epoch_is_rejected(tmp_path):
    log = open_log(tmp_path)
    produce(log, 1, 0, epoch=3)
    expect_error(ErrorCode.invalid_producer_epoch, log, 1, 1, epoch=2)


def test_new_epoch_must_start_at_zero(tmp_path):
    log = open_log(tmp_path)
    produce(log, 2, 0, epoch=1)
    expect_error(ErrorCode.out_of_order_sequence_number, log, 1, 2, epoch=2)
    assert produce(log, 1, 0, epoch=2).first_offset == 2
    # The old epoch's batches are no longer duplicates: the old epoch is fenced.
    expect_error(ErrorCode.invalid_producer_epoch, log, 2, 0, epoch=1)


def test_producers_are_independent(tmp_path):
    log = open_log(tmp_path)
    produce(log, 1, 0, pid=1)
    produce(log, 1, 0, pid=2)
    assert produce(log, 1, 1, pid=1).first_offset == 2
    assert produce(log, 1, 0, pid=2).duplicate


def test_several_batches_in_one_request(tmp_path):
    log = open_log(tmp_path)
    buf = batch(2, producer_id=PID, epoch=0, sequence=0) + batch(1, producer_id=PID, epoch=0, sequence=2)
    result = log.append(buf, split_batches(buf), leader_epoch=0)
    assert (result.first_offset, result.last_offset) == (0, 2)
    assert log.producer_state.last_entry(PID).last_seq == 2
    bad = batch(1, producer_id=PID, epoch=0, sequence=3) + batch(1, producer_id=PID, epoch=0, sequence=5)
    with pytest.raises(KafkaError):
        log.append(bad, split_batches(bad), leader_epoch=0)
    assert log.log_end_offset == 3  # the whole request is rejected


def test_state_survives_clean_restart(tmp_path):
    log = open_log(tmp_path)
    produce(log, 3, 0)
    produce(log, 2, 3)
    log.close()
    assert (tmp_path / "topic-0" / snapshot_name(5)).exists()
    log = open_log(tmp_path)
    duplicate = produce(log, 2, 3)
    assert duplicate.duplicate and duplicate.first_offset == 3
    expect_error(ErrorCode.out_of_order_sequence_number, log, 1, 9)
    assert produce(log, 1, 5).first_offset == 5


def test_state_survives_unclean_restart_by_replaying_headers(tmp_path):
    config = LogConfig(segment_bytes=300)
    log = open_log(tmp_path, config)
    for sequence in range(0, 30, 2):
        produce(log, 2, sequence)
    assert len(log.segments) > 2
    log.flush()  # the flush job after a roll writes its snapshot
    recovery_point = log.recovery_point
    for segment in log.segments:
        segment.close()  # crash: no snapshot at the log end
    snapshots = ProducerStateManager(tmp_path / "topic-0").snapshot_offsets()
    assert snapshots and snapshots[-1] < 30  # only the roll-time snapshots exist
    log = open_log(tmp_path, config, clean_shutdown=False, recovery_point=recovery_point)
    assert produce(log, 2, 28).duplicate
    expect_error(ErrorCode.out_of_order_sequence_number, log, 1, 31)
    assert produce(log, 1, 30).first_offset == 30


def test_state_rebuilt_without_any_snapshot(tmp_path):
    log = open_log(tmp_path)
    produce(log, 1, 0, epoch=5)
    produce(log, 1, 1, epoch=5)
    log.close()
    for path in (tmp_path / "topic-0").glob("*.snapshot"):
        path.unlink()
    log = open_log(tmp_path, clean_shutdown=False)
    assert produce(log, 1, 1, epoch=5).duplicate
    expect_error(ErrorCode.invalid_producer_epoch, log, 1, 2, epoch=4)


def test_corrupt_snapshot_falls_back_to_replay(tmp_path):
    log = open_log(tmp_path)
    produce(log, 1, 0)
    log.close()
    (tmp_path / "topic-0" / snapshot_name(1)).write_bytes(b"\x00\x01garbage")
    log = open_log(tmp_path)
    assert produce(log, 1, 0).duplicate


def test_snapshot_after_log_end_is_ignored_after_truncation(tmp_path):
    log = open_log(tmp_path)
    produce(log, 2, 0)
    produce(log, 2, 2)
    log.truncate_to(2)
    assert log.producer_state.last_entry(PID).last_seq == 1
    assert produce(log, 2, 2).first_offset == 2
    log.close()
    log = open_log(tmp_path)
    assert log.producer_state.last_entry(PID).last_seq == 3


def test_truncation_reloads_state_from_an_older_snapshot(tmp_path):
    config = LogConfig(segment_bytes=250)
    log = open_log(tmp_path, config)
    for sequence in range(10):
        produce(log, 1, sequence)
    assert len(log.segments) > 2
    log.truncate_to(3)
    assert log.producer_state.last_entry(PID).last_seq == 2
    state = log.producer_state  # the rolls' snapshots are pending: no flush job ran
    assert max(state.snapshot_offsets() + state.pending_snapshot_offsets()) <= 3
    assert produce(log, 1, 3).first_offset == 3


def test_snapshot_round_trip(tmp_path):
    manager = ProducerStateManager(tmp_path)
    log = open_log(tmp_path)
    for sequence in range(7):
        produce(log, 1, sequence, pid=1)
    produce(log, 2, 0, pid=2, epoch=9)
    for header in split_batches(log.read_bytes(0, 1 << 20)):
        manager.apply(header)
    manager.take_snapshot()
    loaded = ProducerStateManager(tmp_path)
    assert loaded.load(0, 100) == manager.map_end_offset
    assert loaded.producers == manager.producers
    assert len(loaded.producers[1].batches) == 5


def test_non_idempotent_batches_skip_producer_checks(tmp_path):
    log = open_log(tmp_path)
    assert not append(log, batch(1)).duplicate
    assert not append(log, batch(1)).duplicate
    assert log.producer_state.producers == {}


# ----------------------------------------------------------- expiration ---
def _txn_batch(pid: int, sequence: int, timestamp: int) -> bytearray:
    from klamm.protocol.records import NewRecord, build_batch
    return bytearray(build_batch([NewRecord(None, b"v", timestamp=timestamp)], producer_id=pid, producer_epoch=0,
                                 base_sequence=sequence, transactional=True))


def _marker(pid: int, timestamp: int) -> bytearray:
    from klamm.protocol.records import ControlRecordType, build_control_batch
    return bytearray(build_control_batch(ControlRecordType.COMMIT, producer_id=pid, producer_epoch=0,
                                         coordinator_epoch=0, timestamp_ms=timestamp))


def test_idle_producers_expire_by_their_last_batch_timestamp(tmp_path):
    log = open_log(tmp_path)
    append(log, batch(1, producer_id=1, epoch=0, sequence=0, timestamp=1000))
    append(log, batch(1, producer_id=2, epoch=0, sequence=0, timestamp=5000))
    state = log.producer_state
    assert state.remove_expired_producers(now_ms=10_999, expiration_ms=10_000) == 0
    assert state.remove_expired_producers(now_ms=11_000, expiration_ms=10_000) == 1
    assert set(state.producers) == {2}
    # Before expiry a gap in producer 2's sequence is refused; producer 1 is forgotten, so (as in Kafka)
    # any sequence starts it again and a retry of its old batch is no longer recognised.
    expect_error(ErrorCode.out_of_order_sequence_number, log, 1, 5, pid=2)
    assert not produce(log, 1, 0, pid=1).duplicate
    assert produce(log, 1, 7, pid=3).first_offset == 3  # an unknown producer


def test_open_transaction_keeps_a_producer_and_its_marker_counts_as_activity(tmp_path):
    log = open_log(tmp_path)
    append(log, _txn_batch(7, 0, timestamp=1000))
    state = log.producer_state
    assert state.remove_expired_producers(now_ms=100_000, expiration_ms=10) == 0  # transaction still open
    append(log, _marker(7, timestamp=50_000))
    assert state.last_entry(7).last_timestamp == 50_000
    assert state.remove_expired_producers(now_ms=50_009, expiration_ms=10) == 0
    assert state.remove_expired_producers(now_ms=50_010, expiration_ms=10) == 1


def test_last_timestamp_survives_a_snapshot(tmp_path):
    log = open_log(tmp_path)
    append(log, _txn_batch(7, 0, timestamp=1000))
    append(log, _marker(7, timestamp=50_000))  # no sequence batch carries this time
    log.close()
    log = open_log(tmp_path)
    assert log.producer_state.last_entry(7).last_timestamp == 50_000
    assert log.producer_state.remove_expired_producers(now_ms=50_009, expiration_ms=10) == 0


def test_version_1_snapshots_are_still_read(tmp_path):
    import struct

    from crc32c import crc32c
    body = struct.pack(">i", 1) + struct.pack(">qhiqb", 9, 3, -1, -1, 1) + struct.pack(">iiqqq", 0, 4, 0, 4, 777)
    (tmp_path / snapshot_name(5)).write_bytes(struct.pack(">hI", 1, crc32c(body)) + body)
    manager = ProducerStateManager(tmp_path)
    assert manager.load(0, 5) == 5
    entry = manager.producers[9]
    assert (entry.epoch, entry.last_seq, entry.last_timestamp) == (3, 4, 777)
