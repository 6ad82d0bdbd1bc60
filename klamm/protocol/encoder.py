"""Encode a response straight from a handler's dict, in the negotiated version's layout.

kio's writer takes its frozen dataclasses and checks every value against its
phantom types as it writes; for responses on the produce and fetch paths that
was half of the broker's per-request CPU. This encoder is compiled once per
kio message type from the same field declarations (order, Kafka type, tags,
flexible or not) and writes plain Python values into one bytearray: fields the
dict lacks take the schema default, a `FileRegion` in a records field becomes a
hole for sendfile. `tests/unit/test_encoder.py` holds it byte for byte to kio.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, get_schema_field_type, \
    is_optional

from klamm.protocol.sendplan import FileRegion

Regions = list[tuple[int, FileRegion]]  # (position in the bytes, region to insert there)
Write = Callable[[bytearray, Regions, Any], None]

_ZERO_UUID = bytes(16)
_STRUCTS = {
    "int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
    "int64": struct.Struct(">q"), "uint8": struct.Struct(">B"), "uint16": struct.Struct(">H"),
    "uint32": struct.Struct(">I"), "uint64": struct.Struct(">Q"), "float64": struct.Struct(">d"),
}
_I16, _I32 = _STRUCTS["int16"], _STRUCTS["int32"]


def uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_UVARINTS = [uvarint(i) for i in range(128)]


def _uv(value: int) -> bytes:
    return _SMALL_UVARINTS[value] if value < 128 else uvarint(value)


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)


def _scalar(kafka_type: str, flexible: bool) -> Write:
    """The writer of one primitive value."""
    if kafka_type in _STRUCTS:
        pack = _STRUCTS[kafka_type].pack
        return lambda out, regions, value: out.extend(pack(value))
    if kafka_type in ("error_code",):
        return lambda out, regions, value: out.extend(_I16.pack(int(value)))
    if kafka_type in ("timedelta_i32",):
        return lambda out, regions, value: out.extend(_I32.pack(_ms(value)))
    if kafka_type in ("timedelta_i64", "datetime_i64"):
        pack = _STRUCTS["int64"].pack
        return lambda out, regions, value: out.extend(pack(-1 if value is None else _ms(value)))
    if kafka_type == "bool":
        return lambda out, regions, value: out.append(1 if value else 0)
    if kafka_type == "uuid":
        return lambda out, regions, value: out.extend(_ZERO_UUID if value is None else value.bytes)
    if kafka_type == "string":
        return _compact_bytes if flexible else _legacy_string
    if kafka_type in ("bytes", "records"):
        return _compact_bytes if flexible else _legacy_bytes
    raise TypeError(f"no writer for Kafka type {kafka_type}")


def _payload(out: bytearray, regions: Regions, value: Any) -> None:
    if isinstance(value, FileRegion):
        regions.append((len(out), value))
    else:
        out.extend(value)


def _compact_bytes(out: bytearray, regions: Regions, value: Any) -> None:
    if value is None:
        out.append(0)
        return
    if isinstance(value, str):
        value = value.encode()
    out.extend(_uv(len(value) + 1))
    _payload(out, regions, value)


def _legacy_string(out: bytearray, regions: Regions, value: Any) -> None:
    if value is None:
        out.extend(b"\xff\xff")
        return
    data = value.encode()
    out.extend(_I16.pack(len(data)))
    out.extend(data)


def _legacy_bytes(out: bytearray, regions: Regions, value: Any) -> None:
    if value is None:
        out.extend(b"\xff\xff\xff\xff")
        return
    out.extend(_I32.pack(len(value)))
    _payload(out, regions, value)


def _array(item: Write, flexible: bool) -> Write:
    def write(out: bytearray, regions: Regions, items: Any) -> None:
        if items is None:
            out.extend(b"\x00" if flexible else b"\xff\xff\xff\xff")
            return
        out.extend(_uv(len(items) + 1) if flexible else _I32.pack(len(items)))
        for value in items:
            item(out, regions, value)
    return write


def _nullable_struct(inner: Write) -> Write:
    def write(out: bytearray, regions: Regions, value: Any) -> None:
        if value is None:
            out.append(0xFF)
        else:
            out.append(1)
            inner(out, regions, value)
    return write


def _default(field: Any) -> Any:
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    kind = classify_field(field)
    if kind.is_array:
        return ()
    if isinstance(kind, EntityField):
        return None if is_optional(field) else {}
    if is_optional(field):
        return None
    return {"string": "", "bytes": b"", "records": b"", "bool": False, "uuid": None}.get(
        get_schema_field_type(field), 0)


def _field_writer(field: Any, flexible: bool) -> Write:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        return _array(entity_encoder(kind.type_), flexible)
    if isinstance(kind, EntityField):
        inner = entity_encoder(kind.type_)
        return _nullable_struct(inner) if is_optional(field) and get_field_tag(field) is None else inner
    scalar = _scalar(get_schema_field_type(field), flexible)
    return _array(scalar, flexible) if kind.is_array else scalar


# Types that are no Mapping: the common values skip the ABC's isinstance check, a call of its own per value.
_NOT_MAPPINGS = frozenset({int, str, bool, float, bytes, type(None), list, tuple})


def _is_default(value: Any, field: Any, implicit: Any) -> bool:
    """kio's rule for leaving a tagged field out: it holds its default."""
    default = field.default if field.default is not MISSING else implicit
    cls = value.__class__
    if cls is dict or (cls not in _NOT_MAPPINGS and isinstance(value, Mapping)):
        from klamm.protocol.build import build

        kind = classify_field(field)
        return bool(build(kind.type_, value) == default)  # type: ignore[union-attr]
    if isinstance(default, datetime.timedelta) and not isinstance(value, datetime.timedelta):
        return _ms(default) == value
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(value) == len(default) == 0
    return bool(value == default)


