"""Golden bytes of the 0.8-0.10 protocol: Produce v0/v2, Fetch v0/v2 and the Offset API (ListOffsets v0),
built and parsed by hand from the grammar of "A Guide To The Kafka Protocol".

Nothing here encodes or decodes through klamm or kio: requests are `struct.pack`ed, message CRCs are
`zlib.crc32`, compressed wrappers are `gzip`, and the broker's answers are read field by field with a
parser that checks every length (frame size, array counts, string/bytes lengths, MessageSetSize,
MessageSize) against the bytes that follow. Each answer is also compared whole to the bytes the grammar
gives for the values Kafka answers with, so a wrong size field, a wrong CRC or one stray byte fails.
Only the topics are created through the RawClient (CreateTopics is not part of the old protocol).

The other direction: the requests built here are compared byte for byte with klamm's own encoding of the
same request (RawClient.encode), and the expected answers with klamm's response encoder.

    RequestOrResponse => Size (RequestMessage | ResponseMessage)
    RequestMessage => ApiKey ApiVersion CorrelationId ClientId RequestMessage
    Response => CorrelationId ResponseMessage
    MessageSet => [Offset MessageSize Message]          (no int32 count in front)
    v0 Message => Crc MagicByte Attributes Key Value
    v1 Message => Crc MagicByte Attributes Timestamp Key Value
    ProduceRequest => RequiredAcks Timeout [TopicName [Partition MessageSetSize MessageSet]]
    v0 ProduceResponse => [TopicName [Partition ErrorCode Offset]]
    v2 ProduceResponse => [TopicName [Partition ErrorCode Offset Timestamp]] ThrottleTime
    FetchRequest => ReplicaId MaxWaitTime MinBytes [TopicName [Partition FetchOffset MaxBytes]]
    v0 FetchResponse => [TopicName [Partition ErrorCode HighwaterMarkOffset MessageSetSize MessageSet]]
    v1/v2 FetchResponse => ThrottleTime [TopicName [Partition ErrorCode HighwaterMarkOffset MessageSetSize MessageSet]]
    v0 ListOffsetRequest => ReplicaId [TopicName [Partition Time MaxNumberOfOffsets]]
    v0 OffsetResponse => [TopicName [Partition ErrorCode [Offset]]]

What klamm documents (klamm/protocol/message_set.py): the log holds v2 batches; a fetched v0-3 message set
is converted down *uncompressed* (Kafka's down-conversion keeps the batch's codec; both are valid message
sets, and the test's parser opens a compressed wrapper should one come back), so a gzip wrapper produced
with magic 0 comes back as plain magic-0 messages with their absolute offsets. Being uncompressed, no
message below the fetch offset is returned (the guide allows those only inside compressed wrappers; Kafka's
down-conversion drops them from uncompressed batches).
"""

from __future__ import annotations

import gzip
import select
import socket
import struct
import zlib
from typing import Any

import pytest

from klamm.protocol.api import message_types
from klamm.protocol.encoder import encode
from tests.integration.conftest import BrokerThread, RawClient, create_topic

CLIENT_ID = "golden"
NO_ERROR, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION = 0, 2, 3
GZIP = 1


# --------------------------------------------------------- the grammar, by hand ---
def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    raw = s.encode()
    return i16(len(raw)) + raw


def kbytes(b: bytes | None) -> bytes:
    return i32(-1) if b is None else i32(len(b)) + b


def array(items: list[bytes]) -> bytes:
    return i32(len(items)) + b"".join(items)


def message(key: bytes | None, value: bytes | None, magic: int = 0, attributes: int = 0,
            timestamp: int | None = None) -> bytes:
    """Message => Crc MagicByte Attributes [Timestamp] Key Value; Crc is the CRC32 of everything after it."""
    rest = i8(magic) + i8(attributes) + (i64(timestamp) if magic == 1 else b"") + kbytes(key) + kbytes(value)
    return struct.pack(">I", zlib.crc32(rest)) + rest


def message_set(entries: list[tuple[int, bytes]]) -> bytes:
    """MessageSet => [Offset MessageSize Message], no count in front."""
    return b"".join(i64(offset) + i32(len(m)) + m for offset, m in entries)


