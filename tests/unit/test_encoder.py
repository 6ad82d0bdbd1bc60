"""The dict encoder writes exactly what kio writes, for every served response version, and for the requests
klamm sends (every served version: a broker forwards any request to the controller)."""

from __future__ import annotations

import dataclasses
import io
import os
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import Records

from klamm.broker.handlers import registry
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.encoder import encode
from klamm.protocol.envelope import encode_request
from klamm.protocol.sendplan import FileRegion

pytestmark = pytest.mark.timeout(300)
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))  # type: ignore[arg-type]

SERVED = [(key, version) for key, api in sorted(registry().items())
          for version in range(api.min_version, api.max_version + 1)]
EXAMPLES = int(os.environ.get("KLAMM_MESSAGE_EXAMPLES", "5"))


def kio_bytes(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def as_dict(entity: Any) -> Any:
    """A kio entity as the nested dicts handlers write."""
    if dataclasses.is_dataclass(entity):
        return {f.name: as_dict(getattr(entity, f.name)) for f in dataclasses.fields(entity)}
    if isinstance(entity, tuple):
        return [as_dict(item) for item in entity]
    return entity


def as_mappings(data: Any) -> Any:
    """The nested dicts of `as_dict` as read-only Mappings that are no dicts (the encoder's other path)."""
    if isinstance(data, dict):
        return MappingProxyType({name: as_mappings(value) for name, value in data.items()})
    if isinstance(data, list):
        return [as_mappings(item) for item in data]
    return data


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k}v{v}" for k, v in SERVED])
def test_same_bytes_as_kio(key: int, version: int) -> None:
    types = message_types(key, version)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(response=st.from_type(types.response))
    def check(response: Any) -> None:
        expected = kio_bytes(response)
        for data in (response, as_dict(response), as_mappings(as_dict(response))):
            out, regions = encode(types.response, data)
            assert regions == []
            assert bytes(out) == expected

    check()


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k}v{v}" for k, v in SERVED])
def test_requests_same_bytes_as_kio(key: int, version: int) -> None:
    types = message_types(key, version)
    header_type = RequestHeaderV2 if types.request_header_version == 2 else RequestHeaderV1

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(request=st.from_type(types.request), client_id=st.none() | st.text(max_size=20),
           correlation_id=st.integers(-(2**31), 2**31 - 1))
    def check(request: Any, client_id: str | None, correlation_id: int) -> None:
        header = header_type(request_api_key=key, request_api_version=version, correlation_id=correlation_id,
                             client_id=client_id)
        expected = kio_bytes(header) + kio_bytes(request)
        for data in (request, as_dict(request)):
            assert encode_request(key, version, data, client_id, correlation_id) == expected

    check()


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k}v{v}" for k, v in SERVED])
def test_defaults_match_kio(key: int, version: int) -> None:
    cls = message_types(key, version).response
    assert bytes(encode(cls, {})[0]) == kio_bytes(build(cls, {}))


@pytest.mark.parametrize("version", [4, 11, 12, 17])
def test_records_region_becomes_a_hole(version: int) -> None:
    cls = message_types(1, version).response
    region = FileRegion(file=None, position=100, length=7)  # type: ignore[arg-type]
    data = {"responses": [{"topic": "t", "topic_id": None, "partitions": [{"partition_index": 0, "records": region}]}]}
    out, regions = encode(cls, data)
    [(position, got)] = regions
    assert got is region
    inline = {"responses": [{"topic": "t", "topic_id": None, "partitions": [{"partition_index": 0,
                                                                            "records": b"R" * 7}]}]}
    expected = bytes(encode(cls, inline)[0])
    assert bytes(out[:position]) + b"R" * 7 + bytes(out[position:]) == expected