@cache
def entity_encoder(entity_type: type) -> Write:
    """Writer of one kio message or nested struct, from a dict (missing keys take defaults)."""
    flexible = bool(entity_type.__flexible__)  # type: ignore[attr-defined]
    plain: list[tuple[str, Write, Any, bool]] = []
    tagged: list[tuple[int, str, Write, Any, Any]] = []
    for field in fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            plain.append((field.name, _field_writer(field, flexible), _default(field), is_optional(field)))
        else:
            tagged.append((tag, field.name, _field_writer(field, flexible), field, get_tagged_field_default(field)))
    tagged.sort(key=lambda entry: entry[0])

    def write(out: bytearray, regions: Regions, data: Any) -> None:
        cls = data.__class__
        if cls is Encoded:
            out.extend(data)
            return
        if cls is dict or isinstance(data, Mapping):  # dict first: the ABC's check is a call of its own
            get = data.get
        else:  # a kio entity: same field names
            def get(name: str, default: Any) -> Any:
                return getattr(data, name, default)
        for name, writer, default, nullable in plain:
            value = get(name, default)
            writer(out, regions, default if value is None and not nullable else value)
        if not flexible:
            return
        present = [(tag, writer, value) for tag, name, writer, field, implicit in tagged
                   if (value := get(name, _ABSENT)) is not _ABSENT and not _is_default(value, field, implicit)]
        out.extend(_uv(len(present)))
        for tag, writer, value in present:
            body = bytearray()
            writer(body, regions, value)  # tagged fields never hold file regions
            out.extend(_uv(tag))
            out.extend(_uv(len(body)))
            out.extend(body)

    return write


_ABSENT = object()


class Encoded(bytes):
    """A struct already written in the layout of the version being encoded (a piece of a response kept from an
    earlier one): the encoder copies it as it is."""


def encode(entity_type: type, data: Mapping[str, Any]) -> tuple[bytearray, Regions]:
    """The message's bytes and the file regions to splice into them."""
    out = bytearray()
    regions: Regions = []
    entity_encoder(entity_type)(out, regions, data)
    return out, regions


def encode_struct(entity_type: type, data: Mapping[str, Any]) -> Encoded:
    """One struct of a message (no file regions), to be written later as it is."""
    out, regions = encode(entity_type, data)
    if regions:
        raise ValueError("a struct with file regions cannot be kept encoded")
    return Encoded(out)

