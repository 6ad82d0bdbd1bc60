"""How a connection runs its requests' handlers and answers them (klamm.broker.network.ClientConnection).

A handler of a run-at-once API runs inside the read (no task) up to its first wait; the answers ready after a
read go out in one write, always in request order, whatever order the handlers finish in. Driven through a
transport double, so each write the connection makes is seen.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from klamm.broker import network
from klamm.broker.low_water import AVAILABLE as LOW_WATER
from klamm.broker.low_water import LARGEST
from klamm.broker.network import (
    MAX_IN_FLIGHT,
    READ_SLICE_S,
    ClientConnection,
    CloseConnection,
    Processor,
    RequestBudget,
)
from klamm.protocol.connection import Request
from tests.cyclic_garbage import cyclic_garbage
from tests.unit.test_connection import SUPPORTED, api_versions, encode_request

pytestmark = pytest.mark.timeout(60)

API_VERSIONS = 18


class Transport:
    """What ClientConnection uses of an asyncio transport; records every write."""

    def __init__(self, connection: ClientConnection) -> None:
        self.connection = connection
        self.writes: list[bytes] = []
        self.reading = True
        self.closed = False

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 40000) if name == "peername" else None

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.connection.connection_lost, None)

    def answered(self) -> list[int]:
        """The correlation ids of the responses written so far, in order."""
        data, ids = b"".join(self.writes), []
        while data:
            (size,) = struct.unpack_from(">i", data)
            ids.append(struct.unpack_from(">i", data, 4)[0])
            data = data[4 + size:]
        return ids


Handler = Callable[[Request, ClientConnection], Awaitable[Any]]


def connect(handler: Handler, run_at_once: frozenset[int] = frozenset({API_VERSIONS}),
            budget: RequestBudget | None = None) -> tuple[ClientConnection, Transport]:
    processor = Processor(0, handler, lambda: SUPPORTED, 1 << 20, 600_000, False, budget, run_at_once)
    connection = ClientConnection(processor)
    transport = Transport(connection)
    connection.connection_made(transport)  # type: ignore[arg-type]
    return connection, transport


def requests(*ids: int) -> bytes:
    return b"".join(api_versions(i) for i in ids)


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


ANSWER = {"error_code": 0}


@pytest.fixture(autouse=True)
def whole_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """One read dispatches all it can: on a loaded machine a hundred requests outlast READ_SLICE_S, and a test
    counting what one read dispatched would see the read hand the loop on part way."""
    monkeypatch.setattr(network, "READ_SLICE_S", 60.0)


@pytest.fixture
def read_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's own slice, for the tests of the slice itself."""
    monkeypatch.setattr(network, "READ_SLICE_S", READ_SLICE_S)


def test_a_handler_done_at_once_is_answered_in_the_read_without_a_task() -> None:
    async def main() -> None:
        seen: list[Any] = []

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            seen.append(asyncio.current_task())
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1, 2, 3))
        # answered before any loop turn, all three in one write
        assert transport.writes and len(transport.writes) == 1
        assert transport.answered() == [1, 2, 3]
        if sys.version_info < (3, 12):  # in the caller (data_received), not in tasks of their own
            assert seen == [asyncio.current_task()] * 3
        else:  # eager tasks, each done before data_received returned
            assert all(task is not asyncio.current_task() and task.done() for task in seen)
        assert not connection._pending and connection.processor.budget.requests == 0
    asyncio.run(main())


def test_other_apis_still_run_in_a_task() -> None:
    async def main() -> None:
        seen: list[Any] = []

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            seen.append(asyncio.current_task())
            return ANSWER

        connection, transport = connect(handler, run_at_once=frozenset())
        connection.data_received(requests(1, 2))
        assert transport.writes == []
        await turns()
        assert transport.answered() == [1, 2]
        assert all(task is not None for task in seen)
    asyncio.run(main())


