"""Every close of a client connection says why (klamm.broker.network.ClientConnection, over real TCP sockets).

asyncio closes a transport by itself when a protocol callback raises, and says nothing when the error is an
OSError (a file's EMFILE or EIO looks like a socket's): the client saw a healthy connection end with nothing in
the broker's log. An error of klamm's own in the read or send path is logged (ERROR, naming the connection)
before the close; a socket that fails on its own (reset by the client) is logged at debug, as Kafka's Selector
logs a disconnection.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import struct
from typing import Any

import pytest

from klamm.broker.network import ClientConnection, Processor
from klamm.protocol.connection import Request
from tests.unit.test_connection import SUPPORTED, api_versions

pytestmark = pytest.mark.timeout(60)


async def _accept_one(processor: Processor) -> tuple[socket.socket, list[ClientConnection]]:
    """A TCP client socket (non-blocking) connected to a ClientConnection of `processor` on this loop."""
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    made: list[ClientConnection] = []

    def factory() -> ClientConnection:
        made.append(ClientConnection(processor))
        return made[-1]
    await asyncio.get_running_loop().connect_accepted_socket(factory, server)
    client.setblocking(False)
    return client, made


async def _closed_by_server(client: socket.socket) -> None:
    """Waits until the server ends the connection (end of file or reset), with no answer before it."""
    loop = asyncio.get_running_loop()
    try:
        data = await asyncio.wait_for(loop.sock_recv(client, 65536), 10)
    except ConnectionResetError:
        return
    assert data == b"", f"an answer came instead of the close: {data!r}"


async def _gone(processor: Processor, connection: ClientConnection) -> None:
    """Waits (bounded) until the processor has dropped `connection`."""
    for _ in range(500):
        if connection not in processor.connections:
            return
        await asyncio.sleep(0.01)
    assert connection not in processor.connections


def _network_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "klamm.network"]


def test_an_oserror_of_the_request_path_is_logged_before_the_close(caplog: pytest.LogCaptureFixture) -> None:
    def handler(request: Request, connection: ClientConnection) -> Any:
        # Raised inside the socket's read callback, before any coroutine runs: an OSError there made
        # asyncio close the transport without a word.
        raise OSError(errno.EMFILE, "Too many open files")

    async def main() -> None:
        processor = Processor(0, handler, lambda: SUPPORTED, 1 << 20, 600_000, False)
        client, made = await _accept_one(processor)
        try:
            await asyncio.get_running_loop().sock_sendall(client, api_versions(7))
            await _closed_by_server(client)
            await asyncio.sleep(0.05)  # connection_lost runs in the next loop turn
            assert made[0] not in processor.connections
        finally:
            client.close()

    with caplog.at_level(logging.INFO, logger="klamm.network"):
        asyncio.run(main())
    errors = [r for r in _network_records(caplog) if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in caplog.records]
    message = errors[0].getMessage()
    assert "closing connection from 127.0.0.1:" in message and "Too many open files" in message, message
    assert errors[0].exc_info is not None  # the traceback says where


def test_a_connection_reset_by_the_client_is_logged_at_debug_with_the_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    async def handler(request: Request, connection: ClientConnection) -> Any:
        await asyncio.sleep(3600)  # never answers: the client gives up first

    async def main() -> None:
        processor = Processor(0, handler, lambda: SUPPORTED, 1 << 20, 600_000, False)
        client, made = await _accept_one(processor)
        await asyncio.get_running_loop().sock_sendall(client, api_versions(7))
        for _ in range(100):
            if made[0]._pending:
                break
            await asyncio.sleep(0.01)
        # Unread bytes plus SO_LINGER 0: the close sends a reset, which the server's next read reports.
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        await _gone(processor, made[0])

    with caplog.at_level(logging.DEBUG, logger="klamm.network"):
        asyncio.run(main())
    lost = [r for r in _network_records(caplog) if "lost" in r.getMessage()]
    assert len(lost) == 1, [r.getMessage() for r in caplog.records]
    assert lost[0].levelno == logging.DEBUG and "ConnectionResetError" in lost[0].getMessage()
    assert not [r for r in _network_records(caplog) if r.levelno >= logging.WARNING]


def test_a_clean_close_by_the_client_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    async def handler(request: Request, connection: ClientConnection) -> Any:
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}

    async def main() -> None:
        processor = Processor(0, handler, lambda: SUPPORTED, 1 << 20, 600_000, False)
        client, made = await _accept_one(processor)
        client.close()
        await _gone(processor, made[0])

    with caplog.at_level(logging.DEBUG, logger="klamm.network"):
        asyncio.run(main())
    assert not _network_records(caplog), [r.getMessage() for r in caplog.records]