def request(api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: str = CLIENT_ID) -> bytes:
    """Size + request header v1 (ApiKey ApiVersion CorrelationId ClientId) + body."""
    payload = i16(api_key) + i16(api_version) + i32(correlation_id) + string(client_id) + body
    return i32(len(payload)) + payload


def produce_request(correlation_id: int, topic: str, messages: bytes, acks: int = -1, timeout: int = 10_000,
                    partition: int = 0, version: int = 0) -> bytes:
    body = i16(acks) + i32(timeout) + array([string(topic) + array([i32(partition) + i32(len(messages)) + messages])])
    return request(0, version, correlation_id, body)


def fetch_request(correlation_id: int, topic: str, offset: int, max_bytes: int = 1 << 20, partition: int = 0,
                  version: int = 0, max_wait: int = 0, min_bytes: int = 1) -> bytes:
    body = (i32(-1) + i32(max_wait) + i32(min_bytes)
            + array([string(topic) + array([i32(partition) + i64(offset) + i32(max_bytes)])]))
    return request(1, version, correlation_id, body)


def offsets_request(correlation_id: int, topic: str, time: int, max_num: int, partition: int = 0) -> bytes:
    body = i32(-1) + array([string(topic) + array([i32(partition) + i64(time) + i32(max_num)])])
    return request(2, 0, correlation_id, body)


# ------------------------------------------------------------- reading by hand ---
class Reader:
    """Reads the grammar's types off a buffer; every length must fit what is left."""

    def __init__(self, data: bytes, what: str = "response") -> None:
        self.data, self.pos, self.what = data, 0, what

    def _take(self, n: int) -> bytes:
        assert n >= 0, f"{self.what}: negative length {n} at byte {self.pos}"
        assert self.pos + n <= len(self.data), (
            f"{self.what}: {n} bytes wanted at byte {self.pos}, only {len(self.data) - self.pos} left")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def i8(self) -> int:
        return struct.unpack(">b", self._take(1))[0]

    def i16(self) -> int:
        return struct.unpack(">h", self._take(2))[0]

    def i32(self) -> int:
        return struct.unpack(">i", self._take(4))[0]

    def u32(self) -> int:
        return struct.unpack(">I", self._take(4))[0]

    def i64(self) -> int:
        return struct.unpack(">q", self._take(8))[0]

    def string(self) -> str | None:
        n = self.i16()
        return None if n == -1 else self._take(n).decode()

    def bytes(self) -> bytes | None:
        n = self.i32()
        return None if n == -1 else self._take(n)

    def raw(self, n: int) -> bytes:
        return self._take(n)

    def count(self) -> int:
        n = self.i32()
        assert 0 <= n <= len(self.data) - self.pos, f"{self.what}: array of {n} at byte {self.pos - 4}"
        return n

    def done(self) -> None:
        assert self.pos == len(self.data), f"{self.what}: {len(self.data) - self.pos} bytes left over"


def parse_message_set(data: bytes, magic: int, depth: int = 0) -> list[dict[str, Any]]:
    """Every message of a set, down to each field; CRCs recomputed; a gzip wrapper opened (one level)."""
    r = Reader(data, "message set")
    out: list[dict[str, Any]] = []
    while r.pos < len(data):
        offset = r.i64()
        size = r.i32()
        body = r.raw(size)  # a partial message at the end would fail here: klamm sends whole messages
        m = Reader(body, f"message at offset {offset}")
        crc = m.u32()
        assert crc == zlib.crc32(body[4:]), f"message at offset {offset}: CRC {crc:#x} != {zlib.crc32(body[4:]):#x}"
        got_magic, attributes = m.i8(), m.i8()
        assert got_magic == magic, f"message at offset {offset}: magic {got_magic}"
        timestamp = m.i64() if magic == 1 else None
        key, value = m.bytes(), m.bytes()
        m.done()  # MessageSize covers exactly Crc..Value
        entry = {"offset": offset, "size": size, "crc": crc, "magic": got_magic, "attributes": attributes,
                 "timestamp": timestamp, "key": key, "value": value}
        if attributes & 0x07:
            assert attributes & 0x07 == GZIP and depth == 0 and value is not None, entry
            inner = parse_message_set(gzip.decompress(value), magic, depth + 1)
            if magic == 0:  # magic 0: the inner messages carry absolute offsets, the wrapper the last one
                assert inner[-1]["offset"] == offset
            else:  # magic 1: relative inner offsets, the wrapper's is the last absolute offset
                assert [i["offset"] for i in inner] == list(range(len(inner)))
                for i in inner:
                    i["offset"] += offset - (len(inner) - 1)
            for i in inner:
                i["wrapper"] = entry
            out += inner
        else:
            out.append(entry)
    return out


