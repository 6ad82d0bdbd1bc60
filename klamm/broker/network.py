"""The network edge: an acceptor, N processors, and one protocol object per connection.

A connection decodes requests with the sans-io `ServerConnection`, starts one
handler task per request (in arrival order, so appends from pipelined produce
requests happen in order: handlers do their synchronous work before their
first await), and writes responses strictly in request order from a single
writer task. File regions in a response go out with the loop's native
`sendfile` when it has one (the stock selector loop) and with `os.pread` into
memory otherwise (uvloop); each region's file lease is released once it is
sent or its response dropped. Socket errors end the connection at this one edge.

A request that fails (its handler raises, or its response cannot be encoded)
closes its connection after one log line: the client sees EOF and retries,
rather than waiting forever on a connection that will never answer.

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
    socket.listen.backlog.size.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from klamm.broker.authentication import ANONYMOUS, SaslListener, SaslSession, Session, session_of_certificate
from klamm.broker.principal_mapping import NoMatchingRule, PrincipalMapper
from klamm.config.errors import ConfigError
from klamm.protocol.connection import NEED_DATA, ProtocolError, Request, ServerConnection
from klamm.protocol.sendplan import FileRegion, Part, release_regions

log = logging.getLogger("klamm.network")

MAX_IN_FLIGHT = 100  # per connection; reading pauses beyond this
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

    @property
    def full(self) -> bool:
        return self.requests >= self.max_requests or (self.max_bytes > 0 and self.bytes >= self.max_bytes)

    def take(self, size: int) -> None:
        self.requests += 1
        self.bytes += size

    def give_back(self, size: int) -> None:
        self.requests -= 1
        self.bytes -= size
        while self._waiting and not self.full:
            connection = next(iter(self._waiting))
            del self._waiting[connection]
            connection.read_requests()

    def wait(self, connection: ClientConnection) -> None:
        self._waiting[connection] = None

    def forget(self, connection: ClientConnection) -> None:
        self._waiting.pop(connection, None)


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


class ClientConnection(asyncio.Protocol):
    # Slots and futures made only while waiting: an idle connection costs little (bench/idle_connections.py).
    __slots__ = ("processor", "peer", "client_host", "last_active", "session", "_on_lost", "_sans_io", "_transport",
                 "_pending", "_wakeup", "_drained", "_reading_paused", "_closed", "_writer_task", "_sendfile",
                 "_security", "_muted")

    def __init__(self, processor: Processor, on_lost: Callable[[], None] | None = None,
                 security: ListenerSecurity = PLAINTEXT) -> None:
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
                                         processor.supported())
        self._transport: asyncio.Transport | None = None
        # the requests in flight, in arrival order: (future of the handler's response, request)
        self._pending: collections.deque[tuple[asyncio.Future[Any], Request]] = collections.deque()
        self._wakeup: asyncio.Future[None] | None = None  # the writer waits on it for the next request
        self._drained: asyncio.Future[None] | None = None  # set while the transport's buffer is too full
        self._reading_paused = False
        self._muted = 0.0  # throttled by a client quota: no request is read before this loop time
        self._closed = False
        self._writer_task: asyncio.Task[None] | None = None

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
        self._writer_task = asyncio.ensure_future(self._write_responses())

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        self._sans_io.receive_data(data)
        self.read_requests()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.processor.connections.discard(self)
        self.processor.budget.forget(self)
        pending, self._pending = self._pending, collections.deque()
        for future, _ in pending:
            future.cancel()
            future.add_done_callback(_release_result)  # a response already made holds file leases
        self._wake()
        self._writable()
        if self._on_lost is not None:
            on_lost, self._on_lost = self._on_lost, None
            on_lost()

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._writable()

    def _writable(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    # request flow
    def read_requests(self) -> None:
        """Dispatch the buffered requests while there is room; stop reading the socket when there is none."""
        budget = self.processor.budget
        if self._muted:
            self._pause_reading()
            return
        try:
            while not self._closed:
                if len(self._pending) >= MAX_IN_FLIGHT:
                    self._pause_reading()  # the writer reads on when responses go out
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
        except ProtocolError as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self.close()

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
        budget = self.processor.budget
        budget.take(request.size)
        counted = True

        def leave_queue() -> None:  # once: when the handler parks, or when it is done
            nonlocal counted
            if counted:
                counted = False
                budget.give_back(request.size)

        request.leave_queue = leave_queue
        future = asyncio.ensure_future(self.processor.handler(request, self))
        future.add_done_callback(lambda _: leave_queue())
        self._pending.append((future, request))
        self._wake()

    async def _write_responses(self) -> None:
        try:
            while not self._closed:
                if not self._pending:
                    self._wakeup = asyncio.get_running_loop().create_future()
                    await self._wakeup
                    continue
                future, request = self._pending[0]
                try:
                    response = await future
                except asyncio.CancelledError:
                    if self._closed:
                        return
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():
                        self.close()
                        raise  # the writer itself is being cancelled (shutdown)
                    self._fail(request, "handler cancelled", asyncio.CancelledError())
                    return
                except CloseConnection:
                    self.close()
                    return
                except Exception as exc:
                    self._fail(request, "handler failed", exc)
                    return
                if self._closed:
                    return  # connection_lost took the pending responses (and releases this one)
                self._pending.popleft()
                if self._reading_paused and len(self._pending) < MAX_IN_FLIGHT // 2:
                    self.read_requests()
                if self.session.gated:
                    self._follow_authentication()
                if response is not None:
                    await self._respond(request, response)
                if self.session.failed:  # a failed SASL authentication: its answer is sent, then the connection ends
                    self.close()
                    return
                future = request = response = None  # an idle connection keeps nothing of its last exchange
        except (ConnectionError, OSError, asyncio.exceptions.SendfileNotAvailableError, RuntimeError) as exc:
            # The peer went away mid-response (sendfile reports it as "not available",
            # a closed transport as RuntimeError): this connection ends, nothing else.
            log.debug("connection %s lost while writing: %s", self.peer, exc)
            self.close()
        except Exception as exc:  # a bug in this loop: never leave the connection open and silent
            log.error("closing connection from %s: writer failed: %r", self.peer, exc,
                      exc_info=log.isEnabledFor(logging.DEBUG))
            self.close()

    def _follow_authentication(self) -> None:
        """Requests as large as socket.request.max.bytes once a SASL client has authenticated; bare token
        frames while a SaslHandshake v0 exchange goes on (set before its answer goes out, so the client's
        next frame is read as it is meant)."""
        if self.session.authenticated:
            self._sans_io.max_request_size = self.processor.max_request_size
        self._sans_io.raw_tokens = getattr(self.session, "raw_tokens", False)

    async def _respond(self, request: Request, response: Any) -> None:
        try:
            parts = self._sans_io.encode_response(request, response)
        except Exception as exc:
            release_regions(response)
            self._fail(request, "response could not be encoded", exc)
            return
        try:
            await self._send(parts)
        finally:
            release_regions(parts)

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
            if self._drained is not None:
                await self._drained
        self.processor.bytes_sent += sum(len(p) for p in parts)

    async def _send_file(self, transport: asyncio.Transport, region: FileRegion) -> None:
        fd = region.file.fileno()
        if not self._sendfile:
            transport.write(os.pread(fd, region.length, region.position))
            return
        position, length = region.position, region.length
        if transport.get_write_buffer_size() == 0:
            # Nothing queued ahead of the file bytes: hand them to the kernel now. Only
            # what the socket buffer cannot take goes through loop.sendfile, which costs
            # several loop turns (pause reading, wait for an empty buffer, writability).
            try:
                sent = os.sendfile(transport.get_extra_info("socket").fileno(), fd, position, length)
            except BlockingIOError:
                sent = 0
            position, length = position + sent, length - sent
        if length:
            loop = asyncio.get_running_loop()
            await loop.sendfile(transport, _FileShim(fd), position, length, fallback=False)  # type: ignore[arg-type]

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._transport is not None:
                self._transport.close()
            self._wake()


def _release_result(future: asyncio.Future[Any]) -> None:
    """Release the file leases of a response that will not be sent."""
    if not future.cancelled() and future.exception() is None:
        release_regions(future.result())


class Processor:
    """A share of the connections, as Kafka's network threads are; sweeps idle ones."""

    def __init__(self, index: int, handler: Handler, supported: Callable[[], dict[int, tuple[int, int]]],
                 max_request_size: int, idle_ms: int, native_sendfile: bool,
                 budget: RequestBudget | None = None) -> None:
        self.index = index
        self.handler = handler
        self.supported = supported
        self.max_request_size = max_request_size
        self.idle_seconds = idle_ms / 1000
        self.native_sendfile = native_sendfile
        self.budget = budget or RequestBudget(2**31 - 1)
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
        return ClientConnection(processor, on_lost=lambda: self.quotas.release(ip), security=self.security)

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
