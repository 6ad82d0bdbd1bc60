"""The length check before kio decodes a flexible request: it walks exactly what kio reads, and refuses every
frame cut short, for every served request version."""

from __future__ import annotations

import io
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.primitive import Records

from klamm.broker.handlers import registry
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.guard import LengthError, check_lengths, struct_check

pytestmark = pytest.mark.timeout(300)
st.register_type_strategy(Records, st.binary(max_size=300).map(Records))  # type: ignore[arg-type]

FLEXIBLE = [(key, version) for key, api in sorted(registry().items())
            for version in range(api.min_version, api.max_version + 1) if message_types(key, version).flexible]
EXAMPLES = int(os.environ.get("KLAMM_MESSAGE_EXAMPLES", "5"))


def written(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def assert_walked_exactly(cls: type, data: bytes) -> None:
    """The check ends where the message ends, and refuses each of its prefixes."""
    assert struct_check(cls)(data, 0, len(data), []) == len(data)
    for end in range(len(data)):
        with pytest.raises(LengthError):
            struct_check(cls)(data, 0, end, [])


@pytest.mark.parametrize(("key", "version"), FLEXIBLE, ids=[f"{k}v{v}" for k, v in FLEXIBLE])
def test_the_check_walks_what_kio_writes_and_refuses_every_prefix(key: int, version: int) -> None:
    cls = message_types(key, version).request

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(request=st.from_type(cls))
    def check(request: Any) -> None:
        assert_walked_exactly(cls, written(request))

    check()


def test_lengths_of_two_varint_bytes_and_more() -> None:
    """Names, strings and records past 127 bytes take the varint reader, not the one-byte path."""
    produce = message_types(0, 10).request
    assert_walked_exactly(produce, written(build(produce, {"transactional_id": "x" * 200, "acks": -1, "topic_data": [
        {"name": "t" * 130, "partition_data": [{"index": 0, "records": b"r" * 20000}]}]})))
    create = message_types(19, 7).request
    assert_walked_exactly(create, written(build(create, {"topics": [{"name": "t", "num_partitions": 1,
                                                                    "replication_factor": 1, "configs": [
        {"name": "cleanup.policy", "value": "v" * 5000}]}]})))


def test_a_one_byte_length_past_the_end_is_refused() -> None:
    produce = message_types(0, 10).request
    data = written(build(produce, {"acks": 1, "topic_data": [{"name": "t", "partition_data": [
        {"index": 0, "records": b"r" * 100}]}]}))
    at = data.index(bytes([101]) + b"r" * 100)  # the records' compact length: 100 + 1
    grown = data[:at] + bytes([120]) + data[at + 1:]  # 119 bytes declared, 100 there
    with pytest.raises(LengthError):
        check_lengths(produce, grown, 0)