def test_a_handler_that_waits_finishes_in_a_task_and_answers_in_order() -> None:
    async def main() -> None:
        release = asyncio.get_running_loop().create_future()
        tasks: dict[int, Any] = {}

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 2:
                value = await release  # suspends: the rest runs in a task made for it
                tasks[2] = asyncio.current_task()
                return {"error_code": value}
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1, 2, 3, 4))
        assert transport.answered() == [1]  # 3 and 4 are done but wait behind 2
        assert [answer.request.correlation_id for answer in connection._pending] == [2, 3, 4]
        assert connection.processor.budget.requests == 1  # only the one still running holds a place
        await turns()
        assert transport.answered() == [1]
        release.set_result(0)
        await turns()
        assert transport.answered() == [1, 2, 3, 4]
        assert len(transport.writes) == 2  # 2, 3 and 4 together
        assert tasks[2] is not None
        assert connection.processor.budget.requests == 0
    asyncio.run(main())


def test_pipelined_requests_are_answered_in_order_whatever_order_their_handlers_finish() -> None:
    async def main() -> None:
        async def handler(request: Request, _connection: ClientConnection) -> Any:
            for _ in range((request.correlation_id * 7) % 5):  # some at once, some after a few loop turns
                await asyncio.sleep(0)
            return ANSWER

        connection, transport = connect(handler)
        ids = list(range(1, 41))
        connection.data_received(requests(*ids[:25]))
        connection.data_received(requests(*ids[25:]))
        await turns(20)
        assert transport.answered() == ids
        assert len(transport.writes) < len(ids)
    asyncio.run(main())


def test_a_handler_that_raises_at_once_closes_the_connection_after_the_answers_before_it(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 3:
                raise ValueError("boom")
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1, 2, 3, 4))
        assert transport.answered() == [1, 2]
        assert transport.closed
        await turns()
        assert connection.processor.budget.requests == 0
    asyncio.run(main())
    assert "handler failed for api_key=18 v3 correlation_id=3: ValueError('boom')" in caplog.text


def test_a_handler_that_raises_after_waiting_closes_the_connection_in_its_turn(
        caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 2:
                await asyncio.sleep(0)
                raise ValueError("late")
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1, 2, 3))
        await turns()
        assert transport.answered() == [1]
        assert transport.closed
    asyncio.run(main())
    assert "correlation_id=2: ValueError('late')" in caplog.text


def test_close_connection_at_once_closes_without_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 2:
                raise CloseConnection()
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1, 2, 3))
        assert transport.answered() == [1] and transport.closed
    asyncio.run(main())
    assert "closing connection" not in caplog.text


def test_a_cancelled_handler_closes_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async def handler(request: Request, _connection: ClientConnection) -> Any:
            await asyncio.get_running_loop().create_future()  # forever

        connection, transport = connect(handler)
        connection.data_received(requests(1))
        [answer] = connection._pending
        await turns()
        assert answer.task is not None
        answer.task.cancel()
        await turns()
        assert transport.closed
    asyncio.run(main())
    assert "handler cancelled for api_key=18" in caplog.text


def test_cancellation_reaches_the_handler_where_it_waits() -> None:
    async def main() -> None:
        cleaned = []

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            try:
                await asyncio.get_running_loop().create_future()
            finally:
                cleaned.append(request.correlation_id)

        connection, transport = connect(handler)
        connection.data_received(requests(1))
        await turns()
        transport.close()  # the peer goes: pending handlers are cancelled
        await turns()
        assert cleaned == [1]
        assert connection.processor.budget.requests == 0
    asyncio.run(main())


def test_a_handler_cancelled_where_it_awaits_a_future_leaves_no_cycle() -> None:
    """The connection's peer goes while a handler awaits a bare future (as an acks=all produce's wait for the ISR
    does): the handler, its request and its task are freed by reference counting, not left to the collector."""
    async def main() -> None:
        async def handler(request: Request, _connection: ClientConnection) -> Any:
            await asyncio.get_running_loop().create_future()

        connection, transport = connect(handler)
        connection.data_received(requests(1, 2))
        await turns()
        with cyclic_garbage() as left:
            transport.close()
            await turns()
            assert connection.processor.budget.requests == 0
            del connection, transport
        assert not {"Task", "CancelledError", "frame", "Request"} & set(left), left.most_common(10)
    asyncio.run(main())


