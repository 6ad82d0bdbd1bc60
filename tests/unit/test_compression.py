"""Codec round trips and compatibility with what Kafka clients write and read."""

from __future__ import annotations

import gzip
import os
import random
import struct
import threading

import cramjam
import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.protocol.compression import Compression, compress, decompress
from klamm.protocol.errors import ErrorCode, KafkaError

CODECS = list(Compression)
COMPRESSED = [c for c in Compression if c != Compression.NONE]
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _compressible(size: int) -> bytes:
    """Text-like data: compresses well and spans several codec blocks when large."""
    rng = random.Random(size)  # deterministic: hypothesis replays examples
    words = [rng.randbytes(3).hex().encode() for _ in range(64)]
    out = bytearray()
    index = 0
    while len(out) < size:
        out += words[(index * 7919) % 64] + b" "
        index += 1
    return bytes(out[:size])


# ------------------------------------------------------------------ round trips


@SETTINGS
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=4096))
def test_round_trip_random_bytes(codec: Compression, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", [0, 1, 32 * 1024, 32 * 1024 + 1, 64 * 1024 + 3, 300_000])
def test_round_trip_across_block_boundaries(codec: Compression, size: int) -> None:
    data = _compressible(size)
    compressed = compress(codec, data)
    assert decompress(codec, compressed) == data
    assert decompress(codec, memoryview(compressed)) == data
    assert decompress(codec, bytearray(compressed)) == data


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_any_buffer_type(codec: Compression) -> None:
    data = _compressible(5000)
    for buffer in (data, bytearray(data), memoryview(data)):
        assert decompress(codec, compress(codec, buffer)) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_levels(codec: Compression) -> None:
    data = _compressible(100_000)
    for level in (1, 3):
        assert decompress(codec, compress(codec, data, level)) == data


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("codec", [5, 6, 7, -1, 8])
def test_unknown_codec(codec: int) -> None:
    with pytest.raises(KafkaError) as info:
        compress(codec, b"x")
    assert info.value.code == ErrorCode.unsupported_compression_type
    with pytest.raises(KafkaError) as info:
        decompress(codec, b"x")
    assert info.value.code == ErrorCode.unsupported_compression_type


@SETTINGS
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=512))
def test_garbage_raises_corrupt_message_only(codec: Compression, data: bytes) -> None:
    try:
        result = decompress(codec, data)
    except KafkaError as exc:
        assert exc.code == ErrorCode.corrupt_message
    else:
        assert isinstance(result, bytes)


@SETTINGS
@given(codec=st.sampled_from(COMPRESSED), data=st.data())
def test_mutated_streams_raise_corrupt_message_only(codec: Compression, data: st.DataObject) -> None:
    compressed = bytearray(compress(codec, _compressible(3000)))
    for _ in range(data.draw(st.integers(1, 4))):
        compressed[data.draw(st.integers(0, len(compressed) - 1))] = data.draw(st.integers(0, 255))
    try:
        decompress(codec, bytes(compressed))
    except KafkaError as exc:
        assert exc.code == ErrorCode.corrupt_message


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_streams_raise(codec: Compression) -> None:
    # One snappy block: a xerial cut at a block boundary would be a valid, shorter stream.
    compressed = compress(codec, _compressible(20_000))
    first = len(XERIAL_HEADER) + 1 if codec == Compression.SNAPPY else 0
    for cut in range(first, len(compressed), 7):
        with pytest.raises(KafkaError) as info:
            decompress(codec, compressed[:cut])
        assert info.value.code == ErrorCode.corrupt_message


# ------------------------------------------------------------------ gzip


def test_gzip_reads_python_gzip_and_concatenated_members() -> None:
    a, b = _compressible(10_000), os.urandom(1000)
    assert decompress(Compression.GZIP, gzip.compress(a, mtime=123)) == a
    # Java's GZIPInputStream reads concatenated members; so must we.
    assert decompress(Compression.GZIP, gzip.compress(a) + gzip.compress(b)) == a + b


def test_gzip_output_is_standard_gzip() -> None:
    data = _compressible(10_000)
    compressed = compress(Compression.GZIP, data)
    assert compressed[:2] == b"\x1f\x8b"
    assert gzip.decompress(compressed) == data


# ------------------------------------------------------------------ snappy


