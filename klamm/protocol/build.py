"""Build a kio entity of any version from plain dicts.

`build(MessageType, data)` turns nested dicts with Kafka's field names
(snake_case, as kio names them) into the exact dataclass tree of that version:
fields the version lacks are dropped, fields the dict lacks take the schema
default (or the type's zero), and convenient plain values are converted
(int -> ErrorCode / timedelta). The broker encodes its responses from dicts
directly (klamm/protocol/encoder.py); this is for requests written by tests and
tools, and for comparing a tagged struct against its default.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_schema_field_type, is_optional

_ZERO_UUID = uuid.UUID(int=0)

_ZEROS: dict[str, Any] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint8": 0, "uint16": 0, "uint32": 0, "uint64": 0,
    "float64": 0.0, "bool": False, "string": "", "bytes": b"", "records": None, "uuid": _ZERO_UUID,
    "error_code": ErrorCode.none, "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
}


def _convert_error(value: Any) -> Any:
    return value if isinstance(value, ErrorCode) else ErrorCode(value)


def _convert_ms(value: Any) -> Any:
    return value if isinstance(value, datetime.timedelta) else datetime.timedelta(milliseconds=value)


def _convert_datetime(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return value
    return datetime.datetime.fromtimestamp(value / 1000, datetime.timezone.utc)


def _identity(value: Any) -> Any:
    return value


_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "error_code": _convert_error,
    "timedelta_i32": _convert_ms,
    "timedelta_i64": _convert_ms,
    "datetime_i64": _convert_datetime,
}


@cache
def _plan(cls: type) -> tuple[tuple[str, Callable[[Any], Any], Any], ...]:
    """Per field: name, converter of a given value, and a factory-free default."""
    plan = []
    for field in fields(cls):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            inner = kind.type_
            convert: Callable[[Any], Any] = (
                lambda items, inner=inner: None if items is None else tuple(build(inner, item) for item in items))
            zero: Any = ()
        elif isinstance(kind, EntityField):
            inner = kind.type_
            convert = (lambda item, inner=inner: None if item is None else build(inner, item))
            zero = None if is_optional(field) else MISSING
        else:
            kafka_type = get_schema_field_type(field)
            scalar = _CONVERTERS.get(kafka_type, _identity)
            if kind.is_array:
                convert = (lambda items, scalar=scalar: None if items is None else tuple(scalar(i) for i in items))
                zero = ()
            else:
                convert = (lambda value, scalar=scalar: None if value is None else scalar(value))
                zero = None if is_optional(field) else _ZEROS.get(kafka_type)
        if field.default is not MISSING:
            zero = field.default
        elif field.default_factory is not MISSING:  # type: ignore[misc]
            zero = field.default_factory()  # type: ignore[misc]
        plan.append((field.name, convert, zero))
    return tuple(plan)


def build(cls: type, data: Mapping[str, Any] | Any) -> Any:
    """The `cls` entity for `data` (a dict, or already an instance of `cls`)."""
    if isinstance(data, cls):
        return data
    kwargs = {}
    for name, convert, zero in _plan(cls):
        if name in data:
            kwargs[name] = convert(data[name])
        elif zero is MISSING:
            kwargs[name] = build(_entity_type(cls, name), {})
        else:
            kwargs[name] = zero
    return cls(**kwargs)


@cache
def _entity_type(cls: type, name: str) -> type:
    for field in fields(cls):
        if field.name == name:
            return classify_field(field).type_  # type: ignore[return-value]
    raise KeyError(name)
