"""Record batch compression codecs, byte-compatible with Kafka's clients and broker.

The codec of a v2 batch is attribute bits 0-2. What each codec means on the wire:

* GZIP   - a gzip stream (RFC 1952); readers accept concatenated members, as
           Java's GZIPInputStream does.
* SNAPPY - Java clients and the broker write the xerial/snappy-java stream format
           (16-byte header, then [int32 length][raw snappy block] per 32 KiB of
           input); librdkafka may write plain raw snappy. We read both and write
           xerial, which librdkafka, kafka-python and aiokafka all read.
* LZ4    - the standard LZ4 frame format with independent blocks (KIP-57). The
           pre-0.10 broken header checksum only applies to magic 0/1, never here.
* ZSTD   - a zstd stream; zstd-jni's streaming output has no content size in the
           frame header, so decoding must not depend on it.

All codecs go through cramjam (measured fastest or on par with zstandard, lz4 and
python-snappy; and it detects truncated lz4/zstd frames, which zstandard's
decompressobj does not).

A produced batch is decompressed with a `limit`: a compression bomb (a small batch that
inflates to gigabytes) is refused with MESSAGE_TOO_LARGE as soon as its output passes the
limit, never inflated whole. Snappy states its blocks' sizes up front; the other codecs
decompress into a bounded buffer, which cramjam refuses to overrun.
"""

from __future__ import annotations

import enum
import gzip
import struct
import threading
import zlib

import cramjam

from klamm.protocol.errors import ErrorCode, KafkaError

__all__ = ["Compression", "compress", "decompress"]


class Compression(enum.IntEnum):
    """Batch attribute codes for the compression codec."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's default levels: gzip uses Deflater.DEFAULT_COMPRESSION (6); lz4's default
# (9) maps to lz4-java's *fast* compressor, i.e. plain LZ4 rather than HC; zstd 3.
_GZIP_DEFAULT_LEVEL = 6
_LZ4_FAST_LEVEL = 1
_ZSTD_DEFAULT_LEVEL = 3
_LZ4_KAFKA_DEFAULT_LEVEL = 9

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
# magic + version 1 + minimum compatible version 1, as snappy-java writes it.
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024  # snappy-java's default, used by Kafka's producer
_I32 = struct.Struct(">i")

_CRAMJAM_ERRORS = (cramjam.DecompressionError, ValueError, OverflowError)
_GZIP_ERRORS = (OSError, EOFError, zlib.error)


def compress(codec: int, data: bytes | bytearray | memoryview, level: int | None = None) -> bytes:
    """Compress `data` as a Kafka client of `codec` would; `level` None means Kafka's default."""
    codec = _check_codec(codec)
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return zlib.compress(data, _GZIP_DEFAULT_LEVEL if level is None else level, wbits=31)
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        return _lz4_compress(data, level)
    return bytes(cramjam.zstd.compress(data, level=_ZSTD_DEFAULT_LEVEL if level is None else level))


def decompress(codec: int, data: bytes | bytearray | memoryview, limit: int | None = None) -> bytes:
    """Decompress a batch's records section; corrupt input raises KafkaError(corrupt_message), output
    past `limit` bytes KafkaError(message_too_large) before it is all made."""
    codec = _check_codec(codec)
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data, limit)
        if limit is not None:
            return _bounded(codec, data, limit)
        if codec == Compression.GZIP:
            return _gzip_decompress(data)
        if codec == Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except _CRAMJAM_ERRORS + _GZIP_ERRORS as exc:
        raise KafkaError(ErrorCode.corrupt_message, f"cannot decompress {Compression(codec).name}: {exc}") from exc


_MODULES = {Compression.GZIP: cramjam.gzip, Compression.LZ4: cramjam.lz4, Compression.ZSTD: cramjam.zstd}
# Each thread decompresses bounded batches into a buffer of its own, made once: a fresh buffer for every
# batch cost more than the decompression (zero-filled and page-faulted: 190 µs for a 20 KB lz4 batch into
# 330 KB, against 15-30 µs for the decompression and the copy out). This size covers Kafka's default
# max.message.bytes; a larger limit reached is decompressed into a buffer of its own.
_SCRATCH_BYTES = 1 << 21


