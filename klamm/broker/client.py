"""A broker's own connection to another broker: one request at a time, framed and encoded with kio.

Used between brokers (the replica fetchers, the transaction markers, the
controller channel, Raft) and by klamm's tools. Requests are dicts of Kafka's
field names, built into kio entities; responses come back as kio entities. A
connection that fails in any way is closed and raises `BrokerUnavailable`; the
caller reconnects with backoff.

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
import io
import itertools
import logging
import struct
import time
from collections.abc import Callable
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity
from klamm.protocol.api import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, message_types
from klamm.protocol.build import build
from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import SaslError

__all__ = ["BrokerConnection", "BrokerConnections", "BrokerUnavailable"]

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
REAUTH_FRACTION = 0.85  # of the session lifetime: reconnect before the server would close the connection


_MILLISECOND = datetime.timedelta(milliseconds=1)


class BrokerUnavailable(ConnectionError):
    """The other broker cannot be reached, or the connection broke."""


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float = 30.0,
                 security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.host, self.port, self.client_id = host, port, client_id
        self.timeout_s = timeout_s
        self.security = security
        self._session_ends = float("inf")  # monotonic time to replace the connection (SASL session lifetime)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)
        self._lock = asyncio.Lock()

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        """Send one request and return its decoded response; BrokerUnavailable on any failure."""
        async with self._lock:
            try:
                async with asyncio.timeout(timeout_s or self.timeout_s):
                    return await self._exchange(api_key, version, body)
            except SaslError as exc:
                self.close()
                log.warning("authentication to %s:%d with %s failed: %s", self.host, self.port,
                            self.security.mechanism, exc.message)
                raise BrokerUnavailable(f"{self.host}:{self.port}: {exc.message}") from exc
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                self.close()
                raise BrokerUnavailable(f"{self.host}:{self.port}: {exc!r}") from exc
            except asyncio.CancelledError:
                # Cancelled between sending and reading: the answer would arrive for the next request.
                self.close()
                raise

    async def _exchange(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        if self._writer is not None and time.monotonic() >= self._session_ends:
            self.close()
        if self._writer is None:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        correlation_id = next(self._correlation)
        types = message_types(api_key, version)
        header_type = RequestHeaderV2 if types.request_header_version == 2 else RequestHeaderV1
        buffer = io.BytesIO()
        entity_writer(header_type)(buffer, header_type(request_api_key=api_key, request_api_version=version,
                                                       correlation_id=correlation_id, client_id=self.client_id))
        entity_writer(types.request)(buffer, build(types.request, body))
        payload = buffer.getvalue()
        self._writer.write(_SIZE.pack(len(payload)) + payload)
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 0 < size <= MAX_RESPONSE_BYTES:
            raise ValueError(f"response of {size} bytes")
        frame = await self._reader.readexactly(size)
        header_type = ResponseHeaderV1 if types.response_header_version == 1 else ResponseHeaderV0
        header, position = entity_reader(header_type)(frame, 0)
        if header.correlation_id != correlation_id:
            raise ValueError(f"correlation id {header.correlation_id}, expected {correlation_id}")
        response, _ = entity_reader(types.response)(frame, position)
        return response

    async def _connect(self) -> None:
        tls = self.security.tls
        self._reader, self._writer = await asyncio.open_connection(
            self.host, self.port, ssl=tls, server_hostname=self.host if tls is not None else None)
        self._session_ends = float("inf")
        if self.security.mechanism is not None:
            await self._authenticate()

    async def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 until the mechanism completes; SaslError if refused."""
        mechanism = self.security.sasl_client()
        handshake = await self._exchange(SASL_HANDSHAKE_KEY, 1, {"mechanism": mechanism.mechanism})
        if handshake.error_code != ErrorCode.none:
            raise SaslError(ErrorCode(handshake.error_code), f"{mechanism.mechanism} is not enabled on the "
                            f"listener ({ErrorCode(handshake.error_code).name}); it offers "
                            f"{', '.join(handshake.mechanisms) or 'none'}")
        token: bytes | None = mechanism.initial()
        while token is not None:
            answer = await self._exchange(SASL_AUTHENTICATE_KEY, 2, {"auth_bytes": token})
            if answer.error_code != ErrorCode.none:
                raise SaslError(ErrorCode(answer.error_code), answer.error_message or ErrorCode(answer.error_code).name)
            token = mechanism.evaluate(bytes(answer.auth_bytes))
        lifetime_ms = answer.session_lifetime // _MILLISECOND
        if lifetime_ms > 0:
            self._session_ends = time.monotonic() + lifetime_ms * REAUTH_FRACTION / 1000

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


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
