"""Record-level produce validation (Kafka's LogValidator): recomputed max timestamps, timestamp bounds.

Batches "as librdkafka builds them" for records produced with timestamp -1: firstTimestamp
-1, every timestamp delta 0, maxTimestamp 0 (rd_kafka_msgset_writer starts its max at 0).
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.broker.partition import Partition
from klamm.broker.validation import RecordRules, validate_records
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.protocol.batch import ATTR_TIMESTAMP_TYPE, crc_ok, read_batch_header, split_batches
from klamm.protocol.compression import Compression, compress
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import (
    NewRecord,
    assemble_batch,
    build_batch,
    decode_batch,
    encode_record,
    keyed_timestamp_span,
    record_keys,
)
from klamm.storage.log import Log, LogConfig
from klamm.storage.retention import RetentionPolicy, enforce_retention

HOUR_MS = 3_600_000
LONG_MAX = 2**63 - 1


def librdkafka_batch(timestamps: list[int], codec: int = Compression.NONE) -> bytes:
    """A batch as rd_kafka_msgset_writer writes it: base = first timestamp, max starts at 0."""
    first = timestamps[0]
    body = b"".join(encode_record(i, t - first, f"k{i}".encode(), b"v" * 20, []) for i, t in enumerate(timestamps))
    return assemble_batch(base_offset=0, partition_leader_epoch=-1, attributes=codec,
                          last_offset_delta=len(timestamps) - 1, base_timestamp=first,
                          max_timestamp=max([0, *timestamps]), producer_id=-1, producer_epoch=-1,
                          base_sequence=-1, records_count=len(timestamps), body=compress(codec, body))


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def partition(tmp_path, overrides: dict[str, str] | None = None, *, broker: dict[str, str] | None = None,
              now: int | None = None) -> Partition:
    clock = Clock(now if now is not None else time.time_ns() // 1_000_000)
    config = TopicConfig.resolve(BrokerConfig.from_properties(broker or {}), overrides or {})
    log = Log.open(tmp_path / "t-0", LogConfig(), time_ms=clock)
    return Partition("t", 0, uuid.uuid4(), log, config, time_ms=clock)


def stored_headers(p: Partition):
    data = p.log.read_bytes(0, 1 << 20)
    return data, split_batches(data)


# -- max timestamp recomputed when the header cannot vouch for it ---------------------------------


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4, Compression.ZSTD])
def test_librdkafka_no_timestamp_batch_is_stored_with_max_timestamp_minus_one(tmp_path, codec):
    p = partition(tmp_path)
    p.append(librdkafka_batch([-1, -1, -1], codec))
    data, [header] = stored_headers(p)
    assert header.base_timestamp == -1 and header.max_timestamp == -1  # Kafka: NO_TIMESTAMP, not 0
    assert crc_ok(data, header)  # the CRC covers max_timestamp: recomputed
    assert [r.timestamp for r in decode_batch(data, check_crc=True)[1]] == [-1, -1, -1]
    assert p.log.active_segment.max_timestamp == -1


def test_first_timestamp_unknown_later_known_keeps_the_real_max(tmp_path):
    now = time.time_ns() // 1_000_000
    p = partition(tmp_path, now=now)
    p.append(librdkafka_batch([-1, now - 5000, now - 7000]))
    data, [header] = stored_headers(p)
    assert header.max_timestamp == now - 5000 and crc_ok(data, header)


def test_a_well_formed_header_is_trusted_and_left_byte_for_byte(tmp_path):
    now = time.time_ns() // 1_000_000
    p = partition(tmp_path, now=now)
    sent = build_batch([NewRecord(b"a", b"1", timestamp=now - 10), NewRecord(b"b", b"2", timestamp=now - 5)],
                       timestamp_ms=now)
    p.append(sent)
    data, [header] = stored_headers(p)
    assert data[21:] == sent[21:]  # offsets/epoch differ, nothing under the CRC does
    assert header.max_timestamp == now - 5


def test_no_timestamp_segments_survive_retention_and_age_by_file_mtime(tmp_path):
    """librdkafka's timestamp -1 batches: ~5 minutes after start-up the first retention pass deleted them
    as 56 years old (max timestamp 0). Now their segment has no timestamp and ages by its mtime."""
    p = partition(tmp_path)
    for _ in range(3):
        p.append(librdkafka_batch([-1, -1]))
        p.log.roll()
    policy = RetentionPolicy(retention_ms=7 * 24 * HOUR_MS, retention_bytes=-1, delete=True)
    in_five_minutes = time.time_ns() // 1_000_000 + 5 * 60_000
    assert enforce_retention(p.log, policy, now_ms=in_five_minutes, high_watermark=p.high_watermark) == []
    assert p.log.log_start_offset == 0 and p.log_end_offset == 6
    # the fallback is the file's age: a segment whose file is 8 days old goes
    old = p.log.segments[0]
    eight_days_ago = time.time() - 8 * 24 * 3600
    os.utime(old.log_path, (eight_days_ago, eight_days_ago))
    removed = enforce_retention(p.log, policy, now_ms=in_five_minutes, high_watermark=p.high_watermark)
    assert [s.base_offset for s in removed] == [0]
    for segment in removed:
        segment.delete()


# -- message.timestamp.after.max.ms / before.max.ms -----------------------------------------------


NOW = 1_800_000_000_000


def test_record_ten_years_in_the_future_is_invalid_timestamp(tmp_path):
    p = partition(tmp_path, now=NOW)
    future = NOW + 10 * 365 * 24 * HOUR_MS
    batch = build_batch([NewRecord(b"a", b"1", timestamp=NOW), NewRecord(b"b", b"2", timestamp=future)],
                        timestamp_ms=NOW)
    with pytest.raises(KafkaError) as error:
        p.append(batch)
    assert error.value.code == ErrorCode.invalid_timestamp
    assert error.value.message == "One or more records have been rejected due to invalid timestamp"
    assert error.value.record_errors == [
        (1, f"Timestamp {future} of message with offset 1 is out of range. "
            f"The timestamp should be within [{NOW - LONG_MAX}, {NOW + HOUR_MS}]")]
    assert p.log_end_offset == 0
    # exactly at the bound is fine (Kafka: diff > after.max.ms is refused)
    assert p.append(build_batch([(b"a", b"1")], timestamp_ms=NOW + HOUR_MS)).first_offset == 0


def test_before_max_ms_refuses_old_records_and_names_each(tmp_path):
    p = partition(tmp_path, {"message.timestamp.before.max.ms": "60000"}, now=NOW)
    # base timestamp is in range; the old records hide behind negative deltas
    batch = build_batch([NewRecord(b"a", b"1", timestamp=NOW), NewRecord(b"b", b"2", timestamp=NOW - 60_001),
                         NewRecord(b"c", b"3", timestamp=NOW - 60_000), NewRecord(b"d", b"4", timestamp=1)],
                        timestamp_ms=NOW)
    with pytest.raises(KafkaError) as error:
        p.append(batch)
    assert error.value.code == ErrorCode.invalid_timestamp
    assert [i for i, _ in error.value.record_errors] == [1, 3]
    assert error.value.record_errors[0][1].endswith(f"within [{NOW - 60_000}, {NOW + HOUR_MS}]")


def test_broker_level_setting_is_the_topic_default(tmp_path):
    p = partition(tmp_path, broker={"log.message.timestamp.after.max.ms": "1000"}, now=NOW)
    with pytest.raises(KafkaError) as error:
        p.append(build_batch([(b"a", b"1")], timestamp_ms=NOW + 1001))
    assert error.value.code == ErrorCode.invalid_timestamp
    relaxed = partition(tmp_path / "r", {"message.timestamp.after.max.ms": "5000"},
                        broker={"log.message.timestamp.after.max.ms": "1000"}, now=NOW)
    assert relaxed.append(build_batch([(b"a", b"1")], timestamp_ms=NOW + 1001)).first_offset == 0


def test_no_timestamp_records_are_never_out_of_range(tmp_path):
    p = partition(tmp_path, {"message.timestamp.before.max.ms": "0", "message.timestamp.after.max.ms": "0"},
                  now=NOW)
    assert p.append(librdkafka_batch([-1, -1])).last_offset == 1


def test_log_append_time_topic_ignores_the_bounds(tmp_path):
    p = partition(tmp_path, {"message.timestamp.type": "LogAppendTime"}, now=NOW)
    result = p.append(build_batch([(b"a", b"1")], timestamp_ms=NOW + 100 * HOUR_MS))
    assert result.log_append_time == NOW
    _, [header] = stored_headers(p)
    assert header.max_timestamp == NOW


def test_producer_may_not_set_log_append_time(tmp_path):
    raw = bytearray(build_batch([(b"a", b"1"), (b"b", b"22")], timestamp_ms=NOW))
    header = read_batch_header(raw)
    from klamm.protocol.batch import set_max_timestamp

    set_max_timestamp(raw, header, NOW, log_append_time=True)
    p = partition(tmp_path, {"message.timestamp.type": "LogAppendTime"}, now=NOW)
    with pytest.raises(KafkaError) as error:
        p.append(bytes(raw))
    assert error.value.code == ErrorCode.invalid_timestamp
    assert error.value.record_errors[1] == (
        1, f"Invalid timestamp type in message DefaultRecord(offset=1, timestamp={NOW}, key=1 bytes, "
           f"value=2 bytes). Producer should not set timestamp type to LogAppendTime.")
    # a CreateTime topic checks the (in range) timestamps and stores the batch as CreateTime
    create_time = partition(tmp_path / "c", now=NOW)
    create_time.append(bytes(raw))
    data, [stored] = stored_headers(create_time)
    assert not stored.attributes & ATTR_TIMESTAMP_TYPE and crc_ok(data, stored)


def test_compacted_topic_reports_key_and_timestamp_errors_together(tmp_path):
    p = partition(tmp_path, {"cleanup.policy": "compact"}, now=NOW)
    batch = build_batch([NewRecord(None, b"1", timestamp=NOW), NewRecord(b"b", b"2", timestamp=NOW + 2 * HOUR_MS)],
                        timestamp_ms=NOW)
    with pytest.raises(KafkaError) as error:
        p.append(batch)
    # Kafka: any timestamp error makes the whole answer INVALID_TIMESTAMP, listing every record error
    assert error.value.code == ErrorCode.invalid_timestamp
    assert [i for i, _ in error.value.record_errors] == [0, 1]
    assert error.value.record_errors[0][1] == "Compacted topic cannot accept message without key in topic partition t-0."


# -- the compacted topics' key scan agrees with the full decoder --------------------------------

_nullable = st.none() | st.binary(max_size=50)
_records = st.lists(st.builds(NewRecord, key=_nullable, value=_nullable,
                              headers=st.lists(st.tuples(st.text(max_size=8), _nullable), max_size=3),
                              timestamp=st.none() | st.integers(-1, 2**40)), min_size=1, max_size=20)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=3))
def test_key_scan_matches_decode_batch_and_refuses_what_it_refuses(records, flips):
    data = bytearray(build_batch(records, timestamp_ms=NOW))
    for position, xor in flips:  # corrupt the records section (after the 61-byte header)
        data[61 + position % max(len(data) - 61, 1)] ^= xor
    header = read_batch_header(data)
    try:
        decoded = [(r.offset, r.timestamp, r.key) for r in decode_batch(data)[1]]
    except KafkaError:
        decoded = None
    try:
        scanned = record_keys(data, header)
    except KafkaError:
        scanned = None
    assert scanned == decoded


def _span_expected(data: bytearray, header, scanned) -> tuple[int, int] | None:
    """What keyed_timestamp_span must say, from record_keys' answer (None: it refused the batch)."""
    if scanned is None or any(key is None for _, _, key in scanned):
        return None
    deltas = [timestamp - header.base_timestamp for _, timestamp, _ in scanned]
    return min(deltas), max(deltas)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=3))
