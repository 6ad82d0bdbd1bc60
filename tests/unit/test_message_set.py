"""Message sets (magic 0 and 1) up to v2 batches and back, with sets built by kafka-python's own builder."""

from __future__ import annotations

import gzip
import struct
import zlib

import pytest
from kafka.record import MemoryRecords
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.message_set import STEP_MESSAGES, converting, from_batches, to_batch
from klamm.protocol.records import build_batch, iter_records
from klamm.protocol.batch import split_batches

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3}
NOW = 1_700_000_000_000


def legacy_set(magic: int, codec: int, messages: list[tuple[int, bytes | None, bytes | None]]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
    for offset, (timestamp, key, value) in enumerate(messages):
        builder.append(offset, timestamp if magic else None, key, value)
    return bytes(builder.build())


MESSAGES = [(NOW + i, None if i % 3 == 0 else f"k{i}".encode(), None if i % 5 == 0 else f"v{i}".encode() * i)
            for i in range(12)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_a_produced_message_set_becomes_one_v2_batch(magic, codec):
    batch = to_batch(legacy_set(magic, CODECS[codec], MESSAGES), NOW)
    headers = split_batches(batch)
    assert len(headers) == 1 and headers[0].compression == CODECS[codec]
    records = list(iter_records(batch))
    assert [(r.key, r.value) for r in records] == [(k, v) for _, k, v in MESSAGES]
    assert [r.timestamp for r in records] == ([t for t, _, _ in MESSAGES] if magic else [-1] * len(MESSAGES))


@pytest.mark.parametrize("magic", [0, 1])
def test_batches_become_a_message_set_that_old_clients_read(magic):
    data = build_batch([(k, v) for _, k, v in MESSAGES[:5]], base_offset=40, timestamp_ms=NOW, compression=1)
    data += build_batch([(k, v) for _, k, v in MESSAGES[5:]], base_offset=45, timestamp_ms=NOW)
    data += build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], base_offset=52, control=True,
                        transactional=True, producer_id=7, producer_epoch=0)
    records = MemoryRecords(from_batches(data, magic))
    batches = []
    while (batch := records.next_batch()) is not None:
        assert batch.magic == magic
        batches.append(batch)
    read = [m for b in batches for m in b]
    assert [m.offset for m in read] == list(range(40, 52))  # the marker is left out
    assert [(m.key, m.value) for m in read] == [(k, v) for _, k, v in MESSAGES]
    assert all(b.validate_crc() for b in batches)
    if magic:
        assert {m.timestamp for m in read} == {NOW}


def test_a_bad_crc_or_a_cut_set_is_a_corrupt_message():
    good = legacy_set(1, 0, MESSAGES[:3])
    bad_crc = good[:12] + bytes([good[12] ^ 0xFF]) + good[13:]
    for broken in (bad_crc, good[:-3], good[:10]):
        with pytest.raises(KafkaError) as failed:
            to_batch(broken, NOW)
        assert failed.value.code == ErrorCode.corrupt_message
    with pytest.raises(KafkaError) as failed:
        to_batch(b"", NOW)
    assert failed.value.code == ErrorCode.invalid_record


def test_magic_0_lz4_with_the_old_header_checksum_is_accepted():
    """0.8/0.9 clients checksum the LZ4 frame's magic number too (KAFKA-3160)."""
    import lz4.frame
    import xxhash

    inner = legacy_set(0, 0, MESSAGES[:4])
    frame = lz4.frame.compress(inner, block_linked=False, store_size=False)
    broken = frame[:6] + xxhash.xxh32(frame[0:6]).digest()[-2:-1] + frame[7:]
    assert broken != frame
    wrapper = LegacyRecordBatchBuilder(0, 0, 1 << 20)
    wrapper.append(0, None, None, broken)
    raw = bytearray(wrapper.build())
    raw[17] = 3  # attributes: lz4 (the builder wrote an uncompressed message; its CRC covers the attributes)
    struct.pack_into(">I", raw, 12, zlib.crc32(bytes(raw[16:])))
    records = list(iter_records(to_batch(bytes(raw), NOW)))
    assert [(r.key, r.value) for r in records] == [(k, v) for _, k, v in MESSAGES[:4]]