def _xerial(blocks: list[bytes], version: int = 1, compatible: int = 1) -> bytes:
    """A snappy-java (xerial) stream built by hand from the format description."""
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", version, compatible)
    for block in blocks:
        raw = snappy.compress(block)
        out += struct.pack(">i", len(raw)) + raw
    return out


def test_snappy_reads_hand_built_xerial_stream() -> None:
    blocks = [_compressible(32 * 1024), os.urandom(100), b"", _compressible(5)]
    assert decompress(Compression.SNAPPY, _xerial(blocks)) == b"".join(blocks)


def test_snappy_reads_xerial_header_only_and_other_versions() -> None:
    assert decompress(Compression.SNAPPY, _xerial([])) == b""
    # librdkafka ignores the version fields; so do we.
    assert decompress(Compression.SNAPPY, _xerial([b"abc"], version=1, compatible=0)) == b"abc"


def test_snappy_reads_raw_snappy() -> None:
    data = _compressible(100_000)
    assert decompress(Compression.SNAPPY, snappy.compress(data)) == data
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


@pytest.mark.parametrize(
    "stream",
    [
        XERIAL_HEADER[:10],
        XERIAL_HEADER + b"\x00\x00",
        XERIAL_HEADER + struct.pack(">i", 100) + b"short",
        XERIAL_HEADER + struct.pack(">i", -1) + b"x",
    ],
)
def test_snappy_bad_xerial_framing(stream: bytes) -> None:
    with pytest.raises(KafkaError) as info:
        decompress(Compression.SNAPPY, stream)
    assert info.value.code == ErrorCode.corrupt_message


def test_snappy_writes_xerial_in_32k_blocks() -> None:
    data = _compressible(70_000)
    compressed = compress(Compression.SNAPPY, data)
    assert compressed.startswith(XERIAL_HEADER)
    position, blocks = len(XERIAL_HEADER), []
    while position < len(compressed):
        (length,) = struct.unpack_from(">i", compressed, position)
        blocks.append(snappy.decompress(compressed[position + 4 : position + 4 + length]))
        position += 4 + length
    assert [len(b) for b in blocks] == [32768, 32768, 70_000 - 65536]
    assert b"".join(blocks) == data


@pytest.mark.parametrize("size", [0, 1, 100_000])
def test_snappy_output_readable_by_python_clients(size: int) -> None:
    from aiokafka.codec import snappy_decode as aiokafka_snappy_decode
    from kafka.codec import snappy_decode as kafka_python_snappy_decode

    data = _compressible(size)
    compressed = compress(Compression.SNAPPY, data)
    assert kafka_python_snappy_decode(compressed) == data
    assert aiokafka_snappy_decode(compressed) == data


def test_snappy_reads_python_clients_output() -> None:
    from aiokafka.codec import snappy_encode as aiokafka_snappy_encode
    from kafka.codec import snappy_encode as kafka_python_snappy_encode

    data = _compressible(100_000)
    for encode in (aiokafka_snappy_encode, kafka_python_snappy_encode):
        assert decompress(Compression.SNAPPY, encode(data)) == data
        assert decompress(Compression.SNAPPY, encode(data, xerial_compatible=False)) == data


# ------------------------------------------------------------------ lz4


@pytest.mark.parametrize("block_linked", [False, True])
@pytest.mark.parametrize("content_checksum", [False, True])
@pytest.mark.parametrize("store_size", [False, True])
@pytest.mark.parametrize("block_size", [lz4.frame.BLOCKSIZE_MAX64KB, lz4.frame.BLOCKSIZE_MAX4MB])
def test_lz4_reads_lz4_frame_module_output(
    block_linked: bool, content_checksum: bool, store_size: bool, block_size: int
) -> None:
    data = _compressible(200_000)
    compressed = lz4.frame.compress(
        data,
        block_size=block_size,
        block_linked=block_linked,
        content_checksum=content_checksum,
        store_size=store_size,
        block_checksum=content_checksum,
    )
    assert decompress(Compression.LZ4, compressed) == data


def test_lz4_writes_kafka_compatible_frames() -> None:
    data = _compressible(200_000)
    compressed = compress(Compression.LZ4, data)
    assert compressed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic, little endian
    flg = compressed[4]
    assert flg >> 6 == 1  # frame format version 01
    assert flg & 0x20  # independent blocks: Kafka's Java reader rejects linked blocks
    assert not flg & 0x08  # no content size (Kafka's writer never sets it)
    assert lz4.frame.decompress(compressed) == data


