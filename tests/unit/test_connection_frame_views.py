"""ServerConnection decodes each request from a view of its receive buffer, not a copy of the frame.

The view is released once decoded, so the receive area is read into again; what was decoded owns its bytes
(a produce request's records do not change when the buffer is reused), and a view someone else still holds
of received bytes never sees them change: the connection moves to a new buffer instead.
"""

from __future__ import annotations

import pytest

from klamm.protocol.connection import NEED_DATA, ServerConnection
from tests.unit.test_connection import PRODUCE, SUPPORTED, encode_request, metadata

pytestmark = pytest.mark.timeout(60)


def produce(correlation_id: int, records: bytes) -> bytes:
    return encode_request(PRODUCE, 9, {"transactional_id": None, "acks": -1, "timeout": 30000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": records}]}]}, correlation_id)


def test_decoded_records_own_their_bytes_while_the_buffer_is_reused() -> None:
    conn = ServerConnection(1 << 20, SUPPORTED)
    first, second = bytes(range(256)) * 40, bytes(reversed(range(256))) * 40
    one, two = produce(1, first), produce(2, second)
    conn.receive_data(one + two[:100])  # the first whole, the start of the second behind it
    request = conn.next_request()
    assert request is not NEED_DATA and conn.next_request() is NEED_DATA
    conn.receive_data(two[100:])  # drops the first frame's bytes and appends: the view must be gone
    later = conn.next_request()
    assert later is not NEED_DATA
    assert bytes(request.body.topic_data[0].partition_data[0].records) == first
    assert bytes(later.body.topic_data[0].partition_data[0].records) == second
    assert (request.correlation_id, later.correlation_id, request.client_id) == (1, 2, "client")


def test_a_view_held_elsewhere_moves_the_connection_to_a_new_buffer() -> None:
    conn = ServerConnection(1 << 20, SUPPORTED)
    one, two = metadata(1), metadata(2, ("x",))
    conn.receive_data(one + two[:7])
    assert conn.next_request() is not NEED_DATA
    held = memoryview(conn._buffer)[:conn._end]  # the bytes received so far
    before = bytes(held)
    conn.receive_data(two[7:])
    later = conn.next_request()
    assert later is not NEED_DATA and later.correlation_id == 2 and [t.name for t in later.body.topics] == ["x"]
    assert conn.next_request() is NEED_DATA
    conn.receive_data(metadata(3, ("y" * 40,)))  # all parsed: the next read would start the area over
    third = conn.next_request()
    assert third is not NEED_DATA and [t.name for t in third.body.topics] == ["y" * 40]
    assert bytes(held) == before
