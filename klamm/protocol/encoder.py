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


# Fixed-size Kafka types: their struct format, and the expression that makes a value packable.
FIXED_TYPES = {
    "int8": ("b", "{v}"), "int16": ("h", "{v}"), "int32": ("i", "{v}"), "int64": ("q", "{v}"),
    "uint8": ("B", "{v}"), "uint16": ("H", "{v}"), "uint32": ("I", "{v}"), "uint64": ("Q", "{v}"),
    "float64": ("d", "{v}"), "error_code": ("h", "{v}"), "bool": ("?", "{v}"),
    "uuid": ("16s", "(_ZERO_UUID if {v} is None else {v}.bytes)"), "timedelta_i32": ("i", "_ms({v})"),
    "timedelta_i64": ("q", "(-1 if {v} is None else _ms({v}))"),
    "datetime_i64": ("q", "(-1 if {v} is None else _ms({v}))"),
}


@cache
def entity_encoder(entity_type: type) -> Write:
    """Writer of one kio message or nested struct, from a dict (missing keys take defaults).

    Its source is made once per type: a run of fixed-size fields is one struct pack, strings and arrays are
    written in line, nested structs call their own writers. A writer built of one closure per field cost
    about twice as much a response (bench/encode_cost.py).
    """
    flexible = bool(entity_type.__flexible__)  # type: ignore[attr-defined]
    namespace: dict[str, Any] = {"Encoded": Encoded, "Mapping": Mapping, "FileRegion": FileRegion,
                                 "_ZERO_UUID": _ZERO_UUID, "_ms": _ms, "_SMALL": _SMALL_UVARINTS,
                                 "uvarint": uvarint, "_I32P": _I32.pack, "NULL_ARRAY": b"\xff\xff\xff\xff",
                                 "_attributes": _attributes, "_write_tagged": _write_tagged}
    body: list[str] = []
    run: list[tuple[str, str]] = []  # the fixed-size fields read but not yet packed: (format, expression)
    tagged: list[tuple[int, str, Write, Any, Any]] = []

    def pack_run() -> None:
        if run:
            name = f"S{len(namespace)}"
            namespace[name] = struct.Struct(">" + "".join(fmt for fmt, _ in run)).pack
            body.append(f"out += {name}({', '.join(expression for _, expression in run)})")
            run.clear()

    for index, field in enumerate(fields(entity_type)):
        tag = get_field_tag(field)
        if tag is not None:
            tagged.append((tag, field.name, _field_writer(field, flexible), field, get_tagged_field_default(field)))
            continue
        value = f"v{index}"
        namespace[f"D{index}"] = _default(field)
        if is_optional(field):
            body.append(f"{value} = get({field.name!r}, D{index})")
        else:
            body.append(f"{value} = get({field.name!r})")
            body.append(f"if {value} is None: {value} = D{index}")
        kind = classify_field(field)
        kafka_type = None if isinstance(kind, (EntityField, EntityTupleField)) else get_schema_field_type(field)
        if kafka_type in FIXED_TYPES and not kind.is_array:
            fmt, expression = FIXED_TYPES[kafka_type]
            run.append((fmt, expression.format(v=value)))
            continue
        pack_run()
        if entity_type.__name__ == "RequestHeader" and field.name == "client_id":
            # Kafka's one exception: a flexible request header keeps the client id a legacy nullable string,
            # so that a broker can read it before it knows the version (kio's writer has the same rule)
            namespace[f"W{index}"] = _legacy_string
            body.append(f"W{index}(out, regions, {value})")
        elif kafka_type in ("string", "bytes", "records") and flexible and not kind.is_array:
            body.extend(_compact_lines(value, kafka_type != "string"))
        elif isinstance(kind, EntityTupleField) or kind.is_array:
            namespace[f"W{index}"] = (entity_encoder(kind.type_) if isinstance(kind, EntityTupleField)
                                      else _scalar(kafka_type, flexible))
            body.extend(_array_lines(value, f"W{index}", flexible))
        else:
            namespace[f"W{index}"] = _field_writer(field, flexible)
            body.append(f"W{index}(out, regions, {value})")
    pack_run()
    if flexible:
        if tagged:
            tagged.sort(key=lambda entry: entry[0])
            namespace["TAGGED"] = tuple(tagged)
            namespace["_ABSENT"] = _ABSENT
            absent = " and ".join(f"get({name!r}, _ABSENT) is _ABSENT" for _, name, _, _, _ in tagged)
            body.extend([f"if {absent}: out.append(0)",  # what handlers leave out: no tagged field at all
                         "else: _write_tagged(out, regions, get, TAGGED)"])
        else:
            body.append("out.append(0)")
    source = "\n".join([
        "def write(out, regions, data):",
        "    cls = data.__class__",
        "    if cls is Encoded:",
        "        out += data",
        "        return",
        "    get = data.get if cls is dict or isinstance(data, Mapping) else _attributes(data)",
        *("    " + line for line in body)])
    exec(compile(source, f"<encoder of {entity_type.__qualname__}>", "exec"), namespace)  # noqa: S102
    return namespace["write"]  # type: ignore[no-any-return]


def _compact_lines(value: str, payload: bool) -> list[str]:
    """A compact string or bytes field in line: null, or its length + 1 as a varint and the bytes (or a hole
    for a file region, which only a bytes or records field holds)."""
    lines = [f"if {value} is None: out.append(0)",
             "else:",
             f"    if {value}.__class__ is str: {value} = {value}.encode()",
             f"    n = len({value}) + 1",
             "    out += _SMALL[n] if n < 128 else uvarint(n)"]
    if payload:
        lines += [f"    if {value}.__class__ is FileRegion: regions.append((len(out), {value}))",
                  f"    else: out += {value}"]
    else:
        lines.append(f"    out += {value}")
    return lines


def _array_lines(value: str, element: str, flexible: bool) -> list[str]:
    """An array in line: null, or its length (+ 1 as a varint when flexible) and each element."""
    if flexible:
        lines = [f"if {value} is None: out.append(0)",
                 "else:",
                 f"    n = len({value}) + 1",
                 "    out += _SMALL[n] if n < 128 else uvarint(n)"]
    else:
        lines = [f"if {value} is None: out += NULL_ARRAY",
                 "else:",
                 f"    out += _I32P(len({value}))"]
    return [*lines, f"    for x in {value}: {element}(out, regions, x)"]


def _attributes(data: Any) -> Callable[..., Any]:
    """`get` for a kio entity: its attributes have the field names."""
    def get(name: str, default: Any = None) -> Any:
        return getattr(data, name, default)
    return get


def _write_tagged(out: bytearray, regions: Regions, get: Callable[..., Any],
                  tagged: tuple[tuple[int, str, Write, Any, Any], ...]) -> None:
    present = [(tag, writer, value) for tag, name, writer, field, implicit in tagged
               if (value := get(name, _ABSENT)) is not _ABSENT and not _is_default(value, field, implicit)]
    out += _uv(len(present))
    for tag, writer, value in present:
        body = bytearray()
        writer(body, regions, value)  # tagged fields never hold file regions
        out += _uv(tag)
        out += _uv(len(body))
        out += body


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

