"""The sans-io server connection: framing, headers, version checks, response encoding."""

from __future__ import annotations

import io
import os
import struct
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_reader, entity_writer

from klamm.broker.handlers import registry
from klamm.protocol.api import API_VERSIONS_KEY, message_types
from klamm.protocol.build import build
from klamm.protocol.connection import NEED_DATA, ProtocolError, Request, ServerConnection
from klamm.protocol.sendplan import FileRegion

pytestmark = pytest.mark.timeout(60)

SUPPORTED = {key: (api.min_version, api.max_version) for key, api in registry().items()}
MAX = 4096
PRODUCE, FETCH, METADATA = 0, 1, 3


def connection(max_size: int = MAX) -> ServerConnection:
    return ServerConnection(max_size, SUPPORTED)


def encode_request(key: int, version: int, body: dict[str, Any], correlation_id: int = 1,
                   client_id: str | None = "client") -> bytes:
    types = message_types(key, version)
    header_type = RequestHeaderV2 if types.request_header_version == 2 else RequestHeaderV1
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header_type(request_api_key=key, request_api_version=version,
                                                   correlation_id=correlation_id, client_id=client_id))
    entity_writer(types.request)(buffer, build(types.request, body))
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


def api_versions(correlation_id: int = 1, version: int = 3) -> bytes:
    return encode_request(API_VERSIONS_KEY, version, {"client_software_name": "librdkafka",
                                                      "client_software_version": "2.5.0"}, correlation_id)


def metadata(correlation_id: int = 1, topics: tuple[str, ...] = ("a", "b"), version: int = 12) -> bytes:
    return encode_request(METADATA, version, {"topics": [{"name": t} for t in topics],
                                              "allow_auto_topic_creation": False}, correlation_id)


def drain(conn: ServerConnection) -> list[Request]:
    out = []
    while (request := conn.next_request()) is not NEED_DATA:
        out.append(request)
    return out


def joined(parts: list[Any]) -> bytes:
    out = bytearray()
    for part in parts:
        if isinstance(part, FileRegion):
            out += os.pread(part.file.fileno(), part.length, part.position)
        else:
            out += part
    return bytes(out)


# ------------------------------------------------------------------ decoding ---
def test_decode_whole_request() -> None:
    conn = connection()
    data = metadata(correlation_id=42)
    conn.receive_data(data)
    request = conn.next_request()
    assert isinstance(request, Request)
    assert (request.api_key, request.api_version, request.correlation_id) == (METADATA, 12, 42)
    assert request.client_id == "client"
    assert request.types == message_types(METADATA, 12)
    assert [t.name for t in request.body.topics] == ["a", "b"]
    assert request.size == len(data) - 4
    assert conn.next_request() is NEED_DATA


def test_decode_one_byte_at_a_time() -> None:
    conn = connection()
    data = metadata(correlation_id=7)
    for byte in data[:-1]:
        conn.receive_data(bytes([byte]))
        assert conn.next_request() is NEED_DATA
    conn.receive_data(data[-1:])
    request = conn.next_request()
    assert isinstance(request, Request) and request.correlation_id == 7
    assert conn.next_request() is NEED_DATA


def test_decode_with_trailing_prefix_of_next_request() -> None:
    conn = connection()
    first, second = metadata(1), api_versions(2)
    for cut in (1, 3, 4, 5, len(second) - 1):
        conn = connection()
        conn.receive_data(first + second[:cut])
        request = conn.next_request()
        assert isinstance(request, Request) and request.correlation_id == 1
        assert conn.next_request() is NEED_DATA
        conn.receive_data(second[cut:])
        request = conn.next_request()
        assert isinstance(request, Request) and request.correlation_id == 2
        assert request.api_key == API_VERSIONS_KEY
        assert conn.next_request() is NEED_DATA


def test_pipelined_requests_in_one_buffer() -> None:
    conn = connection()
    frames = [metadata(i) if i % 2 else api_versions(i) for i in range(1, 21)]
    conn.receive_data(b"".join(frames))
    requests = drain(conn)
    assert [r.correlation_id for r in requests] == list(range(1, 21))
    assert [r.api_key for r in requests] == [METADATA if i % 2 else API_VERSIONS_KEY for i in range(1, 21)]