class _Scratch(threading.local):
    buffer: bytearray | None = None


_scratch = _Scratch()


def _bounded(codec: Compression, data: bytes | bytearray | memoryview, limit: int) -> bytes:
    if codec == Compression.GZIP and not len(data):
        raise EOFError("empty gzip stream")
    module = _MODULES[codec]
    size = min(limit, _SCRATCH_BYTES - 1)
    while True:
        # One byte more than allowed: filling it means the output is too large.
        out = _scratch_view(size + 1) if size < _SCRATCH_BYTES else memoryview(bytearray(size + 1))
        try:
            written = module.decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise
            written = len(out)
        if written <= size:
            return bytes(out[:written])
        if size >= limit:
            raise _too_large(codec, limit)
        size = limit


def _scratch_view(size: int) -> memoryview:
    buffer = _scratch.buffer
    if buffer is None:
        buffer = _scratch.buffer = bytearray(_SCRATCH_BYTES)
    return memoryview(buffer)[:size]


def _too_large(codec: Compression, limit: int) -> KafkaError:
    return KafkaError(ErrorCode.message_too_large,
                      f"the {codec.name} records of the batch inflate past {limit} bytes, more than a batch may hold")


def _check_codec(codec: int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise KafkaError(ErrorCode.unsupported_compression_type, f"unknown compression codec {codec}") from None


def _gzip_decompress(data: bytes | bytearray | memoryview) -> bytes:
    # gzip.decompress returns b"" for empty input; Java's GZIPInputStream fails on it.
    if not len(data):
        raise EOFError("empty gzip stream")
    return gzip.decompress(data)


def _lz4_compress(data: bytes | bytearray | memoryview, level: int | None) -> bytes:
    # Kafka's readers reject dependent (linked) blocks. cramjam also writes per-block
    # checksums (FLG 0x70 where Kafka writes 0x60); every reader verifies them fine.
    if level is None or level == _LZ4_KAFKA_DEFAULT_LEVEL:
        level = _LZ4_FAST_LEVEL
    compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
    # The streaming compressor only takes bytes (the one-shot functions take any buffer).
    compressor.compress(data if isinstance(data, bytes) else bytes(data))
    return bytes(compressor.finish())


def _xerial_compress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    # An empty input still gets one (empty) block: kafka-python and aiokafka only
    # recognise the xerial header when something follows it.
    for start in range(0, max(len(view), 1), _XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_SIZE]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: bytes | bytearray | memoryview, limit: int | None = None) -> bytes:
    view = memoryview(data)
    if view[: len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        if limit is not None and cramjam.snappy.decompress_raw_len(view) > limit:
            raise _too_large(Compression.SNAPPY, limit)
        return bytes(cramjam.snappy.decompress_raw(view))
    return _xerial_decompress(view, limit)


def _xerial_decompress(view: memoryview, limit: int | None = None) -> bytes:
    # Header: magic, version, minimum compatible version. Like librdkafka we skip the
    # two version ints; every writer in the wild puts 1 and 1 there.
    if len(view) < len(_XERIAL_HEADER):
        raise ValueError("truncated xerial snappy header")
    parts = []
    inflated = 0
    position = len(_XERIAL_HEADER)
    end = len(view)
    while position < end:
        if end - position < 4:
            raise ValueError("truncated xerial snappy block length")
        (length,) = _I32.unpack_from(view, position)
        position += 4
        if length < 0 or position + length > end:
            raise ValueError(f"bad xerial snappy block length {length}")
        block = view[position : position + length]
        if limit is not None:  # each raw block states its size: the bomb is found before any inflating
            inflated += cramjam.snappy.decompress_raw_len(block)
            if inflated > limit:
                raise _too_large(Compression.SNAPPY, limit)
        parts.append(bytes(cramjam.snappy.decompress_raw(block)))
        position += length
    return b"".join(parts)
