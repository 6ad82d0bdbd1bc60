"""The network edge: an acceptor, N processors, and one protocol object per connection.

A connection is an asyncio buffered protocol: the socket reads straight into the
buffer of the sans-io `ServerConnection` (the processor's `ReceiveArea`, or a
frame's own buffer), which decodes requests from there. It starts
their handlers in arrival order (so appends from pipelined produce requests
happen in order: handlers do their synchronous work before their first await).
The APIs of `Processor.run_at_once` (Produce, Fetch) run in the read itself, up
to their first wait, and get a task only if they wait: most produce requests
never do, and a task per request was the largest cost the request path added of
its own. One read dispatches requests for a slice of time (`READ_SLICE_S`), the
rest of what is buffered a turn later, the socket not read meanwhile: a client
pipelining hundreds of requests does not hold every other connection up.
Responses go out strictly in request order: those ready after a read (or when a
handler's task ends) are written together, one send for a burst of pipelined
requests. File regions in a response go to `os.sendfile` at once when
the socket takes them, else to the loop's native `sendfile` in a task (the stock
selector loop), and through `os.pread` into memory where there is none (uvloop,
TLS); each region's file lease is released once it is sent or its response
dropped. Socket errors end the connection at this one edge.

A request that fails (its handler raises, or its response cannot be encoded)
closes its connection after one log line: the client sees EOF and retries,
rather than waiting forever on a connection that will never answer. An error of
klamm's own anywhere in the read or send path closes the connection the same
way (asyncio would close it silently for an OSError); a socket that fails on its
own (reset by the peer) is logged at debug, as Kafka's Selector does.

Kafka's SocketServer limits, all static:
  * queued.max.requests / queued.max.request.bytes (`RequestBudget`): requests
    read but not yet handled, across every connection; when either is reached,
    connections stop reading until a handler finishes. A parked long-poll fetch
    counts until it answers.
  * max.connections (`ConnectionQuotas`): at the limit the acceptor stops
    accepting (new connections wait in the listen backlog) until one closes;
    max.connections.per.ip (and its overrides): a connection over its address's
    limit is closed at once.
  * socket.send/receive.buffer.bytes (SO_SNDBUF/SO_RCVBUF, -1 the OS default) and
    socket.listen.backlog.size. A connection sending a request larger than its
    receive buffer holds gets a larger one (klamm.broker.low_water), so that the
    request wakes the loop once it is in rather than at each window's worth.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import os
import socket
import ssl
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import Any

from klamm.broker.authentication import ANONYMOUS, SaslListener, SaslSession, Session, session_of_certificate
from klamm.broker.low_water import ReceiveLowWater
from klamm.broker.principal_mapping import NoMatchingRule, PrincipalMapper
from klamm.config.errors import ConfigError
from klamm.protocol.connection import NEED_DATA, ProtocolError, ReceiveArea, Request, ServerConnection
from klamm.protocol.sendplan import FileRegion, Part, release_regions

log = logging.getLogger("klamm.network")

MAX_IN_FLIGHT = 100  # per connection; reading pauses beyond this
# A connection's read hands the loop on after this much handling, the rest of its buffered requests a turn later:
# a client pipelining hundreds of requests (each rolling a segment, say) must not hold up every other connection.
READ_SLICE_S = 0.001
TLS_HANDSHAKE_TIMEOUT_S = 10.0  # a connection that does not finish its TLS handshake by then is closed
USE_OS_DEFAULT = -1  # socket.*.buffer.bytes


class CloseConnection(Exception):
    """A handler asks to drop the connection (e.g. an acks=0 produce that failed)."""


Handler = Callable[[Request, "ClientConnection"], Awaitable[Any]]


@dataclass(frozen=True)
class SocketSettings:
    """The socket options of the listener and of every accepted connection."""

    send_buffer_bytes: int = USE_OS_DEFAULT
    receive_buffer_bytes: int = USE_OS_DEFAULT
    listen_backlog: int = 50


class RequestBudget:
    """Requests read but not yet handled, across all connections (queued.max.requests/.request.bytes).

    Like Kafka's memory pool (not strict), a request is admitted while the totals are
    below the limits, so one request larger than the byte limit still gets through.
    """

    def __init__(self, max_requests: int, max_bytes: int = -1) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes  # <= 0: unbounded (Kafka's -1)
        self.requests = 0
        self.bytes = 0
        self._waiting: dict[ClientConnection, None] = {}  # ordered: the longest waiting first
        self._waking = False  # in give_back's loop

    @property
    def full(self) -> bool:
        return self.requests >= self.max_requests or (self.max_bytes > 0 and self.bytes >= self.max_bytes)

    def take(self, size: int) -> None:
        self.requests += 1
        self.bytes += size

    def give_back(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        if self._waking:
            return  # a request a connection read below ran at once and is done: the loop below wakes the next
        self._waking = True
        try:
            while self._waiting and not self.full:
                connection = next(iter(self._waiting))
                del self._waiting[connection]
                connection.read_requests()
        finally:
            self._waking = False

    def wait(self, connection: ClientConnection) -> None:
        self._waiting[connection] = None

    def forget(self, connection: ClientConnection) -> None:
        self._waiting.pop(connection, None)


class _SendfilePump:
    """The rest of a file region the socket could not take at once, sent as the socket drains.

    One writer, on a duplicate of the socket's descriptor (the transport owns the descriptor itself), stays
    registered until the region is sent: loop.sendfile unregisters and registers its writer at every full
    buffer and pauses reading around the transfer, several system calls and loop turns a wake-up. With a
    client's small receive window (Java's 64 KiB) a megabyte takes a dozen wake-ups, which doubled the
    broker's CPU per megabyte sent (BENCHMARKS.md).
    """

    __slots__ = ("_loop", "_fd", "_file_fd", "_position", "_left", "done")

    def __init__(self, loop: asyncio.AbstractEventLoop, socket_fd: int, region: FileRegion) -> None:
        self._loop = loop
        self._file_fd = region.file.fileno()
        self._position = region.position
        self._left = region.length
        self.done: asyncio.Future[None] = loop.create_future()
        self._fd = os.dup(socket_fd)
        loop.add_writer(self._fd, self._write)

    def _write(self) -> None:
        try:
            sent = os.sendfile(self._fd, self._file_fd, self._position, self._left)
        except BlockingIOError:
            return
        except OSError as exc:
            self.stop(exc)
            return
        if sent == 0:  # the file ends before the region: a short response must not go out
            self.stop(ConnectionError("the file ended inside the region being sent"))
            return
        self._position += sent
        self._left -= sent
        if not self._left:
            self.stop()

    def stop(self, error: BaseException | None = None) -> None:
        """Unregister and close the duplicate (once); `done` gets `error`, or success."""
        if self._fd >= 0:
            self._loop.remove_writer(self._fd)
            os.close(self._fd)
            self._fd = -1
        if not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)


class _FileShim:
    """What `loop.sendfile` needs of a file: its descriptor; it seeks after sending."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, *_: int) -> None:  # the fd is shared by readers: keep its offset alone
        pass


