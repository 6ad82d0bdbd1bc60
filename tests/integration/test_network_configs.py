"""Kafka's SocketServer and fetch limits do what they say: each key here has an observable effect.

fetch.max.bytes, queued.max.requests, queued.max.request.bytes, socket.send.buffer.bytes,
socket.receive.buffer.bytes, socket.listen.backlog.size, max.connections,
max.connections.per.ip(.overrides), num.network.threads.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from klamm.broker.broker import Broker
from klamm.config.errors import ConfigError
from klamm.protocol.records import build_batch, iter_records
from klamm.testing import config_for
from tests.integration.conftest import (
    API_VERSIONS,
    FETCH,
    BrokerThread,
    RawClient,
    create_topic,
    fetch,
    fetch_body,
    produce,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

VERSIONS_BODY = {"client_software_name": "t", "client_software_version": "1"}


def _versions(c: RawClient) -> int:
    return c.request(API_VERSIONS, 3, VERSIONS_BODY).error_code


def _silent(c: RawClient, seconds: float = 0.5) -> bool:
    """Nothing arrives on `c` for `seconds` (the broker is not reading or answering it)."""
    c.sock.settimeout(seconds)
    try:
        data = c.sock.recv(1, socket.MSG_PEEK)
    except TimeoutError:
        return True
    finally:
        c.sock.settimeout(10)
    return False if data else pytest.fail("connection closed")


def _parked(broker: BrokerThread, topic: str) -> int:
    return broker.call(lambda: len(broker.broker.replicas.get(topic, 0)._waiters))


def _broker_side_sockets(broker: BrokerThread) -> list[socket.socket]:
    return broker.call(lambda: [c._transport.get_extra_info("socket") for p in broker.broker._processors
                                for c in p.connections])


# ------------------------------------------------------------ fetch.max.bytes ---
def test_fetch_max_bytes_caps_a_fetch(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"fetch.max.bytes": "1024"})
    batch = build_batch([(b"k", b"v" * 200)])
    with broker.connect() as c:
        create_topic(c, "t")
        for _ in range(10):
            assert produce(c, "t", batch).error_code == 0
        read = fetch(c, "t", 0, max_bytes=1 << 20)
        assert 0 < len(read.records) <= 1024 < 10 * len(batch)
        assert len(list(iter_records(bytes(read.records)))) == 1024 // len(batch)
        # min_bytes is capped with it (Kafka's KafkaApis): one batch over the cap (sent whole, as
        # the first) satisfies a fetch that asks for a MiB, which would otherwise wait its 30 s.
        create_topic(c, "big")
        assert produce(c, "big", build_batch([(b"k", b"v" * 1500)])).error_code == 0
        read = fetch(c, "big", 0, max_bytes=1 << 20, min_bytes=1 << 20, max_wait_ms=30_000)
        assert len(read.records) > 1024


# --------------------------------------------------- queued.max.requests/.bytes ---
def _waiting_for_budget(broker: BrokerThread, client: RawClient) -> bool:
    """`client`'s connection has a request read but not dispatched: the broker-wide budget is spent."""
    peer = "%s:%d" % client.sock.getsockname()[:2]
    return broker.call(lambda: any(c.peer == peer for c in broker.broker._processors[0].budget._waiting))


def _hold_requests_of(broker: BrokerThread, client_id: str) -> asyncio.Event:
    """Handlers of `client_id`'s requests wait for the returned event: requests in the queue that stay there."""
    def install() -> asyncio.Event:
        release = asyncio.Event()
        for processor in broker.broker._processors:
            inner = processor.handler

            async def held(request: Any, connection: Any, inner: Any = inner) -> Any:
                if request.client_id == client_id:
                    await release.wait()
                return await inner(request, connection)

            processor.handler = held
        return release
    return broker.call(install)


@pytest.mark.parametrize("overrides,pipelined", [
    ({"queued.max.requests": "1"}, 1),
    # Kafka requires at least socket.request.max.bytes; two ~560-byte requests spend 1000 bytes
    ({"queued.max.request.bytes": "1000", "socket.request.max.bytes": "1000"}, 2),
])
def test_queued_requests_are_bounded_across_connections(broker_factory: Callable[..., BrokerThread],
                                                        overrides: dict[str, str], pipelined: int) -> None:
    broker = broker_factory(**overrides)
    slow_client = "s" * 500
    release = _hold_requests_of(broker, slow_client)
    with broker.connect(client_id=slow_client) as slow, broker.connect() as other:
        for _ in range(pipelined):
            slow.send(API_VERSIONS, 3, VERSIONS_BODY)
        other.send(API_VERSIONS, 3, VERSIONS_BODY)
        wait_for(lambda: _waiting_for_budget(broker, other))  # read off the wire, then reading stopped
        assert _silent(other)
        broker.call(release.set)  # the held requests finish: the budget frees and `other` is read
        _, answer = other.receive()
        assert answer.error_code == 0
        for _ in range(pipelined):
            slow.receive()