def read_frame(sock: socket.socket) -> bytes:
    """One response: the Size field, then exactly Size bytes; nothing else may follow on the socket."""
    def exact(n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            assert chunk, f"connection closed after {len(buf)} of {n} bytes"
            buf += chunk
        return bytes(buf)

    (size,) = struct.unpack(">i", exact(4))
    assert 4 <= size < 1 << 24, f"response Size field {size}"
    frame = exact(size)
    poller = select.poll()  # not select.select: the test process may hold descriptors numbered over 1024
    poller.register(sock, select.POLLIN)
    assert not poller.poll(50), f"bytes after a response of Size {size}: {sock.recv(64, socket.MSG_PEEK)!r}"
    return frame


def exchange(sock: socket.socket, frame: bytes) -> bytes:
    sock.sendall(frame)
    return read_frame(sock)


def klamm_request(api_key: int, version: int, body: dict[str, Any], correlation_id: int, port: int) -> bytes:
    """klamm's (kio's) encoding of the same request: the other side of the golden comparison."""
    with RawClient(port, client_id=CLIENT_ID) as c:
        return c.encode(api_key, version, body, correlation_id)


def klamm_response(api_key: int, version: int, correlation_id: int, body: dict[str, Any]) -> bytes:
    """klamm's response encoder: correlation id (response header v0) + body."""
    encoded, regions = encode(message_types(api_key, version).response, body)
    assert not regions
    return i32(correlation_id) + bytes(encoded)


# --------------------------------------------------------------------- fixtures ---
@pytest.fixture
def sock(broker: BrokerThread):
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    yield s
    s.close()


def make_topic(broker: BrokerThread, name: str) -> str:
    with broker.connect() as c:
        create_topic(c, name)
    return name


def produce_v0_answer(correlation_id: int, topic: str, error: int, offset: int) -> bytes:
    return i32(correlation_id) + array([string(topic) + array([i32(0) + i16(error) + i64(offset)])])


# ------------------------------------------------------------------------ tests ---
def test_the_helpers_match_a_literal_request():
    """The hand encoding itself, against bytes written out: ListOffsets v0, topic "golden", latest, 1 offset."""
    literal = bytes.fromhex(
        "00000034"                  # Size: 52 bytes follow
        "0002" "0000" "00000007"     # ApiKey 2 (Offsets), ApiVersion 0, CorrelationId 7
        "0006" "676f6c64656e"        # ClientId "golden"
        "ffffffff"                   # ReplicaId -1
        "00000001" "0006" "676f6c64656e"  # [TopicName] one: "golden"
        "00000001" "00000000"        # [Partition ...] one: partition 0
        "ffffffffffffffff"           # Time -1 (latest)
        "00000001")                  # MaxNumberOfOffsets 1
    assert offsets_request(7, "golden", -1, 1) == literal
    # Crc (CRC-32 of the rest), MagicByte 0, Attributes 0, Key "k", Value "v"
    assert message(b"k", b"v") == bytes.fromhex("1fecd70a" "00" "00" "00000001" "6b" "00000001" "76")
    assert message_set([(5, message(b"k", b"v"))]) == bytes.fromhex(
        "0000000000000005" "00000010" "1fecd70a" "0000" "000000016b" "0000000176")  # Offset 5, MessageSize 16


def test_produce_v0_by_hand(broker: BrokerThread, sock: socket.socket):
    topic = make_topic(broker, "golden-produce")
    messages = message_set([(0, message(b"key-1", b"value one")), (1, message(b"key-2", b"value two"))])
    frame = produce_request(11, topic, messages)
    # klamm encodes the same request to the same bytes
    assert frame == klamm_request(0, 0, {"acks": -1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": messages}]}]}, 11, broker.port)

    answer = exchange(sock, frame)
    r = Reader(answer)
    assert r.i32() == 11  # CorrelationId
    assert r.count() == 1
    assert r.string() == topic
    assert r.count() == 1
    assert (r.i32(), r.i16(), r.i64()) == (0, NO_ERROR, 0)  # Partition, ErrorCode, Offset of the first message
    r.done()
    assert answer == produce_v0_answer(11, topic, NO_ERROR, 0)
    assert answer == klamm_response(0, 0, 11, {"responses": [{"name": topic, "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 0}]}]})

    # the next set goes after the first two, whatever offsets the producer wrote in it
    again = message_set([(0, message(None, b"no key")), (0, message(b"k", None))])
    assert exchange(sock, produce_request(12, topic, again)) == produce_v0_answer(12, topic, NO_ERROR, 2)


def test_produce_v0_errors_by_hand(broker: BrokerThread, sock: socket.socket):
    topic = make_topic(broker, "golden-errors")
    good = message(b"k", b"v")
    bad_crc = bytes([good[0] ^ 0xFF]) + good[1:]
    # CorruptMessage: Offset -1, as Kafka answers for a partition that failed
    assert exchange(sock, produce_request(21, topic, message_set([(0, bad_crc)]))) == \
        produce_v0_answer(21, topic, CORRUPT_MESSAGE, -1)
    # a MessageSize running past the MessageSetSize
    cut = message_set([(0, good)])[:-1]
    assert exchange(sock, produce_request(22, topic, cut)) == produce_v0_answer(22, topic, CORRUPT_MESSAGE, -1)
    assert exchange(sock, produce_request(23, "golden-nope", message_set([(0, good)]))) == \
        produce_v0_answer(23, "golden-nope", UNKNOWN_TOPIC_OR_PARTITION, -1)
    # nothing was appended by the refused sets
    assert exchange(sock, produce_request(24, topic, message_set([(0, good)]))) == \
        produce_v0_answer(24, topic, NO_ERROR, 0)


def test_produce_v0_with_acks_0_has_no_response(broker: BrokerThread, sock: socket.socket):
    """RequiredAcks 0: the only request the server does not answer; the next answer is the next request's."""
    topic = make_topic(broker, "golden-acks0")
    sock.sendall(produce_request(31, topic, message_set([(0, message(b"a", b"1")), (1, message(b"b", b"2"))]),
                                 acks=0))
    answer = exchange(sock, offsets_request(32, topic, -1, 1))
    assert answer[:4] == i32(32)
    latest = Reader(answer)
    latest.raw(4 + 4 + 2 + len(topic) + 4 + 4)
    assert latest.i16() == NO_ERROR
    assert latest.count() == 1
    assert latest.i64() == 2  # the acks=0 set was appended before the request after it was answered
    latest.done()


def fetch_v0_answer(correlation_id: int, topic: str, high_watermark: int, messages: bytes, error: int = 0) -> bytes:
    return i32(correlation_id) + array([string(topic) + array([
        i32(0) + i16(error) + i64(high_watermark) + i32(len(messages)) + messages])])


def parse_fetch(answer: bytes, correlation_id: int, topic: str, version: int) -> tuple[int, int, list[dict]]:
    """(error code, high watermark, messages) of a one-partition Fetch answer, read field by field."""
    r = Reader(answer)
    assert r.i32() == correlation_id
    if version >= 1:
        assert r.i32() == 0  # ThrottleTime
    assert r.count() == 1
    assert r.string() == topic
    assert r.count() == 1
    assert r.i32() == 0  # Partition
    error, high_watermark = r.i16(), r.i64()
    size = r.i32()
    data = r.raw(size)  # MessageSetSize: exactly the set, then the answer ends
    r.done()
    return error, high_watermark, parse_message_set(data, 1 if version >= 2 else 0)


def test_fetch_v0_by_hand_with_a_gzip_wrapper(broker: BrokerThread, sock: socket.socket):
    topic = make_topic(broker, "golden-fetch")
    plain = [(b"key-0", b"plain zero"), (b"key-1", b"plain one")]
    packed = [(b"key-2", b"gzip two"), (None, b"gzip three, no key"), (b"key-4", b"")]
    assert exchange(sock, produce_request(41, topic, message_set(
        [(i, message(k, v)) for i, (k, v) in enumerate(plain)]))) == produce_v0_answer(41, topic, NO_ERROR, 0)
    # a compressed message: its value is a gzipped message set, inner offsets from 0, the wrapper has the last
    inner = message_set([(i, message(k, v)) for i, (k, v) in enumerate(packed)])
    wrapper = message(None, gzip.compress(inner, mtime=0), attributes=GZIP)
    assert exchange(sock, produce_request(42, topic, message_set([(len(packed) - 1, wrapper)]))) == \
        produce_v0_answer(42, topic, NO_ERROR, 2)

    frame = fetch_request(43, topic, 0)
    assert frame == klamm_request(1, 0, {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "topics": [
        {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]},
        43, broker.port)
    answer = exchange(sock, frame)
    error, high_watermark, got = parse_fetch(answer, 43, topic, 0)
    assert (error, high_watermark) == (NO_ERROR, 5)
    records = plain + packed
    assert [(m["offset"], m["key"], m["value"]) for m in got] == [(i, k, v) for i, (k, v) in enumerate(records)]
    for m in got:
        assert m["magic"] == 0
        assert m["size"] == 4 + 1 + 1 + 4 + len(m["key"] or b"") + 4 + len(m["value"])
    # klamm converts down uncompressed (message_set.py): plain magic-0 messages, attributes 0
    assert [m["attributes"] for m in got] == [0] * 5 and not any("wrapper" in m for m in got)
    want_set = message_set([(i, message(k, v)) for i, (k, v) in enumerate(records)])
    assert answer == fetch_v0_answer(43, topic, 5, want_set)
    assert answer == klamm_response(1, 0, 43, {"responses": [{"topic": topic, "partitions": [
        {"partition_index": 0, "error_code": 0, "high_watermark": 5, "records": want_set}]}]})

    # from the middle of the compressed set, and of the plain one: uncompressed, nothing below the fetch offset
    for correlation_id, offset in ((44, 3), (45, 1), (46, 4)):
        answer = exchange(sock, fetch_request(correlation_id, topic, offset))
        assert answer == fetch_v0_answer(correlation_id, topic, 5, message_set(
            [(i, message(k, v)) for i, (k, v) in enumerate(records) if i >= offset])), offset
    # at the end: an empty set (MessageSetSize 0); past it: OffsetOutOfRange and no messages (with the
    # partition's high watermark, as Kafka's handleOffsetOutOfRangeError answers since tiered storage)
    assert exchange(sock, fetch_request(47, topic, 5)) == fetch_v0_answer(47, topic, 5, b"")
    assert exchange(sock, fetch_request(48, topic, 6)) == fetch_v0_answer(48, topic, 5, b"", error=1)


def test_produce_v2_and_fetch_v2_magic_1_by_hand(broker: BrokerThread, sock: socket.socket):
    """0.10: magic-1 messages keep their CreateTime stamps; Fetch v2 answers magic 1 (v1 still magic 0)."""
    topic = make_topic(broker, "golden-magic1")
    stamps = [1_700_000_000_000, 1_700_000_000_005, 1_700_000_000_009]
    records = [(b"a", b"first"), (None, b"second"), (b"c", None)]
    messages = message_set([(i, message(k, v, magic=1, timestamp=t)) for i, ((k, v), t) in
                            enumerate(zip(records, stamps))])
    answer = exchange(sock, produce_request(51, topic, messages, version=2))
    # v2: Timestamp -1 (CreateTime), then ThrottleTime
    assert answer == i32(51) + array([string(topic) + array([i32(0) + i16(0) + i64(0) + i64(-1)])]) + i32(0)

    # a converted set may stop before the high watermark (no larger than the batches read, as Kafka's
    # down-conversion): read on from the next offset as old consumers do; every answer is byte-exact
    want = [(i, message(k, v, magic=1, timestamp=t)) for i, ((k, v), t) in enumerate(zip(records, stamps))]
    got = fetch_all(sock, topic, 2, want, 3, first_correlation_id=52)
    assert [(m["offset"], m["timestamp"], m["attributes"], m["key"], m["value"]) for m in got] == \
        [(i, t, 0, k, v) for i, ((k, v), t) in enumerate(zip(records, stamps))]
    # Fetch v1 (0.9): magic 0, the stamps dropped
    got = fetch_all(sock, topic, 1, [(i, message(k, v)) for i, (k, v) in enumerate(records)], 3,
                    first_correlation_id=152)
    assert [(m["offset"], m["magic"], m["key"], m["value"]) for m in got] == \
        [(i, 0, k, v) for i, (k, v) in enumerate(records)]


def fetch_all(sock: socket.socket, topic: str, version: int, want: list[tuple[int, bytes]], high_watermark: int,
              first_correlation_id: int) -> list[dict]:
    """Fetch from 0 to the high watermark; each answer must be exactly the next whole messages of `want`."""
    got: list[dict] = []
    offset, correlation_id = 0, first_correlation_id
    while offset < high_watermark:
        answer = exchange(sock, fetch_request(correlation_id, topic, offset, version=version))
        error, hw, messages = parse_fetch(answer, correlation_id, topic, version)
        assert (error, hw) == (NO_ERROR, high_watermark)
        assert messages and messages[0]["offset"] == offset, f"no progress at offset {offset}"
        part = message_set(want[offset:offset + len(messages)])
        throttle = i32(0) if version >= 1 else b""
        assert answer == i32(correlation_id) + throttle + array([string(topic) + array([
            i32(0) + i16(0) + i64(high_watermark) + i32(len(part)) + part])])
        got += messages
        offset, correlation_id = offset + len(messages), correlation_id + 1
    return got


def offsets_v0_answer(correlation_id: int, topic: str, offsets: list[int], error: int = 0) -> bytes:
    return i32(correlation_id) + array([string(topic) + array([
        i32(0) + i16(error) + array([i64(o) for o in offsets])])])


def parse_offsets(answer: bytes, correlation_id: int, topic: str) -> tuple[int, list[int]]:
    r = Reader(answer)
    assert r.i32() == correlation_id
    assert r.count() == 1
    assert r.string() == topic
    assert r.count() == 1
    assert r.i32() == 0  # Partition
    error = r.i16()
    offsets = [r.i64() for _ in range(r.count())]
    r.done()
    return error, offsets


def test_offset_api_v0_by_hand(broker: BrokerThread, sock: socket.socket):
    topic = make_topic(broker, "golden-offsets")
    frame = offsets_request(61, topic, -1, 10)
    assert frame == klamm_request(2, 0, {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "timestamp": -1, "max_num_offsets": 10}]}]}, 61, broker.port)
    # an empty log: latest and earliest are both 0
    assert exchange(sock, frame) == offsets_v0_answer(61, topic, [0])
    assert exchange(sock, offsets_request(62, topic, -2, 10)) == offsets_v0_answer(62, topic, [0])

    n = 7
    assert exchange(sock, produce_request(63, topic, message_set(
        [(i, message(f"k{i}".encode(), f"v{i}".encode())) for i in range(n)]))) == \
        produce_v0_answer(63, topic, NO_ERROR, 0)
    answer = exchange(sock, offsets_request(64, topic, -1, 10))
    # latest: the log end offset, then the segments' base offsets, newest first (one segment here)
    assert parse_offsets(answer, 64, topic) == (NO_ERROR, [n, 0])
    assert answer == offsets_v0_answer(64, topic, [n, 0])
    assert answer == klamm_response(2, 0, 64, {"topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "error_code": 0, "old_style_offsets": [n, 0]}]}]})
    assert exchange(sock, offsets_request(65, topic, -1, 1)) == offsets_v0_answer(65, topic, [n])
    answer = exchange(sock, offsets_request(66, topic, -2, 10))
    assert parse_offsets(answer, 66, topic) == (NO_ERROR, [0])  # earliest: always one offset
    assert answer == offsets_v0_answer(66, topic, [0])
    assert exchange(sock, offsets_request(67, "golden-none", -1, 1)) == \
        offsets_v0_answer(67, "golden-none", [], error=UNKNOWN_TOPIC_OR_PARTITION)