@dataclass(frozen=True)
class ListenerSecurity:
    """What a listener's connections go through: TLS, SASL, and the principals of client certificates."""

    tls: ssl.SSLContext | None = None
    sasl: SaslListener | None = None
    principals: PrincipalMapper | None = None  # ssl.principal.mapping.rules
    listener: str = ""  # its name: requests carry it, so answers give endpoints of the same listener


PLAINTEXT = ListenerSecurity()


def _left() -> None:
    """leave_queue of a request whose answer is out of the queue: it left already."""


class _Answer:
    """A request in flight, and what its handler gave: a response or an error, or the task still running it."""

    __slots__ = ("request", "connection", "task", "response", "error", "_counted")

    def __init__(self, request: Request, connection: ClientConnection) -> None:
        self.request = request
        self.connection = connection
        self.task: asyncio.Task[Any] | None = None  # only for a handler that waits
        self.response: Any = None
        self.error: BaseException | None = None
        self._counted = True  # in the processor's RequestBudget

    def done(self) -> bool:
        return self.task is None or self.task.done()

    def outcome(self) -> tuple[Any, BaseException | None]:
        """(response, error) of a done answer."""
        task = self.task
        if task is None:
            return self.response, self.error
        if task.cancelled():
            return None, asyncio.CancelledError()
        error = task.exception()
        return (None, error) if error is not None else (task.result(), None)

    def leave_queue(self) -> None:
        """Once: when the handler parks (request.leave_queue) or when it is done."""
        if self._counted:
            self._counted = False
            self.connection.processor.budget.give_back(self.request.size)

    def finished(self, _task: asyncio.Task[Any]) -> None:
        self.leave_queue()
        self.connection.answer_ready()


