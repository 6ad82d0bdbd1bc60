"""v2 record batches: round trips, CRC, recompression, control batches, client interop."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.protocol.batch import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    InvalidBatch,
    crc_ok,
    read_batch_header,
    split_batches,
)
from klamm.protocol.compression import Compression
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import (
    ControlRecordType,
    NewRecord,
    Record,
    build_batch,
    build_control_batch,
    decode_batch,
    decode_control_record,
    iter_records,
    record_timestamps,
    recompress_batch,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CODECS = list(Compression)
NOW = 1_700_000_000_000

nullable_bytes = st.none() | st.binary(max_size=300)
headers = st.lists(st.tuples(st.text(max_size=20), nullable_bytes), max_size=4)
timestamps = st.none() | st.integers(NOW - 10**9, NOW + 10**9) | st.integers(-1, 10)
new_records = st.lists(
    st.builds(NewRecord, key=nullable_bytes, value=nullable_bytes, headers=headers, timestamp=timestamps),
    min_size=1,
    max_size=20,
)


def _expected(records: list[NewRecord], base_offset: int, default_ts: int) -> list[Record]:
    return [
        Record(
            base_offset + i,
            default_ts if r.timestamp is None else r.timestamp,
            r.key,
            r.value,
            list(r.headers),
        )
        for i, r in enumerate(records)
    ]


def _text_records(count: int) -> list[NewRecord]:
    """Compressible records, so that clients that skip useless compression do compress."""
    return [
        NewRecord(f"key-{i}".encode(), b"value " * 40 + str(i).encode(), [("h", str(i).encode())], NOW + i)
        for i in range(count)
    ]


# ------------------------------------------------------------------ round trips


@SETTINGS
@given(
    records=new_records,
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    producer=st.tuples(st.integers(-1, 2**62), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)),
    leader_epoch=st.integers(-1, 2**31 - 1),
    transactional=st.booleans(),
)
def test_round_trip(
    records: list[NewRecord],
    codec: Compression,
    base_offset: int,
    producer: tuple[int, int, int],
    leader_epoch: int,
    transactional: bool,
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    buf = build_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        partition_leader_epoch=leader_epoch,
        timestamp_ms=NOW,
    )
    header, decoded = decode_batch(buf, check_crc=True)
    expected = _expected(records, base_offset, NOW)
    assert decoded == expected
    assert crc_ok(buf, header)
    assert header.size == len(buf)
    assert header.compression == codec
    assert header.base_offset == base_offset
    assert header.last_offset_delta == len(records) - 1
    assert header.records_count == len(records)
    assert header.partition_leader_epoch == leader_epoch
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.is_transactional == transactional
    assert not header.is_control
    assert header.base_timestamp == expected[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in expected)
    assert record_timestamps(buf, header) == [(r.offset, r.timestamp) for r in expected]


@SETTINGS
@given(batches=st.lists(st.tuples(new_records, st.sampled_from(CODECS)), min_size=1, max_size=4))
def test_iter_records_over_several_batches(batches: list[tuple[list[NewRecord], Compression]]) -> None:
    buf, expected, offset = b"", [], 0
    for records, codec in batches:
        buf += build_batch(records, base_offset=offset, compression=codec, timestamp_ms=NOW)
        expected += _expected(records, offset, NOW)
        offset += len(records)
    assert list(iter_records(buf)) == expected
    assert list(iter_records(memoryview(buf))) == expected
    assert list(iter_records(b"")) == []


def test_tuple_records_and_default_timestamp() -> None:
    buf = build_batch([(b"k", b"v"), (None, b"x"), (b"y", None)], timestamp_ms=NOW)
    _, records = decode_batch(buf)
    assert records == [
        Record(0, NOW, b"k", b"v", []),
        Record(1, NOW, None, b"x", []),
        Record(2, NOW, b"y", None, []),
    ]


def test_timestamp_defaults_to_now() -> None:
    import time

    before = time.time_ns() // 1_000_000
    header, (record,) = decode_batch(build_batch([(b"k", b"v")]))
    assert before <= record.timestamp <= time.time_ns() // 1_000_000
    assert header.max_timestamp == record.timestamp


def test_decode_at_position() -> None:
    first = build_batch([(b"a", b"1")], timestamp_ms=NOW)
    second = build_batch([(b"b", b"2"), (b"c", b"3")], base_offset=1, compression=Compression.ZSTD, timestamp_ms=NOW)
    buf = bytearray(first + second)
    header, records = decode_batch(buf, len(first))
    assert header.position == len(first)
    assert [r.key for r in records] == [b"b", b"c"]
    assert [r.offset for r in records] == [1, 2]


def test_large_fields_use_multibyte_varints() -> None:
    key, value = b"k" * 200, b"v" * 70_000
    records = [
        NewRecord(key, value, [("x" * 300, b"y" * 20_000)], NOW),
        NewRecord(None, None, [], NOW - 2**40),  # large negative timestamp delta
        NewRecord(b"", b"", [("", b"")], NOW + 2**40),
    ]
    for codec in CODECS:
        buf = build_batch(records, timestamp_ms=NOW, compression=codec)
        assert decode_batch(buf, check_crc=True)[1] == _expected(records, 0, NOW)


def test_empty_batch_is_rejected() -> None:
    with pytest.raises(ValueError):
        build_batch([])


def test_header_keys_decode_like_java() -> None:
    # Java builds header keys with new String(bytes, UTF_8): invalid bytes become U+FFFD.
    buf = build_batch([NewRecord(b"k", b"v", [(b"\xff", b"1"), ("é", None)], NOW)])  # type: ignore[list-item]
    _, (record,) = decode_batch(buf)
    assert record.headers == [("\ufffd", b"1"), ("é", None)]


# ------------------------------------------------------------------ LogAppendTime


@SETTINGS
@given(records=new_records, codec=st.sampled_from(CODECS))
def test_log_append_time(records: list[NewRecord], codec: Compression) -> None:
    buf = build_batch(records, compression=codec, timestamp_ms=NOW, log_append_time=True, base_offset=7)
    header, decoded = decode_batch(buf, check_crc=True)
    assert header.attributes & ATTR_TIMESTAMP_TYPE
    assert header.max_timestamp == NOW
    assert [r.timestamp for r in decoded] == [NOW] * len(records)
    assert record_timestamps(buf, header) == [(7 + i, NOW) for i in range(len(records))]


def test_log_append_time_set_by_batch_module() -> None:
    from klamm.protocol.batch import set_log_append_time

    records = [NewRecord(b"a", b"1", timestamp=NOW - 5), NewRecord(b"b", b"2", timestamp=NOW - 3)]
    buf = bytearray(build_batch(records, compression=Compression.LZ4, timestamp_ms=NOW))
    header = read_batch_header(buf)
    set_log_append_time(buf, header, NOW + 100)
    header, decoded = decode_batch(buf, check_crc=True)
    assert [r.timestamp for r in decoded] == [NOW + 100, NOW + 100]
    assert record_timestamps(buf, header) == [(0, NOW + 100), (1, NOW + 100)]


# ------------------------------------------------------------------ recompression


@SETTINGS
@given(
    records=new_records,
    source=st.sampled_from(CODECS),
    target=st.sampled_from(CODECS),
    log_append_time=st.booleans(),
)
def test_recompress(records: list[NewRecord], source: Compression, target: Compression, log_append_time: bool) -> None:
    buf = build_batch(
        records,
        base_offset=1000,
        compression=source,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        transactional=True,
        partition_leader_epoch=9,
        timestamp_ms=NOW,
        log_append_time=log_append_time,
    )
    before, before_records = decode_batch(buf)
    out = recompress_batch(buf, before, target)
    after, after_records = decode_batch(out, check_crc=True)
    assert after_records == before_records
    assert after.compression == target
    assert after.attributes & ~0x07 == before.attributes & ~0x07
    for name in (
        "base_offset",
        "partition_leader_epoch",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
    ):
        assert getattr(after, name) == getattr(before, name), name
    if source == target == Compression.NONE:
        assert out == buf


def test_recompress_batch_inside_a_larger_buffer() -> None:
    first = build_batch([(b"a", b"1")], timestamp_ms=NOW)
    second = build_batch(_text_records(5), base_offset=1, compression=Compression.GZIP, timestamp_ms=NOW)
    buf = first + second
    header = split_batches(buf)[1]
    out = recompress_batch(buf, header, Compression.SNAPPY)
    assert decode_batch(out, check_crc=True)[1] == decode_batch(second)[1]


def test_recompress_to_unknown_codec() -> None:
    buf = build_batch([(b"a", b"1")], timestamp_ms=NOW)
    with pytest.raises(KafkaError) as info:
        recompress_batch(buf, read_batch_header(buf), 5)
    assert info.value.code == ErrorCode.unsupported_compression_type


# ------------------------------------------------------------------ control batches


@pytest.mark.parametrize("control_type", list(ControlRecordType))
def test_control_batch(control_type: ControlRecordType) -> None:
    buf = build_control_batch(
        control_type, producer_id=77, producer_epoch=4, coordinator_epoch=12, base_offset=50, timestamp_ms=NOW
    )
    header, (record,) = decode_batch(buf, check_crc=True)
    assert header.attributes == ATTR_CONTROL | ATTR_TRANSACTIONAL
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 4, -1)
    assert record.offset == 50 and record.timestamp == NOW
    assert record.key == struct.pack(">hh", 0, control_type)
    assert record.value == struct.pack(">hi", 0, 12)
    assert decode_control_record(record) == (control_type, 12)


def test_decode_control_record_rejects_garbage() -> None:
    for key, value in ((None, None), (b"\x00", b""), (b"\x00\x00\x00\x07", b"\x00" * 6), (b"\x00\x00\x00\x01", b"\x00")):
        with pytest.raises(KafkaError) as info:
            decode_control_record(Record(0, 0, key, value, []))
        assert info.value.code == ErrorCode.corrupt_message


def test_control_batch_read_by_kafka_python() -> None:
    from kafka.record.default_records import DefaultRecordBatch

    buf = build_control_batch(ControlRecordType.COMMIT, producer_id=5, producer_epoch=1, coordinator_epoch=3)
    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    assert batch.is_control_batch and batch.is_transactional
    (record,) = list(batch)
    assert record.commit and not record.abort


# ------------------------------------------------------------------ interop: kafka-python


def _kafka_python_records(buf: bytes) -> tuple[object, list[tuple]]:
    from kafka.record.default_records import DefaultRecordBatch

    batch = DefaultRecordBatch(bytearray(buf))
    assert batch.validate_crc()
    return batch, [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


@SETTINGS
@given(records=new_records, codec=st.sampled_from(CODECS), log_append_time=st.booleans())
def test_kafka_python_reads_our_batches(records: list[NewRecord], codec: Compression, log_append_time: bool) -> None:
    buf = build_batch(
        records,
        base_offset=100,
        compression=codec,
        producer_id=9,
        producer_epoch=1,
        base_sequence=0,
        timestamp_ms=NOW,
        log_append_time=log_append_time,
    )
    batch, got = _kafka_python_records(buf)
    assert batch.compression_type == codec
    assert batch.base_offset == 100 and batch.producer_id == 9
    ts = [NOW] * len(records) if log_append_time else None
    expected = _expected(records, 100, NOW)
    assert got == [
        (r.offset, ts[i] if ts else r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(expected)
    ]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("transactional", [False, True])
def test_we_read_kafka_python_batches(codec: Compression, transactional: bool) -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=11,
        producer_epoch=2,
        base_sequence=5,
        batch_size=1 << 20,
    )
    records = _text_records(50) + [NewRecord(None, None, [("n", None)], NOW - 1)]
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    buf = bytes(builder.build())
    header, decoded = decode_batch(buf, check_crc=True)
    assert header.compression == codec  # the data is compressible: the builder kept the codec
    assert header.is_transactional == transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (11, 2, 5)
    assert decoded == _expected(records, 0, NOW)
    assert record_timestamps(buf, header) == [(r.offset, r.timestamp) for r in decoded]


def test_uncompressed_bytes_identical_to_kafka_python() -> None:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    records = _text_records(3) + [NewRecord(None, b"", [("a", None), ("b", b"")], NOW - 1000)]
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    # kafka-python writes leader epoch 0 where a fresh producer batch would carry it.
    assert build_batch(records, partition_leader_epoch=0) == bytes(builder.build())


# ------------------------------------------------------------------ interop: aiokafka


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_round_trip(codec: Compression) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

    records = _text_records(20)
    buf = build_batch(records, compression=codec, base_offset=3, timestamp_ms=NOW)
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in _expected(records, 3, NOW)
    ]

    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 20)
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    theirs = bytes(builder.build())
    header, decoded = decode_batch(theirs, check_crc=True)
    assert header.compression == codec
    assert decoded == _expected(records, 0, NOW)


# ------------------------------------------------------------------ malformed input


def _only_kafka_errors(func, *args) -> None:
    try:
        func(*args)
    except KafkaError as exc:
        assert exc.code == ErrorCode.corrupt_message


@SETTINGS
@given(data=st.binary(max_size=200))
def test_garbage_raises_kafka_error(data: bytes) -> None:
    _only_kafka_errors(decode_batch, data)
    _only_kafka_errors(lambda b: list(iter_records(b)), data)


@pytest.mark.parametrize("codec", CODECS)
def test_every_truncation_raises(codec: Compression) -> None:
    buf = build_batch(_text_records(4), compression=codec, timestamp_ms=NOW)
    for cut in range(len(buf)):
        with pytest.raises(KafkaError) as info:
            decode_batch(buf[:cut])
        assert info.value.code == ErrorCode.corrupt_message
        if cut:
            with pytest.raises(KafkaError):
                list(iter_records(buf[:cut]))


@SETTINGS
@given(codec=st.sampled_from(CODECS), data=st.data())
def test_mutations_raise_only_kafka_errors(codec: Compression, data: st.DataObject) -> None:
    records = data.draw(new_records)
    buf = bytearray(build_batch(records, compression=codec, timestamp_ms=NOW))
    for _ in range(data.draw(st.integers(1, 4))):
        # Mostly hit the records section; sometimes the header.
        position = data.draw(st.integers(0, len(buf) - 1))
        buf[position] = data.draw(st.integers(0, 255))
    _only_kafka_errors(decode_batch, buf)
    _only_kafka_errors(lambda b: list(iter_records(b)), buf)
    try:
        header = read_batch_header(buf)
    except InvalidBatch:
        return
    _only_kafka_errors(record_timestamps, buf, header)
    for target in (Compression.NONE, Compression.ZSTD):
        _only_kafka_errors(recompress_batch, buf, header, target)


def test_crc_mismatch_detected_when_asked() -> None:
    buf = bytearray(build_batch([(b"k", b"v")], timestamp_ms=NOW))
    buf[-2] ^= 0xFF  # the value byte: the structure stays fine
    decode_batch(buf)
    with pytest.raises(KafkaError) as info:
        decode_batch(buf, check_crc=True)
    assert info.value.code == ErrorCode.corrupt_message


def _patched_records_count(buf: bytes, count: int) -> bytes:
    out = bytearray(buf)
    struct.pack_into(">i", out, 57, count)
    return bytes(out)


@pytest.mark.parametrize("delta", [-1, 1])
def test_records_count_must_match(delta: int) -> None:
    buf = build_batch([(b"a", b"1"), (b"b", b"2")], timestamp_ms=NOW)
    with pytest.raises(KafkaError):
        decode_batch(_patched_records_count(buf, 2 + delta))
    header = read_batch_header(_patched_records_count(buf, 2 + delta))
    with pytest.raises(KafkaError):
        record_timestamps(_patched_records_count(buf, 2 + delta), header)


def test_negative_header_count_and_key_size() -> None:
    def batch_with_record(record_body: bytes) -> bytes:
        good = build_batch([(b"k", b"v")], timestamp_ms=NOW)
        body = bytes([len(record_body) * 2]) + record_body  # zigzag varint length (< 64)
        out = bytearray(good[:61] + body)
        struct.pack_into(">i", out, 8, len(out) - 12)
        return bytes(out)

    valid = b"\x00\x00\x00" + b"\x02k" + b"\x02v" + b"\x00"
    assert decode_batch(batch_with_record(valid))[1] == [Record(0, NOW, b"k", b"v", [])]
    with pytest.raises(KafkaError):
        decode_batch(batch_with_record(valid[:-1] + b"\x01"))  # header count -1
    with pytest.raises(KafkaError):
        decode_batch(batch_with_record(valid[:-1] + b"\x02\x01\x00"))  # header key size -1
    with pytest.raises(KafkaError):
        decode_batch(batch_with_record(valid + b"\x00"))  # trailing byte inside the record


def test_an_unknown_codec_in_a_batch_is_a_corrupt_batch() -> None:
    # Attribute bits 0-2 hold the codec; 5-7 name none. Found by the mutation test above, which
    # once flipped them to 5 and got UNSUPPORTED_COMPRESSION_TYPE from deep in decompression.
    buf = bytearray(build_batch(_text_records(2), timestamp_ms=NOW))
    assert read_batch_header(buf).compression == 0
    for codec in (5, 6, 7):
        buf[22] = (buf[22] & ~7) | codec  # the low byte of the int16 attributes at offset 21
        assert read_batch_header(buf).compression == codec
        with pytest.raises(KafkaError) as info:
            decode_batch(buf)
        assert info.value.code == ErrorCode.corrupt_message