def test_keyed_timestamp_span_agrees_with_the_key_scan(records, flips):
    data = bytearray(build_batch(records, timestamp_ms=NOW))
    for position, xor in flips:
        data[61 + position % max(len(data) - 61, 1)] ^= xor
    header = read_batch_header(data)
    if header.attributes & ATTR_TIMESTAMP_TYPE:
        return  # a producer's LogAppendTime batch is refused before any scan
    try:
        scanned = record_keys(data, header)
    except KafkaError:
        scanned = None
    assert keyed_timestamp_span(data, header) == _span_expected(data, header, scanned)


_wide_key = st.binary(max_size=3) | st.sampled_from([b"v" * 200, b"w" * 20_000])
_wide = st.none() | _wide_key


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(st.builds(NewRecord, key=_wide_key, value=_wide,
                                  headers=st.lists(st.tuples(st.text(max_size=3), _wide), max_size=2),
                                  timestamp=st.none() | st.integers(NOW - 10**7, NOW + 10**7)),
                        min_size=60, max_size=150),
       codec=st.sampled_from([Compression.NONE, Compression.LZ4]))
def test_keyed_timestamp_span_reads_wide_varints(records, codec):
    # offset deltas past 63, lengths of two and three bytes, timestamp deltas of several
    data = bytearray(build_batch(records, compression=codec, timestamp_ms=NOW))
    header = read_batch_header(data)
    assert keyed_timestamp_span(data, header) == _span_expected(data, header, record_keys(data, header))


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(keys=st.lists(st.sampled_from([None, b"k", b"key" * 50]), min_size=1, max_size=20),
       offsets=st.lists(st.integers(-3 * HOUR_MS, 3 * HOUR_MS) | st.just(None), min_size=20, max_size=20),
       before=st.sampled_from([HOUR_MS, LONG_MAX]), after=st.sampled_from([HOUR_MS, LONG_MAX]),
       log_append_time=st.booleans())
def test_compacted_validation_answers_as_each_record_is_checked(keys, offsets, before, after, log_append_time):
    # the batch is checked whole first; what it answers must be what checking each record answers
    timestamps = [-1 if offset is None else NOW + offset for offset in offsets[:len(keys)]]
    data = bytearray(build_batch([NewRecord(key, b"v", timestamp=ts) for key, ts in zip(keys, timestamps)],
                                 timestamp_ms=NOW))
    header = read_batch_header(data)
    rules = RecordRules("t-0", True, log_append_time, before, after)
    keyless = [i for i, key in enumerate(keys) if key is None]
    out_of_bounds = [i for i, ts in enumerate(timestamps) if keys[i] is not None and not log_append_time
                     and ts != -1 and (NOW - ts > before or ts - NOW > after)]
    if keyless or out_of_bounds:
        with pytest.raises(KafkaError) as error:
            validate_records(data, header, rules, NOW)
        assert [i for i, _ in error.value.record_errors] == sorted(keyless + out_of_bounds)
        assert error.value.code == (ErrorCode.invalid_timestamp if out_of_bounds else ErrorCode.invalid_record)
    else:
        assert validate_records(data, header, rules, NOW) == max([-1, *timestamps])
