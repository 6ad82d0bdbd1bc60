"""A length check of flexible requests before kio decodes them.

kio's native reader reserves memory for a compact array's declared length
before reading it: a declared length of 2**31 or more makes it try to allocate
tens of gigabytes and abort the whole process. Kafka checks every length
against the bytes that remain, so a 20-byte request cannot take a broker down.
This module does that check, walking the same kio dataclasses (fields, Kafka
types, tags) without building anything: every compact string, bytes and array
length and every tagged field size must fit in what is left of the frame.
Non-flexible versions use int32 lengths, which kio already bounds.

The same walk finds tagged fields this broker does not know (a newer client's,
KIP-482): kio's reader refuses them, so they are cut from the frame first and
the struct's tag count (and the size of any tagged field around them) fixed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (EntityField, EntityTupleField, classify_field, get_field_tag,
                                    get_schema_field_type, is_optional)

from klamm.protocol.encoder import FIXED_TYPES, uvarint

Edit = tuple[int, int, bytes]  # replace frame[start:end] with these bytes
Check = Callable[[bytes, int, int, list[Edit]], int]  # (frame, position, end, edits) -> new position

# The size of each fixed-size Kafka type, from the struct format the encoder writes it with.
_FIXED = {kafka_type: struct.calcsize(">" + fmt) for kafka_type, (fmt, _) in FIXED_TYPES.items()}


class LengthError(ValueError):
    """A declared length runs past the end of the frame."""


def _uvarint(buf: bytes, position: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= end:
            raise LengthError("truncated varint")
        byte = buf[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift > 28:
            raise LengthError("varint too long")


def read_request_header(frame: bytes | memoryview, flexible: bool) -> tuple[str | None, int]:
    """(client id, header size) of a request header v1, or v2 when `flexible`.

    v2 keeps v1's int16-length client id and adds tagged fields; none is defined, so every
    one is skipped (KIP-482: a newer client's header tag must not cost the connection).
    """
    end = len(frame)
    if end < 10:
        raise LengthError("truncated request header")
    length = int.from_bytes(frame[8:10], "big", signed=True)
    position = 10
    client_id = None
    if length >= 0:
        if position + length > end:
            raise LengthError("client id exceeds the frame")
        client_id = str(frame[position:position + length], "utf-8")  # bytes or a memoryview
        position += length
    elif length != -1:
        raise LengthError(f"client id length {length}")
    if flexible:
        count, position = _uvarint(frame, position, end)
        for _ in range(count):
            _, position = _uvarint(frame, position, end)
            size, position = _uvarint(frame, position, end)
            position += size
            if position > end:
                raise LengthError("tagged field exceeds the frame")
    return client_id, position


def _fixed(size: int) -> Check:
    def check(buf: bytes, position: int, end: int, edits: list[Edit]) -> int:
        position += size
        if position > end:
            raise LengthError("truncated field")
        return position
    return check


def _compact_bytes(buf: bytes, position: int, end: int, edits: list[Edit]) -> int:
    length, position = _uvarint(buf, position, end)
    position += max(length - 1, 0)
    if position > end:
        raise LengthError(f"length {length - 1} exceeds the frame")
    return position


def _compact_array(element: Check) -> Check:
    def check(buf: bytes, position: int, end: int, edits: list[Edit]) -> int:
        count, position = _uvarint(buf, position, end)
        count -= 1
        if count > end - position:  # every element takes at least one byte
            raise LengthError(f"array of {count} exceeds the frame")
        for _ in range(max(count, 0)):
            position = element(buf, position, end, edits)
        return position
    return check


def _nullable_struct(inner: Check) -> Check:
    def check(buf: bytes, position: int, end: int, edits: list[Edit]) -> int:
        position = _fixed(1)(buf, position, end, edits)
        return inner(buf, position, end, edits) if buf[position - 1] != 0xFF else position
    return check


def _primitive(kafka_type: str) -> Check:
    if kafka_type in _FIXED:
        return _fixed(_FIXED[kafka_type])
    if kafka_type in ("string", "bytes", "records"):
        return _compact_bytes
    raise LengthError(f"unknown type {kafka_type}")


def _field_check(field: object) -> Check:
    kind = classify_field(field)  # type: ignore[arg-type]
    if isinstance(kind, EntityTupleField):
        return _compact_array(struct_check(kind.type_))
    if isinstance(kind, EntityField):
        inner = struct_check(kind.type_)
        nullable = type(None) in getattr(field.type, "__args__", ())  # type: ignore[attr-defined]
        return _nullable_struct(inner) if nullable else inner
    element = _primitive(get_schema_field_type(field))  # type: ignore[arg-type]
    return _compact_array(element) if kind.is_array else element


@cache
def struct_check(entity_type: type) -> Check:
    """The check for one flexible struct: its fields in order, then its tagged fields.

    Its source is made once per type: a run of fixed-size fields is one bound check, a compact string or
    bytes field and an array's length are read in line (a one-byte varint), nested structs call their own.
    """
    namespace: dict[str, Any] = {"LengthError": LengthError, "_uvarint": _uvarint, "_compact_bytes": _compact_bytes,
                                 "_tagged_fields": _tagged_fields}
    body: list[str] = []
    fixed = 0  # bytes of fixed-size fields not yet checked
    tagged: dict[int, Check] = {}

    def check_fixed() -> None:
        nonlocal fixed
        if fixed:
            body.extend([f"position += {fixed}", "if position > end: raise LengthError('truncated field')"])
            fixed = 0

    for index, field in enumerate(fields(entity_type)):
        tag = get_field_tag(field)
        if tag is not None:
            tagged[tag] = _field_check(field)
            continue
        kind = classify_field(field)
        kafka_type = None if isinstance(kind, (EntityField, EntityTupleField)) else get_schema_field_type(field)
        if kafka_type in _FIXED and not kind.is_array:
            fixed += _FIXED[kafka_type]
            continue
        check_fixed()
        if kafka_type in ("string", "bytes", "records") and not kind.is_array:
            body.extend(["if position < end and buf[position] < 0x80: position += max(buf[position], 1)",
                         "else: position = _compact_bytes(buf, position, end, edits)",
                         "if position > end: raise LengthError('length exceeds the frame')"])
        elif kind.is_array or isinstance(kind, EntityTupleField):
            element = struct_check(kind.type_) if isinstance(kind, EntityTupleField) else _primitive(kafka_type)
            namespace[f"C{index}"] = element
            body.extend(["if position < end and buf[position] < 0x80:",
                         "    count = buf[position] - 1",
                         "    position += 1",
                         "else:",
                         "    count, position = _uvarint(buf, position, end)",
                         "    count -= 1",
                         "if count > end - position: raise LengthError(f'array of {count} exceeds the frame')",
                         "for _ in range(count):",
                         f"    position = C{index}(buf, position, end, edits)"])
        else:
            namespace[f"C{index}"] = _field_check(field)
            body.append(f"position = C{index}(buf, position, end, edits)")
    check_fixed()
    namespace["TAGGED"] = tagged
    source = "\n".join(["def check(buf, position, end, edits):", *("    " + line for line in body),
                        "    return _tagged_fields(buf, position, end, edits, TAGGED)"])
    exec(compile(source, f"<length check of {entity_type.__qualname__}>", "exec"), namespace)  # noqa: S102
    return namespace["check"]  # type: ignore[no-any-return]


def _tagged_fields(buf: bytes, position: int, end: int, edits: list[Edit], tagged: dict[int, Check]) -> int:
    """A struct's tagged fields: each must fit; those unknown here are cut (and the count and any enclosing
    tagged field's size fixed)."""
    if position < end and buf[position] == 0:  # none: nearly every request
        return position + 1
    count_start = position
    count, position = _uvarint(buf, position, end)
    if count > end - position:
        raise LengthError("too many tagged fields")
    unknown = 0
    for _ in range(count):
        entry_start = position
        tag, position = _uvarint(buf, position, end)
        size_start = position
        size, position = _uvarint(buf, position, end)
        if position + size > end:
            raise LengthError("tagged field exceeds the frame")
        if tag in tagged:
            before = len(edits)
            tagged[tag](buf, position, position + size, edits)
            removed = sum(e - s - len(b) for s, e, b in edits[before:])
            if removed:  # something unknown inside it was cut: its size shrinks by as much
                edits.append((size_start, position, uvarint(size - removed)))
        else:
            edits.append((entry_start, position + size, b""))
            unknown += 1
        position += size
    if unknown:
        edits.append((count_start, _uvarint(buf, count_start, end)[1], uvarint(count - unknown)))
    return position


def check_lengths(entity_type: type, frame: bytes | memoryview, position: int) -> bytes | memoryview:
    """The frame, with tagged fields unknown here cut out; LengthError if a declared length overruns it."""
    if not entity_type.__flexible__:  # type: ignore[attr-defined]
        return frame
    edits: list[Edit] = []
    struct_check(entity_type)(frame, position, len(frame), edits)
    if not edits:
        return frame
    out, last = bytearray(), 0
    for start, end, replacement in sorted(edits):
        out += frame[last:start]
        out += replacement
        last = end
    out += frame[last:]
    return bytes(out)



class NullError(ValueError):
    """A null where the message's schema does not allow one."""


@cache
def null_check(entity_type: type) -> Callable[[Any], None]:
    """A check that a decoded message has no null in a field its version declares non-nullable.

    kio decodes a -1 length as None whatever the field's nullability; Kafka rejects the request then, so
    this is checked once here rather than by each handler (which would fail on it with a TypeError).
    Only what a length can make null is looked at: strings, bytes, arrays and structs.
    """
    steps = _null_steps(entity_type)

    def check(value: Any) -> None:
        for name, nullable, inner, is_array in steps:
            item = getattr(value, name)
            if item is None:
                if not nullable:
                    raise NullError(f"{type(value).__name__}.{name} is null, which its schema does not allow")
            elif inner is not None:
                if is_array:
                    for element in item:
                        inner(element)
                else:
                    inner(item)

    return check


@cache
def _null_steps(entity_type: type) -> tuple[tuple[str, bool, Callable[[Any], None] | None, bool], ...]:
    """(field, nullable, check of its elements or None, is an array) for each field that can decode as null."""
    steps = []
    for field in fields(entity_type):
        kind = classify_field(field)
        nullable = is_optional(field)  # `X | None`, and `tuple[...] | None` for a nullable array
        if isinstance(kind, (EntityField, EntityTupleField)):
            inner = null_check(kind.type_) if _null_steps(kind.type_) else None
            if inner is not None or not nullable:
                steps.append((field.name, nullable, inner, isinstance(kind, EntityTupleField)))
        elif not nullable and (kind.is_array or get_schema_field_type(field) in _LENGTH_PREFIXED):
            steps.append((field.name, False, None, False))
    return tuple(steps)


_LENGTH_PREFIXED = {"string", "bytes", "records"}
