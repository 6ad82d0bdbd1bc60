"""Record batch v2 headers: read, validate and patch them without touching records.

On-disk and on-wire layout of a v2 batch header (61 bytes, big endian):

    0  base_offset            int64
    8  batch_length           int32   bytes after this field
   12  partition_leader_epoch int32
   16  magic                  int8    (2)
   17  crc                    uint32  CRC32C of bytes 21..end
   21  attributes             int16
   23  last_offset_delta      int32
   27  base_timestamp         int64
   35  max_timestamp          int64
   43  producer_id            int64
   51  producer_epoch         int16
   53  base_sequence          int32
   57  records_count          int32

The produce path reads these headers and patches base offset, leader epoch and
(for LogAppendTime) timestamps in place; records are never decoded there.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length: what precedes batch_length's span
CRC_START = 21

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LENGTH = struct.Struct(">qi")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # set: LogAppendTime
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1


class InvalidBatch(ValueError):
    """The bytes are not a well-formed v2 record batch."""


class UnsupportedMagic(InvalidBatch):
    """Not a v2 batch: produce v3+ accepts only magic 2 (Kafka answers INVALID_RECORD)."""


class TruncatedBatch(InvalidBatch):
    """The bytes end before the batch does (Kafka sees no complete batch there)."""


@dataclass(slots=True)
class BatchHeader:
    """The fixed fields of one v2 batch; `position` is where it starts in its buffer."""

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch including the 12-byte log overhead."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_batch_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Parse the header at `position`; raise InvalidBatch if it cannot be a v2 batch."""
    if len(buf) - position < HEADER_SIZE:
        if len(buf) - position >= 17 and buf[position + 16] != 2:
            raise UnsupportedMagic(f"unsupported magic {buf[position + 16]}")
        raise TruncatedBatch("truncated batch header")
    fields = _HEADER.unpack_from(buf, position)
    header = BatchHeader(position, *fields)
    if header.magic != 2:
        raise UnsupportedMagic(f"unsupported magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise InvalidBatch(f"batch length {header.batch_length} too small")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise InvalidBatch("negative record count or offset delta")
    return header


def peek_offset_and_length(buf: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """The base offset and batch length at `position` (12 bytes; no validation)."""
    return _OFFSET_LENGTH.unpack_from(buf, position)


def compute_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> int:
    start = header.position + CRC_START
    end = header.position + header.size
    return crc32c(memoryview(buf)[start:end])


def crc_ok(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    return compute_crc(buf, header) == header.crc


def split_batches(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Headers of every batch in `buf`, which must hold whole batches only.

    Raises InvalidBatch for a malformed or truncated batch; CRCs are not checked here.
    """
    headers = []
    position = 0
    end = len(buf)
    while position < end:
        header = read_batch_header(buf, position)
        if position + header.size > end:
            raise TruncatedBatch("truncated batch")
        headers.append(header)
        position += header.size
    return headers


def patch_offsets(buf: bytearray | memoryview, header: BatchHeader, base_offset: int, leader_epoch: int) -> None:
    """Assign the batch its offsets and leader epoch. Neither field is covered by the CRC."""
    _I64.pack_into(buf, header.position, base_offset)
    _I32.pack_into(buf, header.position + 12, leader_epoch)
    header.base_offset = base_offset
    header.partition_leader_epoch = leader_epoch


def set_max_timestamp(buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int, *,
                      log_append_time: bool = False) -> None:
    """Kafka's setMaxTimestamp: store the timestamp type and max timestamp the broker computed.

    Both fields are covered by the CRC, which is recomputed, but only if one of them changed.
    """
    attributes = header.attributes | ATTR_TIMESTAMP_TYPE if log_append_time else header.attributes & ~ATTR_TIMESTAMP_TYPE
    if attributes == header.attributes and timestamp_ms == header.max_timestamp:
        return
    _I16.pack_into(buf, header.position + 21, attributes)
    _I64.pack_into(buf, header.position + 35, timestamp_ms)
    header.attributes = attributes
    header.max_timestamp = timestamp_ms
    header.crc = compute_crc(buf, header)
    _U32.pack_into(buf, header.position + 17, header.crc)


def set_log_append_time(buf: bytearray | memoryview, header: BatchHeader, timestamp_ms: int) -> None:
    """Stamp a batch with LogAppendTime as Kafka does: attribute bit + max timestamp, new CRC."""
    set_max_timestamp(buf, header, timestamp_ms, log_append_time=True)