class ClientConnection(asyncio.BufferedProtocol):
    # Slots and futures made only while waiting: an idle connection costs little (bench/idle_connections.py).
    __slots__ = ("processor", "peer", "client_host", "last_active", "session", "_on_lost", "_sans_io", "_transport",
                 "_pending", "_drained", "_reading_paused", "_closed", "_reading", "_sending", "_sendfile",
                 "_security", "_muted", "_pump", "_yielded", "_receive_locked", "_low_water")

    def __init__(self, processor: Processor, on_lost: Callable[[], None] | None = None,
                 security: ListenerSecurity = PLAINTEXT, receive_buffer_locked: bool = False) -> None:
        self.processor = processor
        self._security = security
        sasl = security.sasl
        # TLS encrypts in user space: no zero copy
        self._sendfile = processor.native_sendfile and security.tls is None
        self.session: Session | SaslSession = ANONYMOUS if sasl is None else SaslSession(sasl)
        self.peer = "?"
        self.client_host = ""
        self.last_active = time.monotonic()
        self._on_lost = on_lost
        self._sans_io = ServerConnection(processor.max_request_size if sasl is None else sasl.max_receive_size,
                                         processor.supported(), processor.receive_area)
        self._transport: asyncio.Transport | None = None
        self._pending: collections.deque[_Answer] = collections.deque()  # the requests in flight, in arrival order
        self._drained: asyncio.Future[None] | None = None  # set while the transport's buffer is too full
        self._reading_paused = False
        self._muted = 0.0  # throttled by a client quota: no request is read before this loop time
        self._closed = False
        self._reading = False  # in read_requests
        self._sending: asyncio.Task[None] | None = None  # a response the socket could not take at once
        self._pump: _SendfilePump | None = None  # the file region _sending is sending, while it waits for the socket
        self._yielded = False  # a read used its slice: _take_turn reads on in a later turn
        self._receive_locked = receive_buffer_locked  # socket.receive.buffer.bytes set SO_RCVBUF
        self._low_water: ReceiveLowWater | None = None  # a large request wakes the loop once it is in

    # asyncio.Protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = f"/{peer[0]}" if peer else ""
        if self.session is ANONYMOUS and transport.get_extra_info("ssl_object") is not None:
            try:  # mutual TLS
                self.session = session_of_certificate(transport.get_extra_info("peercert"), self._security.principals)
            except NoMatchingRule as exc:
                log.info("closing connection from %s: %s (ssl.principal.mapping.rules)", self.peer, exc)
                self.close()
                return
        self.processor.connections.add(self)
        self.processor.connections_accepted += 1
        self._low_water = ReceiveLowWater.of(transport, self._receive_locked)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._sans_io.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            self._sans_io.buffer_updated(nbytes)
            self.read_requests()
            if self._low_water is not None:
                self._low_water.expect(self._sans_io.lacking())
        except Exception as exc:
            self._unexpected("reading requests", exc)

    def data_received(self, data: bytes) -> None:
        """Bytes handed in rather than read into get_buffer (tests, tools): copied in."""
        self.last_active = time.monotonic()
        try:
            self._sans_io.receive_data(data)
            self.read_requests()
        except Exception as exc:
            self._unexpected("reading requests", exc)

    def eof_received(self) -> bool | None:
        # The client is done (Kafka closes a connection whose read hits its end): nothing is written after it.
        # Over TLS asyncio calls connection_lost only once its shutdown completes, and answers written meanwhile
        # went into the closing connection ("SSL connection is closed").
        self.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None:
            # The socket failed (reset, timed out, aborted): asyncio closed the transport without a word. Kafka's
            # Selector logs such a disconnection at debug; klamm's own errors were logged by _unexpected.
            log.debug("connection from %s lost: %r", self.peer, exc)
        self._closed = True
        self._sans_io.close()
        self.processor.connections.discard(self)
        self.processor.budget.forget(self)
        pending, self._pending = self._pending, collections.deque()
        for answer in pending:
            answer.request.leave_queue = _left  # as when answered: the two are freed by reference counting
            if answer.task is None:
                release_regions(answer.response)  # a response already made holds file leases
            else:
                answer.task.cancel()
                answer.task.add_done_callback(_release_result)
        self._writable()  # a send waiting for the socket ends
        if self._pump is not None:  # its duplicate descriptor would keep the socket open
            self._pump.stop(ConnectionError("connection lost"))
        if self._on_lost is not None:
            on_lost, self._on_lost = self._on_lost, None
            on_lost()
        _break_transport_cycle(self._transport)

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._writable()
        try:
            self.answer_ready()
        except Exception as exc:
            self._unexpected("sending responses", exc)

    def _unexpected(self, what: str, exc: Exception) -> None:
        """An error of klamm's own in a protocol callback: one log line naming the connection, then close.

        Raised on, asyncio would close the transport itself, and say nothing at all when the error is an
        OSError (a file's, not the socket's): the client would see a healthy connection end without a reason.
        """
        log.error("closing connection from %s: unexpected error while %s: %r", self.peer, what, exc, exc_info=exc)
        self.close()

    def _writable(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # request flow
    def read_requests(self) -> None:
        """Dispatch the buffered requests while there is room, then send the answers ready."""
        if self._reading:
            return  # called again from a handler run at once below (budget.give_back): that loop reads on
        self._reading = True
        try:
            while True:
                self._read_buffered()
                if not (self._send_ready() and self._reading_paused and len(self._pending) < MAX_IN_FLIGHT // 2):
                    return
        finally:
            self._reading = False

    def answer_ready(self) -> None:
        """A handler's task is done, a slow send ended or the socket drained: send what is ready, read on."""
        if self._send_ready() and self._reading_paused and len(self._pending) < MAX_IN_FLIGHT // 2:
            self.read_requests()

    def _read_buffered(self) -> None:
        """Dispatch the buffered requests while there is room and the slice lasts; stop reading the socket when
        there is no room, or until the next turn when the slice is used up."""
        if self._yielded:
            return
        budget = self.processor.budget
        pending = self._pending
        deadline = time.perf_counter() + READ_SLICE_S
        try:
            while not self._closed:
                if self._muted or len(pending) >= MAX_IN_FLIGHT:
                    self._pause_reading()  # _unmute, or the answers going out, read on
                    return
                if budget.full:
                    budget.wait(self)  # give_back reads on
                    self._pause_reading()
                    return
                request = self._sans_io.next_request()
                if request is NEED_DATA:
                    self._resume_reading()
                    return
                self._dispatch(request)  # type: ignore[arg-type]
                if time.perf_counter() > deadline:
                    self._yield_turn()
                    return
        except ProtocolError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self.close()

    def _yield_turn(self) -> None:
        """Read on after the loop's other callbacks. The socket is not read meanwhile: its buffered requests go
        first, and an end of file behind them is seen only once they are dispatched."""
        self._yielded = True
        self._pause_reading()
        asyncio.get_running_loop().call_soon(self._take_turn)

    def _take_turn(self) -> None:
        self._yielded = False
        try:
            self.read_requests()
        except Exception as exc:
            self._unexpected("reading requests", exc)

    def mute(self, seconds: float) -> None:
        """A client over its quota (KIP-219): its connection reads no request for `seconds`."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if until > self._muted:
            self._muted = until
            self._pause_reading()
            loop.call_later(seconds, self._unmute)

    def _unmute(self) -> None:
        if asyncio.get_running_loop().time() >= self._muted - 0.001:  # the latest throttle is over
            self._muted = 0.0
            self.read_requests()

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._transport.pause_reading()
            self._reading_paused = True

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and not self._closed:
            self._transport.resume_reading()
            self._reading_paused = False

    def _dispatch(self, request: Request) -> None:
        session = self.session
        if session.gated and not session.admits(request.api_key):
            # Kafka's SaslServerAuthenticator: only the handshake before authentication; no request at all
            # on a session past connections.max.reauth.ms that has not re-authenticated
            log.info("closing connection from %s: api_key=%d %s", self.peer, request.api_key,
                     "after its SASL session expired" if session.authenticated else "during the SASL handshake")
            self.close()
            return
        request.client_host = self.client_host
        request.listener = self._security.listener
        request.session = session
        processor = self.processor
        processor.budget.take(request.size)
        answer = _Answer(request, self)
        request.leave_queue = answer.leave_queue
        self._pending.append(answer)  # before the handler runs: what it sets off comes after it
        coroutine = processor.handler(request, self)
        if request.api_key in processor.run_at_once:
            _run_at_once(answer, coroutine)
        else:
            answer.task = asyncio.ensure_future(coroutine)
            answer.task.add_done_callback(answer.finished)

    def _send_ready(self) -> int:
        """Send the answers ready at the head of the queue, in order, their bytes in one write; how many went.

        Stops at a handler still running (its task comes back here when done) and while the socket's buffer
        is full (resume_writing comes back); a file region the socket cannot take at once goes, with the
        rest of its response, in a task of its own (which comes back here when done).
        """
        if self._closed or self._sending is not None or self._drained is not None:
            return 0
        pending = self._pending
        chunks: list[bytes] = []
        count = 0
        while pending and pending[0].done() and self._drained is None:
            answer = pending.popleft()
            count += 1
            request = answer.request
            request.leave_queue = _left  # no longer bound to its answer: the two are freed now, not by the collector
            response, error = answer.outcome()
            if error is not None:
                self._write(chunks)
                self._fail_with(request, error)
                return count
            if self.session.gated:
                self._follow_authentication()
            if response is not None and not self._encode_into(chunks, request, response):
                return count
            if self.session.failed:  # a failed SASL authentication: its answer is sent, then the connection ends
                self._write(chunks)
                self.close()
                return count
        self._write(chunks)
        return count

    def _encode_into(self, chunks: list[bytes], request: Request, response: Any) -> bool:
        """Add the response's bytes to `chunks` (its file regions sent at once, or handed to a task); False
        when the connection goes on no further (closed, or a task sends the rest)."""
        try:
            parts = self._sans_io.encode_response(request, response)
        except Exception as exc:
            release_regions(response)
            self._write(chunks)
            self._fail(request, "response could not be encoded", exc)
            return False
        if len(parts) == 1 and not isinstance(parts[0], FileRegion):  # no records from files: the usual case
            chunks.append(parts[0])  # type: ignore[arg-type]
            return True
        for index, part in enumerate(parts):
            if not isinstance(part, FileRegion):
                chunks.append(part)
                continue
            self._write(chunks)  # what comes before the region goes first
            rest = self._send_region_now(part)
            if rest is not None:
                self._sending = asyncio.ensure_future(self._send_later([rest, *parts[index + 1:]], parts))
                return False
        release_regions(parts)
        return True

    def _write(self, chunks: list[bytes]) -> None:
        if chunks:
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
            self._transport.write(data)  # type: ignore[union-attr]
            self.processor.bytes_sent += len(data)

    def _send_region_now(self, region: FileRegion) -> FileRegion | None:
        """Hand the region to the kernel now if the socket takes it all; else what is left of it."""
        fd = region.file.fileno()
        transport = self._transport
        assert transport is not None
        if not self._sendfile:  # uvloop (no loop.sendfile) or TLS (encrypted in user space): through memory
            transport.write(os.pread(fd, region.length, region.position))
            self.processor.bytes_sent += region.length
            return None
        if transport.get_write_buffer_size():
            return region  # bytes queued ahead of it: loop.sendfile waits for them to go first
        try:
            sent = os.sendfile(transport.get_extra_info("socket").fileno(), fd, region.position, region.length)
        except OSError:  # a full socket, or a peer gone: loop.sendfile goes on, or reports it
            sent = 0
        self.processor.bytes_sent += sent
        if sent == region.length:
            return None
        return FileRegion(region.file, region.position + sent, region.length - sent)

    async def _send_later(self, rest: list[Part], parts: list[Part]) -> None:
        """Send `rest`, what the socket could not take at once of a response (`parts`), then what follows it."""
        try:
            await self._send(rest)
        except (ConnectionError, OSError, asyncio.exceptions.SendfileNotAvailableError, RuntimeError) as exc:
            # The peer went away mid-response (sendfile reports it as "not available",
            # a closed transport as RuntimeError): this connection ends, nothing else.
            log.debug("connection %s lost while writing: %s", self.peer, exc)
            self.close()
        except Exception as exc:  # a bug here: never leave the connection open and silent
            log.error("closing connection from %s: writer failed: %r", self.peer, exc,
                      exc_info=log.isEnabledFor(logging.DEBUG))
            self.close()
        finally:
            release_regions(parts)
            self._sending = None
        self.answer_ready()

    def _follow_authentication(self) -> None:
        """Requests as large as socket.request.max.bytes once a SASL client has authenticated; bare token
        frames while a SaslHandshake v0 exchange goes on (set before its answer goes out, so the client's
        next frame is read as it is meant)."""
        if self.session.authenticated:
            self._sans_io.max_request_size = self.processor.max_request_size
        self._sans_io.raw_tokens = getattr(self.session, "raw_tokens", False)

    def _fail_with(self, request: Request, error: BaseException) -> None:
        if isinstance(error, CloseConnection):
            self.close()
        elif isinstance(error, asyncio.CancelledError):
            self._fail(request, "handler cancelled", error)
        else:
            self._fail(request, "handler failed", error)

    def _fail(self, request: Request, what: str, exc: BaseException) -> None:
        """One log line, then close: the client sees EOF instead of a connection that never answers."""
        log.error("closing connection from %s: %s for api_key=%s v%s correlation_id=%s: %r", self.peer, what,
                  request.api_key, request.api_version, request.correlation_id, exc,
                  exc_info=exc if log.isEnabledFor(logging.DEBUG) else None)
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
                self.processor.bytes_sent += len(part)
            if self._drained is not None:
                await self._drained

    async def _send_file(self, transport: asyncio.Transport, region: FileRegion) -> None:
        rest = self._send_region_now(region)
        if rest is None:
            return
        loop = asyncio.get_running_loop()
        if transport.get_write_buffer_size():  # bytes queued ahead: loop.sendfile waits for them to go first
            await loop.sendfile(transport, _FileShim(rest.file.fileno()), rest.position,  # type: ignore[arg-type]
                                rest.length, fallback=False)
        else:
            self._pump = _SendfilePump(loop, transport.get_extra_info("socket").fileno(), rest)
            try:
                await self._pump.done
            finally:
                self._pump.stop(ConnectionError("the send was given up"))  # cancelled: leave nothing registered
                self._pump = None
        self.processor.bytes_sent += rest.length

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._transport is not None:
                self._transport.close()


def _run_at_once(answer: _Answer, coroutine: Coroutine[Any, Any, Any]) -> None:
    """Run a handler up to its first wait, in the caller; only one that waits gets a task, to finish in.

    Python 3.11 has no eager tasks: the coroutine is stepped here, and if it waits, a task goes on from
    that point (_Resumed). Until then it runs outside any task (asyncio.current_task() is not its own), so
    only handlers that ask nothing of their task before their first wait may run this way
    (Processor.run_at_once). 3.12 starts an eager task instead.
    """
    try:
        step = coroutine.send(None)
    except StopIteration as done:
        answer.response = done.value
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001  # kept as a task keeps it: the connection fails in order
        answer.error = exc
    else:
        answer.task = asyncio.ensure_future(_Resumed(coroutine, step))
        answer.task.add_done_callback(answer.finished)
        return
    answer.leave_queue()


if sys.version_info >= (3, 12):
    def _run_at_once(answer: _Answer, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run a handler as an eager task: up to its first wait in the caller (with the task current)."""
        answer.task = task = asyncio.Task(coroutine, loop=asyncio.get_running_loop(), eager_start=True)
        if task.done():
            answer.leave_queue()
        else:
            task.add_done_callback(answer.finished)


class _Resumed(Coroutine[Any, Any, Any]):
    """A handler's coroutine stepped up to a wait, where it yielded `step`, for a task to drive on.

    The task's first step gets `step` (what the handler waits on) without touching the coroutine; after that
    every send and throw goes to it, so a task cancelled before it ever ran still cancels the handler where
    it waits.
    """

    __slots__ = ("_coroutine", "_step", "_started")

    def __init__(self, coroutine: Coroutine[Any, Any, Any], step: Any) -> None:
        self._coroutine, self._step, self._started = coroutine, step, False

    def send(self, value: Any) -> Any:
        if not self._started:
            self._started = True
            step, self._step = self._step, None
            return step
        return self._coroutine.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:  # type: ignore[override]
        self._started = True
        self._step = None
        try:
            return self._coroutine.throw(typ) if val is None and tb is None else self._coroutine.throw(typ, val, tb)
        finally:
            # the error the handler raises back holds this frame in its traceback: were the error still a local
            # here, the two would make a cycle (a task cancelled where it awaits a future raises it back)
            del typ, val, tb

    def close(self) -> None:
        self._coroutine.close()

    def __await__(self) -> Generator[Any, Any, Any]:
        raise TypeError("a resumed handler is driven by its task, not awaited")


def _break_transport_cycle(transport: asyncio.BaseTransport | None) -> None:
    """asyncio's socket transport (CPython 3.11's, at least) keeps its read callback, a bound method of itself,
    after the connection is lost: a reference cycle of about ten objects a connection, left to the cyclic
    collector. Once the connection is lost nothing reads any more, so the callback can go, and the transport is
    freed by reference counting (klamm serve may have frozen it: klamm/cli/collector.py). A TLS transport is
    left alone."""
    if getattr(transport, "_read_ready_cb", None) is not None:
        transport._read_ready_cb = None  # type: ignore[union-attr]


def _release_result(future: asyncio.Future[Any]) -> None:
    """Release the file leases of a response that will not be sent.

    A cancelled task keeps its CancelledError until asked for it, and the error's traceback holds the task's
    frames, which hold the task: a reference cycle. Asking drops it, so the task is freed by reference counting
    (klamm serve may have frozen it: klamm/cli/collector.py)."""
    if future.cancelled():
        try:
            future.exception()
        except asyncio.CancelledError:
            pass
    elif future.exception() is None:
        release_regions(future.result())


class Processor:
    """A share of the connections, as Kafka's network threads are; sweeps idle ones."""

    def __init__(self, index: int, handler: Handler, supported: Callable[[], dict[int, tuple[int, int]]],
                 max_request_size: int, idle_ms: int, native_sendfile: bool,
                 budget: RequestBudget | None = None, run_at_once: frozenset[int] = frozenset()) -> None:
        self.index = index
        self.handler = handler
        # api keys whose handler runs in the connection's read up to its first wait (see _run_at_once)
        self.run_at_once = run_at_once
        self.supported = supported
        self.max_request_size = max_request_size
        self.idle_seconds = idle_ms / 1000
        self.native_sendfile = native_sendfile
        self.budget = budget or RequestBudget(2**31 - 1)
        self.receive_area = ReceiveArea()  # its connections read into it in turn (one event loop)
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


class ConnectionQuotas:
    """max.connections (the acceptor waits for a free slot) and max.connections.per.ip (refused at once)."""

    def __init__(self, max_connections: int, max_per_ip: int, per_ip_overrides: dict[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = dict(per_ip_overrides or {})  # by address
        self.total = 0
        self.per_ip: collections.Counter[str] = collections.Counter()
        self._slot_free = asyncio.Event()

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    async def wait_for_slot(self) -> None:
        while self.total >= self.max_connections:
            self._slot_free.clear()
            await self._slot_free.wait()

    def admit(self, ip: str) -> bool:
        """Count a new connection from `ip`; False (nothing counted) if `ip` is at its limit."""
        if self.per_ip[ip] >= self.limit_for(ip):
            return False
        self.per_ip[ip] += 1
        self.total += 1
        return True

    def release(self, ip: str) -> None:
        self.per_ip[ip] -= 1
        if not self.per_ip[ip]:
            del self.per_ip[ip]
        self.total -= 1
        self._slot_free.set()


def check_socket_server_config(config: Any) -> dict[str, int]:
    """Kafka's start-up checks of these keys; returns the parsed max.connections.per.ip.overrides."""
    queued_bytes, request_max = config.queued_max_request_bytes, config.socket_request_max_bytes
    if 0 < queued_bytes < request_max:
        raise ConfigError("queued.max.request.bytes", queued_bytes,
                          "queued.max.request.bytes must be larger or equal to socket.request.max.bytes")
    overrides = parse_per_ip_overrides(config.max_connections_per_ip_overrides)
    if config.max_connections_per_ip == 0 and not overrides:
        raise ConfigError("max.connections.per.ip", 0, "max.connections.per.ip can be set to zero only if "
                          "max.connections.per.ip.overrides property is set.")
    return overrides


def parse_per_ip_overrides(value: str) -> dict[str, int]:
    """max.connections.per.ip.overrides: "host:count,host:count" -> {address: count}.

    Host names are resolved once here, as Kafka resolves them when it reads the config.
    """
    overrides: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in (value or "").split(","))):
        host, sep, count = item.rpartition(":")
        try:
            limit = int(count)
        except ValueError:
            limit = -1
        if not sep or not host or limit < 0:
            raise ConfigError("max.connections.per.ip.overrides", value, f"Invalid entry {item!r}: expected host:count")
        for address in _addresses(host):
            overrides[address] = limit
    return overrides


def _addresses(host: str) -> list[str]:
    host = host.strip("[]")
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})
    except OSError as exc:
        raise ConfigError("max.connections.per.ip.overrides", host, f"Unknown host {host}: {exc}") from exc


