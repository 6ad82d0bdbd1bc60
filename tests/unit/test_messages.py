"""Message types of every served API version: kio round trips, buildable defaults, tag elision."""

from __future__ import annotations

import dataclasses
import io
import os
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from klamm.broker.handlers import registry
from klamm.protocol.api import API_VERSIONS_KEY, message_types
from klamm.protocol.build import build
from klamm.protocol.guard import LengthError, check_lengths

pytestmark = pytest.mark.timeout(120)

# kio registers strategies for its primitive types but not for raw record bytes.
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))  # type: ignore[arg-type]

SERVED = [(key, version) for key, api in sorted(registry().items())
          for version in range(api.min_version, api.max_version + 1)]
IDS = [f"{key}v{version}" for key, version in SERVED]
# Per version; raise it for a deeper run (KLAMM_MESSAGE_EXAMPLES=200).
EXAMPLES = int(os.environ.get("KLAMM_MESSAGE_EXAMPLES", "5"))


def encode(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def decode(cls: type, data: bytes) -> Any:
    entity, consumed = entity_reader(cls)(data, 0)
    assert consumed == len(data), f"{len(data) - consumed} bytes left over"
    return entity


def test_registry_serves_the_expected_apis() -> None:
    served = {key: (api.min_version, api.max_version) for key, api in registry().items()}
    assert served[API_VERSIONS_KEY] == (0, 4)
    for key, (low, high) in served.items():
        assert 0 <= low <= high
        message_types(key, low), message_types(key, high)  # kio has both ends


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_types_match_version(key: int, version: int) -> None:
    types = message_types(key, version)
    for cls in (types.request, types.response):
        assert cls.__api_key__ == key
        assert cls.__version__ == version
        assert cls.__flexible__ == types.flexible


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_request_and_response_round_trip(key: int, version: int) -> None:
    types = message_types(key, version)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(request=st.from_type(types.request), response=st.from_type(types.response))
    def round_trip(request: Any, response: Any) -> None:
        for entity in (request, response):
            data = encode(entity)
            try:
                again = decode(type(entity), data)
            except ValueError as exc:
                # kio writes any timedelta but reads back only what fits Python's timedelta:
                # a generated out-of-range duration says nothing about klamm.
                if "timedelta" in str(exc):
                    reject()
                raise
            assert again == entity
            assert encode(again) == data
            check_lengths(type(entity), data, 0)  # the pre-decode guard accepts every valid message
            if types.flexible and len(data) > 1:
                with pytest.raises(LengthError):
                    check_lengths(type(entity), data[:-1], 0)

    round_trip()


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_default_response_is_encodable(key: int, version: int) -> None:
    """Handlers leave fields out of their dicts: the defaults alone must encode."""
    cls = message_types(key, version).response
    response = build(cls, {})
    assert isinstance(response, cls)
    assert decode(cls, encode(response)) == response


@pytest.mark.parametrize(("key", "version"), SERVED, ids=IDS)
def test_default_request_is_encodable(key: int, version: int) -> None:
    cls = message_types(key, version).request
    request = build(cls, {})
    assert decode(cls, encode(request)) == request


def test_build_converts_plain_values() -> None:
    cls = message_types(0, 9).response
    response = build(cls, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 2, "base_offset": 5, "log_append_time": 1_700_000_000_000}]}],
        "throttle_time": 250})
    [partition] = response.responses[0].partition_responses
    assert int(partition.error_code) == 2
    assert partition.base_offset == 5
    assert partition.log_append_time.timestamp() == 1_700_000_000
    assert response.throttle_time.total_seconds() == 0.25
    assert decode(cls, encode(response)) == response


def test_build_drops_fields_the_version_lacks() -> None:
    # Produce v3 responses have no log_start_offset (v5+) nor error_message (v8+).
    cls = message_types(0, 3).response
    response = build(cls, {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 0, "log_start_offset": 9, "error_message": "x"}]}]})
    [partition] = response.responses[0].partition_responses
    assert not hasattr(partition, "log_start_offset")


