"""A broker's own connection to another broker: one request at a time, framed and encoded with kio.

Used between brokers (the replica fetchers, the transaction markers, the
controller channel, Raft) and by klamm's tools. Requests are dicts of Kafka's
field names, built into kio entities; responses come back as kio entities. A
connection that fails in any way is closed and raises `BrokerUnavailable`; the
caller reconnects with backoff.

Responses are received straight into one buffer per connection (an
`asyncio.BufferedProtocol`): the socket reads into it, and `request` decodes
from it with kio. `request_views` decodes with the spec codec instead and hands
the records fields back as slices of that buffer, valid until the next request
on the connection: a replica fetcher appends the leader's batches from there,
without the two copies of a stream reader and the one of kio's records decoder.

A connection to a secured listener (klamm.broker.peer_security) starts with TLS
and/or SASL: SaslHandshake v1, then SaslAuthenticate v2 tokens of the client
mechanism until it completes. When the server gives the session a lifetime
(connections.max.reauth.ms, KIP-368), the connection is replaced by a new,
newly authenticated one before 85 % of it has passed, as Kafka's clients
re-authenticate before the server would close them.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
import struct
import time
from collections.abc import Callable
from typing import Any

from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader

from klamm.broker.low_water import ReceiveLowWater
from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity
from klamm.protocol.api import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, message_types
from klamm.protocol.envelope import encode_request
from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import SaslError
from klamm.protocol.schema import records_view_codec

__all__ = ["BrokerConnection", "BrokerConnections", "BrokerUnavailable"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
REAUTH_FRACTION = 0.85  # of the session lifetime: reconnect before the server would close the connection
_FIRST_READ = 64 * 1024  # room offered to a read before the frame's size is known


_MILLISECOND = datetime.timedelta(milliseconds=1)


class BrokerUnavailable(ConnectionError):
    """The other broker cannot be reached, or the connection broke."""


class _ResponseReader(asyncio.BufferedProtocol):
    """Receives size-prefixed response frames into one buffer, reused from frame to frame.

    One request is in flight at a time, so a frame ends what the socket has to
    say: bytes past it are an error. The buffer grows (a new one: views into the
    old stay valid) to the largest frame seen.
    """

    def __init__(self) -> None:
        self._buffer = bytearray(_FIRST_READ)
        self._filled = 0
        self._frame_end = 0  # 4 + the frame's size once its size prefix is in, else 0
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._writable: asyncio.Future[None] | None = None  # set while the transport's write buffer is full
        self.transport: asyncio.Transport | None = None
        self._low_water: ReceiveLowWater | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._low_water = ReceiveLowWater.of(transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self._buffer)[self._filled:self._frame_end or len(self._buffer)]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if not self._frame_end and self._filled >= 4:
            (size,) = _SIZE.unpack_from(self._buffer)
            if not 0 < size <= MAX_RESPONSE_BYTES:
                self._fail(ValueError(f"response of {size} bytes"))
                return
            self._frame_end = 4 + size
            if self._frame_end > len(self._buffer):
                grown = bytearray(self._frame_end)
                grown[:self._filled] = memoryview(self._buffer)[:self._filled]
                self._buffer = grown
        if self._low_water is not None:
            self._low_water.expect(self._frame_end - self._filled if self._frame_end else 0)
        if self._frame_end and self._filled >= self._frame_end:
            if self._filled > self._frame_end:
                self._fail(ValueError(f"{self._filled - self._frame_end} bytes past the response"))
                return
            self._wake()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost tells the reader

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("connection closed by the other broker"))

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    async def drain(self) -> None:
        if self._error is not None:
            raise self._error
        if self._writable is not None:
            await self._writable
            if self._error is not None:
                raise self._error

    async def frame(self) -> memoryview:
        """The next response frame (after its size): a view of the buffer, valid until the next frame is read."""
        if not self._complete():
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
            if not self._complete():
                assert self._error is not None
                raise self._error
        frame = memoryview(self._buffer)[4:self._frame_end].toreadonly()  # kio decodes read-only buffers only
        self._filled = self._frame_end = 0
        return frame

    def _complete(self) -> bool:
        return self._frame_end > 0 and self._filled == self._frame_end

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        if self.transport is not None:
            self.transport.close()
        self._wake()
        self.resume_writing()  # a drain waiting for room raises the error

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0,
                 security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.timeout_s = timeout_s
        self.security = security
        self._session_ends = float("inf")  # monotonic time to replace the connection (SASL session lifetime)
        self._reader: _ResponseReader | None = None
        self._correlation = itertools.count(1)
        self._lock = asyncio.Lock()
        self._try: asyncio.Timeout | None = None  # the timeout of the request in flight
        self._resets = 0

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        """Send one request and return its decoded response (a kio entity); BrokerUnavailable on any failure."""
        return await self._request(api_key, version, body, timeout_s, _decode_kio)

    async def request_views(self, api_key: int, version: int, body: dict[str, Any],
                            timeout_s: float | None = None) -> dict[str, Any]:
        """As `request`, the response a dict of the spec codec whose records fields are memoryviews of the
        connection's receive buffer: valid until the next request on this connection."""
        return await self._request(api_key, version, body, timeout_s, _decode_views)

    async def _request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float | None,
                       decode: _Decoder) -> Any:
        resets = self._resets
        async with self._lock:
            if self._resets != resets:
                raise BrokerUnavailable(f"{self.host}:{self.port}: given up (reset while waiting its turn)")
            try:
                async with asyncio.timeout(timeout_s or self.timeout_s) as self._try:
                    return await self._exchange(api_key, version, body, decode)
            except SaslError as exc:
                self.close()
                log.warning("authentication to %s:%d with %s failed: %s", self.host, self.port,
                            self.security.mechanism, exc.message)
                raise BrokerUnavailable(f"{self.host}:{self.port}: {exc.message}") from exc
            except (OSError, EOFError, TimeoutError, ValueError) as exc:
                self.close()
                reason = "given up (reset)" if self._resets != resets else repr(exc)
                raise BrokerUnavailable(f"{self.host}:{self.port}: {reason}") from exc
            except asyncio.CancelledError:
                # Cancelled between sending and reading: the answer would arrive for the next request.
                self.close()
                raise
            finally:
                self._try = None

    async def _exchange(self, api_key: int, version: int, body: dict[str, Any], decode: _Decoder) -> Any:
        if self._reader is not None and time.monotonic() >= self._session_ends:
            self.close()
        if self._reader is None:
            await self._connect()
        reader = self._reader
        assert reader is not None and reader.transport is not None
        correlation_id = next(self._correlation)
        types = message_types(api_key, version)
        payload = encode_request(api_key, version, body, self.client_id, correlation_id)
        reader.transport.write(_SIZE.pack(len(payload)) + payload)
        await reader.drain()
        frame = await reader.frame()
        header_type = ResponseHeaderV1 if types.response_header_version == 1 else ResponseHeaderV0
        header, position = entity_reader(header_type)(frame, 0)
        if header.correlation_id != correlation_id:
            raise ValueError(f"correlation id {header.correlation_id}, expected {correlation_id}")
        return decode(types.response, version, frame, position)

    async def _connect(self) -> None:
        tls = self.security.tls
        _, self._reader = await asyncio.get_running_loop().create_connection(
            _ResponseReader, self.host, self.port, ssl=tls, server_hostname=self.host if tls is not None else None)
        self._session_ends = float("inf")
        if self.security.mechanism is not None:
            await self._authenticate()

    async def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 until the mechanism completes; SaslError if refused."""
        mechanism = self.security.sasl_client()
        handshake = await self._exchange(SASL_HANDSHAKE_KEY, 1, {"mechanism": mechanism.mechanism}, _decode_kio)
        if handshake.error_code != ErrorCode.none:
            raise SaslError(ErrorCode(handshake.error_code), f"{mechanism.mechanism} is not enabled on the "
                            f"listener ({ErrorCode(handshake.error_code).name}); it offers "
                            f"{', '.join(handshake.mechanisms) or 'none'}")
        token: bytes | None = mechanism.initial()
        while token is not None:
            answer = await self._exchange(SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": token}, _decode_kio)
            if answer.error_code != ErrorCode.none:
                raise SaslError(ErrorCode(answer.error_code), answer.error_message or ErrorCode(answer.error_code).name)
            token = mechanism.evaluate(bytes(answer.auth_bytes))
        lifetime_ms = answer.session_lifetime // _MILLISECOND
        if lifetime_ms > 0:
            self._session_ends = time.monotonic() + lifetime_ms * REAUTH_FRACTION / 1000

    def reset(self) -> None:
        """Give up the request in flight now (connecting, sending or awaiting its answer) and those waiting their
        turn: each fails with BrokerUnavailable, and the connection is made anew for the next."""
        self._resets += 1
        if self._try is not None and not self._try.expired():
            self._try.reschedule(asyncio.get_running_loop().time())
        self.close()

    def close(self) -> None:
        if self._reader is not None and self._reader.transport is not None:
            self._reader.transport.close()
        self._reader = None


_Decoder = Callable[[type, int, memoryview, int], Any]


def _decode_kio(response_type: type, version: int, frame: memoryview, position: int) -> Any:
    response, _ = entity_reader(response_type)(frame, position)
    return response


def _decode_views(response_type: type, version: int, frame: memoryview, position: int) -> dict[str, Any]:
    codec = records_view_codec("clients", response_type.__name__, version)
    response, end = codec.read(frame, position)
    if end != len(frame):
        raise ValueError(f"{len(frame) - end} bytes past {response_type.__name__} v{version}")
    return response


class BrokerConnections:
    """One connection to each other broker, made anew when the broker's registered endpoint changes."""

    def __init__(self, endpoint_of: Callable[[int], tuple[str, int] | None], client_id: str, timeout_s: float,
                 security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.endpoint_of = endpoint_of
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security
        self._connections: dict[int, BrokerConnection] = {}

    def get(self, node_id: int) -> BrokerConnection | None:
        """The connection to `node_id`; None while the metadata has no endpoint for it."""
        endpoint = self.endpoint_of(node_id)
        if endpoint is None:
            return None
        connection = self._connections.get(node_id)
        if connection is None or (connection.host, connection.port) != endpoint:
            if connection is not None:
                connection.close()
            connection = self._connections[node_id] = BrokerConnection(endpoint[0], endpoint[1], self.client_id,
                                                                       self.timeout_s, self.security)
        return connection

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