@given(data=st.data())
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_arbitrary_chunking_yields_the_same_requests(data: st.DataObject) -> None:
    stream = b"".join([metadata(1), api_versions(2), metadata(3, topics=("x" * 100,)), api_versions(4, 0)])
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=20)))
    conn = connection()
    seen = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        conn.receive_data(stream[start:end])
        seen += [r.correlation_id for r in drain(conn)]
    assert seen == [1, 2, 3, 4]


def test_v0_api_versions_and_null_client_id() -> None:
    conn = connection()
    conn.receive_data(encode_request(API_VERSIONS_KEY, 0, {}, 9, client_id=None))
    request = conn.next_request()
    assert isinstance(request, Request)
    assert request.client_id is None and request.api_version == 0


# ------------------------------------------------------------------- framing ---
def test_size_over_max_raises() -> None:
    conn = connection(max_size=64)
    conn.receive_data(struct.pack(">i", 65))  # refused from the size alone, before the body arrives
    with pytest.raises(ProtocolError):
        conn.next_request()


def test_size_at_max_is_accepted() -> None:
    data = metadata(topics=("t",))
    conn = connection(max_size=len(data) - 4)
    conn.receive_data(data)
    assert isinstance(conn.next_request(), Request)


@pytest.mark.parametrize("size", [-1, -(1 << 31), 0, 1, 7])
def test_negative_or_too_small_size_raises(size: int) -> None:
    conn = connection()
    conn.receive_data(struct.pack(">i", size) + b"\x00" * 16)
    with pytest.raises(ProtocolError):
        conn.next_request()


def test_unknown_api_key_raises() -> None:
    conn = connection()
    conn.receive_data(struct.pack(">ihhih", 10, 999, 0, 1, -1))
    with pytest.raises(ProtocolError):
        conn.next_request()


@pytest.mark.parametrize(("key", "version"), [(PRODUCE, 2), (PRODUCE, 12), (FETCH, 3), (METADATA, 99)])
def test_unsupported_version_of_other_api_raises(key: int, version: int) -> None:
    conn = connection()
    conn.receive_data(struct.pack(">ihhih", 10, key, version, 1, -1))
    with pytest.raises(ProtocolError):
        conn.next_request()


def test_api_versions_unsupported_version_answers_v0() -> None:
    conn = connection()
    body = b"whatever a future version carries"
    conn.receive_data(struct.pack(">ihhih", 10 + len(body), API_VERSIONS_KEY, 99, 77, -1) + body)
    request = conn.next_request()
    assert isinstance(request, Request)
    assert (request.api_key, request.api_version, request.correlation_id) == (API_VERSIONS_KEY, 99, 77)
    assert request.types is None and request.body is None
    # The handler's answer is built as v0; it is framed with header v0.
    v0 = message_types(API_VERSIONS_KEY, 0).response
    response = build(v0, {"error_code": 35, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]})
    data = joined(conn.encode_response(request, response))
    assert data == struct.pack(">iihihhh", 4 + 2 + 4 + 6, 77, 35, 1, 18, 0, 4)
    # The connection goes on.
    conn.receive_data(api_versions(78))
    assert conn.next_request().correlation_id == 78  # type: ignore[union-attr]


def test_garbage_body_raises() -> None:
    conn = connection()
    header = api_versions(1)[4:4 + 8 + 2 + len("client") + 1]
    payload = header + b"\xff" * 12
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    with pytest.raises(ProtocolError):
        conn.next_request()


_VALID_HEADERS = [(key, version) for key, (low, high) in sorted(SUPPORTED.items()) for version in (low, high)]


_RIGID_HEADERS = [(k, v) for k, v in _VALID_HEADERS if not message_types(k, v).flexible]


@given(choice=st.sampled_from(_RIGID_HEADERS), tail=st.binary(max_size=200))
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_body_only_raises_protocol_error(choice: tuple[int, int], tail: bytes) -> None:
    """Random bytes after a valid header: a Request or ProtocolError, nothing else."""
    key, version = choice
    payload = struct.pack(">hhih", key, version, 5, 3) + b"abc" + tail
    conn = connection(max_size=1 << 20)
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    try:
        request = conn.next_request()
    except ProtocolError:
        return
    assert isinstance(request, Request)
    assert request.correlation_id == 5


