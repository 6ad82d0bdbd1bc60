"""A request decoded with its records left in the frame: the spec codec, then the kio entity handlers take.

kio copies a records field out of the frame it decodes, and the leader copies it
once more to patch the batch's offsets. A large produce request is decoded
instead with `schema.records_view_codec` (Kafka's JSON spec, records fields as
slices of the frame) from a frame the request owns, and built into the same kio
entity with `build`: its records are a writable memoryview of that frame, which
the partition patches and writes as it is (klamm.broker.partition._validate).
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, classify_field

from klamm.protocol.build import build
from klamm.protocol.schema import SchemaError, records_view_codec

__all__ = ["decode_with_views", "has_view_codec"]


@cache
def has_view_codec(entity_type: type, version: int) -> bool:
    """Whether a vendored spec decodes this message at this version."""
    try:
        records_view_codec("clients", entity_type.__name__, version)
    except (SchemaError, OSError):
        return False
    return True


def decode_with_views(entity_type: type, version: int, frame: memoryview, position: int) -> Any:
    """The `entity_type` entity at `frame[position:]`, its records fields slices of `frame`.

    SchemaError (a ValueError) for bytes the spec does not decode, or a field the two do not name alike.
    """
    value, _ = records_view_codec("clients", entity_type.__name__, version).read(frame, position)
    return build(entity_type, _kio_names(entity_type, value))


def _kio_names(entity_type: type, value: dict[str, Any]) -> dict[str, Any]:
    """The spec codec's dict under kio's field names: kio names a "...Ms" field after its timedelta."""
    out = {}
    for name, inner, many in _fields(entity_type):
        key = name if name in value else name + "_ms"
        if key not in value:
            raise SchemaError(f"{entity_type.__name__}.{name} is not in the spec's fields")
        item = value[key]
        if inner is not None and item is not None:
            item = [_kio_names(inner, element) for element in item] if many else _kio_names(inner, item)
        out[name] = item
    return out


@cache
def _fields(entity_type: type) -> tuple[tuple[str, type | None, bool], ...]:
    """Per kio field: its name, the entity type it holds (or None), and whether it holds a tuple of them."""
    out = []
    for field in fields(entity_type):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            out.append((field.name, kind.type_, True))
        elif isinstance(kind, EntityField):
            out.append((field.name, kind.type_, False))
        else:
            out.append((field.name, None, False))
    return tuple(out)
