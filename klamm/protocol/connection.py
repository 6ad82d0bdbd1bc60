"""The server side of one Kafka connection, sans-io (in the manner of h11).

Everything that decides how bytes become requests and responses become bytes
lives here: framing (4-byte big-endian size), request headers, the version
check, and response encoding into a send plan. The network layer feeds
`receive_data`, pulls `next_request()` until it returns `NEED_DATA`, and
writes what `encode_response` returns. A `ProtocolError` means: close this
connection (Kafka does the same for malformed or oversized frames).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from kio.serial import entity_reader

from klamm.protocol.api import API_VERSIONS_KEY, SASL_AUTHENTICATE_KEY, MessageTypes, message_types
from klamm.protocol.guard import check_lengths, null_check, read_request_header
from klamm.protocol.encoder import encode
from klamm.protocol.frame_views import decode_with_views, has_view_codec
from klamm.protocol.sendplan import Part

_SIZE = struct.Struct(">i")
_KEY_VERSION_CORRELATION = struct.Struct(">hhi")
_API_KEY = struct.Struct(">h")
PRODUCE_KEY = 0
# A produce request this large is decoded with its records left in its frame (klamm.protocol.frame_views):
# two copies of its records saved, against a few microseconds of decoding in Python and the copy of
# whatever followed it in the receive buffer.
OWN_FRAME_MIN_BYTES = 128 * 1024


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


class ProtocolError(Exception):
    """The peer broke the framing or sent an undecodable request: disconnect it."""


@dataclass(slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    types: MessageTypes | None  # None: unsupported version (only for ApiVersions)
    body: Any
    size: int  # frame size in bytes
    client_host: str = ""  # "/ip", as Kafka reports it; set by the network layer
    listener: str = ""  # the name of the listener it came in on; set by the network layer
    # Set by the network layer: gives back the request's share of queued.max.requests/.request.bytes.
    # A handler that parks (a long-poll fetch) calls it, as Kafka counts its purgatory in neither.
    leave_queue: Callable[[], None] = lambda: None
    session: Any = None  # who sent it (klamm.broker.authentication); set by the network layer
    raw: bool = False  # a bare SASL token after SaslHandshake v0, as a SaslAuthenticate v0 request


class ServerConnection:
    """Turns received bytes into requests and responses into send plans."""

    def __init__(self, max_request_size: int, supported: dict[int, tuple[int, int]]) -> None:
        self.max_request_size = max_request_size  # lower before a SASL client has authenticated
        self.raw_tokens = False  # frames are bare SASL tokens (after SaslHandshake v0), set by the network layer
        self._supported = supported
        self._buffer = bytearray()
        self._position = 0

    def receive_data(self, data: bytes) -> None:
        try:
            if self._position:
                del self._buffer[: self._position]
                self._position = 0
            self._buffer += data
        except BufferError:  # something decoded from the last frame kept a view of the buffer: leave it that one
            self._buffer = self._buffer[self._position:] + data
            self._position = 0

    def next_request(self) -> Request | _NeedData:
        available = len(self._buffer) - self._position
        if available < 4:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buffer, self._position)
        if self.raw_tokens:
            return self._raw_token(size, available)
        if size < 8 or size > self.max_request_size:
            raise ProtocolError(f"invalid frame size {size} (limit {self.max_request_size})")
        if available < 4 + size:
            return NEED_DATA
        start = self._position + 4
        self._position = start + size
        if size >= OWN_FRAME_MIN_BYTES and _API_KEY.unpack_from(self._buffer, start)[0] == PRODUCE_KEY:
            return self._decode(self._take_frame(start, size), size, views=True)
        # Decoded from a read-only view (kio's only kind), not a copy: kio's values are copies of their own,
        # so the view is released once decoded and the buffer may grow again.
        with memoryview(self._buffer)[start : start + size].toreadonly() as frame:
            return self._decode(frame, size)

    def _take_frame(self, start: int, size: int) -> memoryview:
        """The frame at `start`, in a buffer given up to it: the connection goes on in a new one."""
        owned, end = self._buffer, start + size
        self._buffer = bytearray(memoryview(owned)[end:])  # what followed it (usually nothing)
        self._position = 0
        return memoryview(owned)[start:end]

    def _raw_token(self, size: int, available: int) -> Request | _NeedData:
        if not 0 <= size <= self.max_request_size:
            raise ProtocolError(f"invalid SASL token size {size} (limit {self.max_request_size})")
        if available < 4 + size:
            return NEED_DATA
        start = self._position + 4
        self._position = start + size
        types = message_types(SASL_AUTHENTICATE_KEY, 0)
        body = types.request(auth_bytes=bytes(memoryview(self._buffer)[start : start + size]))
        return Request(SASL_AUTHENTICATE_KEY, 0, 0, None, types, body, size, raw=True)

    def _decode(self, frame: bytes | memoryview, size: int, views: bool = False) -> Request:
        """`views`: `frame` is the request's own, writable; its records fields stay in it if the spec decodes it."""
        api_key, version, correlation_id = _KEY_VERSION_CORRELATION.unpack_from(frame, 0)
        versions = self._supported.get(api_key)
        if versions is None or not versions[0] <= version <= versions[1]:
            if api_key == API_VERSIONS_KEY:
                # Kafka answers an unknown ApiVersions version with a v0 error response
                # listing what it supports, so the client can retry with a known one.
                return Request(api_key, version, correlation_id, None, None, None, size)
            raise ProtocolError(f"unsupported api key {api_key} version {version}")
        types = message_types(api_key, version)
        try:
            client_id, header_size = read_request_header(frame, types.request_header_version == 2)
            if views and isinstance(frame, memoryview) and has_view_codec(types.request, version):
                body = decode_with_views(types.request, version, frame, header_size)  # skips unknown tags
            else:
                if isinstance(frame, memoryview):
                    frame = frame.toreadonly()  # kio decodes read-only buffers only
                frame = check_lengths(types.request, frame, header_size)  # unknown tagged fields cut out
                body, _ = _reader(types.request)(frame, header_size)
            null_check(types.request)(body)
        except Exception as exc:  # kio raises several types for bad bytes
            raise ProtocolError(f"malformed request api_key={api_key} v{version}: {exc}") from exc
        return Request(api_key, version, correlation_id, client_id, types, body, size)

    def encode_response(self, request: Request, response: Any) -> list[Part]:
        """Frame `response` (a dict of kio field names, or a kio entity) for `request`.

        Bytes and file regions alternate in the result; the size prefix counts both.
        """
        if request.raw:  # the token alone; a failed authentication gets nothing, and the connection closes
            if _field(response, "error_code"):
                return []
            token = bytes(_field(response, "auth_bytes"))
            return [_SIZE.pack(len(token)) + token]
        types = request.types or message_types(API_VERSIONS_KEY, 0)
        flexible_header = request.types is not None and types.response_header_version == 1
        header = _SIZE.pack(request.correlation_id) + (b"\x00" if flexible_header else b"")
        body, regions = encode(types.response, response)
        size = len(header) + len(body) + sum(region.length for _, region in regions)
        parts: list[Part] = []
        start = 0
        prefix = _SIZE.pack(size) + header
        for position, region in regions:
            parts.append(prefix + body[start:position])
            parts.append(region)
            prefix, start = b"", position
        parts.append(prefix + body[start:])
        return [part for part in parts if len(part)]


def _field(response: Any, name: str) -> Any:
    return response[name] if isinstance(response, dict) else getattr(response, name)


@cache
def _reader(entity_type: type) -> Any:
    return entity_reader(entity_type)

