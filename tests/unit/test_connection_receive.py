"""ServerConnection as an asyncio buffered protocol: the socket reads into get_buffer(), no copy in between.

The connections of a processor read in turn into one ReceiveArea; what one leaves unparsed moves into a
buffer of its own before another reads into the area; a large frame is read into a buffer that is exactly
the frame, handed to the request whole. These tests feed the connection the way a transport does: each
"read" writes at most some bytes into the view get_buffer gave, then calls buffer_updated.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import pytest

from klamm.broker.handlers.produce import let_go_of_frames
from klamm.broker.network import ClientConnection, Processor
from klamm.protocol import connection as connection_module
from klamm.protocol.connection import (
    NEED_DATA,
    OWN_FRAME_MIN_BYTES,
    ProtocolError,
    ReceiveArea,
    Request,
    ServerConnection,
)
from tests.unit.test_connection import PRODUCE, SUPPORTED, api_versions, encode_request, metadata

pytestmark = pytest.mark.timeout(120)


def produce(correlation_id: int, records: bytes) -> bytes:
    return encode_request(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}]}, correlation_id)


def read(conn: ServerConnection, data: bytes | memoryview, most: int | None = None) -> int:
    """One read of a transport: at most `most` bytes of `data` into the view get_buffer gave; how many."""
    room = conn.get_buffer()
    assert len(room) > 0 and not room.readonly
    count = min(len(room), len(data), most if most is not None else len(data))
    room[:count] = data[:count]
    room.release()
    conn.buffer_updated(count)
    return count


def feed(conn: ServerConnection, data: bytes, cuts: list[int] = ()) -> list[Request]:
    """Send `data` in reads that end at `cuts` (and wherever get_buffer's view ends); pull requests after each."""
    out: list[Request] = []
    position, view = 0, memoryview(data)
    for end in [*cuts, len(data)]:
        while position < end:
            position += read(conn, view[position:end])
            while (request := conn.next_request()) is not NEED_DATA:
                out.append(request)
    return out


def summary(request: Request) -> tuple[Any, ...]:
    if request.api_key == PRODUCE:
        return request.correlation_id, bytes(request.body.topic_data[0].partition_data[0].records)
    return request.correlation_id, tuple(topic.name for topic in request.body.topics)


SMALL = [metadata(1, ("a",)), api_versions(2), metadata(3, ("bb", "ccc")), produce(4, b"r" * 100)]


def test_frames_split_at_every_byte_boundary() -> None:
    stream = b"".join(SMALL)
    expected = [summary(r) for r in feed(ServerConnection(1 << 20, SUPPORTED), stream) if r.api_key != 18]
    assert [e[0] for e in expected] == [1, 3, 4]
    for cut in range(1, len(stream)):
        for second in (cut + 1, cut + 3, cut + 7):
            got = feed(ServerConnection(1 << 20, SUPPORTED), stream, [cut, min(second, len(stream))])
            assert [r.correlation_id for r in got] == [1, 2, 3, 4]
            assert [summary(r) for r in got if r.api_key != 18] == expected


def test_a_large_frame_split_near_its_edges_and_read_one_byte_at_a_time_at_its_start() -> None:
    records = bytes(range(256)) * (OWN_FRAME_MIN_BYTES // 256 + 3)
    big = produce(7, records)
    stream = metadata(6, ("x",)) + big + metadata(8, ("y",))
    first = len(metadata(6, ("x",)))
    cuts = sorted({*range(first - 2, first + 12), *range(first + len(big) - 6, first + len(big) + 3)})
    got = feed(ServerConnection(1 << 22, SUPPORTED), stream, cuts)
    assert [summary(r) for r in got] == [(6, ("x",)), (7, records), (8, ("y",))]


def test_many_frames_in_one_read_and_more_than_the_area_holds() -> None:
    frames = [metadata(i, (f"topic-{i}",)) for i in range(3000)]  # ~100 KB: the area (64 KiB) fills, twice
    conn = ServerConnection(1 << 20, SUPPORTED)
    got = feed(conn, b"".join(frames))
    assert [summary(r) for r in got] == [(i, (f"topic-{i}",)) for i in range(3000)]
    assert conn.next_request() is NEED_DATA


def test_frames_pulled_late_after_many_reads() -> None:
    """Reads go on while no request is pulled (the network layer pausing is not assumed here)."""
    frames = [metadata(i, ("t" * (i % 50),)) for i in range(2000)]
    conn = ServerConnection(1 << 20, SUPPORTED)
    conn.receive_data(b"".join(frames))
    got = []
    while (request := conn.next_request()) is not NEED_DATA:
        got.append(summary(request))
    assert got == [(i, ("t" * (i % 50),)) for i in range(2000)]


def test_a_large_produce_is_read_into_its_own_frame_and_decoded_there() -> None:
    records = b"\x01\x02" * (OWN_FRAME_MIN_BYTES // 2 + 100)
    big = produce(9, records)
    conn = ServerConnection(1 << 22, SUPPORTED)
    read(conn, big, most=1000)  # into the area
    assert conn.next_request() is NEED_DATA
    room = conn.get_buffer()  # the rest of the frame, and not a byte past it, in a buffer of its own
    frame_buffer = room.obj
    assert len(room) == len(big) - 1000 and len(frame_buffer) >= len(big)
    room.release()
    while (request := conn.next_request()) is NEED_DATA:
        read(conn, memoryview(big)[conn._end:], most=50_000)
    records_view = request.body.topic_data[0].partition_data[0].records
    assert isinstance(records_view, memoryview) and not records_view.readonly
    assert records_view.obj is frame_buffer  # no copy: the bytes the socket wrote
    assert bytes(records_view) == records
    after = feed(conn, metadata(10, ("z",)))  # the connection goes on in another buffer
    assert [summary(r) for r in after] == [(10, ("z",))] and bytes(records_view) == records


def big_produce(conn: ServerConnection, correlation_id: int, records: bytes) -> Request:
    got = feed(conn, produce(correlation_id, records), [3000, 70_000])
    assert len(got) == 1
    return got[0]


def records_of(request: Request) -> memoryview:
    return request.body.topic_data[0].partition_data[0].records


def test_a_frame_buffer_is_reused_only_once_its_request_let_go_of_it() -> None:
    area = ReceiveArea()
    conn = ServerConnection(1 << 22, SUPPORTED, area)
    size = OWN_FRAME_MIN_BYTES + 5000
    first = big_produce(conn, 1, b"a" * size)
    second = big_produce(conn, 2, b"b" * size)
    first_buffer, second_buffer = records_of(first).obj, records_of(second).obj
    assert first_buffer is not second_buffer  # the first request still holds its frame
    del first
    third = big_produce(conn, 3, b"c" * size)
    assert records_of(third).obj is first_buffer and bytes(records_of(third)) == b"c" * size
    assert bytes(records_of(second)) == b"b" * size
    held = [big_produce(conn, 10 + i, bytes([i]) * (size + i * 70_000)) for i in range(12)]  # more than the pool
    assert len({id(records_of(r).obj) for r in held}) == 12
    assert all(bytes(records_of(r)) == bytes([i]) * (size + i * 70_000) for i, r in enumerate(held))
    assert bytes(records_of(second)) == b"b" * size and bytes(records_of(third)) == b"c" * size


def test_the_produce_handler_letting_go_of_its_records_frees_the_frame_while_the_request_waits() -> None:
    conn = ServerConnection(1 << 22, SUPPORTED, ReceiveArea())
    size = OWN_FRAME_MIN_BYTES + 5000
    first = big_produce(conn, 1, b"a" * size)
    first_buffer = records_of(first).obj
    let_go_of_frames(first.body)  # the request itself is still held, as while it waits for the ISR
    second = big_produce(conn, 2, b"b" * size)
    assert records_of(second).obj is first_buffer and bytes(records_of(second)) == b"b" * size
    piece = records_of(second)[100:200]  # a slice kept elsewhere keeps the frame
    let_go_of_frames(second.body)
    third = big_produce(conn, 3, b"c" * size)
    assert records_of(third).obj is not first_buffer and bytes(piece) == b"b" * 100
    assert bytes(records_of(third)) == b"c" * size


def test_two_connections_receiving_large_frames_at_once_never_share_a_buffer() -> None:
    area = ReceiveArea()
    one, two = ServerConnection(1 << 22, SUPPORTED, area), ServerConnection(1 << 22, SUPPORTED, area)
    size = OWN_FRAME_MIN_BYTES + 100
    for i in range(3):  # buffers in the pool, free again
        big_produce(one, i, b"p" * size)
    frames = [produce(10, b"1" * size), produce(20, b"2" * size)]
    at, got = [0, 0], [[], []]
    while at != [len(frames[0]), len(frames[1])]:
        for k, conn in enumerate((one, two)):
            if at[k] < len(frames[k]):
                at[k] += read(conn, memoryview(frames[k])[at[k]:], most=9000)
                while (request := conn.next_request()) is not NEED_DATA:
                    got[k].append(request)
    assert bytes(records_of(got[0][0])) == b"1" * size and bytes(records_of(got[1][0])) == b"2" * size


def test_a_connection_closed_in_a_large_frame_gives_its_buffer_to_no_one() -> None:
    area = ReceiveArea()
    gone, other = ServerConnection(1 << 22, SUPPORTED, area), ServerConnection(1 << 22, SUPPORTED, area)
    size = OWN_FRAME_MIN_BYTES + 100
    frame = produce(1, b"g" * size)
    read(gone, frame, most=4000)
    read(gone, memoryview(frame)[4000:], most=50_000)
    partial = gone._buffer
    gone.close()
    request = big_produce(other, 2, b"o" * size)
    assert records_of(request).obj is not partial and bytes(records_of(request)) == b"o" * size


def test_an_oversized_frame_is_refused_from_its_size_without_taking_memory_for_it() -> None:
    conn = ServerConnection(4096, SUPPORTED)
    read(conn, struct.pack(">i", 1 << 30) + b"\x00" * 6)
    room = conn.get_buffer()
    assert len(room) <= 1 << 17  # not a buffer the size the frame claims
    room.release()
    with pytest.raises(ProtocolError):
        conn.next_request()
    conn = ServerConnection(4096, SUPPORTED)
    read(conn, metadata(1, ("m" * 5000,)))
    with pytest.raises(ProtocolError):
        conn.next_request()


def test_a_size_prefix_alone_takes_no_more_than_the_pooled_frame_size_and_larger_frames_still_arrive() -> None:
    from klamm.protocol.connection import POOLED_FRAME_MAX
    conn = ServerConnection(1 << 27, SUPPORTED)
    read(conn, struct.pack(">i", 100_000_000))  # a claim of 100 MB, nothing behind it
    room = conn.get_buffer()
    assert len(room.obj) <= POOLED_FRAME_MAX
    room.release()
    conn.close()
    records = bytes(range(256)) * (POOLED_FRAME_MAX // 256 * 2 + 7)  # ~16 MB: beyond the pool, grown into
    got = feed(ServerConnection(1 << 27, SUPPORTED), produce(4, records) + metadata(5, ("after",)),
               list(range(1000, 17_000_000, 1_000_000)))
    assert [summary(r) for r in got] == [(4, records), (5, ("after",))]


def test_a_frame_larger_than_the_area_that_is_not_a_produce() -> None:
    topics = tuple(f"topic-{i:06d}" for i in range(9000))  # ~130 KB metadata request
    frame = metadata(5, topics)
    assert len(frame) > OWN_FRAME_MIN_BYTES
    conn = ServerConnection(1 << 22, SUPPORTED)
    got = feed(conn, frame + api_versions(6), [17, 70_000])
    assert [r.correlation_id for r in got] == [5, 6] and summary(got[0]) == (5, topics)


def test_a_view_kept_by_a_decoded_request_keeps_its_bytes_across_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """A decoder that kept a view of the area (kio does not, but nothing may rely on it) never sees it change."""
    kept: list[tuple[memoryview, bytes]] = []
    reader_of = connection_module._reader

    def keeping_reader(entity_type: type) -> Any:
        read_entity = reader_of(entity_type)

        def read_and_keep(frame: memoryview, position: int) -> Any:
            kept.append((frame[position:], bytes(frame[position:])))
            return read_entity(frame, position)
        return read_and_keep

    monkeypatch.setattr(connection_module, "_reader", keeping_reader)
    area = ReceiveArea(4096)  # small: it is started over often
    conn = ServerConnection(1 << 20, SUPPORTED, area)
    frames = [metadata(i, (f"t{i}" * (i % 7 + 1),)) for i in range(400)]
    got = feed(conn, b"".join(frames), list(range(100, sum(map(len, frames)), 333)))
    assert [summary(r) for r in got] == [(i, (f"t{i}" * (i % 7 + 1),)) for i in range(400)]
    assert len(kept) == 400 and all(bytes(view) == copy for view, copy in kept)


def test_connections_sharing_an_area_keep_their_unparsed_bytes() -> None:
    area = ReceiveArea()
    one, two = ServerConnection(1 << 22, SUPPORTED, area), ServerConnection(1 << 22, SUPPORTED, area)
    stream_one = b"".join(metadata(i, ("one",)) for i in range(50)) + produce(50, b"1" * (OWN_FRAME_MIN_BYTES + 9))
    stream_two = b"".join(metadata(100 + i, ("two" * i,)) for i in range(60))
    got_one: list[Request] = []
    got_two: list[Request] = []
    at_one = at_two = 0
    step = 0
    while at_one < len(stream_one) or at_two < len(stream_two):
        step += 1
        for conn, stream, got, at in ((one, stream_one, got_one, at_one), (two, stream_two, got_two, at_two)):
            if at < len(stream):
                at += read(conn, memoryview(stream)[at:], most=997 + 61 * (step % 13))
                while (request := conn.next_request()) is not NEED_DATA:
                    got.append(request)
            if conn is one:
                at_one = at
            else:
                at_two = at
    assert [r.correlation_id for r in got_one] == list(range(51))
    assert bytes(got_one[-1].body.topic_data[0].partition_data[0].records) == b"1" * (OWN_FRAME_MIN_BYTES + 9)
    assert [summary(r) for r in got_two] == [(100 + i, ("two" * i,)) for i in range(60)]


def test_the_start_of_a_large_frame_spilled_from_the_area_goes_into_a_frame_buffer_once() -> None:
    area = ReceiveArea()
    big_conn, other = ServerConnection(1 << 22, SUPPORTED, area), ServerConnection(1 << 22, SUPPORTED, area)
    size = OWN_FRAME_MIN_BYTES + 3000
    big_produce(big_conn, 1, b"x" * size)  # a frame buffer in the pool, free again
    frame = produce(2, b"y" * size)
    read(big_conn, frame, most=20_000)  # its start in the area
    assert big_conn.next_request() is NEED_DATA
    assert [summary(r) for r in feed(other, metadata(3, ("o",)))] == [(3, ("o",))]  # takes the area: a spill
    spilled = big_conn._buffer
    assert len(spilled) >= len(frame) and spilled is big_conn._frame_buffer  # the pooled one, not a copy in between
    room = big_conn.get_buffer()
    assert room.obj is spilled and len(room) == len(frame) - 20_000
    room.release()
    got = feed(big_conn, frame[20_000:])
    assert [summary(r) for r in got] == [(2, b"y" * size)] and records_of(got[0]).obj is spilled


def test_a_connection_closed_mid_frame_leaves_the_area_to_the_others() -> None:
    area = ReceiveArea()
    gone, other = ServerConnection(1 << 20, SUPPORTED, area), ServerConnection(1 << 20, SUPPORTED, area)
    read(gone, metadata(1, ("half",)), most=9)
    assert gone.next_request() is NEED_DATA
    gone.close()
    assert [summary(r) for r in feed(other, metadata(2, ("whole",)))] == [(2, ("whole",))]


# ------------------------------------------------------------------ over real sockets ---
async def _serve(processor: Processor) -> tuple[socket.socket, list[ClientConnection]]:
    client, server = socket.socketpair()
    made: list[ClientConnection] = []

    def factory() -> ClientConnection:
        made.append(ClientConnection(processor))
        return made[-1]
    await asyncio.get_running_loop().connect_accepted_socket(factory, server)
    client.setblocking(False)
    return client, made


async def _receive_frames(sock: socket.socket, count: int) -> list[bytes]:
    loop, data, frames = asyncio.get_running_loop(), b"", []
    while len(frames) < count:
        chunk = await asyncio.wait_for(loop.sock_recv(sock, 65536), 10)
        assert chunk, "connection closed"
        data += chunk
        while len(data) >= 4 and len(data) >= 4 + struct.unpack_from(">i", data)[0]:
            size = struct.unpack_from(">i", data)[0]
            frames.append(data[4:4 + size])
            data = data[4 + size:]
    return frames


def test_over_sockets_interleaved_connections_a_large_produce_and_one_closed_mid_frame() -> None:
    seen: list[tuple[int, Any]] = []
    big_records = bytes(range(251)) * 1000

    async def handler(request: Request, _connection: ClientConnection) -> dict[str, Any]:
        if request.api_key == PRODUCE:
            seen.append((request.correlation_id, bytes(request.body.topic_data[0].partition_data[0].records)))
        else:
            seen.append((request.correlation_id, tuple(t.name for t in request.body.topics)))
        return {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}

    async def main() -> None:
        processor = Processor(0, handler, lambda: SUPPORTED, 1 << 22, 600_000, False)
        loop = asyncio.get_running_loop()
        a, _ = await _serve(processor)
        b, _ = await _serve(processor)
        c, made_c = await _serve(processor)
        stream_a = metadata(1, ("a1",)) + produce(2, big_records) + metadata(3, ("a3",))
        stream_b = b"".join(metadata(10 + i, ("b",)) for i in range(20))
        await loop.sock_sendall(c, metadata(99, ("never",))[:11])  # c leaves mid-frame
        for cut in range(0, max(len(stream_a), len(stream_b)), 7001):
            await loop.sock_sendall(a, stream_a[cut:cut + 7001])
            await loop.sock_sendall(b, stream_b[cut:cut + 7001])
            await asyncio.sleep(0)
        c.close()
        got_a, got_b = await _receive_frames(a, 3), await _receive_frames(b, 20)
        assert [struct.unpack_from(">i", f)[0] for f in got_a] == [1, 2, 3]
        assert [struct.unpack_from(">i", f)[0] for f in got_b] == list(range(10, 30))
        for _ in range(100):
            if made_c[0]._closed:
                break
            await asyncio.sleep(0.01)
        assert made_c[0]._closed
        a.close()
        b.close()

    asyncio.run(main())
    assert [entry for entry in seen if entry[0] < 10] == [(1, ("a1",)), (2, big_records), (3, ("a3",))]
    assert [entry[0] for entry in seen if entry[0] >= 10] == list(range(10, 30))
    assert all(entry[0] != 99 for entry in seen)