def test_a_handler_parked_with_leave_queue_gives_its_place_back_at_once() -> None:
    async def main() -> None:
        release = asyncio.get_running_loop().create_future()

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 1:
                request.leave_queue()  # a long poll: out of the request queue while it waits
                await release
            return ANSWER

        budget = RequestBudget(1)
        connection, transport = connect(handler, budget=budget)
        connection.data_received(requests(1, 2, 3))
        assert budget.requests == 0
        assert [answer.request.correlation_id for answer in connection._pending] == [1, 2, 3]
        release.set_result(None)
        await turns()
        assert transport.answered() == [1, 2, 3]
    asyncio.run(main())


def test_a_full_budget_stops_reading_until_a_handler_ends() -> None:
    async def main() -> None:
        release = asyncio.get_running_loop().create_future()

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 1:
                await release
            return ANSWER

        budget = RequestBudget(1)
        connection, transport = connect(handler, budget=budget)
        connection.data_received(requests(1, 2, 3))
        assert [answer.request.correlation_id for answer in connection._pending] == [1]
        assert not transport.reading
        release.set_result(None)
        await turns()
        assert transport.answered() == [1, 2, 3]
        assert transport.reading
    asyncio.run(main())


def test_many_connections_waiting_on_the_budget_are_woken_without_recursion() -> None:
    async def main() -> None:
        release = asyncio.get_running_loop().create_future()

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 0:
                await release
            return ANSWER

        budget = RequestBudget(1)
        holder, _ = connect(handler, budget=budget)
        holder.data_received(requests(0))
        waiting = [connect(handler, budget=budget) for _ in range(3000)]
        for connection, _ in waiting:
            connection.data_received(requests(1))
        assert budget.full and all(not connection._pending for connection, _ in waiting)
        release.set_result(None)  # each woken connection's request runs at once and gives its place back
        await turns()
        assert all(transport.answered() == [1] for _, transport in waiting)
        assert budget.requests == 0
    asyncio.run(main())


def test_responses_wait_while_the_socket_is_full_then_go_together() -> None:
    async def main() -> None:
        async def handler(request: Request, _connection: ClientConnection) -> Any:
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1))
        connection.pause_writing()
        connection.data_received(requests(2, 3))
        assert transport.answered() == [1]
        connection.resume_writing()
        assert transport.answered() == [1, 2, 3]
        assert len(transport.writes) == 2
    asyncio.run(main())


def test_in_flight_limit_pauses_reading_and_answers_resume_it() -> None:
    async def main() -> None:
        release = asyncio.get_running_loop().create_future()

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            if request.correlation_id == 0:
                await release
            return ANSWER

        connection, transport = connect(handler)
        ids = list(range(MAX_IN_FLIGHT + 20))
        connection.data_received(requests(*ids))
        assert len(connection._pending) == MAX_IN_FLIGHT and not transport.reading
        release.set_result(None)
        await turns()
        assert transport.answered() == ids and transport.reading
    asyncio.run(main())


def test_a_throttled_request_stops_the_reading_of_those_after_it() -> None:
    async def main() -> None:
        async def handler(request: Request, connection: ClientConnection) -> Any:
            if request.correlation_id == 1:
                connection.mute(0.05)  # what Broker._throttle does for a client over its quota
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1, 2))
        assert transport.answered() == [1]
        await asyncio.sleep(0.1)
        assert transport.answered() == [1, 2]
    asyncio.run(main())


def test_a_handler_cancelled_before_its_task_first_runs_sees_the_cancellation_where_it_waits() -> None:
    async def main() -> None:
        seen: list[type[BaseException]] = []

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            try:
                await asyncio.get_running_loop().create_future()
            except BaseException as exc:
                seen.append(type(exc))
                raise

        connection, _ = connect(handler)
        connection.data_received(requests(1))
        [answer] = connection._pending
        assert answer.task is not None
        answer.task.cancel()  # in the same loop turn: before the task's first step
        await turns()
        assert seen == [asyncio.CancelledError]
        assert answer.task.cancelled()
    asyncio.run(main())


def test_the_clients_end_of_file_closes_the_connection_and_nothing_is_written_after_it() -> None:
    async def main() -> None:
        release = asyncio.get_running_loop().create_future()

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            await release
            return ANSWER

        connection, transport = connect(handler)
        connection.data_received(requests(1))
        assert not connection.eof_received()  # falsy: the transport closes itself too
        assert transport.closed
        release.set_result(None)
        await turns()
        assert transport.writes == []
    asyncio.run(main())