def test_lz4_readable_by_python_clients() -> None:
    from aiokafka.codec import lz4_decode as aiokafka_lz4_decode
    from kafka.codec import lz4_decode as kafka_python_lz4_decode

    data = _compressible(100_000)
    compressed = compress(Compression.LZ4, data)
    assert kafka_python_lz4_decode(compressed) == data
    assert aiokafka_lz4_decode(compressed) == data


# ------------------------------------------------------------------ zstd


def test_zstd_reads_frames_without_content_size() -> None:
    data = _compressible(300_000)
    one_shot = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.get_frame_parameters(one_shot).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Compression.ZSTD, one_shot) == data

    # zstd-jni's ZstdOutputStream: a streaming compressor fed in chunks.
    streaming = zstandard.ZstdCompressor().compressobj()
    chunks = [streaming.compress(data[i : i + 8192]) for i in range(0, len(data), 8192)]
    stream = b"".join(chunks) + streaming.flush()
    assert zstandard.get_frame_parameters(stream).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Compression.ZSTD, stream) == data


def test_zstd_reads_concatenated_frames() -> None:
    compressor = zstandard.ZstdCompressor(write_content_size=False)
    a, b = _compressible(1000), os.urandom(1000)
    assert decompress(Compression.ZSTD, compressor.compress(a) + compressor.compress(b)) == a + b


def test_zstd_readable_by_python_clients() -> None:
    from aiokafka.codec import zstd_decode as aiokafka_zstd_decode
    from kafka.codec import zstd_decode as kafka_python_zstd_decode

    data = _compressible(100_000)
    compressed = compress(Compression.ZSTD, data)
    assert kafka_python_zstd_decode(compressed) == data
    assert aiokafka_zstd_decode(compressed) == data
    assert zstandard.ZstdDecompressor().decompressobj().decompress(compressed) == data


@pytest.mark.parametrize("codec", COMPRESSED)
def test_empty_compressed_input_is_corrupt(codec: Compression) -> None:
    # No codec ever produces zero bytes, and Java's readers fail on them.
    with pytest.raises(KafkaError) as info:
        decompress(codec, b"")
    assert info.value.code == ErrorCode.corrupt_message


# ------------------------------------------------------------------ bounded decompression

BOUNDED = [Compression.GZIP, Compression.LZ4, Compression.ZSTD]  # snappy states its sizes up front
SCRATCH = 1 << 21  # compression._SCRATCH_BYTES: each thread's reused output buffer


@pytest.mark.parametrize("codec", BOUNDED)
def test_a_bounded_decompression_answers_only_its_own_bytes(codec: Compression) -> None:
    # Each thread reuses one output buffer: a small batch after a large one must not carry the large one's tail.
    large, small = _compressible(300_000), os.urandom(1_000)
    assert decompress(codec, compress(codec, large), limit=1_048_588) == large
    assert decompress(codec, compress(codec, small), limit=1_048_588) == small
    assert decompress(codec, compress(codec, b"x"), limit=1_048_588) == b"x"


@pytest.mark.parametrize("codec", BOUNDED)
@pytest.mark.parametrize("size", [SCRATCH - 2, SCRATCH - 1, SCRATCH, SCRATCH + 1, 3 * SCRATCH // 2])
def test_a_limit_past_the_reused_buffer_is_honoured(codec: Compression, size: int) -> None:
    data = _compressible(size)
    compressed = compress(codec, data)
    assert decompress(codec, compressed, limit=size) == data
    assert decompress(codec, compressed, limit=2 * SCRATCH) == data
    with pytest.raises(KafkaError) as info:
        decompress(codec, compressed, limit=size - 1)
    assert info.value.code == ErrorCode.message_too_large


@pytest.mark.parametrize("codec", BOUNDED)
def test_threads_decompress_bounded_batches_side_by_side(codec: Compression) -> None:
    inputs = [_compressible(1_000 * (n + 1)) + bytes([n]) * n for n in range(8)]
    compressed = [compress(codec, data) for data in inputs]
    failures: list[int] = []

    def work(n: int) -> None:
        for _ in range(200):
            if decompress(codec, compressed[n], limit=1_048_588) != inputs[n]:
                failures.append(n)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
