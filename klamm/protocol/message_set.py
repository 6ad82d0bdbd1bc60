"""Message sets, the record formats before v2 (magic 0 and 1), for clients of Produce v0-2 and Fetch v0-3.

The log holds v2 batches only (as Kafka's does since 3.0): a produced message
set is converted up to one v2 batch, and fetched batches are converted down to
an uncompressed message set of the magic the fetch version reads.

One message (big endian):

    offset       int64   (in a produced set: anything; in a fetched one: the record's offset)
    size         int32   bytes after this field
    crc          uint32  CRC-32 (IEEE) of everything after it
    magic        int8    0 or 1
    attributes   int8    bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4); bit 3 LogAppendTime (magic 1)
    timestamp    int64   magic 1 only
    key          int32 length (-1 null), bytes
    value        int32 length (-1 null), bytes

A compressed message's value is a compressed message set (its "inner" messages).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

from klamm.protocol.batch import ATTR_CONTROL, ATTR_TIMESTAMP_TYPE, InvalidBatch, split_batches
from klamm.protocol.compression import Compression, decompress
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import NewRecord, batch_records, build_batch

NO_TIMESTAMP = -1
STEP_MESSAGES = 64  # records decoded between two steps of `converting`: a few hundred microseconds
_OFFSET_SIZE = struct.Struct(">qi")
_CRC_MAGIC_ATTRIBUTES = struct.Struct(">IbB")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_LZ4 = 3
_MAX_NESTING = 1  # a compressed message holds plain messages only


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _read_bytes(buf: bytes, position: int, end: int) -> tuple[bytes | None, int]:
    (length,) = _I32.unpack_from(buf, position)
    position += 4
    if length < 0:
        return None, position
    if position + length > end:
        raise _corrupt("a key or value runs past its message")
    return buf[position:position + length], position + length


_XXH_PRIME1, _XXH_PRIME2, _XXH_PRIME3, _XXH_PRIME4, _XXH_PRIME5 = (
    2654435761, 2246822519, 3266489917, 668265263, 374761393)
_MASK32 = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK32


def _xxh32_short(data: bytes) -> int:
    """XXH32 (seed 0) of fewer than 16 bytes: an LZ4 frame descriptor."""
    h = (_XXH_PRIME5 + len(data)) & _MASK32
    position = 0
    while position + 4 <= len(data):
        (word,) = struct.unpack_from("<I", data, position)
        h = (_rotl((h + word * _XXH_PRIME3) & _MASK32, 17) * _XXH_PRIME4) & _MASK32
        position += 4
    for byte in data[position:]:
        h = (_rotl((h + byte * _XXH_PRIME5) & _MASK32, 11) * _XXH_PRIME1) & _MASK32
    h = ((h ^ (h >> 15)) * _XXH_PRIME2) & _MASK32
    h = ((h ^ (h >> 13)) * _XXH_PRIME3) & _MASK32
    return h ^ (h >> 16)


def _lz4_fix_header_checksum(frame: bytes) -> bytes:
    """Magic-0 LZ4 frames of old Kafka clients checksum the magic number too (KAFKA-3160): recompute it."""
    if len(frame) < 7:
        return frame
    descriptor_end = 6 + (8 if frame[4] & 0x08 else 0)  # FLG, BD, and the content size when flagged
    if len(frame) <= descriptor_end:
        return frame
    checksum = (_xxh32_short(frame[4:descriptor_end]) >> 8) & 0xFF
    return frame[:descriptor_end] + bytes([checksum]) + frame[descriptor_end + 1:]


def _messages(buf: bytes, depth: int = 0,
              limit: int | None = None) -> Iterator[tuple[int, int, int, bytes | None, bytes | None]]:
    """(magic, attributes, timestamp, key, value) of each message, compressed ones opened."""
    position = 0
    while position < len(buf):
        if position + 12 > len(buf):
            raise _corrupt("a message set ends inside a message header")
        _, size = _OFFSET_SIZE.unpack_from(buf, position)
        start, end = position + 12, position + 12 + size
        if size < 14 or end > len(buf):
            raise _corrupt(f"a message of {size} bytes does not fit its message set")
        crc, magic, attributes = _CRC_MAGIC_ATTRIBUTES.unpack_from(buf, start)
        if zlib.crc32(memoryview(buf)[start + 4:end]) != crc:
            raise _corrupt("message CRC mismatch")
        if magic not in (0, 1):
            raise _corrupt(f"magic {magic} in a message set")
        body = start + 6
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _I64.unpack_from(buf, body)
            body += 8
        key, body = _read_bytes(buf, body, end)
        value, body = _read_bytes(buf, body, end)
        codec = attributes & _CODEC_MASK
        if codec == 0:
            yield magic, attributes, timestamp, key, value
        else:
            if codec == Compression.ZSTD:
                raise KafkaError(ErrorCode.unsupported_compression_type, "zstd needs record batches (magic 2)")
            if depth >= _MAX_NESTING or value is None or codec not in (Compression.GZIP, Compression.SNAPPY, _LZ4):
                raise _corrupt(f"a compressed message (codec {codec}) that cannot be opened")
            if codec == _LZ4 and magic == 0:
                value = _lz4_fix_header_checksum(value)
            try:
                inner = decompress(codec, value, limit)
            except KafkaError as exc:
                if exc.code == ErrorCode.message_too_large:  # a compression bomb: refused before it is inflated
                    raise
                raise _corrupt(f"cannot decompress a message ({exc})") from exc
            except Exception as exc:  # each codec library raises its own errors
                raise _corrupt(f"cannot decompress a message ({exc})") from exc
            for inner_magic, inner_attributes, inner_timestamp, inner_key, inner_value in _messages(inner, depth + 1,
                                                                                                     limit):
                if inner_magic != magic:
                    raise _corrupt(f"a compressed message of magic {magic} holds one of magic {inner_magic}")
                if magic == 1 and attributes & _LOG_APPEND_TIME:
                    inner_timestamp = timestamp  # LogAppendTime: the wrapper's stamp is every message's
                yield inner_magic, inner_attributes, inner_timestamp, inner_key, inner_value
        position = end


def to_batch(message_set: bytes, now_ms: int, limit: int | None = None) -> bytes:
    """One v2 batch holding the messages of a produced set (KafkaError CORRUPT_MESSAGE if it is not one);
    a compressed message inflating past `limit` bytes is MESSAGE_TOO_LARGE.

    The batch takes the codec of the set's first compressed message (uncompressed otherwise), as Kafka's
    up-conversion keeps the producer's codec. Magic 0 messages have no timestamp.
    """
    buf = bytes(message_set)
    records, codec = [], Compression.NONE
    try:
        for magic, attributes, timestamp, key, value in _messages(buf, limit=limit):
            records.append(NewRecord(key, value, (), timestamp if magic == 1 else NO_TIMESTAMP))
        if buf and len(buf) >= 18:
            codec = _CRC_MAGIC_ATTRIBUTES.unpack_from(buf, 12)[2] & _CODEC_MASK
    except (struct.error, IndexError) as exc:
        raise _corrupt(f"malformed message set: {exc}") from exc
    if not records:
        raise KafkaError(ErrorCode.invalid_record, "an empty message set")
    compression = {Compression.GZIP: Compression.GZIP, Compression.SNAPPY: Compression.SNAPPY,
                   _LZ4: Compression.LZ4}.get(codec, Compression.NONE)
    try:
        return build_batch(records, compression=compression, timestamp_ms=now_ms)
    except ValueError as exc:
        # Magic-1 timestamps so far apart (-2^63 and 2^62, say) that a v2 record's timestamp delta, an int64, cannot
        # hold them. Kafka's up-conversion refuses negative timestamps (MemoryRecordsBuilder: "Invalid negative
        # timestamp"); the producer gets INVALID_TIMESTAMP here, not a handler failure and a closed connection.
        raise KafkaError(ErrorCode.invalid_timestamp, f"the messages cannot make one record batch: {exc}") from exc


def _message(offset: int, magic: int, timestamp_type: int, timestamp: int, key: bytes | None,
             value: bytes | None) -> bytes:
    body = bytearray(_CRC_MAGIC_ATTRIBUTES.size)
    if magic == 1:
        body += _I64.pack(timestamp)
    for part in (key, value):
        body += _I32.pack(-1) if part is None else _I32.pack(len(part)) + part
    attributes = _LOG_APPEND_TIME if magic == 1 and timestamp_type else 0
    _CRC_MAGIC_ATTRIBUTES.pack_into(body, 0, 0, magic, attributes)
    struct.pack_into(">I", body, 0, zlib.crc32(memoryview(body)[4:]))
    return _OFFSET_SIZE.pack(offset, len(body)) + body


def from_batches(data: bytes, magic: int, max_bytes: int | None = None, first_offset: int = 0) -> bytes:
    """The records of whole v2 batches as an uncompressed message set of `magic`; markers are left out.

    Records below `first_offset` (the fetch offset, inside the first batch) are left out too.
    With `max_bytes` the set stops at the last whole message that fits (the first one always
    goes), and what lies past it is not decoded: a fetch of compressed batches answers no more
    than the bytes it read, however far they decompress (KIP-283). The client fetches the rest
    from the next offset.
    """
    out = bytearray()
    for _ in converting(data, magic, out, max_bytes, first_offset):
        pass
    return bytes(out)


def converting(data: bytes, magic: int, out: bytearray, max_bytes: int | None = None,
               first_offset: int = 0) -> Iterator[None]:
    """from_batches in steps of STEP_MESSAGES records decoded: the message set is written to `out`. A batch of thousands of
    records takes tens of milliseconds to convert; between two steps the caller may hand the loop on."""
    try:
        headers = split_batches(data)
    except InvalidBatch as exc:
        raise _corrupt(str(exc)) from exc
    decoded = 0
    for header in headers:
        if header.attributes & ATTR_CONTROL or header.last_offset < first_offset:
            continue
        timestamp_type = 1 if header.attributes & ATTR_TIMESTAMP_TYPE else 0
        for record in batch_records(data, header.position):
            decoded += 1
            if decoded % STEP_MESSAGES == 0:
                # Counted whether converted or skipped: a fetch from deep inside a batch of thousands of records
                # decodes those before its offset too, and that took one step of 20-30 ms.
                yield
            if record.offset < first_offset:
                continue
            message = _message(record.offset, magic, timestamp_type, record.timestamp, record.key, record.value)
            if max_bytes is not None and out and len(out) + len(message) > max_bytes:
                return
            out += message
