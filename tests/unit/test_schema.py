"""The JSON-spec codec: round trips for every vendored spec/version, parity with kio."""

from __future__ import annotations

import importlib
import io
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from klamm.protocol.schema import (
    SPECS_DIR,
    FieldSpec,
    MessageSpec,
    SchemaError,
    VersionRange,
    packaged_spec,
    packaged_specs,
    read_uvarint,
    snake_case,
    strip_comments,
    write_uvarint,
)

GROUPS = ["metadata", "group-coordinator", "transaction-coordinator", "clients"]

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def _scalar(type_name: str) -> st.SearchStrategy:
    if type_name in _INT_RANGES:
        low, high = _INT_RANGES[type_name]
        return st.integers(low, high)
    return {
        "float64": st.floats(allow_nan=False),
        "bool": st.booleans(),
        "uuid": st.uuids(),
        "string": st.text(max_size=12),
        "bytes": st.binary(max_size=12),
        "records": st.binary(max_size=12),
    }[type_name]


def _struct(spec: MessageSpec, fields: tuple[FieldSpec, ...], version: int) -> st.SearchStrategy:
    """Values for the fields that exist at `version` (absent ones are left out)."""
    parts = {f.key: _field(spec, f, version) for f in fields if version in f.versions}
    return st.fixed_dictionaries(parts)


def _field(spec: MessageSpec, f: FieldSpec, version: int) -> st.SearchStrategy:
    element = f.element_type
    if element in _INT_RANGES or element in ("float64", "bool", "uuid", "string", "bytes", "records"):
        item = _scalar(element)
    else:
        item = st.deferred(lambda: _struct(spec, f.fields or spec.common_structs[element], version))
    value = st.lists(item, max_size=3) if f.is_array else item
    return st.none() | value if version in f.nullable_versions else value


