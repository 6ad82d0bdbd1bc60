"""A v2 batch's records decoded a column at a time (numpy), straight into Arrow arrays.

decode_batch (klamm.protocol.records) walks the records one by one and makes a
Python object per record; the Spark readers only want columns. Here the only
per-record Python work is finding where each record starts, and usually not
even that: the records of a batch tend to have the same size for long runs, so
the start of every record is guessed from the size of one, the guess checked for
all records at once, and corrected at the first record where it was wrong (see
_record_starts). The fields after the length are then read for all records of
the batch at once; keys and values stay where they are in the decompressed
bytes until Arrow's `take` copies them into contiguous buffers.

The records layout is the one in klamm.protocol.records. Malformed records raise
what decode_batch raises, KafkaError(corrupt_message); varints that decode_batch
would read past 64 bits, or timestamps that do not fit Spark's microseconds, are
rejected too. Headers are read a header index at a time (the first header of
every record, then the second...) while many records have more of them, and
the last headers of the few records that have many are walked one at a time
(see _read_headers). Header keys become strings as Java's consumer makes them
(klamm.spark.header_keys), as decode_batch does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from klamm.protocol.batch import (
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    BatchHeader,
    InvalidBatch,
    read_batch_header,
)
from klamm.protocol.compression import Compression, decompress
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.spark.header_keys import java_strings
from klamm.spark.reading import HEADERS_TYPE, arrow_schema

_KNOWN_CODECS = frozenset(int(codec) for codec in Compression)
_PAD = 10  # the longest varint: every read starting inside the data stays inside data + padding
_VARINT_BYTES = 5
_VARLONG_BYTES = 10
_GUESSES = 8  # vectorised passes over a batch's lengths before the rest is walked record by record
_MIN_STEP = 32  # ... or as soon as a pass confirms fewer records than this
_HEADER_ROWS = 32  # headers are read a header index at a time while this many records have more
# Spark's timestamps are microseconds in an int64: the milliseconds that fit.
_MS_MIN, _MS_MAX = -(2**63) // 1000 + 1, (2**63 - 1) // 1000
_EMPTY_HEADERS = pa.array([], HEADERS_TYPE.value_type)


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


@dataclass(frozen=True)
class RecordColumns:
    """The records of one batch: offsets and timestamps (ms) as int64, keys and values as Arrow binary."""

    offsets: np.ndarray
    timestamps: np.ndarray
    keys: pa.Array
    values: pa.Array
    header_counts: np.ndarray
    headers: pa.Array | None = None  # list<struct<key, value>> when asked for

    def __len__(self) -> int:
        return len(self.offsets)


def _varints(data: np.ndarray, positions: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """The zigzag varints starting at `positions` (int64 values, byte counts). `data` ends with _PAD zero bytes,
    so no read leaves it; a varint longer than `max_bytes`, or past 64 bits, is corrupt."""
    values, sizes, bad = _guarded_varints(data, positions, max_bytes)
    if bad.any():
        raise _corrupt(_VARINT_ERRORS[int(bad[bad != 0][0])])
    return values, sizes


_VARINT_ERRORS = {1: "malformed record: varint too long", 2: "malformed record: varint past 64 bits"}


def _guarded_varints(data: np.ndarray, positions: np.ndarray,
                     max_bytes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """As _varints, with the varints that are not (1: too long, 2: past 64 bits) marked instead of rejected."""
    byte = data[positions]
    unsigned = (byte & 0x7F).astype(np.uint64)
    more = byte >= 0x80
    sizes = np.ones(len(positions), np.int64)
    bad = np.zeros(len(positions), np.int8)
    shift = 7
    for i in range(1, max_bytes):
        if not more.any():
            break
        byte = data[positions + i]
        part = (byte & 0x7F).astype(np.uint64)
        if i == 9:  # bits 63 and up: only bit 63 exists
            bad[more & (part > 1)] = 2
        unsigned |= np.where(more, part << np.uint64(shift), np.uint64(0))
        sizes += more
        more &= byte >= 0x80
        shift += 7
    bad[more] = 1
    values = (unsigned >> np.uint64(1)).view(np.int64) ^ -(unsigned & np.uint64(1)).view(np.int64)
    return values, sizes, bad


def _varint_at(data: bytes, position: int, max_bytes: int) -> tuple[int, int]:
    """One zigzag varint: (value, byte count); IndexError past the data, ValueError when too long."""
    unsigned = shift = 0
    for i in range(max_bytes):
        byte = data[position + i]
        unsigned |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (unsigned >> 1) ^ -(unsigned & 1), i + 1
        shift += 7
    raise ValueError("varint too long")


def _walk(data: bytes, position: int, count: int) -> tuple[list[int], list[int], list[int]]:
    """Record starts, lengths and length sizes of `count` records from `position`, one record at a time."""
    starts, lengths, sizes = [], [], []
    try:
        for _ in range(count):
            length, size = _varint_at(data, position, _VARINT_BYTES)
            if length <= 0:
                raise _corrupt(f"invalid record size {length}")
            starts.append(position)
            lengths.append(length)
            sizes.append(size)
            position += size + length
    except (IndexError, ValueError) as exc:
        raise _corrupt(f"malformed record: {exc}") from exc
    return starts, lengths, sizes


def _record_starts(raw: bytes, data: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each of the `count` records starts, its length and the size of its length varint.

    A record's start depends on every record before it. Guess: the records from
    the first unconfirmed one on are all as long as that one. Read the length
    varints at the guessed starts (all at once); the guess is right up to the
    first record whose guessed end is not the next guessed start, and that end
    is a confirmed start. A batch of equal records takes one pass; one whose
    record size changes a few times (offset deltas reaching 64, 8192: a longer
    varint) one pass per change. Records of scattered sizes are walked one at a
    time after a few passes.
    """
    size = len(raw)
    starts = np.zeros(count, np.int64)
    lengths = np.zeros(count, np.int64)
    sizes = np.zeros(count, np.int64)
    done, position, passes = 0, 0, 0
    while done < count:
        if position >= size:
            raise _corrupt("truncated record")
        if passes == _GUESSES:
            walked = _walk(raw, position, count - done)
            starts[done:], lengths[done:], sizes[done:] = walked
            break
        passes += 1
        try:
            length, varint_size = _varint_at(raw, position, _VARINT_BYTES)
        except (IndexError, ValueError) as exc:
            raise _corrupt(f"malformed record: {exc}") from exc
        if length <= 0:
            raise _corrupt(f"invalid record size {length}")
        guess = position + (length + varint_size) * np.arange(count - done, dtype=np.int64)
        np.minimum(guess, size - 1, out=guess)  # a wrong guess past the end still reads inside the data
        found, found_sizes, bad = _guarded_varints(data, guess, _VARINT_BYTES)
        ends = guess + found_sizes + found
        wrong = np.flatnonzero((bad[:-1] != 0) | (ends[:-1] != guess[1:]))
        confirmed = count - done if len(wrong) == 0 else int(wrong[0]) + 1
        if bad[confirmed - 1]:  # at a confirmed start
            raise _corrupt(_VARINT_ERRORS[int(bad[confirmed - 1])])
        part = slice(done, done + confirmed)
        starts[part], lengths[part], sizes[part] = guess[:confirmed], found[:confirmed], found_sizes[:confirmed]
        if (found[:confirmed] <= 0).any():
            bad = int(found[:confirmed][found[:confirmed] <= 0][0])
            raise _corrupt(f"invalid record size {bad}")
        done += confirmed
        position = int(ends[confirmed - 1])
        if confirmed < _MIN_STEP:
            passes = _GUESSES
    return starts, lengths, sizes


