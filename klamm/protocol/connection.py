"""The server side of one Kafka connection, sans-io (in the manner of h11).

Everything that decides how bytes become requests and responses become bytes
lives here: framing (4-byte big-endian size), request headers, the version
check, and response encoding into a send plan. The network layer reads
into `get_buffer()` and reports it with `buffer_updated(n)` (an asyncio buffered
protocol: no copy of received bytes), pulls `next_request()` until it returns
`NEED_DATA`, and writes what `encode_response` returns. A `ProtocolError` means: close this
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
# The connections of a processor read in turn into one area of this size (ReceiveArea): small requests are
# decoded where they landed; a frame larger than what is left of it goes into a buffer of its own.
RECEIVE_AREA_BYTES = 64 * 1024
# Buffers of large frames are reused once no view of them is left (a fresh 1 MB bytearray costs its zeroing
# and its page faults, ~0.2 ms, more than the copy it saves): this many per area, of up to POOLED_FRAME_MAX.
FRAME_POOL_SIZE = 4
POOLED_FRAME_MAX = 8 * 1024 * 1024
_FRAME_ROUNDING = 64 * 1024  # frames of a stream differ a little in size: one buffer fits several


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


class ReceiveArea:
    """One buffer that the connections of a processor (one event loop) receive into in turn.

    A connection reads into it while it has nothing left unparsed, and its requests are decoded where they
    landed; what it leaves unparsed is moved into a buffer of its own before another connection reads into
    the area (`ServerConnection.spill`). So an idle connection holds no buffer, and a busy one copies only
    the start of a frame that a read cut. The area is read into again from its start only when no view of
    it is left: a view still held (something decoded kept one) keeps its bytes, and the area is replaced.
    """

    def __init__(self, size: int = RECEIVE_AREA_BYTES) -> None:
        self.size = size
        self._buffer: bytearray | None = None  # made at the first read: a connection's own area costs nothing idle
        self._user: ServerConnection | None = None  # whose unparsed bytes may be in it
        self._frames: list[bytearray] = []  # buffers of large frames handed to requests, oldest first

    def take(self, connection: ServerConnection) -> bytearray:
        """The area, for `connection` to read into from its start."""
        user = self._user
        if user is not None and user is not connection:
            user.spill()
        self._user = connection
        if self._buffer is None or _has_views(self._buffer):
            self._buffer = _bytearray(self.size)
        return self._buffer

    def leave(self, connection: ServerConnection) -> None:
        if self._user is connection:
            self._user = None

    def frame_buffer(self, need: int) -> bytearray:
        """A buffer of at least `need` bytes for a large frame, the caller's alone: one whose request is done
        with it (no view of it left), else a new one."""
        for index, buffer in enumerate(self._frames):
            if len(buffer) >= need and not _has_views(buffer):
                return self._frames.pop(index)
        return _bytearray(-(-need // _FRAME_ROUNDING) * _FRAME_ROUNDING)

    def recycle(self, buffer: bytearray) -> None:
        """`buffer` now holds a frame handed to its request: reused once the request lets go of it."""
        if OWN_FRAME_MIN_BYTES <= len(buffer) <= POOLED_FRAME_MAX:
            self._frames.append(buffer)
            if len(self._frames) > FRAME_POOL_SIZE:
                del self._frames[0]  # dropped: freed when its request is


def _bytearray(size: int) -> bytearray:
    """A zeroed bytearray with room for one more byte, so that _has_views never reallocates (copies) it."""
    buffer = bytearray(size + 1)
    buffer.pop()
    return buffer


def _has_views(buffer: bytearray) -> bool:
    """Whether a memoryview of `buffer` (or a slice of one) is alive: a bytearray with exports cannot resize."""
    try:
        buffer.append(0)
    except BufferError:
        return True
    buffer.pop()
    return False


class ServerConnection:
    """Turns received bytes into requests and responses into send plans."""

    def __init__(self, max_request_size: int, supported: dict[int, tuple[int, int]],
                 area: ReceiveArea | None = None) -> None:
        self.max_request_size = max_request_size  # lower before a SASL client has authenticated
        self.raw_tokens = False  # frames are bare SASL tokens (after SaslHandshake v0), set by the network layer
        self._supported = supported
        self._area = area if area is not None else ReceiveArea()
        # The received bytes not parsed yet are _buffer[_start:_end]. _buffer is the area's while _in_area
        # (then this connection is its user), else one of this connection's own, never read into twice at
        # the same place: a view of it never sees its bytes change.
        self._buffer = bytearray()
        self._in_area = False
        self._frame_buffer: bytearray | None = None  # from the area's pool, while a large frame arrives in it
        self._start = 0
        self._end = 0

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go: a writable view of at least one byte (asyncio's get_buffer)."""
        start, end = self._start, self._end
        if start == end:
            self._buffer = self._area.take(self)
            self._in_area = True
            self._start = self._end = 0
            return memoryview(self._buffer)
        need = self._frame_need()
        if need > end - start:  # a frame still arriving
            if OWN_FRAME_MIN_BYTES <= need <= POOLED_FRAME_MAX:  # into a frame buffer up to its end, handed to it
                if start or self._buffer is not self._frame_buffer:
                    self._into_frame_buffer(need)
                return memoryview(self._buffer)[self._end:need]
            if start + need > len(self._buffer) and (self._in_area or start or end == len(self._buffer)):
                # it does not fit where it began: a buffer of its own, which a frame larger than
                # POOLED_FRAME_MAX grows into as it arrives (its size prefix alone takes no more memory than that)
                self._own(min(need, max(2 * (end - start), POOLED_FRAME_MAX)))
        elif end == len(self._buffer):  # full: its size not known yet, or whole frames not pulled yet
            self._own(end - start + (4 if end - start < 4 else self._area.size))
        return memoryview(self._buffer)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        """`nbytes` were received into the view the last get_buffer gave."""
        self._end += nbytes

    def receive_data(self, data: bytes) -> None:
        """Bytes received elsewhere, copied in (tests, tools)."""
        view = memoryview(data)
        while view:
            room = self.get_buffer()
            count = min(len(room), len(view))
            room[:count] = view[:count]
            room.release()  # else the area would look still in use at the next get_buffer
            self.buffer_updated(count)
            view = view[count:]

    def spill(self) -> None:
        """Move what is unparsed out of the area into a buffer of this connection's own (another reads into it)."""
        if not self._in_area:
            return
        need = self._frame_need()
        if OWN_FRAME_MIN_BYTES <= need <= POOLED_FRAME_MAX and need > self._end - self._start:
            self._into_frame_buffer(need)  # where get_buffer would move it next: one copy, not a second buffer
        else:
            self._own(min(need, POOLED_FRAME_MAX))

    def close(self) -> None:
        """The connection is gone: its buffers go."""
        self._area.leave(self)
        self._buffer, self._in_area, self._start, self._end = bytearray(), False, 0, 0

    def _own(self, capacity: int) -> None:
        """Move the unparsed bytes to the start of a new buffer of this connection's, of at least `capacity`."""
        start, end = self._start, self._end
        own = bytearray(max(capacity, end - start))
        own[: end - start] = memoryview(self._buffer)[start:end]
        if self._in_area:
            self._area.leave(self)
        self._buffer, self._in_area, self._start, self._end = own, False, 0, end - start

    def _into_frame_buffer(self, need: int) -> None:
        """Move the start of a large frame into a buffer from the area's pool."""
        start, end = self._start, self._end
        buffer = self._area.frame_buffer(need)
        buffer[: end - start] = memoryview(self._buffer)[start:end]
        if self._in_area:
            self._area.leave(self)
        self._buffer, self._frame_buffer, self._in_area, self._start, self._end = buffer, buffer, False, 0, end - start

    def lacking(self) -> int:
        """The bytes the frame under way still lacks (0: it is whole, none is under way, or its size is not in)."""
        need = self._frame_need()
        return max(need - (self._end - self._start), 0) if need else 0

    def _frame_need(self) -> int:
        """4 + the size of the frame at _start, or 0 while its size is not in (or is one next_request refuses)."""
        if self._end - self._start < 4:
            return 0
        (size,) = _SIZE.unpack_from(self._buffer, self._start)
        low = 0 if self.raw_tokens else 8
        return 4 + size if low <= size <= self.max_request_size else 0

    def next_request(self) -> Request | _NeedData:
        available = self._end - self._start
        if available < 4:
            return NEED_DATA
        (size,) = _SIZE.unpack_from(self._buffer, self._start)
        if self.raw_tokens:
            return self._raw_token(size, available)
        if size < 8 or size > self.max_request_size:
            raise ProtocolError(f"invalid frame size {size} (limit {self.max_request_size})")
        if available < 4 + size:
            return NEED_DATA
        start = self._start + 4
        self._start = start + size
        if size >= OWN_FRAME_MIN_BYTES and _API_KEY.unpack_from(self._buffer, start)[0] == PRODUCE_KEY:
            return self._decode(self._take_frame(start, size), size, views=True)
        # Decoded from a read-only view (kio's only kind), not a copy: kio's values are copies of their own,
        # so the view is released once decoded (ReceiveArea checks that none is left before reusing its bytes).
        with memoryview(self._buffer)[start : start + size].toreadonly() as frame:
            request = self._decode(frame, size)
        self._drop_if_parsed()
        return request

    def _drop_if_parsed(self) -> None:
        """A buffer of this connection's own goes once all of it is parsed (the next read is into the area)."""
        if self._start == self._end and not self._in_area:
            self._buffer, self._start, self._end = bytearray(), 0, 0

    def _take_frame(self, start: int, size: int) -> memoryview:
        """The frame at `start`, writable and the request's own: the connection never reads into it again."""
        end = start + size
        if self._in_area:  # the area is read into again: a copy
            return memoryview(bytearray(memoryview(self._buffer)[start:end]))
        owned = self._buffer  # usually a frame buffer that holds just the frame (get_buffer): no copy
        self._buffer = bytearray(memoryview(owned)[end:self._end])  # what followed it (usually nothing)
        self._start, self._end, self._frame_buffer = 0, len(self._buffer), None
        self._area.recycle(owned)
        return memoryview(owned)[start:end]

    def _raw_token(self, size: int, available: int) -> Request | _NeedData:
        if not 0 <= size <= self.max_request_size:
            raise ProtocolError(f"invalid SASL token size {size} (limit {self.max_request_size})")
        if available < 4 + size:
            return NEED_DATA
        start = self._start + 4
        self._start = start + size
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