def _assert_contains(expected, actual) -> None:
    """`actual` (decoded) holds every generated value; absent fields are defaults."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict)
        for key, value in expected.items():
            _assert_contains(value, actual[key])
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected)
        for e, a in zip(expected, actual):
            _assert_contains(e, a)
    else:
        assert actual == expected, (expected, actual)


def _all_spec_versions() -> list[tuple[str, str, int]]:
    cases = []
    for group in GROUPS:
        for name, spec in packaged_specs(group).items():
            cases.extend((group, name, v) for v in spec.valid_versions)
    return cases


@pytest.mark.parametrize(("group", "name", "version"), _all_spec_versions())
def test_round_trip_every_spec_version(group: str, name: str, version: int) -> None:
    spec = packaged_spec(group, name)
    codec = spec.codec(version)

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_struct(spec, spec.fields, version))
    def check(value: dict) -> None:
        encoded = codec.encode(value)
        decoded = codec.decode(encoded)
        _assert_contains(value, decoded)
        assert set(decoded) == {f.key for f in spec.fields}
        # Re-encoding the full decoded value gives the same bytes.
        assert codec.encode(decoded) == encoded

    check()


@pytest.mark.parametrize(("group", "name", "version"), _all_spec_versions())
def test_default_value_round_trips(group: str, name: str, version: int) -> None:
    codec = packaged_spec(group, name).codec(version)
    default = codec.default()
    assert codec.decode(codec.encode(default)) == default
    assert codec.encode({}) == codec.encode(default)


def test_every_reference_spec_is_vendored_with_license() -> None:
    assert (SPECS_DIR / "LICENSE").is_file() and (SPECS_DIR / "NOTICE").is_file()
    names = packaged_specs("metadata")
    for required in ("TopicRecord", "PartitionRecord", "PartitionChangeRecord", "RemoveTopicRecord", "ConfigRecord",
                     "RegisterBrokerRecord", "FeatureLevelRecord", "NoOpRecord", "ProducerIdsRecord"):
        assert required in names
    assert "OffsetCommitKey" in packaged_specs("group-coordinator")
    assert "TransactionLogValue" in packaged_specs("transaction-coordinator")
    for path in SPECS_DIR.glob("*/*.json"):
        assert "Licensed to the Apache Software Foundation" in path.read_text()


# --- parity with kio ------------------------------------------------------------------


def _kio_metadata_request(version: int, value: dict):
    module = importlib.import_module(f"kio.schema.metadata.v{version}.request")
    topics = value["topics"]
    if topics is not None:
        topic_fields = module.MetadataRequestTopic.__dataclass_fields__
        topics = tuple(
            module.MetadataRequestTopic(**{k: v for k, v in t.items() if k in topic_fields}) for t in topics
        )
    fields = module.MetadataRequest.__dataclass_fields__
    kwargs = {k: v for k, v in value.items() if k in fields and k != "topics"}
    return module.MetadataRequest(topics=topics, **kwargs)


def _kio_bytes(entity) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    return buf.getvalue()


@pytest.mark.parametrize("version", range(13))
def test_metadata_request_bytes_match_kio(version: int) -> None:
    spec = packaged_spec("clients", "MetadataRequest")
    codec = spec.codec(version)

    topic = st.fixed_dictionaries(
        {"topic_id": st.uuids() if version >= 10 else st.just(uuid.UUID(int=0)), "name": st.text(max_size=10)}
    )
    topics = st.lists(topic, max_size=3)
    if version >= 1:
        topics = st.none() | topics

    @settings(max_examples=40, deadline=None)
    @given(topics, st.booleans(), st.booleans(), st.booleans())
    def check(topic_list, auto_create, cluster_ops, topic_ops) -> None:
        value = {
            "topics": topic_list,
            "allow_auto_topic_creation": auto_create if version >= 4 else True,
            "include_cluster_authorized_operations": cluster_ops if 8 <= version <= 10 else False,
            "include_topic_authorized_operations": topic_ops if version >= 8 else False,
        }
        kio_entity = _kio_metadata_request(version, value)
        ours = codec.encode(value)
        assert ours == _kio_bytes(kio_entity)
        # And kio reads what we wrote.
        assert entity_reader(type(kio_entity))(ours, 0) == (kio_entity, len(ours))

    check()


@pytest.mark.parametrize("client_id", [None, "", "klamm-client", "ünïcode"])
def test_request_header_v2_matches_kio(client_id: str | None) -> None:
    from kio.schema.request_header.v2.header import RequestHeader

    header = RequestHeader(request_api_key=3, request_api_version=12, correlation_id=77, client_id=client_id)
    ours = packaged_spec("clients", "RequestHeader").encode(
        {"request_api_key": 3, "request_api_version": 12, "correlation_id": 77, "client_id": client_id}, 2
    )
    # ClientId opts out of compact encoding ("flexibleVersions": "none") even in v2.
    assert ours == _kio_bytes(header)


# --- encoding details ------------------------------------------------------------------


def test_tagged_fields_at_default_are_not_written() -> None:
    spec = packaged_spec("metadata", "PartitionChangeRecord")
    topic_id = uuid.uuid4()
    bare = spec.encode({"partition_id": 1, "topic_id": topic_id}, 0)
    assert bare == (1).to_bytes(4, "big") + topic_id.bytes + b"\x00"
    assert spec.encode({"partition_id": 1, "topic_id": topic_id, "leader": -2, "isr": None}, 0) == bare
    with_leader = spec.encode({"partition_id": 1, "topic_id": topic_id, "leader": 3}, 0)
    # one tagged field: tag 1, size 4, int32 3
    assert with_leader == bare[:-1] + b"\x01\x01\x04\x00\x00\x00\x03"
    assert spec.decode(with_leader, 0)["leader"] == 3
    assert spec.decode(bare, 0)["isr"] is None


def test_unknown_tagged_fields_are_skipped() -> None:
    spec = packaged_spec("metadata", "TopicRecord")
    topic_id = uuid.uuid4()
    body = spec.encode({"name": "t", "topic_id": topic_id}, 0)
    with_unknown = body[:-1] + b"\x01\x63\x02ab"  # tag 99, 2 bytes
    assert spec.decode(with_unknown, 0) == {"name": "t", "topic_id": topic_id}


def test_nullable_struct_marker() -> None:
    spec = packaged_spec("group-coordinator", "ConsumerGroupMemberMetadataValue")
    value = {"client_id": "c", "classic_member_metadata": {"session_timeout_ms": 5, "supported_protocols": []}}
    decoded = spec.decode(spec.encode(value, 0), 0)
    assert decoded["classic_member_metadata"] == {"session_timeout_ms": 5, "supported_protocols": []}
    assert spec.decode(spec.encode({"client_id": "c"}, 0), 0)["classic_member_metadata"] is None


def test_non_flexible_version_uses_legacy_lengths() -> None:
    spec = packaged_spec("group-coordinator", "OffsetCommitKey")
    assert spec.encode({"group": "g", "topic": "t", "partition": 2}, 1) == b"\x00\x01g\x00\x01t\x00\x00\x00\x02"


def test_field_versions_and_defaults() -> None:
    spec = packaged_spec("group-coordinator", "OffsetCommitValue")
    v1 = spec.decode(spec.encode({"offset": 5, "metadata": "m", "commit_timestamp": 1, "expire_timestamp": 9}, 1), 1)
    assert v1["expire_timestamp"] == 9 and v1["leader_epoch"] == -1
    v3 = spec.decode(spec.encode({"offset": 5, "metadata": "m", "commit_timestamp": 1, "expire_timestamp": 9}, 3), 3)
    assert v3["expire_timestamp"] == -1  # not in v3: dropped, decoded as the default


def test_trailing_and_truncated_bytes_raise() -> None:
    spec = packaged_spec("metadata", "TopicRecord")
    body = spec.encode({"name": "t", "topic_id": uuid.uuid4()}, 0)
    with pytest.raises(SchemaError):
        spec.decode(body + b"\x00", 0)
    with pytest.raises(SchemaError):
        spec.decode(body[:-3], 0)
    with pytest.raises(SchemaError):
        spec.codec(1)


def test_null_in_non_nullable_field_raises() -> None:
    with pytest.raises(SchemaError):
        packaged_spec("metadata", "TopicRecord").encode({"name": None}, 0)


def test_helpers() -> None:
    assert snake_case("TopicId") == "topic_id"
    assert snake_case("protocolType") == "protocol_type"
    assert snake_case("IsMigratingZkBroker") == "is_migrating_zk_broker"
    assert snake_case("ISRChange") == "isr_change"
    assert strip_comments('{"a": "http://x"} // c\n') == '{"a": "http://x"} \n'
    assert VersionRange.parse("3+") == VersionRange(3, 0x7FFF)
    assert 2 not in VersionRange.parse("none")
    for value in (0, 1, 127, 128, 300, 2**31 - 1):
        out = bytearray()
        write_uvarint(out, value)
        assert read_uvarint(out, 0) == (value, len(out))
