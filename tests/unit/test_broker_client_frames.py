"""BrokerConnection receives each response into its own buffer and decodes it from there.

A scripted server answers each request as a test tells it: the response in pieces,
closed mid-frame, with a bad size prefix or with bytes past it. `request` (kio) and
`request_views` (the spec codec, records as views of the buffer) must give what the
server meant, or BrokerUnavailable and a working connection on the next request.
"""

from __future__ import annotations

import asyncio
import io
import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.broker.low_water import AVAILABLE, LARGEST
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.schema import packaged_spec, records_view_codec

FETCH, VERSION = 1, 12
REQUEST = {"replica_id": 2, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
           "session_id": 0, "session_epoch": -1,
           "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 1, "fetch_offset": 0,
                                                      "last_fetched_epoch": -1, "log_start_offset": 0,
                                                      "partition_max_bytes": 1 << 20}]}],
           "forgotten_topics_data": [], "rack_id": ""}

# How the server writes one response frame: gets the writer and the whole frame (size prefix included).
Send = Callable[[asyncio.StreamWriter, bytes], Awaitable[None]]


def fetch_response_body(records: bytes | None, high_watermark: int = 7) -> bytes:
    types = message_types(FETCH, VERSION)
    response = build(types.response, {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": high_watermark, "last_stable_offset": high_watermark,
         "records": records}]}]})
    out = io.BytesIO()
    entity_writer(types.response)(out, response)
    return out.getvalue()


def frame_of(correlation_id: int, body: bytes) -> bytes:
    out = io.BytesIO()
    entity_writer(ResponseHeaderV1)(out, ResponseHeaderV1(correlation_id=correlation_id))
    payload = out.getvalue() + body
    return struct.pack(">i", len(payload)) + payload


async def whole(writer: asyncio.StreamWriter, frame: bytes) -> None:
    writer.write(frame)
    await writer.drain()


def in_pieces(*cuts: int) -> Send:
    """Write the frame cut at these positions, letting the client read between the pieces."""
    async def send(writer: asyncio.StreamWriter, frame: bytes) -> None:
        start = 0
        for cut in [*cuts, len(frame)]:
            writer.write(frame[start:cut])
            await writer.drain()
            await asyncio.sleep(0.01)
            start = cut
    return send


