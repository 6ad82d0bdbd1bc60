"""Fetch responses larger than the socket takes at once reach a slow reader whole and in order, and a reader
that goes away mid-response leaves no descriptor behind.

With a small socket.send.buffer.bytes, most of each response's file bytes wait for
the socket to drain (klamm.broker.network._SendfilePump, on a duplicate of the
socket's descriptor).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from typing import Any

import pytest

from klamm.broker import network
from klamm.protocol.records import build_batch, iter_records
from tests.integration.conftest import FETCH, BrokerThread, create_topic, fetch_body, produce, wait_for

TOPIC = "slow-reader"
BATCHES = 24
VALUE = 100_000


def fill(broker: BrokerThread) -> list[bytes]:
    values = []
    with broker.connect() as client:
        create_topic(client, TOPIC)
        for n in range(BATCHES):
            value = bytes([n]) * VALUE
            assert produce(client, TOPIC, build_batch([(b"k%d" % n, value)])).error_code == 0
            values.append(value)
    return values


def open_sockets() -> int:
    """Sockets open in this process (the broker runs in it): a pump's duplicate is one; files are left out,
    as a flush job may open the next segment's files at any time."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return count


def test_a_slow_reader_gets_every_response_whole(broker_factory: Callable[..., BrokerThread],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    pumps = []

    class CountedPump(network._SendfilePump):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            pumps.append(self)

    monkeypatch.setattr(network, "_SendfilePump", CountedPump)
    broker = broker_factory(**{"socket.send.buffer.bytes": "16384"})
    values = fill(broker)
    with broker.connect() as client:
        client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sent = [client.send(FETCH, 11, fetch_body(TOPIC, offset, max_bytes=1 << 20)) for offset in (0, 8, 16)]
        time.sleep(0.3)  # the broker meets a full socket and waits for it
        for correlation_id, offset in zip(sent, (0, 8, 16)):
            received, response = client.receive()
            assert received == correlation_id
            [partition] = response.responses[0].partitions
            assert partition.error_code == 0
            got = [r.value for r in iter_records(partition.records)]
            assert len(got) >= 8 and got == values[offset:offset + len(got)]
    assert pumps  # the responses did wait for the socket


def test_a_reader_gone_mid_response_leaves_no_descriptor(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"socket.send.buffer.bytes": "16384"})
    values = fill(broker)
    with broker.connect() as warm:
        warm.request(FETCH, 11, fetch_body(TOPIC, 0, max_bytes=1 << 20))
    before = open_sockets()
    for _ in range(5):
        with broker.connect() as client:
            client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
            client.send(FETCH, 11, fetch_body(TOPIC, 0, max_bytes=4 << 20))
            client.sock.recv(1000)  # the response has begun
    wait_for(lambda: open_sockets() <= before)
    with broker.connect() as client:
        [partition] = client.request(FETCH, 11, fetch_body(TOPIC, 20, max_bytes=1 << 20)).responses[0].partitions
        assert [r.value for r in iter_records(partition.records)] == values[20:]
