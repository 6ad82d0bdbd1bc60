"""Message types of the versions Kafka 4.0 removed, which kio does not generate.

They are derived, never written by hand: which fields a version has, in which
order, comes from Kafka 3.9's JSON spec of the message (vendored under
specs/clients/); each field's Python type and kio metadata come from the same
field in kio's lowest version of the message (kio names a `...Ms` field of a
duration without the suffix). The result is a frozen dataclass in kio's own
form, so kio's readers and writers, klamm's response encoder and `build` take
it as they take kio's classes.
"""

from __future__ import annotations

import dataclasses
import importlib
from functools import cache
from typing import Any

from kio.index import api_key_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, is_optional
from kio.static.primitive import i8, i16, i32, i64

from klamm.protocol.schema import FieldSpec, MessageSpec, packaged_spec

# APIs whose removed versions are served, by spec name.
SPEC_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 8: "OffsetCommit", 9: "OffsetFetch", 19: "CreateTopics",
              20: "DeleteTopics", 23: "OffsetForLeaderEpoch", 27: "WriteTxnMarkers", 29: "DescribeAcls",
              30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 34: "AlterReplicaLogDirs",
              35: "DescribeLogDirs", 38: "CreateDelegationToken", 39: "RenewDelegationToken",
              40: "ExpireDelegationToken", 41: "DescribeDelegationToken"}


class LegacyTypeError(LookupError):
    """No derived type for this version (its spec is not vendored, or a field has no kio counterpart)."""


def _kio_class(api_key: int, version: int, suffix: str) -> type | None:
    module_name = f"kio.schema.{api_key_map[api_key]}.v{version}.{suffix.lower()}"
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    return next(v for v in vars(module).values() if isinstance(v, type) and v.__name__.endswith(suffix)
                and v.__module__ == module_name and getattr(v, "__type__", None) is not None
                and v.__type__.name == suffix.lower())


def _template(api_key: int, version: int, suffix: str) -> type:
    """kio's class of the lowest version above `version` (its fields are a superset of the removed ones).

    It may be flexible (WriteTxnMarkers v1): a field's type and metadata are the same in
    both encodings, and the derived class is not flexible, which is what its readers and
    writers go by.
    """
    for candidate in range(version + 1, version + 20):
        found = _kio_class(api_key, candidate, suffix)
        if found is not None:
            return found
    raise LegacyTypeError(f"kio has no {api_key_map[api_key]} {suffix} to derive v{version} from")


_HEADERS = {"Request": RequestHeaderV1, "Response": ResponseHeaderV0}  # of every non-flexible version

# A removed field has no kio counterpart: integers, booleans and their arrays are typed from the spec alone.
_PRIMITIVES = {"int8": i8, "int16": i16, "int32": i32, "int64": i64, "bool": bool}


def _template_field(template: type, spec_field: FieldSpec) -> dataclasses.Field:
    by_name = {f.name: f for f in dataclasses.fields(template)}
    found = by_name.get(spec_field.key) or by_name.get(spec_field.key.removesuffix("_ms"))
    if found is not None:
        return found
    primitive = _PRIMITIVES.get(spec_field.element_type)
    if primitive is None:
        raise LegacyTypeError(f"{template.__qualname__} has no field for {spec_field.name}")
    if spec_field.is_array:
        default: Any = ()
    elif primitive is bool:
        default = str(spec_field.default).lower() == "true"
    else:
        default = int(spec_field.default or 0)
    made = dataclasses.field(metadata={"kafka_type": spec_field.element_type}, default=default)
    made.name, made.type = spec_field.key, tuple[primitive, ...] if spec_field.is_array else primitive
    return made


def _derive(template: type, fields: tuple[FieldSpec, ...], spec: MessageSpec, version: int,
            classvars: dict[str, Any]) -> type:
    members = []
    for spec_field in fields:
        if version not in spec_field.versions:
            continue
        source = _template_field(template, spec_field)
        field_type: Any = source.type
        kind = classify_field(source)
        if isinstance(kind, (EntityField, EntityTupleField)):
            inner_fields = spec_field.fields or spec.common_structs[spec_field.element_type]
            inner = _derive(kind.type_, inner_fields, spec, version, {**classvars, "__type__": kind.type_.__type__})
            field_type = tuple[inner, ...] if isinstance(kind, EntityTupleField) else inner
            if isinstance(kind, EntityField) and dataclasses.MISSING is not source.default:
                field_type = inner | None
            elif isinstance(kind, EntityTupleField) and is_optional(source):  # nullable (DescribeDelegationToken)
                field_type = tuple[inner, ...] | None
        extra: dict[str, Any] = {}
        if source.default is not dataclasses.MISSING:
            extra["default"] = source.default
        elif source.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            extra["default_factory"] = source.default_factory  # type: ignore[misc]
        members.append((source.name, field_type, dataclasses.field(metadata=source.metadata, **extra)))
    derived = dataclasses.make_dataclass(template.__name__, members, frozen=True, slots=True, kw_only=True,
                                         namespace=dict(classvars))
    derived.__qualname__ = f"{template.__qualname__}[v{version}]"
    return derived


@cache
def legacy_message_types(api_key: int, version: int) -> tuple[type, type]:
    """(request class, response class) of a version kio lacks; LegacyTypeError if it cannot be derived."""
    name = SPEC_NAMES.get(api_key)
    if name is None:
        raise LegacyTypeError(f"no vendored spec for api key {api_key}")
    classes = []
    for suffix in ("Request", "Response"):
        spec = packaged_spec("clients", f"{name}{suffix}")
        if version not in spec.valid_versions or version in spec.flexible_versions:
            raise LegacyTypeError(f"{spec.name} has no non-flexible version {version}")
        template = _template(api_key, version, suffix)
        classvars = {"__type__": template.__type__, "__version__": version, "__flexible__": False,
                     "__api_key__": api_key, "__header_schema__": _HEADERS[suffix]}
        classes.append(_derive(template, spec.fields, spec, version, classvars))
    return classes[0], classes[1]
