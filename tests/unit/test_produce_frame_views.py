"""A large produce request keeps its records in its own frame, and the leader patches and writes them there.

ServerConnection hands a produce frame of OWN_FRAME_MIN_BYTES and up to the request (the connection goes on
in a new buffer) and decodes it with the spec codec (klamm.protocol.frame_views): the entity must equal
kio's decoding of the same bytes, with the records a writable memoryview of the frame. Partition._validate
patches such a view in place; anything else it copies, as before.
"""

from __future__ import annotations

import uuid

import pytest
from kio.serial import entity_reader

from klamm.broker.handlers import registry
from klamm.broker.partition import Partition, log_config
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.protocol.api import message_types
from klamm.protocol.batch import read_batch_header
from klamm.protocol.connection import (
    NEED_DATA,
    OWN_FRAME_MIN_BYTES,
    ProtocolError,
    ServerConnection,
)
from klamm.protocol.guard import read_request_header
from klamm.protocol.records import build_batch
from klamm.storage.log import Log
from tests.unit.test_connection import PRODUCE, SUPPORTED, encode_request, metadata

pytestmark = pytest.mark.timeout(60)
LOW, HIGH = registry()[PRODUCE].min_version, registry()[PRODUCE].max_version


def produce(version: int, records: bytes | None, correlation_id: int = 1) -> bytes:
    return encode_request(PRODUCE, version, {"transactional_id": "tx" if version >= 3 else None, "acks": -1,
                                             "timeout": 1234, "topic_data": [
        {"name": "t", "partition_data": [{"index": 3, "records": records}, {"index": 4, "records": b"small"}]}]},
        correlation_id)


def kio_decoded(frame: bytes, version: int):
    types = message_types(PRODUCE, version)
    _, position = read_request_header(frame[4:], types.request_header_version == 2)
    return entity_reader(types.request)(frame[4:], position)[0]


@pytest.mark.parametrize("version", range(LOW, HIGH + 1))
def test_a_large_produce_is_decoded_as_kio_decodes_it_with_its_records_in_its_frame(version: int) -> None:
    records = bytes(range(256)) * (OWN_FRAME_MIN_BYTES // 256 + 1)
    frame, after = produce(version, records), metadata(2, ("x",))
    conn = ServerConnection(1 << 22, SUPPORTED)
    conn.receive_data(frame[:1000])
    assert conn.next_request() is NEED_DATA
    conn.receive_data(frame[1000:] + after[:5])  # the next request begins in the same buffer
    request = conn.next_request()
    assert request is not NEED_DATA and conn.next_request() is NEED_DATA
    conn.receive_data(after[5:])
    later = conn.next_request()
    assert later is not NEED_DATA and later.correlation_id == 2 and [t.name for t in later.body.topics] == ["x"]
    got = request.body.topic_data[0].partition_data[0].records
    assert isinstance(got, memoryview) and not got.readonly and bytes(got) == records
    assert request.body == kio_decoded(frame, version)  # a memoryview compares equal to the same bytes
    assert (request.correlation_id, request.client_id, request.size) == (1, "client", len(frame) - 4)


def test_a_small_produce_is_decoded_by_kio() -> None:
    request = ServerConnection(1 << 22, SUPPORTED)
    request.receive_data(produce(HIGH, b"abc"))
    decoded = request.next_request()
    assert decoded is not NEED_DATA and isinstance(decoded.body.topic_data[0].partition_data[0].records, bytes)


def test_a_large_produce_with_null_records_and_a_bad_one() -> None:
    conn = ServerConnection(1 << 22, SUPPORTED)
    padded = encode_request(PRODUCE, HIGH, {"transactional_id": "x" * 40_000, "acks": 1, "timeout": 5, "topic_data": [
        {"name": "t" * 30_000, "partition_data": [{"index": i, "records": None} for i in range(20_000)]}]})
    assert len(padded) > OWN_FRAME_MIN_BYTES
    conn.receive_data(padded)
    decoded = conn.next_request()
    assert decoded is not NEED_DATA and decoded.body.topic_data[0].partition_data[-1].records is None
    assert decoded.body == kio_decoded(padded, HIGH)
    frame = bytearray(produce(HIGH, b"z" * OWN_FRAME_MIN_BYTES))
    frame[-30:] = b"\xff" * 30  # lengths past the end
    conn.receive_data(bytes(frame))
    with pytest.raises(ProtocolError):
        conn.next_request()


def make_partition(tmp_path) -> Partition:
    config = TopicConfig.resolve(BrokerConfig.from_properties({}), {})
    return Partition("t", 0, uuid.uuid4(), Log.open(tmp_path / "t-0", log_config(config)), config)


def test_a_writable_view_is_patched_in_place_and_other_records_are_copied(tmp_path) -> None:
    partition = make_partition(tmp_path)
    first = build_batch([(b"k", b"v" * 10)] * 3)
    partition.append(first)
    assert read_batch_header(first).base_offset == 0  # bytes: patched in a copy
    frame = bytearray(b"xx" + first + b"yy")
    view = memoryview(frame)[2:-2]
    result = partition.append(view)
    assert result.first_offset == 3 and read_batch_header(view).base_offset == 3  # patched where it is
    stored = partition.log.read_bytes(0, 1 << 20)
    assert stored[len(first):] == bytes(view) and frame[:2] == b"xx" and frame[-2:] == b"yy"
    assert first[12:16] == b"\xff" * 4 and stored[12:16] == bytes(view[12:16]) == bytes(4)  # leader epoch 0
    readonly = memoryview(bytes(first)).toreadonly()
    assert partition.append(readonly).first_offset == 6 and read_batch_header(readonly).base_offset == 0