@given(payload=st.binary(min_size=8, max_size=300))
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_any_frame_only_raises_protocol_error(payload: bytes) -> None:
    conn = connection(max_size=1 << 20)
    payload = payload[:4] + _safe_tail(payload[4:])
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    try:
        conn.next_request()
    except ProtocolError:
        pass


# ------------------------------------------------------------------ encoding ---
def _request(conn: ServerConnection, frame: bytes) -> Request:
    conn.receive_data(frame)
    request = conn.next_request()
    assert isinstance(request, Request)
    return request


def _check_frame(parts: list[Any]) -> bytes:
    data = joined(parts)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return data[4:]


def test_encode_response_header_v0_for_non_flexible() -> None:
    conn = connection()
    request = _request(conn, metadata(correlation_id=11, version=8))
    types = message_types(METADATA, 8)
    response = build(types.response, {"cluster_id": "c", "controller_id": 1})
    body = _check_frame(conn.encode_response(request, response))
    assert struct.unpack_from(">i", body)[0] == 11
    decoded, consumed = entity_reader(types.response)(body, 4)
    assert consumed == len(body) - 4
    assert decoded == response


def test_encode_response_header_v1_for_flexible() -> None:
    conn = connection()
    request = _request(conn, metadata(correlation_id=12, version=12))
    types = message_types(METADATA, 12)
    response = build(types.response, {"cluster_id": "c", "controller_id": 1})
    body = _check_frame(conn.encode_response(request, response))
    assert struct.unpack_from(">i", body)[0] == 12
    assert body[4] == 0  # empty tagged fields of response header v1
    decoded, consumed = entity_reader(types.response)(body, 5)
    assert consumed == len(body) - 5
    assert decoded == response


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_response_always_header_v0(version: int) -> None:
    conn = connection()
    request = _request(conn, encode_request(API_VERSIONS_KEY, version, {}, 13))
    types = message_types(API_VERSIONS_KEY, version)
    response = build(types.response, {"api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}]})
    body = _check_frame(conn.encode_response(request, response))
    assert struct.unpack_from(">i", body)[0] == 13
    decoded, consumed = entity_reader(types.response)(body, 4)  # no tag byte after the correlation id
    assert consumed == len(body) - 4
    assert decoded == response


def test_fetch_response_with_file_region() -> None:
    conn = connection()
    request = _request(conn, encode_request(FETCH, 12, {"max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                                        "topics": []}, 21))
    types = message_types(FETCH, 12)
    segment = b"0123456789" * 50
    with tempfile.TemporaryFile() as file:
        file.write(b"HEAD" + segment + b"TAIL")
        file.flush()
        region = FileRegion(file, 4, len(segment))

        def partition(index: int, records: Any) -> dict[str, Any]:
            return {"partition_index": index, "high_watermark": 10, "last_stable_offset": 10,
                    "log_start_offset": 0, "preferred_read_replica": -1, "records": records}

        response = build(types.response, {"responses": [{"topic": "t", "partitions": [
            partition(0, region), partition(1, b""), partition(2, FileRegion(file, 0, 4))]}]})
        parts = conn.encode_response(request, response)
        regions = [p for p in parts if isinstance(p, FileRegion)]
        assert regions == [region, FileRegion(file, 0, 4)]
        assert all(isinstance(p, (bytes, FileRegion)) for p in parts)
        assert parts.index(region) > 0 and not isinstance(parts[0], FileRegion)
        data = joined(parts)
        (size,) = struct.unpack_from(">i", data)
        assert size == sum(len(p) for p in parts) - 4 == len(data) - 4
        # The same response with the bytes inline encodes to the same bytes.
        inline = build(types.response, {"responses": [{"topic": "t", "partitions": [
            partition(0, segment), partition(1, b""), partition(2, b"HEAD")]}]})
        assert joined(conn.encode_response(request, inline)) == data
        assert data[8] == 0  # flexible: response header v1
        decoded, _ = entity_reader(types.response)(data[4:], 5)
        assert decoded.responses[0].partitions[0].records == segment


# ----------------------------------------------------- huge compact arrays ---
_DECODE_IN_CHILD = r"""
import struct, sys
from klamm.broker.handlers import registry
from klamm.protocol.api import message_types
from klamm.protocol.connection import ProtocolError, ServerConnection
supported = {k: (a.min_version, a.max_version) for k, a in registry().items()}
key, version, tail = int(sys.argv[1]), int(sys.argv[2]), bytes.fromhex(sys.argv[3])
header = struct.pack(">hhih", key, version, 5, 1) + b"c"
if message_types(key, version).request_header_version == 2:
    header += b"\x00"
conn = ServerConnection(1 << 20, supported)
conn.receive_data(struct.pack(">i", len(header + tail)) + header + tail)
try:
    conn.next_request()
except ProtocolError:
    print("protocol-error")
"""


def _safe_tail(tail: bytes) -> bytes:
    """No run of more than 3 continuation bytes, so no varint reaches 2**28 (see the xfail below)."""
    out, run = bytearray(), 0
    for byte in tail:
        if byte & 0x80:
            run += 1
            if run > 3:
                byte &= 0x7F
                run = 0
        else:
            run = 0
        out.append(byte)
    return bytes(out)


@given(choice=st.sampled_from(_VALID_HEADERS), tail=st.binary(max_size=200))
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
def test_fuzz_flexible_body_only_raises_protocol_error(choice: tuple[int, int], tail: bytes) -> None:
    key, version = choice
    header = struct.pack(">hhih", key, version, 5, 1) + b"c"
    if message_types(key, version).request_header_version == 2:
        header += b"\x00"
    payload = header + _safe_tail(tail)
    conn = connection(max_size=1 << 20)
    conn.receive_data(struct.pack(">i", len(payload)) + payload)
    try:
        conn.next_request()
    except ProtocolError:
        pass


@pytest.mark.parametrize(("key", "version"), [(METADATA, 12), (19, 7), (20, 6), (37, 3)])
def test_huge_compact_array_length_is_a_protocol_error(key: int, version: int) -> None:
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", _DECODE_IN_CHILD, str(key), str(version), "ffffffff0f"],
                           capture_output=True, timeout=60, text=True)
    assert child.returncode == 0, child.stderr[-500:]
    assert child.stdout.strip() == "protocol-error"


def test_bare_sasl_tokens_after_a_v0_handshake() -> None:
    """In raw-token mode (after SaslHandshake v0) a frame is a SASL token of any size up to the limit, handed
    on as SaslAuthenticate v0; its answer is the token alone, or nothing when authentication failed."""
    connection = ServerConnection(100, {36: (0, 2)})
    connection.raw_tokens = True
    connection.receive_data(struct.pack(">i", 0) + struct.pack(">i", 3) + b"abc" + struct.pack(">i", 5) + b"de")
    empty, token = connection.next_request(), connection.next_request()
    assert isinstance(empty, Request) and isinstance(token, Request)
    assert (empty.api_key, empty.api_version, empty.raw, bytes(empty.body.auth_bytes)) == (36, 0, True, b"")
    assert bytes(token.body.auth_bytes) == b"abc"
    assert connection.next_request() is NEED_DATA  # 2 of 5 bytes
    assert connection.encode_response(token, {"error_code": 0, "auth_bytes": b"xyz"}) == [b"\x00\x00\x00\x03xyz"]
    assert connection.encode_response(token, {"error_code": 58, "auth_bytes": b""}) == []
    big = ServerConnection(100, {36: (0, 2)})
    big.raw_tokens = True
    big.receive_data(struct.pack(">i", 101) + bytes(101))
    with pytest.raises(ProtocolError, match="invalid SASL token size 101"):
        big.next_request()


def test_lacking_counts_what_the_frame_under_way_still_needs() -> None:
    conn = ServerConnection(1 << 20, SUPPORTED)
    frame = encode_request(API_VERSIONS_KEY, 3, {"client_software_name": "a" * 300_000,
                                                 "client_software_version": "1"}, 5)
    assert conn.lacking() == 0  # nothing received
    conn.receive_data(frame[:2])
    assert conn.lacking() == 0  # its size not in yet
    conn.receive_data(frame[2:100_000])
    assert conn.lacking() == len(frame) - 100_000
    conn.receive_data(frame[100_000:] + frame[:10])  # whole, and the start of the next
    assert conn.lacking() == 0
    assert [r.correlation_id for r in drain(conn)] == [5]
    assert conn.lacking() == len(frame) - 10
