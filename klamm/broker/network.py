"""The network edge: an acceptor, N processors, and one protocol object per connection.

A connection decodes requests with the sans-io `ServerConnection`, starts one
handler task per request (in arrival order, so appends from pipelined produce
requests happen in order: handlers do their synchronous work before their
first await), and writes responses strictly in request order from a single
writer task. File regions in a response go out with the loop's native
`sendfile` when it has one (the stock selector loop) and with `os.pread` into
memory otherwise (uvloop). Socket errors end the connection at this one edge.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from klamm.protocol.connection import NEED_DATA, ProtocolError, Request, ServerConnection
from klamm.protocol.sendplan import FileRegion, Part

log = logging.getLogger("klamm.network")

MAX_IN_FLIGHT = 100  # per connection; reading pauses beyond this


class CloseConnection(Exception):
    """A handler asks to drop the connection (e.g. an acks=0 produce that failed)."""


Handler = Callable[[Request, "ClientConnection"], Awaitable[Any]]


class _FileShim:
    """What `loop.sendfile` needs of a file: its descriptor; it seeks after sending."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, *_: int) -> None:  # the fd is shared by readers: keep its offset alone
        pass


class ClientConnection(asyncio.Protocol):
    def __init__(self, processor: Processor) -> None:
        self.processor = processor
        self.peer = "?"
        self.client_host = ""
        self.last_active = time.monotonic()
        self._sans_io = ServerConnection(processor.max_request_size, processor.supported())
        self._transport: asyncio.Transport | None = None
        self._pending: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._requests: collections.deque[Request] = collections.deque()
        self._wakeup = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._reading_paused = False
        self._closed = False
        self._writer_task: asyncio.Task[None] | None = None

    # asyncio.Protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = f"/{peer[0]}" if peer else ""
        self.processor.connections.add(self)
        self.processor.connections_accepted += 1
        self._writer_task = asyncio.ensure_future(self._write_responses())

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        self._sans_io.receive_data(data)
        try:
            while not self._closed:
                request = self._sans_io.next_request()
                if request is NEED_DATA:
                    break
                self._dispatch(request)  # type: ignore[arg-type]
        except ProtocolError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.processor.connections.discard(self)
        for future in self._pending:
            future.cancel()
        self._wakeup.set()
        self._can_write.set()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # request flow
    def _dispatch(self, request: Request) -> None:
        request.client_host = self.client_host
        future = asyncio.ensure_future(self.processor.handler(request, self))
        self._pending.append(future)
        self._requests.append(request)
        self._wakeup.set()
        if len(self._pending) >= MAX_IN_FLIGHT and not self._reading_paused and self._transport:
            self._transport.pause_reading()
            self._reading_paused = True

    async def _write_responses(self) -> None:
        try:
            while not self._closed:
                if not self._pending:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                future = self._pending[0]
                request = self._requests[0]
                try:
                    response = await future
                except CloseConnection:
                    self.close()
                    return
                except asyncio.CancelledError:
                    if self._closed:
                        return
                    raise
                except Exception:
                    log.exception("handler failed for api_key=%s v%s from %s", request.api_key, request.api_version, self.peer)
                    self.close()
                    return
                self._pending.popleft()
                self._requests.popleft()
                if self._reading_paused and len(self._pending) < MAX_IN_FLIGHT // 2 and self._transport:
                    self._transport.resume_reading()
                    self._reading_paused = False
                if response is not None:
                    await self._send(self._sans_io.encode_response(request, response))
        except (ConnectionError, OSError, asyncio.exceptions.SendfileNotAvailableError, RuntimeError) as exc:
            # The peer went away mid-response (sendfile reports it as "not available",
            # a closed transport as RuntimeError): this connection ends, nothing else.
            log.debug("connection %s lost while writing: %s", self.peer, exc)
            self.close()

    async def _send(self, parts: list[Part]) -> None:
        transport = self._transport
        assert transport is not None
        for part in parts:
            if self._closed:
                return
            if isinstance(part, FileRegion):
                await self._send_file(transport, part)
            else:
                transport.write(part)
            if not self._can_write.is_set():
                await self._can_write.wait()
        self.processor.bytes_sent += sum(len(p) for p in parts)

    async def _send_file(self, transport: asyncio.Transport, region: FileRegion) -> None:
        if not self.processor.native_sendfile:
            transport.write(os.pread(region.fd, region.length, region.position))
            return
        position, length = region.position, region.length
        if transport.get_write_buffer_size() == 0:
            # Nothing queued ahead of the file bytes: hand them to the kernel now. Only
            # what the socket buffer cannot take goes through loop.sendfile, which costs
            # several loop turns (pause reading, wait for an empty buffer, writability).
            try:
                sent = os.sendfile(transport.get_extra_info("socket").fileno(), region.fd, position, length)
            except BlockingIOError:
                sent = 0
            position, length = position + sent, length - sent
        if length:
            loop = asyncio.get_running_loop()
            await loop.sendfile(transport, _FileShim(region.fd), position, length, fallback=False)  # type: ignore[arg-type]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._transport is not None:
                self._transport.close()
            self._wakeup.set()


class Processor:
    """A share of the connections, as Kafka's network threads are; sweeps idle ones."""

    def __init__(self, index: int, handler: Handler, supported: Callable[[], dict[int, tuple[int, int]]],
                 max_request_size: int, idle_ms: int, native_sendfile: bool) -> None:
        self.index = index
        self.handler = handler
        self.supported = supported
        self.max_request_size = max_request_size
        self.idle_seconds = idle_ms / 1000
        self.native_sendfile = native_sendfile
        self.connections: set[ClientConnection] = set()
        self.connections_accepted = 0  # for metrics
        self.bytes_sent = 0
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._sweeper = asyncio.ensure_future(self._sweep_idle())

    async def _sweep_idle(self) -> None:
        interval = max(0.05, min(self.idle_seconds / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self.idle_seconds
            for connection in [c for c in self.connections if c.last_active < deadline and not c._pending]:
                log.info("closing idle connection %s", connection.peer)
                connection.close()

    def close_all(self) -> None:
        if self._sweeper:
            self._sweeper.cancel()
        for connection in list(self.connections):
            connection.close()


class Acceptor:
    """Listens on one address and hands each new connection to the next processor."""

    def __init__(self, host: str, port: int, processors: list[Processor]) -> None:
        self.host = host
        self.port = port
        self.processors = processors
        self._next = 0
        self._server: asyncio.base_events.Server | None = None

    def _new_connection(self) -> ClientConnection:
        processor = self.processors[self._next % len(self.processors)]
        self._next += 1
        return ClientConnection(processor)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(self._new_connection, self.host or None, self.port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