def test_build_nullable_entity_array_none() -> None:
    cls = message_types(3, 12).request
    request = build(cls, {"topics": None, "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    assert request.topics is None
    assert decode(cls, encode(request)) == request


# ----------------------------------------------------------- tagged fields ---
def test_api_versions_v3_default_tags_not_written() -> None:
    """librdkafka parses an ApiVersions v3 response byte for byte: defaults must write no tags."""
    cls = message_types(API_VERSIONS_KEY, 3).response
    response = build(cls, {"error_code": 0, "api_keys": [{"api_key": 18, "min_version": 0, "max_version": 4}],
                           "finalized_features_epoch": -1})
    expected = bytes.fromhex(
        "0000"            # error_code
        "02"              # api_keys: compact array of 1
        "0012" "0000" "0004" "00"  # api_key 18, min 0, max 4, no tags
        "00000000"        # throttle_time_ms
        "00"              # no tagged fields: supported_features, epoch, finalized_features, zk_migration_ready omitted
    )
    assert encode(response) == expected


def test_api_versions_v3_non_default_tags_are_written() -> None:
    cls = message_types(API_VERSIONS_KEY, 3).response
    response = build(cls, {"error_code": 0, "api_keys": [], "finalized_features_epoch": 7})
    data = encode(response)
    # tag count 1, tag 1, size 8, int64 7
    assert data == bytes.fromhex("0000" "01" "00000000" "01" "01" "08" "0000000000000007")
    assert decode(cls, data).finalized_features_epoch == 7


def test_api_versions_v0_has_no_tags_or_throttle() -> None:
    cls = message_types(API_VERSIONS_KEY, 0).response
    response = build(cls, {"error_code": 35, "api_keys": [{"api_key": 0, "min_version": 3, "max_version": 11}]})
    assert encode(response) == bytes.fromhex("0023" "00000001" "0000" "0003" "000b")


@pytest.mark.parametrize(("key", "version"), [(k, v) for k, v in SERVED if message_types(k, v).flexible],
                         ids=[i for (k, v), i in zip(SERVED, IDS) if message_types(k, v).flexible])
def test_flexible_default_response_writes_no_tags(key: int, version: int) -> None:
    """A response of defaults carries no tagged field: its last byte is an empty tag section."""
    cls = message_types(key, version).response
    response = build(cls, {})
    tagged = [f for f in dataclasses.fields(cls) if "tag" in f.metadata]
    data = encode(response)
    assert data[-1] == 0
    if tagged:
        # Setting one tagged field to a non-default value makes the encoding longer.
        field = tagged[0]
        default = getattr(response, field.name)
        if isinstance(default, int) and not isinstance(default, bool):
            changed = dataclasses.replace(response, **{field.name: type(default)(default + 1)})
            assert len(encode(changed)) > len(data)


def test_unknown_tagged_fields_are_cut_out_even_inside_a_known_tagged_struct():
    """Fetch v15's ReplicaState is itself a tagged field: an unknown tag inside it shrinks its size too."""
    from kio.serial import entity_writer

    from klamm.protocol.api import message_types
    from klamm.protocol.build import build

    request_type = message_types(1, 15).request
    request = build(request_type, {"replica_state": {"replica_id": 3, "replica_epoch": 7}, "max_wait": 0})
    buffer = io.BytesIO()
    entity_writer(request_type)(buffer, request)
    data = buffer.getvalue()
    tail = bytes([1, 1, 13]) + struct.pack(">iq", 3, 7) + b"\x00"  # one tag: 1, 13 bytes, the struct
    assert data.endswith(tail)
    grown = data[:-len(tail)] + bytes([2, 1, 18]) + struct.pack(">iq", 3, 7) + bytes([1, 99, 3]) + b"abc" \
        + bytes([98, 1]) + b"z"  # inside it an unknown tag 99; beside it an unknown tag 98
    assert check_lengths(request_type, grown, 0) == data
