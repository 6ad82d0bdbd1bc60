"""MessageCodec.complete gives what decode(encode(value)) gives, for values of every field type, present or not.

The controller applies its own records through complete_record instead of decoding
the bytes it just encoded, while every other node applies the decoded bytes: the
two must build the same image.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.controller.records import MetadataRecord, complete_record, decode_record, encode_record
from klamm.protocol.schema import FieldSpec, MessageSpec, packaged_specs

GROUPS = ["metadata", "group-coordinator", "transaction-coordinator"]
_INTS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def _scalar(type_name: str, nullable: bool) -> st.SearchStrategy[Any]:
    if type_name in _INTS:
        bits = _INTS[type_name]
        base: st.SearchStrategy[Any] = st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    elif type_name == "uint16":
        base = st.integers(0, 2**16 - 1)
    elif type_name == "uint32":
        base = st.integers(0, 2**32 - 1)
    elif type_name == "float64":
        base = st.floats(allow_nan=False) | st.integers(-(2**31), 2**31)
    elif type_name == "bool":
        base = st.booleans() | st.sampled_from([0, 1])
    elif type_name == "uuid":
        return st.none() | st.builds(uuid.UUID, st.uuids().map(str))
    elif type_name == "string":
        base = st.text(max_size=8)
    else:  # bytes, records
        base = st.binary(max_size=8) | st.binary(max_size=8).map(bytearray)
    return st.none() | base if nullable else base


def _struct(spec: MessageSpec, fields: tuple[FieldSpec, ...], version: int, depth: int) -> st.SearchStrategy[dict]:
    pieces = {f.key: _field(spec, f, version, depth) for f in fields}
    present = st.lists(st.sampled_from(sorted(pieces)), unique=True) if pieces else st.just([])
    return present.flatmap(lambda keys: st.fixed_dictionaries({k: pieces[k] for k in keys}))


def _field(spec: MessageSpec, f: FieldSpec, version: int, depth: int) -> st.SearchStrategy[Any]:
    nullable = version in f.nullable_versions
    element = f.element_type
    if element in _INTS or element in ("uint16", "uint32", "float64", "bool", "uuid", "string", "bytes", "records"):
        item = _scalar(element, nullable and not f.is_array)
    elif depth > 2:
        item = st.just({})
    else:
        item = _struct(spec, f.fields or spec.common_structs[element], version, depth + 1)
        if nullable and not f.is_array:
            item = st.none() | item
    if not f.is_array:
        return item
    items = st.lists(item, max_size=3)
    items = items | items.map(tuple)
    return st.none() | items if nullable else items


CASES = [(group, name, version) for group in GROUPS for name, spec in packaged_specs(group).items()
         for version in spec.valid_versions]


@pytest.mark.parametrize(("group", "name", "version"), CASES)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_complete_is_decode_of_encode(group: str, name: str, version: int, data: st.DataObject) -> None:
    spec = packaged_specs(group)[name]
    value = data.draw(_struct(spec, spec.fields, version, 0))
    codec = spec.codec(version)
    try:
        encoded = codec.encode(value)
    except Exception:  # noqa: BLE001  # a value that does not encode (a null where none may be) is not compared
        return
    assert codec.complete(value) == codec.decode(encoded)


def test_complete_record_is_the_decoded_record() -> None:
    record = MetadataRecord("PartitionRecord", {"partition_id": 3, "topic_id": uuid.uuid4(), "replicas": (1, 2),
                                                "isr": [1, 2], "leader": 1})
    assert complete_record(record) == decode_record(encode_record(record))
    assert complete_record(record).data["replicas"] == [1, 2]