def _binary(raw_buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """Arrow binary of the byte ranges [start, start + length) of `raw_buffer` (length < 0: null), copied out.

    The ranges are in order and do not overlap, so the ranges and the gaps between
    them are one binary array over the buffer as it is; taking every other
    element of that copies the ranges out in C.
    """
    count = len(starts)
    nulls = lengths < 0
    ends = starts + np.where(nulls, 0, lengths)
    bounds = np.empty(2 * count + 1, np.int32)
    bounds[0] = 0
    bounds[1::2] = starts
    bounds[2::2] = ends
    validity = None
    if nulls.any():
        valid = np.ones(2 * count, np.bool_)
        valid[1::2] = ~nulls
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * count, [validity, pa.py_buffer(bounds), raw_buffer])
    return interleaved.take(pa.array(np.arange(1, 2 * count, 2, dtype=np.int32)))


def decode_columns(raw: bytes, header: BatchHeader, include_headers: bool = False) -> RecordColumns:
    """The records of one batch from its decompressed records section `raw`, with their headers if asked."""
    count = header.records_count
    size = len(raw)
    if count == 0:
        if size:
            raise _corrupt("batch has bytes after its last record")
        empty = np.zeros(0, np.int64)
        return RecordColumns(empty, empty, pa.array([], pa.binary()), pa.array([], pa.binary()), empty,
                             _header_lists(np.zeros(1, np.int32), _EMPTY_HEADERS) if include_headers else None)
    if size > 2**31 - 1:  # Arrow binary offsets are int32
        raise _corrupt(f"records section of {size} bytes")
    padded = raw + bytes(_PAD)
    data = np.frombuffer(padded, np.uint8)
    starts, lengths, length_sizes = _record_starts(raw, data, count)
    ends = starts + length_sizes + lengths
    if ends[-1] != size:
        raise _corrupt("batch has bytes after its last record" if ends[-1] < size else "truncated record")

    def field(positions: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray]:
        if (positions >= ends).any():
            raise _corrupt("malformed record: record size does not match its contents")
        return _varints(data, positions, max_bytes)

    position = starts + length_sizes + 1  # the attributes byte: unused
    timestamp_deltas, used = field(position, _VARLONG_BYTES)
    position += used
    offset_deltas, used = field(position, _VARINT_BYTES)
    position += used
    key_lengths, used = field(position, _VARINT_BYTES)
    key_starts = position + used
    position = key_starts + np.maximum(key_lengths, 0)
    value_lengths, used = field(position, _VARINT_BYTES)
    value_starts = position + used
    position = value_starts + np.maximum(value_lengths, 0)
    header_counts, used = field(position, _VARINT_BYTES)
    if (header_counts < 0).any():
        raise _corrupt(f"invalid record header count {int(header_counts[header_counts < 0][0])}")
    position += used
    first_header = np.zeros(count + 1, np.int64)
    np.cumsum(header_counts, out=first_header[1:])
    header_fields = None
    if first_header[-1]:
        position, header_fields = _read_headers(data, padded, position, ends, header_counts, first_header)
    if (position != ends).any():
        raise _corrupt("malformed record: record size does not match its contents")

    if header.attributes & ATTR_TIMESTAMP_TYPE:
        if not _MS_MIN <= header.max_timestamp <= _MS_MAX:
            raise _corrupt("batch timestamp out of range")
        timestamps = np.full(count, header.max_timestamp, np.int64)
    else:
        low, high = _MS_MIN - header.base_timestamp, _MS_MAX - header.base_timestamp
        if (timestamp_deltas < max(low, -(2**63))).any() or (timestamp_deltas > min(high, 2**63 - 1)).any():
            raise _corrupt("record timestamp out of range")
        timestamps = timestamp_deltas + np.int64(header.base_timestamp)
    if header.base_offset + int(offset_deltas.max()) >= 2**63 or header.base_offset + int(offset_deltas.min()) < 0:
        raise _corrupt("record offset out of range")
    offsets = offset_deltas + np.int64(header.base_offset)
    buffer = pa.py_buffer(raw)
    headers = None
    if include_headers:
        if header_fields is None:
            headers = _header_lists(first_header.astype(np.int32), _EMPTY_HEADERS)
        else:
            key_starts_h, key_lengths_h, value_starts_h, value_lengths_h = header_fields
            header_keys = java_strings(_binary(buffer, key_starts_h, key_lengths_h))
            entries = pa.StructArray.from_arrays([header_keys, _binary(buffer, value_starts_h, value_lengths_h)],
                                                 fields=list(HEADERS_TYPE.value_type))
            headers = _header_lists(first_header.astype(np.int32), entries)
    return RecordColumns(offsets, timestamps, _binary(buffer, key_starts, key_lengths),
                         _binary(buffer, value_starts, value_lengths), header_counts, headers)


