"""Compression bombs: a small produced batch whose records inflate far past max.message.bytes is refused
with MESSAGE_TOO_LARGE wherever the broker must look inside it (record checks of a compacted topic,
recompression to the topic's codec), without being inflated whole; another client is served meanwhile."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import cramjam
import pytest

from klamm.protocol.compression import _XERIAL_HEADER, Compression
from klamm.protocol.errors import ErrorCode
from klamm.protocol.records import _zigzag_varint, assemble_batch, build_batch
from tests.integration.conftest import BrokerThread, create_topic, produce

BOMB_BYTES = 300 * 1024 * 1024  # inflated; each codec squeezes this into at most a few MiB


def bomb(codec: Compression) -> bytes:
    """One record with key b"k" and BOMB_BYTES of zeros, compressed chunk by chunk: never held inflated here."""
    value_size = _zigzag_varint(BOMB_BYTES)
    body_prefix = b"\x00" + _zigzag_varint(0) + _zigzag_varint(0) + _zigzag_varint(1) + b"k" + value_size
    record = _zigzag_varint(len(body_prefix) + BOMB_BYTES + 1) + body_prefix
    chunk = bytes(4 * 1024 * 1024)
    if codec == Compression.SNAPPY:  # xerial: [length][raw block] per block
        block = bytes(cramjam.snappy.compress_raw(chunk))
        parts = [_XERIAL_HEADER, compress_raw_block(record)]
        parts += [struct.pack(">i", len(block)) + block] * (BOMB_BYTES // len(chunk))
        parts.append(compress_raw_block(b"\x00"))  # no headers
        body = b"".join(parts)
    else:
        compressor = {Compression.GZIP: cramjam.gzip, Compression.LZ4: cramjam.lz4,
                      Compression.ZSTD: cramjam.zstd}[codec].Compressor()
        compressor.compress(record)
        for _ in range(BOMB_BYTES // len(chunk)):
            compressor.compress(chunk)
        compressor.compress(b"\x00")
        body = bytes(compressor.finish())
    now = int(time.time() * 1000)
    return assemble_batch(base_offset=0, partition_leader_epoch=-1, attributes=int(codec), last_offset_delta=0,
                          base_timestamp=now, max_timestamp=now, producer_id=-1, producer_epoch=-1,
                          base_sequence=-1, records_count=1, body=body)


def compress_raw_block(data: bytes) -> bytes:
    block = bytes(cramjam.snappy.compress_raw(data))
    return struct.pack(">i", len(block)) + block


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD])
def test_a_bomb_is_refused_without_inflating_it(broker: BrokerThread, codec: Compression) -> None:
    payload = bomb(codec)
    assert len(payload) < 16 * 1024 * 1024
    with broker.connect() as client:
        create_topic(client, "compacted", configs={"cleanup.policy": "compact",
                                                   "max.message.bytes": str(16 * 1024 * 1024)})
        create_topic(client, "recompressed", configs={"compression.type": "gzip" if codec != Compression.GZIP
                                                      else "zstd", "max.message.bytes": str(16 * 1024 * 1024)})
        Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
        before = peak_rss_mib()
        for topic in ("compacted", "recompressed"):
            answer = produce(client, topic, payload)
            assert answer.error_code == ErrorCode.message_too_large, (topic, answer)
            assert "inflate past" in (answer.error_message or "")
        grown_mib = peak_rss_mib() - before
        # the request's own copies and at most max.message.bytes of output: far from the bomb's size
        assert grown_mib < (BOMB_BYTES >> 20) / 2, \
            f"peak memory grew {grown_mib:.0f} MiB while refusing a {BOMB_BYTES >> 20} MiB bomb"
        # an honest batch of the same codec still goes through both paths
        honest = build_batch([(b"k", b"v" * 1000)], compression=codec, timestamp_ms=int(time.time() * 1000))
        assert produce(client, "compacted", honest).error_code == 0
        assert produce(client, "recompressed", honest).error_code == 0


def test_a_batch_may_inflate_to_max_message_bytes(broker: BrokerThread) -> None:
    """The bound is the topic's max.message.bytes (never below Kafka's default, which clients size by)."""
    near = build_batch([(b"k", bytes(900_000))], compression=Compression.ZSTD, timestamp_ms=int(time.time() * 1000))
    with broker.connect() as client:
        create_topic(client, "small-limit", configs={"cleanup.policy": "compact", "max.message.bytes": "100000"})
        assert produce(client, "small-limit", near).error_code == 0
        create_topic(client, "large-limit", configs={"cleanup.policy": "compact",
                                                     "max.message.bytes": str(8 * 1024 * 1024)})
        big = build_batch([(b"k", bytes(6_000_000))], compression=Compression.ZSTD,
                          timestamp_ms=int(time.time() * 1000))
        assert produce(client, "large-limit", big).error_code == 0
        assert produce(client, "small-limit", big).error_code == ErrorCode.message_too_large


def test_a_bomb_in_an_old_message_set_is_refused(broker: BrokerThread) -> None:
    """Produce v2 (magic 1 message sets): a gzip wrapper message inflating far past the limit."""
    import gzip
    import zlib

    inner_value = bytes(64 * 1024 * 1024)
    inner = struct.pack(">qi", 0, 0)  # offset, size (filled below) of one magic-1 message
    message = struct.pack(">bbq", 1, 0, 0) + struct.pack(">i", -1) + struct.pack(">i", len(inner_value))
    body = message + inner_value
    inner = struct.pack(">qi", 0, len(body) + 4) + struct.pack(">I", zlib.crc32(body)) + body
    wrapped_value = gzip.compress(inner, 1)
    wrapper = struct.pack(">bbq", 1, 1, 0) + struct.pack(">i", -1) + struct.pack(">i", len(wrapped_value)) \
        + wrapped_value
    message_set = struct.pack(">qi", 0, len(wrapper) + 4) + struct.pack(">I", zlib.crc32(wrapper)) + wrapper
    with broker.connect() as client:
        create_topic(client, "legacy")
        answer = produce(client, "legacy", message_set, version=2)
    assert answer.error_code == ErrorCode.message_too_large
