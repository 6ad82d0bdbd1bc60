"""klamm.spark.record_columns: column-at-a-time decoding gives exactly what decode_batch gives, or rejects."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.protocol import records as records_module
from klamm.protocol.batch import (
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    BatchHeader,
    read_batch_header,
)
from klamm.protocol.compression import Compression
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import (
    ControlRecordType,
    NewRecord,
    _decode_records,
    build_batch,
    build_control_batch,
    decode_batch,
    encode_record,
)
from klamm.spark import record_columns
from klamm.spark.reading import Columns, arrow_schema
from klamm.spark.record_columns import batch_rows, decode_columns, records_section
from klamm.spark.segments import SegmentSlice, read_slice

MS_MIN, MS_MAX = -(2**63) // 1000 + 1, (2**63 - 1) // 1000
BASE_TS = 1_700_000_000_000

blobs = st.one_of(st.none(), st.just(b""), st.binary(max_size=40), st.binary(min_size=100, max_size=3000))
# bytes that start, continue or break UTF-8 sequences, for keys that are not UTF-8
UTF8_EDGES = [0x41, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEE, 0xEF, 0xF0,
              0xF1, 0xF3, 0xF4, 0xF5, 0xF7, 0xF8, 0xFF]
header_keys = st.one_of(st.text(max_size=8), st.just(""), st.binary(max_size=8),
                        st.lists(st.sampled_from(UTF8_EDGES), max_size=8).map(bytes))
header = st.tuples(header_keys, st.one_of(st.none(), st.just(b""), st.binary(max_size=20)))
headers = st.lists(header, max_size=3)
many_headers = st.lists(header, max_size=100)
timestamps = st.one_of(st.none(), st.integers(BASE_TS - 10**6, BASE_TS + 10**6),
                       st.integers(-(10**15), 10**15), st.integers(MS_MIN // 2, MS_MAX // 2))
records = st.lists(st.builds(NewRecord, blobs, blobs, headers | st.just(()), timestamps), min_size=1, max_size=200)
codecs = st.sampled_from(list(Compression))


def general_batch(buf: bytes, topic: str, partition: int, include_headers: bool) -> pa.RecordBatch:
    """The rows of a batch through decode_batch, a record at a time: what the columns must give."""
    header, decoded = decode_batch(buf, 0)
    columns = Columns(include_headers)
    for r in decoded:
        columns.add(r.key, r.value, r.offset, r.timestamp, 1 if header.attributes & ATTR_TIMESTAMP_TYPE else 0, r.headers)
    return columns.batch(topic, partition)


def expected(buf: bytes) -> tuple[list, list, list, list]:
    _, decoded = decode_batch(buf, 0)
    return ([r.offset for r in decoded], [r.timestamp for r in decoded], [r.key for r in decoded],
            [r.value for r in decoded])


def columns_of(buf: bytes) -> tuple[list, list, list, list]:
    header = read_batch_header(buf, 0)
    c = decode_columns(records_section(buf, header), header)
    return c.offsets.tolist(), c.timestamps.tolist(), c.keys.to_pylist(), c.values.to_pylist()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(records, codecs, st.integers(0, 2**40), st.booleans(), st.booleans())
def test_columns_are_what_decode_batch_gives(recs: list[NewRecord], codec: Compression, base_offset: int,
                                             log_append_time: bool, include_headers: bool) -> None:
    buf = build_batch(recs, base_offset=base_offset, compression=codec, timestamp_ms=BASE_TS,
                      log_append_time=log_append_time)
    assert columns_of(buf) == expected(buf)  # headers skipped, checked
    header = read_batch_header(buf, 0)
    with_headers = decode_columns(records_section(buf, header), header, include_headers=True)
    assert with_headers.headers.to_pylist() == [[{"key": k, "value": v} for k, v in r.headers]
                                                for r in decode_batch(buf, 0)[1]]
    rows = batch_rows(buf, "t", 3, include_headers)
    assert rows.schema == arrow_schema(include_headers)
    assert rows.equals(general_batch(buf, "t", 3, include_headers))  # the record-at-a-time path
    stamps = [r["timestamp"] for r in rows.select(["timestamp"]).cast(
        pa.schema([("timestamp", pa.int64())])).to_pylist()]
    assert stamps == [t * 1000 for t in expected(buf)[1]]
    assert rows.column("timestampType").to_pylist() == [int(log_append_time)] * len(recs)
    assert rows.column("topic").to_pylist() == ["t"] * len(recs)
    assert rows.column("partition").to_pylist() == [3] * len(recs)


def test_many_records_in_runs_of_one_size_need_no_record_by_record_walk(monkeypatch) -> None:
    def walk(*args):
        raise AssertionError("walked record by record")

    monkeypatch.setattr(record_columns, "_walk", walk)
    # offset deltas reach 64 and 8192 (a longer varint), timestamp deltas 64 ms, two value sizes, null keys
    recs = [NewRecord(None if 3000 <= i < 3100 else b"%08d" % i, b"v" * (100 if i < 5000 else 7),
                      timestamp=BASE_TS + i // 100) for i in range(20_000)]
    buf = build_batch(recs, base_offset=7, timestamp_ms=BASE_TS)
    assert columns_of(buf) == expected(buf)


def test_records_of_scattered_sizes_are_walked_after_a_few_guesses() -> None:
    rng = random.Random(9)
    recs = [NewRecord(rng.choice([None, b"", b"k" * rng.randrange(300)]),
                      rng.choice([None, b"", bytes(rng.randrange(256) for _ in range(rng.randrange(500)))]),
                      timestamp=BASE_TS + rng.randrange(-(10**9), 10**9)) for _ in range(3000)]
    buf = build_batch(recs, base_offset=2**33, compression=Compression.ZSTD, timestamp_ms=BASE_TS)
    assert columns_of(buf) == expected(buf)


def header_for(raw: bytes, count: int, base_timestamp: int = BASE_TS, attributes: int = 0) -> BatchHeader:
    return BatchHeader(0, 100, HEADER_SIZE - 12 + len(raw), -1, 2, 0, attributes, max(count - 1, 0),
                       base_timestamp, base_timestamp, -1, -1, -1, count)


def corrupt(raw: bytes, count: int, base_timestamp: int = BASE_TS) -> str:
    with pytest.raises(KafkaError) as info:
        decode_columns(raw, header_for(raw, count, base_timestamp))
    assert info.value.code == ErrorCode.corrupt_message
    return str(info.value)


def test_malformed_records_are_corrupt_messages() -> None:
    one = encode_record(0, 5, b"key", b"value", [])
    two = one + encode_record(1, 6, None, b"", [("h", None)])
    assert decode_columns(two, header_for(two, 2)).values.to_pylist() == [b"value", b""]
    corrupt(two, 3)  # fewer records than the count
    corrupt(two, 1)  # bytes after the last record
    corrupt(two[:-1], 2)
    corrupt(b"", 1)
    corrupt(b"\x00" + one[1:], 1)  # a record length of 0
    corrupt(b"\x03" + one[1:], 1)  # a record length of -2
    corrupt(b"\xff\xff\xff\xff\xff\x01" + one[1:], 1)  # a length varint of 6 bytes
    # a key length running past its record
    body = b"\x00\x0a\x00" + b"\x40" + b"key" + b"\x02v\x00"
    corrupt(bytes([len(body) << 1]) + body, 1)
    # a negative header count, a header key running past the record
    for tail in (b"\x01", b"\x02\x10ab\x00"):
        body = b"\x00\x0a\x00\x06key\x02v" + tail
        corrupt(bytes([len(body) << 1]) + body, 1)


def test_varints_of_every_length_and_the_64_bit_limit() -> None:
    for delta in (0, -1, 63, -64, 64, 8191, 8192, 2**20, -(2**35), 2**48, -(2**52)):
        raw = encode_record(delta & 0x7FFFFFFF, delta, b"k" * (abs(delta) % 300), None, [])
        c = decode_columns(raw, header_for(raw, 1))
        assert (c.timestamps.tolist(), c.offsets.tolist()) == ([BASE_TS + delta], [100 + (delta & 0x7FFFFFFF)])
    # a 10-byte varlong whose last byte carries more than the 64th bit: decode_batch reads it as a 70-bit number
    body = b"\x00" + b"\xff" * 9 + b"\x7f" + b"\x00\x01\x01\x00"
    raw = bytes([len(body) << 1]) + body
    assert "64 bits" in corrupt(raw, 1)
    body = b"\x00" + b"\xff" * 10 + b"\x01" + b"\x00\x01\x01\x00"  # 11 bytes
    assert "too long" in corrupt(bytes([len(body) << 1]) + body, 1)
    # deltas that fit in 64 bits, timestamps that do not fit Spark's microseconds
    raw = encode_record(0, 2**62, None, None, [])
    assert "out of range" in corrupt(raw, 1)
    raw = encode_record(0, -5, None, None, [])
    assert "out of range" in corrupt(raw, 1, base_timestamp=MS_MIN)
    assert decode_columns(raw, header_for(raw, 1, MS_MIN + 5)).timestamps.tolist() == [MS_MIN]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.builds(NewRecord, blobs, blobs, headers | st.just(()), timestamps), min_size=1, max_size=30),
       st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
       st.integers(-2, 2), st.integers(0, 3), st.sampled_from([1, 4, record_columns._HEADER_ROWS]))
def test_damaged_records_decode_as_decode_batch_decodes_them_or_are_rejected(
        recs: list[NewRecord], damage: list[tuple[int, int]], count_change: int, cut: int, header_rows: int) -> None:
    buf = build_batch(recs, timestamp_ms=BASE_TS)
    header = read_batch_header(buf, 0)
    raw = bytearray(buf[HEADER_SIZE:])
    for where, byte in damage:
        raw[where % len(raw)] = byte
    raw = bytes(raw[:len(raw) - cut])
    header.records_count = max(0, header.records_count + count_change)
    try:
        reference = _decode_records(raw, header)
    except (KafkaError, IndexError, ValueError):
        reference = None
    # headers read a header index at a time while `header_rows` records have more, then one record at a time
    saved, record_columns._HEADER_ROWS = record_columns._HEADER_ROWS, header_rows
    try:
        c = decode_columns(raw, header, include_headers=True)
    except KafkaError as exc:
        assert exc.code == ErrorCode.corrupt_message
        # rejected only what decode_batch rejects, or negative offsets, or timestamps Spark cannot hold
        assert reference is None or any(not MS_MIN <= r.timestamp <= MS_MAX or not 0 <= r.offset < 2**63
                                          for r in reference)
        return
    finally:
        record_columns._HEADER_ROWS = saved
    assert reference is not None
    assert c.offsets.tolist() == [r.offset for r in reference]
    assert c.timestamps.tolist() == [r.timestamp for r in reference]
    assert c.keys.to_pylist() == [r.key for r in reference]
    assert c.values.to_pylist() == [r.value for r in reference]
    assert c.header_counts.tolist() == [len(r.headers) for r in reference]
    assert c.headers.to_pylist() == [[{"key": k, "value": v} for k, v in r.headers] for r in reference]


@pytest.fixture
def no_record_by_record(monkeypatch):
    """Fails a test that decodes a batch with decode_batch, the record-by-record path."""
    def refuse(*args):
        raise AssertionError("decoded record by record")

    monkeypatch.setattr(records_module, "_decode_records", refuse)


def test_headers_are_read_a_header_index_at_a_time(no_record_by_record) -> None:
    recs = [NewRecord(b"k", b"v", [("trace", b"%d" % i), ("", None), ("\u00e9t\u00e9", b"")][:i % 4])
            for i in range(50)]
    buf = build_batch(recs, timestamp_ms=BASE_TS)
    rows = batch_rows(buf, "t", 0, True)
    assert rows.column("headers").to_pylist()[:4] == [
        [], [{"key": "trace", "value": b"1"}], [{"key": "trace", "value": b"2"}, {"key": "", "value": None}],
        [{"key": "trace", "value": b"3"}, {"key": "", "value": None}, {"key": "\u00e9t\u00e9", "value": b""}]]


def test_many_headers_and_keys_that_are_not_utf8_take_the_column_path(monkeypatch) -> None:
    # decode_batch gave the rows of these batches until now: 40 headers to a record, keys not UTF-8, both
    forty = [NewRecord(b"k%d" % i, b"v", [(f"h{j}", b"%d" % (i * j)) for j in range(40)]) for i in range(200)]
    not_utf8 = [NewRecord(b"k%d" % i, b"v", [(b"h\xff%d" % i, None), ("h", b"")]) for i in range(200)]
    both = [NewRecord(b"k%d" % i, b"v", [(b"h\xff%d" % j if j % 7 == 0 else f"h{j}", b"%d" % (i * j))
                                          for j in range(40)]) for i in range(200)]
    both[5] = NewRecord(None, b"v", [(b"\xed\xa0\x80", None)] * 100)  # one record with many more
    for recs in (forty, not_utf8, both):
        for codec in Compression:
            buf = build_batch(recs, timestamp_ms=BASE_TS, compression=codec)
            expected_rows = general_batch(buf, "t", 0, True)
            with monkeypatch.context() as m:
                m.setattr(records_module, "_decode_records", lambda *args: pytest.fail("decoded record by record"))
                rows = batch_rows(buf, "t", 0, True)
            assert rows.equals(expected_rows)
    headers = rows.column("headers").to_pylist()
    assert headers[1][:2] == [{"key": "h\ufffd0", "value": b"0"}, {"key": "h1", "value": b"1"}]
    assert headers[5] == [{"key": "\ufffd", "value": None}] * 100  # an encoded surrogate: one U+FFFD, as Java


def test_headers_of_the_few_records_that_have_many_are_walked_one_at_a_time(monkeypatch) -> None:
    passes = []
    real_pass = record_columns._header_pass
    monkeypatch.setattr(record_columns, "_header_pass", lambda *args: passes.append(len(args[4])) or real_pass(*args))
    recs = [NewRecord(b"k", b"v", [("h", b"%d" % j) for j in range(100 if i in (3, 700) else i % 3)])
            for i in range(1000)]
    buf = build_batch(recs, timestamp_ms=BASE_TS)
    assert batch_rows(buf, "t", 0, True).equals(general_batch(buf, "t", 0, True))
    assert passes == [667, 335]  # then the 98 headers left of records 3 and 700, one at a time
    passes.clear()
    buf = build_batch([NewRecord(b"k", b"v", [("h", b"%d" % j) for j in range(40)])] * 100, timestamp_ms=BASE_TS)
    assert batch_rows(buf, "t", 0, True).equals(general_batch(buf, "t", 0, True))
    assert passes == [100] * 40


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.builds(NewRecord, blobs, blobs, st.one_of(headers, many_headers), timestamps), min_size=1,
                max_size=80), codecs, st.booleans())
def test_batches_with_up_to_100_headers_a_record_give_what_decode_batch_gives(
        recs: list[NewRecord], codec: Compression, log_append_time: bool) -> None:
    buf = build_batch(recs, base_offset=11, compression=codec, timestamp_ms=BASE_TS, log_append_time=log_append_time)
    assert batch_rows(buf, "t", 0, True).equals(general_batch(buf, "t", 0, True))
    assert batch_rows(buf, "t", 0, False).equals(general_batch(buf, "t", 0, False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.one_of(st.tuples(st.lists(st.builds(NewRecord, blobs, blobs, st.one_of(headers, many_headers),
                                                       timestamps), min_size=1, max_size=20), codecs),
                          st.sampled_from([ControlRecordType.COMMIT, ControlRecordType.ABORT])), max_size=12))
def test_segments_of_data_and_control_batches_read_as_decode_batch_reads_them(parts: list) -> None:
    batches, offset = [], 0
    for part in parts:
        if isinstance(part, tuple):
            recs, codec = part
            batches.append(build_batch(recs, base_offset=offset, compression=codec, timestamp_ms=BASE_TS))
            offset += len(recs)
        else:
            batches.append(build_control_batch(part, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                               base_offset=offset, timestamp_ms=BASE_TS))
            offset += 1
    expected_rows = [general_batch(buf, "t", 2, True) for buf in batches if not read_batch_header(buf, 0).is_control]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "00000000000000000000.log"
        path.write_bytes(b"".join(batches))
        got = list(read_slice(SegmentSlice(str(path), "t", 2, 0, offset, path.stat().st_size, ()), True))
    schema = arrow_schema(True)
    assert pa.Table.from_batches(got, schema).equals(pa.Table.from_batches(expected_rows, schema))


def test_control_batches_decode_as_decode_batch_decodes_them() -> None:
    buf = build_control_batch(ControlRecordType.ABORT, producer_id=4, producer_epoch=1, coordinator_epoch=2,
                              base_offset=30, timestamp_ms=BASE_TS)
    assert batch_rows(buf, "t", 0, True).equals(general_batch(buf, "t", 0, True))


def test_null_keys_and_values_are_arrow_nulls_and_empty_ones_are_not() -> None:
    buf = build_batch([(None, b""), (b"", None), (b"k", b"v")], timestamp_ms=BASE_TS)
    rows = batch_rows(buf, "t", 0, False)
    assert rows.column("key").to_pylist() == [None, b"", b"k"]
    assert rows.column("value").to_pylist() == [b"", None, b"v"]
    assert rows.column("key").null_count == 1
    assert isinstance(rows.column("key"), pa.BinaryArray)
    assert np.asarray(rows.column("offset")).tolist() == [0, 1, 2]


def test_a_batch_left_empty_by_compaction_gives_no_rows() -> None:
    for include_headers in (False, True):
        c = decode_columns(b"", header_for(b"", 0), include_headers)
        assert len(c) == 0 and c.keys.to_pylist() == [] and (c.headers is not None) == include_headers
        rows = record_columns.record_batch(c, header_for(b"", 0), "t", 1)
        assert rows.num_rows == 0 and rows.schema == arrow_schema(include_headers)
    corrupt(b"\x00", 0)