def test_zstd_nested_compression_and_mixed_magic_are_refused():
    inner = legacy_set(1, 0, MESSAGES[:2])
    for codec, inner_set, error in ((4, inner, ErrorCode.unsupported_compression_type),
                                    (1, legacy_set(1, 1, MESSAGES[:2]), ErrorCode.corrupt_message),  # gzip in gzip
                                    (1, legacy_set(0, 0, MESSAGES[:2]), ErrorCode.corrupt_message)):  # magic 0 in 1
        wrapper = LegacyRecordBatchBuilder(1, 0, 1 << 20)
        wrapper.append(0, NOW, None, gzip.compress(inner_set) if codec == 1 else inner_set)
        raw = bytearray(wrapper.build())
        raw[17] = codec
        struct.pack_into(">I", raw, 12, zlib.crc32(bytes(raw[16:])))
        with pytest.raises(KafkaError) as failed:
            to_batch(bytes(raw), NOW)
        assert failed.value.code == error


def test_down_conversion_stops_at_the_bytes_read_however_far_batches_decompress():
    """KIP-283: a compressed batch of 2,000 zero-filled 1 KB records is ~10 KB on disk and 2 MB as a message
    set; a fetch answers whole messages up to the size it read, from the first record on."""
    records = [(None, bytes(1024))] * 2000
    data = build_batch(records, base_offset=100, timestamp_ms=NOW, compression=1)
    data += build_batch([(None, b"after")], base_offset=2100, timestamp_ms=NOW)
    whole = from_batches(data, 1)
    bounded = from_batches(data, 1, len(data))
    assert len(data) < 20_000 < 2_000_000 < len(whole)
    assert len(data) - 1100 < len(bounded) <= len(data)
    records, read = MemoryRecords(bounded), []
    while (batch := records.next_batch()) is not None:
        read += list(batch)
    assert len(read) >= 5 and [m.offset for m in read] == list(range(100, 100 + len(read)))
    assert whole.startswith(bounded)
    # the first message always goes, however small the budget
    assert [m.offset for m in MemoryRecords(from_batches(data, 0, 1)).next_batch()] == [100]


def test_down_conversion_decodes_no_record_past_the_bytes_read():
    """Records are decoded one at a time as they are converted: a batch whose count promises records it does
    not hold fails only a conversion that reaches past the last one."""
    data = bytearray(build_batch([(None, b"%d" % i) for i in range(10)], base_offset=50, timestamp_ms=NOW))
    struct.pack_into(">i", data, 57, 15)  # records count: five more than the batch holds
    with pytest.raises(KafkaError) as failed:
        from_batches(bytes(data), 1)
    assert failed.value.code == ErrorCode.corrupt_message
    records = MemoryRecords(from_batches(bytes(data), 1, 100))
    read = []
    while (batch := records.next_batch()) is not None:
        read += [m.offset for m in batch]
    assert read and read == list(range(50, 50 + len(read))) and len(read) < 10


def test_down_conversion_starts_at_the_fetch_offset_inside_a_batch():
    data = build_batch([(None, b"%d" % i) for i in range(10)], base_offset=50, timestamp_ms=NOW, compression=1)
    records = MemoryRecords(from_batches(data, 1, first_offset=57))
    read = []
    while (batch := records.next_batch()) is not None:
        read += [m.offset for m in batch]
    assert read == [57, 58, 59]


def test_records_skipped_before_the_fetch_offset_count_toward_a_step():
    """A fetch from deep inside a batch of thousands of records decodes those before its offset: the steps
    (between which the loop is handed on) count them, so no step decodes more than STEP_MESSAGES records."""
    count = 20 * STEP_MESSAGES
    data = build_batch([(None, b"%d" % i) for i in range(count)], base_offset=0, timestamp_ms=NOW)
    out = bytearray()
    steps = sum(1 for _ in converting(data, 1, out, first_offset=count - 3))
    assert steps == count // STEP_MESSAGES
    records = MemoryRecords(bytes(out))
    read = []
    while (batch := records.next_batch()) is not None:
        read += [m.offset for m in batch]
    assert read == [count - 3, count - 2, count - 1]


def test_timestamps_too_far_apart_for_one_batch_are_an_invalid_timestamp():
    """Found by the fuzzer (tests/fuzz/corpus/regression-message-set-timestamp-delta.bin): magic-1 timestamps
    whose difference no v2 timestamp delta (an int64) holds. The producer gets INVALID_TIMESTAMP, where the
    handler used to fail with a ValueError and close the connection."""
    message_set = legacy_set(1, 0, [(2**62, b"k", b"v"), (-2**63, b"k", b"v")])
    with pytest.raises(KafkaError) as refused:
        to_batch(message_set, NOW)
    assert refused.value.code == ErrorCode.invalid_timestamp
