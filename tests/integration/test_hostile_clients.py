"""Hostile clients are bounded, and a well-behaved client on another connection is served all along:
a connection flood (max.connections.per.ip), slow-loris partial frames and silent connections
(connections.max.idle.ms), oversized frames before SASL authentication (sasl.server.max.receive.size).

The well-behaved client's round trips are checked against a loose bound (a second): these tests show
the broker keeps serving it, the latency figures belong to `make bench`."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.integration.conftest import BrokerThread, wait_for

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 1, 4) + b"good"
GOOD_HOST = "127.0.0.2"  # the well-behaved client's own address, outside the flood's per-IP limit
LOOSE_BOUND_S = 1.0


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), 5, source_address=(source, 0))
    sock.settimeout(5)
    return sock


def _round_trip(sock: socket.socket) -> float:
    started = time.perf_counter()
    sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    (size,) = struct.unpack(">i", _read(sock, 4))
    assert struct.unpack(">ih", _read(sock, size)[:6]) == (1, 0)
    return time.perf_counter() - started


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, "closed"
        data += chunk
    return data


@contextmanager
def good_client(port: int) -> Iterator[list[float]]:
    """ApiVersions round trips on one connection from GOOD_HOST, in a thread, for as long as the block runs."""
    times: list[float] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def run() -> None:
        try:
            with _connect(port, GOOD_HOST) as sock:
                while not stop.is_set():
                    times.append(_round_trip(sock))
                    time.sleep(0.01)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield times
    finally:
        stop.set()
        thread.join(10)
    assert not errors, errors
    assert times, "the well-behaved client got no answer"
    assert max(times) < LOOSE_BOUND_S, f"slowest round trip {max(times):.3f} s"


def _open_connections(broker: BrokerThread) -> int:
    return broker.call(lambda: sum(len(p.connections) for p in broker.broker._processors))  # type: ignore[union-attr]


def test_a_connection_flood_is_held_at_the_per_ip_limit(broker_factory: Any) -> None:
    broker = broker_factory(**{"max.connections.per.ip": "50"})
    flood: list[socket.socket] = []
    with good_client(broker.port) as times:
        for _ in range(300):
            try:
                flood.append(_connect(broker.port))
            except OSError:
                pass
        wait_for(lambda: _open_connections(broker) <= 51)  # the good client's, and 50 of the flood's
        time.sleep(0.5)
        assert _open_connections(broker) == 51
    assert len(times) > 10
    for sock in flood:
        sock.close()


def test_silent_and_slow_loris_connections_are_closed_when_idle(broker_factory: Any) -> None:
    broker = broker_factory(**{"connections.max.idle.ms": "1000"})
    lurkers = [_connect(broker.port) for _ in range(100)]
    for sock in lurkers[:50]:
        sock.sendall(struct.pack(">i", 1_000_000) + b"\x00\x12")  # a frame's start, never its end
    with good_client(broker.port) as times:
        wait_for(lambda: _open_connections(broker) == 1, timeout=10)  # only the good client's is left
    assert len(times) > 10
    for sock in lurkers:
        sock.settimeout(5)
        try:
            assert sock.recv(1) == b""  # closed by the broker
        except ConnectionResetError:
            pass  # closed by the broker too: a reset (two clean-clone runs of the full suite; cause not known yet)
        sock.close()


def test_an_oversized_frame_before_sasl_authentication_is_refused_at_once(broker_factory: Any) -> None:
    from tests.integration.test_sasl_listeners import sasl_broker

    broker = sasl_broker(broker_factory)  # sasl.server.max.receive.size: Kafka's default, 512 KiB
    with good_client(broker.port) as times:
        deadline = time.monotonic() + 1
        while time.monotonic() < deadline:
            with _connect(broker.port) as sock:
                sock.sendall(struct.pack(">i", 100 * 1024 * 1024) + bytes(1024))  # claims 100 MiB
                assert sock.recv(1) == b""
    assert len(times) > 5