def _header_lists(bounds: np.ndarray, entries: pa.Array) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(bounds, pa.int32()), entries, type=HEADERS_TYPE)


def _read_headers(data: np.ndarray, padded: bytes, position: np.ndarray, ends: np.ndarray, counts: np.ndarray,
                  first: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The positions after each record's headers (checked as decode_batch checks them), and where each
    header's key and value are (in record order: header j of record i is entry first[i] + j).

    Header j of every record that has one is read in one pass, j = 0, 1, ...; a pass
    costs about as much as a few headers read one at a time, so once fewer than
    _HEADER_ROWS records have headers left, these records' headers are walked one at a time.
    """
    if (2 * counts > ends - position).any():  # a header takes at least two bytes
        raise _corrupt("invalid record header count")
    position = position.copy()
    total = int(first[-1])
    fields = tuple(np.empty(total, np.int64) for _ in range(4))  # key starts and sizes, value starts and sizes
    rows = np.flatnonzero(counts)
    index = 0
    while len(rows) >= _HEADER_ROWS:
        _header_pass(data, position, ends, first[rows] + index, rows, fields)
        index += 1
        rows = rows[counts[rows] > index]
    for row in rows.tolist():
        entry = int(first[row]) + index
        position[row] = _walk_headers(padded, int(position[row]), int(ends[row]), entry,
                                      int(first[row + 1]) - entry, fields)
    return position, fields


def _header_pass(data: np.ndarray, position: np.ndarray, ends: np.ndarray, entry: np.ndarray, rows: np.ndarray,
                 fields: tuple[np.ndarray, ...]) -> None:
    """Reads the header at position[rows] of each of `rows` into fields[...][entry], moving position past it."""
    key_starts, key_sizes, value_starts, value_sizes = fields
    at = position[rows]
    limit = ends[rows]
    if (at >= limit).any():
        raise _corrupt("malformed record: record size does not match its contents")
    key_lengths, used = _varints(data, at, _VARINT_BYTES)
    at = at + used
    if (key_lengths < 0).any() or (at + key_lengths > limit).any():
        raise _corrupt("invalid record header key size")
    key_starts[entry], key_sizes[entry] = at, key_lengths
    at = at + key_lengths
    if (at >= limit).any():
        raise _corrupt("malformed record: record size does not match its contents")
    value_lengths, used = _varints(data, at, _VARINT_BYTES)
    value_starts[entry], value_sizes[entry] = at + used, value_lengths
    position[rows] = at + used + np.maximum(value_lengths, 0)


def _walk_headers(padded: bytes, position: int, limit: int, entry: int, count: int,
                  fields: tuple[np.ndarray, ...]) -> int:
    """_header_pass for `count` headers of one record, one header at a time; the position after them."""
    found: list[list[int]] = [[], [], [], []]
    try:
        for _ in range(count):
            if position >= limit:
                raise _corrupt("malformed record: record size does not match its contents")
            key_length, used = _varint_at(padded, position, _VARINT_BYTES)
            position += used
            if key_length < 0 or position + key_length > limit:
                raise _corrupt("invalid record header key size")
            found[0].append(position)
            found[1].append(key_length)
            position += key_length
            if position >= limit:
                raise _corrupt("malformed record: record size does not match its contents")
            value_length, used = _varint_at(padded, position, _VARINT_BYTES)
            found[2].append(position + used)
            found[3].append(value_length)
            position += used + max(value_length, 0)
    except ValueError as exc:
        raise _corrupt(f"malformed record: {exc}") from exc
    for column, values in zip(fields, found):
        column[entry:entry + count] = values
    return position


def records_section(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bytes:
    """The decompressed records of the batch `header` describes, `buf` holding the whole batch from its start."""
    if header.compression not in _KNOWN_CODECS:
        raise _corrupt(f"unknown compression codec {header.compression}")
    if len(buf) < header.size:
        raise _corrupt("truncated batch")
    return decompress(header.compression, memoryview(buf)[HEADER_SIZE:header.size])


def batch_rows(buf: bytes | bytearray | memoryview, topic: str, partition: int, include_headers: bool,
               header: BatchHeader | None = None) -> pa.RecordBatch:
    """The rows of the batch at the start of `buf` (arrow_schema(include_headers)), every record of it."""
    if header is None:
        try:
            header = read_batch_header(buf, 0)
        except InvalidBatch as exc:
            raise _corrupt(str(exc)) from exc
    columns = decode_columns(records_section(buf, header), header, include_headers)
    return record_batch(columns, header, topic, partition)


def record_batch(columns: RecordColumns, header: BatchHeader, topic: str, partition: int) -> pa.RecordBatch:
    """Arrow rows of decoded records, with a headers column if they were decoded with their headers."""
    count = len(columns)
    arrays = [columns.keys, columns.values, pa.repeat(pa.scalar(topic, pa.string()), count),
              pa.repeat(pa.scalar(partition, pa.int32()), count), pa.array(columns.offsets, pa.int64()),
              pa.array(columns.timestamps * 1000, pa.timestamp("us", tz="UTC")),
              pa.repeat(pa.scalar(1 if header.attributes & ATTR_TIMESTAMP_TYPE else 0, pa.int32()), count)]
    if columns.headers is not None:
        arrays.append(columns.headers)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(columns.headers is not None))