class Acceptor:
    """Listens on one address, admits connections within the quotas, hands each to the next processor."""

    def __init__(self, host: str, port: int, processors: list[Processor], quotas: ConnectionQuotas | None = None,
                 sockets: SocketSettings | None = None, security: ListenerSecurity = PLAINTEXT) -> None:
        self.host = host
        self.port = port
        self.security = security
        self.tls = security.tls  # an SSL listener: each connection's handshake runs in a task of its own
        self.processors = processors
        self.quotas = quotas or ConnectionQuotas(2**31 - 1, 2**31 - 1)
        self.settings = sockets or SocketSettings()
        self._next = 0
        self._listeners: list[socket.socket] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._handshakes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._listeners = _listen(self.host, self.port, self.settings)
        self.port = self._listeners[0].getsockname()[1]
        self._tasks = [asyncio.ensure_future(self._accept_loop(listener)) for listener in self._listeners]

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self.quotas.wait_for_slot()
            try:
                sock, address = await loop.sock_accept(listener)
            except OSError as exc:  # e.g. out of descriptors: back off instead of spinning
                log.warning("accept failed on %s:%d: %s", self.host, self.port, exc)
                await asyncio.sleep(0.1)
                continue
            ip = address[0]
            if not self.quotas.admit(ip):
                log.info("closing connection from %s: max.connections.per.ip (%d) reached", ip,
                         self.quotas.limit_for(ip))
                sock.close()
                continue
            if self.tls is not None:  # a slow or silent client must not hold up the next accept
                handshake = asyncio.ensure_future(self._connect(sock, ip))
                self._handshakes.add(handshake)
                handshake.add_done_callback(self._handshakes.discard)
            else:
                await self._connect(sock, ip)

    async def _connect(self, sock: socket.socket, ip: str) -> None:
        try:
            self._configure(sock)
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: self._new_connection(ip), sock, ssl=self.tls,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if self.tls is not None else None)
        except (OSError, ssl.SSLError, TimeoutError) as exc:
            log.info("connection from %s failed at %s: %s", ip, "the TLS handshake" if self.tls else "accept", exc)
            sock.close()
            self.quotas.release(ip)

    def _configure(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if self.settings.send_buffer_bytes != USE_OS_DEFAULT:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.settings.send_buffer_bytes)
        if self.settings.receive_buffer_bytes != USE_OS_DEFAULT:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.settings.receive_buffer_bytes)

    def _new_connection(self, ip: str) -> ClientConnection:
        processor = self.processors[self._next % len(self.processors)]
        self._next += 1
        return ClientConnection(processor, on_lost=lambda: self.quotas.release(ip), security=self.security,
                                receive_buffer_locked=self.settings.receive_buffer_bytes != USE_OS_DEFAULT)

    async def stop(self) -> None:
        for task in (*self._tasks, *self._handshakes):
            task.cancel()
        await asyncio.gather(*self._tasks, *self._handshakes, return_exceptions=True)
        for listener in self._listeners:
            listener.close()
        self._listeners = []


def _listen(host: str, port: int, settings: SocketSettings) -> list[socket.socket]:
    """Listening sockets for `host` (every interface when empty), all on one port."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    listeners: list[socket.socket] = []
    try:
        for family, type_, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, type_, proto)
            except OSError:
                continue  # a family this host lacks (asyncio's create_server skips it too)
            listeners.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if settings.receive_buffer_bytes != USE_OS_DEFAULT:
                # Before listen, so that accepted sockets inherit it and the TCP window scale fits it.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, settings.receive_buffer_bytes)
            if port == 0 and len(listeners) > 1:  # every family on the port the first one got
                address = (address[0], listeners[0].getsockname()[1], *address[2:])
            sock.bind(address)
            sock.listen(settings.listen_backlog)
            sock.setblocking(False)
    except OSError:
        for sock in listeners:
            sock.close()
        raise
    if not listeners:
        raise OSError(f"no address to listen on for {host!r}")
    return listeners