def _slow_handler(seen: list[int]) -> Handler:
    async def handler(request: Request, _connection: ClientConnection) -> Any:
        seen.append(request.correlation_id)
        if request.correlation_id < 100:
            time.sleep(2 * READ_SLICE_S)  # work done in the read itself, as a segment roll is
        return ANSWER
    return handler


def test_a_read_hands_the_loop_on_once_its_slice_is_used_and_reads_on_a_turn_later(read_slice: None) -> None:
    async def main() -> None:
        seen: list[int] = []
        slow, slow_transport = connect(_slow_handler(seen))
        other, other_transport = connect(_slow_handler(seen))
        slow.data_received(requests(1, 2, 3, 4))
        # the first handler outlasted the slice: its answer went, the rest wait, the socket is not read
        assert seen == [1] and slow_transport.answered() == [1] and not slow_transport.reading
        other.data_received(requests(100))  # another connection is served meanwhile
        assert other_transport.answered() == [100]
        await turns(10)
        assert seen == [1, 100, 2, 3, 4]
        assert slow_transport.answered() == [1, 2, 3, 4] and slow_transport.reading
        assert len(slow_transport.writes) == 4  # one write a slice
    asyncio.run(main())


def test_requests_buffered_before_the_clients_end_of_file_are_all_answered_across_slices(read_slice: None) -> None:
    """Over a real socket: while a read waits for its next turn the socket is not read, so the end of file
    behind the buffered requests closes the connection only once they are dispatched."""
    async def main() -> None:
        seen: list[int] = []
        processor = Processor(0, _slow_handler(seen), lambda: SUPPORTED, 1 << 20, 600_000, False, None,
                              frozenset({API_VERSIONS}))
        listener = socket.create_server(("127.0.0.1", 0))
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        listener.close()
        ids = list(range(1, 21))
        client.sendall(requests(*ids))
        client.shutdown(socket.SHUT_WR)
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(lambda: ClientConnection(processor), server)
        client.setblocking(False)
        received = b""
        while True:
            chunk = await loop.sock_recv(client, 65536)
            if not chunk:
                break
            received += chunk
        client.close()
        answered = []
        while received:
            (size,) = struct.unpack_from(">i", received)
            answered.append(struct.unpack_from(">i", received, 4)[0])
            received = received[4 + size:]
        assert seen == ids and answered == ids
    asyncio.run(main())


@pytest.mark.skipif(not LOW_WATER, reason="SO_RCVLOWAT as klamm uses it needs Linux 5.8 or later")
def test_a_large_request_grows_a_locked_receive_buffer_and_wakes_its_reader_once_it_is_in() -> None:
    """socket.receive.buffer.bytes (100 KiB) locks the buffer, and the kernel caps a receive mark at half of
    it: the connection grows the buffer once for a frame lacking more, and marks what the frame lacks."""
    async def main() -> None:
        seen: list[int] = []

        async def handler(request: Request, _connection: ClientConnection) -> Any:
            seen.append(request.correlation_id)
            return ANSWER

        processor = Processor(0, handler, lambda: SUPPORTED, 1 << 21, 600_000, False, None, frozenset())
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 100 * 1024)  # as the acceptor sets it
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
        listener.close()
        locked = server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        loop = asyncio.get_running_loop()
        _, connection = await loop.connect_accepted_socket(
            lambda: ClientConnection(processor, receive_buffer_locked=True), server)
        frame = encode_request(API_VERSIONS, 3, {"client_software_name": "a" * 600_000,
                                                 "client_software_version": "1"}, 7)
        client.sendall(frame[:150_000])
        mark = 1
        for _ in range(500):
            await asyncio.sleep(0.01)
            mark = server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT)
            if mark > 1:
                break
        grown = server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        lacking = connection._sans_io.lacking()
        assert lacking > locked // 2 and grown > locked
        assert mark == min(lacking, LARGEST, grown // 2)
        client.sendall(frame[150_000:])
        client.setblocking(False)
        answer = await asyncio.wait_for(loop.sock_recv(client, 65536), 10)
        assert struct.unpack_from(">i", answer, 4)[0] == 7 and seen == [7]
        assert server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
        assert server.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == grown  # never shrunk under queued data
        client.close()
    asyncio.run(main())