class ScriptedServer:
    """Answers request i with bodies[i] written by sends[i]; records what it was asked."""

    def __init__(self, answers: list[tuple[bytes, Send]]) -> None:
        self.answers = list(answers)
        self.correlation_ids: list[int] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while self.answers:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                header, _ = entity_reader(RequestHeaderV2)(frame, 0)
                self.correlation_ids.append(header.correlation_id)
                body, send = self.answers.pop(0)
                await send(writer, frame_of(header.correlation_id, body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


async def exchange(answers: list[tuple[bytes, Send]], calls: list[str]) -> list[Any]:
    """Make the calls ("kio" or "views") in turn on one connection; an exception is returned as the result."""
    server = ScriptedServer(answers)
    port = await server.start()
    connection = BrokerConnection("127.0.0.1", port, "test", timeout_s=5)
    results: list[Any] = []
    try:
        for call in calls:
            try:
                if call == "kio":
                    response = await connection.request(FETCH, VERSION, REQUEST)
                    results.append(bytes(response.responses[0].partitions[0].records or b""))
                else:
                    response = await connection.request_views(FETCH, VERSION, REQUEST)
                    records = response["responses"][0]["partitions"][0]["records"]
                    assert records is None or isinstance(records, memoryview)
                    results.append(bytes(records or b""))  # read before the next request reuses the buffer
            except BrokerUnavailable as exc:
                results.append(exc)
    finally:
        connection.close()
        await server.stop()
    return results


def records(size: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) % 251 for i in range(size))


@pytest.mark.parametrize("call", ["kio", "views"])
def test_a_response_in_pieces_is_whole(call: str) -> None:
    big, small = records(300_000, 1), records(100, 2)  # the first grows the 64 KiB buffer, the second reuses it
    cuts = in_pieces(1, 3, 4, 5, 70_000, 200_000)
    results = asyncio.run(exchange([(fetch_response_body(big), cuts), (fetch_response_body(small), cuts),
                                    (fetch_response_body(None), whole)], [call] * 3))
    assert results == [big, small, b""]


def test_views_and_kio_calls_share_the_connection() -> None:
    one, two, three = records(200_000, 3), records(10, 4), records(150_000, 5)
    results = asyncio.run(exchange([(fetch_response_body(one), whole), (fetch_response_body(two), whole),
                                    (fetch_response_body(three), in_pieces(2, 100_000))],
                                   ["views", "kio", "views"]))
    assert results == [one, two, three]


def test_a_connection_closed_mid_frame_fails_and_the_next_request_reconnects() -> None:
    data = records(50_000, 6)

    async def half_then_close(writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(frame[:len(frame) // 2])
        await writer.drain()
        writer.close()

    results = asyncio.run(exchange([(fetch_response_body(data), half_then_close), (fetch_response_body(data), whole)],
                                   ["views", "views"]))
    assert isinstance(results[0], BrokerUnavailable) and results[1] == data


def test_a_large_frame_closed_mid_way_fails_at_once_not_at_the_timeout() -> None:
    """The receive mark waits for more than the half that came: the end of file must still wake the reader."""
    data = records(3_000_000, 10)

    async def half_then_close(writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(frame[:len(frame) // 2])
        await writer.drain()
        await asyncio.sleep(0.2)  # the reader has set its mark for the rest
        writer.close()

    results = asyncio.run(exchange([(fetch_response_body(data), half_then_close), (fetch_response_body(data), whole)],
                                   ["views", "views"]))
    assert isinstance(results[0], BrokerUnavailable) and "Timeout" not in str(results[0]), results[0]
    assert results[1] == data


@pytest.mark.skipif(not AVAILABLE, reason="no receive mark on this platform (Linux 5.8 or later)")
def test_a_large_response_sets_the_receive_mark_until_it_is_whole() -> None:
    data = records(3_000_000, 11)
    first_part = 200_000
    go_on = asyncio.Event()

    async def part_then_rest(writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(frame[:first_part])
        await writer.drain()
        await go_on.wait()
        writer.write(frame[first_part:])
        await writer.drain()

    async def main() -> tuple[list[int], bytes]:
        server = ScriptedServer([(fetch_response_body(data), part_then_rest)])
        port = await server.start()
        connection = BrokerConnection("127.0.0.1", port, "test", timeout_s=5)
        marks: list[int] = []
        try:
            request = asyncio.ensure_future(connection.request_views(FETCH, VERSION, REQUEST))
            async with asyncio.timeout(5):  # until the frame's size is read (the rest of the part may wait)
                while connection._reader is None or not connection._reader._frame_end:
                    await asyncio.sleep(0.005)
            sock = connection._reader.transport.get_extra_info("socket")  # type: ignore[union-attr]
            marks.append(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))
            go_on.set()
            response = await request
            got = bytes(response["responses"][0]["partitions"][0]["records"])
            marks.append(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT))
        finally:
            connection.close()
            await server.stop()
        return marks, got

    marks, got = asyncio.run(main())
    assert got == data
    assert marks == [LARGEST, 1]  # waiting for a megabyte of the rest; back to any byte once the frame is in


def test_a_connection_closed_before_the_size_is_read_fails() -> None:
    async def two_bytes_then_close(writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(frame[:2])
        await writer.drain()
        writer.close()

    results = asyncio.run(exchange([(fetch_response_body(b"x"), two_bytes_then_close)], ["kio"]))
    assert isinstance(results[0], BrokerUnavailable)


def test_a_response_followed_by_a_close_is_still_answered() -> None:
    data = records(1000, 7)

    async def then_close(writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(frame)
        await writer.drain()
        writer.close()

    assert asyncio.run(exchange([(fetch_response_body(data), then_close)], ["views"])) == [data]


@pytest.mark.parametrize("size", [0, -1, 256 * 1024 * 1024 + 1])
def test_a_bad_size_prefix_fails(size: int) -> None:
    async def bad_size(writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(struct.pack(">i", size) + frame[4:])
        await writer.drain()

    results = asyncio.run(exchange([(fetch_response_body(b"x"), bad_size), (fetch_response_body(b"y"), whole)],
                                   ["views", "kio"]))
    assert isinstance(results[0], BrokerUnavailable) and results[1] == b"y"


def test_bytes_past_the_response_fail() -> None:
    async def with_trailer(writer: asyncio.StreamWriter, frame: bytes) -> None:
        writer.write(frame + b"\x00\x00\x00\x01z")
        await writer.drain()

    results = asyncio.run(exchange([(fetch_response_body(b"x"), with_trailer), (fetch_response_body(b"y"), whole)],
                                   ["views", "views"]))
    assert isinstance(results[0], BrokerUnavailable) and results[1] == b"y"


def test_a_truncated_body_fails_in_the_view_decoder() -> None:
    body = fetch_response_body(records(100, 8))
    results = asyncio.run(exchange([(body[:-20], whole), (body, whole)], ["views", "views"]))
    assert isinstance(results[0], BrokerUnavailable) and results[1] == records(100, 8)


def test_the_view_codec_decodes_as_the_copying_one_with_records_sharing_the_buffer() -> None:
    data = records(5000, 9)
    body = bytearray(fetch_response_body(data, high_watermark=42))
    view = memoryview(body)
    by_views, end = records_view_codec("clients", "FetchResponse", VERSION).read(view, 0)
    copied, copied_end = packaged_spec("clients", "FetchResponse").codec(VERSION).read(view, 0)
    assert end == copied_end == len(body)
    got = by_views["responses"][0]["partitions"][0]
    assert isinstance(got["records"], memoryview) and bytes(got["records"]) == data
    assert isinstance(copied["responses"][0]["partitions"][0]["records"], bytes)
    got_records = got["records"]
    got["records"] = copied["responses"][0]["partitions"][0]["records"]
    assert by_views == copied and got["high_watermark"] == 42
    body[end - len(data) - 10:] = bytes(len(data) + 10)  # a view shares the buffer; the copy does not
    assert bytes(got_records) != data and copied["responses"][0]["partitions"][0]["records"] == data