def test_parked_fetches_do_not_hold_the_queue(broker_factory: Callable[..., BrokerThread]) -> None:
    """Kafka counts neither its purgatory in queued.max.requests nor a parked fetch's bytes."""
    broker = broker_factory(**{"queued.max.requests": "1"})
    with broker.connect() as c:
        create_topic(c, "idle")
    with broker.connect() as poller, broker.connect() as other:
        poller.send(FETCH, 11, fetch_body("idle", 0, max_wait_ms=20_000, min_bytes=1))
        wait_for(lambda: _parked(broker, "idle") == 1)
        other.send(API_VERSIONS, 3, VERSIONS_BODY)
        _, answer = other.receive()  # answered while the long poll waits
        assert answer.error_code == 0
        assert _parked(broker, "idle") == 1


# ------------------------------------------------------------- socket options ---
def _accepted_default_sndbuf_rcvbuf() -> tuple[int, int]:
    """What the OS gives an accepted loopback socket nobody configured."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        with socket.create_connection(listener.getsockname()):
            accepted, _ = listener.accept()
            with accepted:
                return _buffer_sizes(accepted)


def _as_set(send: int, receive: int) -> tuple[int, int]:
    """What the OS reports after setting these sizes (Linux doubles them)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send)
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive)
        return _buffer_sizes(probe)


def _buffer_sizes(sock: socket.socket) -> tuple[int, int]:
    return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)


def test_socket_buffer_sizes(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"socket.send.buffer.bytes": "32768", "socket.receive.buffer.bytes": "24576"})
    with broker.connect() as c:
        assert _versions(c) == 0
        [sock] = _broker_side_sockets(broker)
        got = _buffer_sizes(sock)
    assert got == _as_set(32768, 24576)


def test_socket_buffer_sizes_minus_one_keep_the_os_default(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"socket.send.buffer.bytes": "-1", "socket.receive.buffer.bytes": "-1"})
    with broker.connect() as c:
        assert _versions(c) == 0
        [sock] = _broker_side_sockets(broker)
        got = _buffer_sizes(sock)
    assert got == _accepted_default_sndbuf_rcvbuf()
    assert got != _as_set(100 * 1024, 100 * 1024)  # not Kafka's default sizes, which apply otherwise


def test_listen_backlog(broker_factory: Callable[..., BrokerThread]) -> None:
    if shutil.which("ss") is None:
        pytest.skip("needs ss (iproute2) to read a listening socket's backlog")
    broker = broker_factory(**{"socket.listen.backlog.size": "7"})
    out = subprocess.run(["ss", "-ltnH", f"sport = :{broker.port}"], capture_output=True, text=True, check=True)
    [line] = out.stdout.splitlines()
    assert line.split()[2] == "7"  # Send-Q of a listening socket is its backlog


# ------------------------------------------------------------ max.connections ---
def _connections(broker: BrokerThread) -> int:
    return broker.call(lambda: sum(len(p.connections) for p in broker.broker._processors))


def test_max_connections_stops_accepting_until_one_closes(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"max.connections": "2"})
    first, second = broker.connect(), broker.connect()
    assert _versions(first) == 0 and _versions(second) == 0
    with broker.connect() as third:  # TCP completes (the listen backlog) but is not accepted
        third.send(API_VERSIONS, 3, VERSIONS_BODY)
        assert _silent(third)
        assert _connections(broker) == 2
        first.close()
        _, answer = third.receive()
        assert answer.error_code == 0
    second.close()


def test_max_connections_per_ip_closes_the_extra_connection(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"max.connections.per.ip": "1"})
    with broker.connect() as first:
        assert _versions(first) == 0
        with broker.connect() as second:
            second.expect_disconnect()
        assert _versions(first) == 0
    wait_for(lambda: _connections(broker) == 0)
    with broker.connect() as again:  # the slot is free again
        assert _versions(again) == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_max_connections_per_ip_overrides(broker_factory: Callable[..., BrokerThread], host: str) -> None:
    broker = broker_factory(**{"max.connections.per.ip": "1", "max.connections.per.ip.overrides": f"{host}:2"})
    with broker.connect() as first, broker.connect() as second:
        assert _versions(first) == 0 and _versions(second) == 0
        with broker.connect() as third:
            third.expect_disconnect()


@pytest.mark.parametrize("props,key", [
    ({"max.connections.per.ip.overrides": "127.0.0.1:not_a_number"}, "max.connections.per.ip.overrides"),
    ({"max.connections.per.ip": "0"}, "max.connections.per.ip"),
    ({"queued.max.request.bytes": "1000"}, "queued.max.request.bytes"),  # below socket.request.max.bytes
])
def test_kafka_start_up_checks(tmp_path: Path, props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Broker(config_for(str(tmp_path), props))
    assert refused.value.key == key


# -------------------------------------------------------- num.network.threads ---
def test_num_network_threads_processors_share_the_connections(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"num.network.threads": "2"})
    with broker.connect() as a, broker.connect() as b:
        assert _versions(a) == 0 and _versions(b) == 0
        shares = broker.call(lambda: [len(p.connections) for p in broker.broker._processors])
    assert shares == [1, 1]
