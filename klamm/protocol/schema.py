"""A codec derived from Kafka's JSON message specs, for messages kio does not cover.

Kafka generates Java classes from `*.json` specs (clients/src/main/resources/common/
message, metadata/src/main/resources/common/metadata, ...). kio does the same for
the client protocol; the metadata log records and the coordinator records are not
in kio, so this module reads the same JSON files (vendored under `specs/`) and
compiles, once per (spec, version), a reader and a writer made of closures.

Values are plain dicts keyed by the snake_case of the JSON field names
("TopicId" -> "topic_id", "protocolType" -> "protocol_type"). Encoding accepts
partial dicts (missing keys take the field default); decoding returns every
field, absent-in-this-version fields set to their default. uuid fields are
`uuid.UUID`, bytes/records are `bytes`, arrays are lists, structs nested dicts.
A codec compiled with `records_views` (`records_view_codec`) returns each records
field as a slice of the buffer it reads instead: a memoryview that shares its
bytes when decoding a memoryview (a follower's fetched batches are appended from
the receive buffer as they are).

Encoding rules followed (Kafka's MessageDataGenerator):
- flexible versions use compact strings/bytes/arrays (uvarint length + 1, 0 for
  null) and end every struct with a tagged-field section; a field may opt out of
  compact encoding with its own "flexibleVersions": "none" (RequestHeader.ClientId);
- a tagged field is written only when it differs from its default, in tag order,
  as uvarint tag, uvarint size, value; unknown tags are skipped when reading;
- a nullable non-array struct field is prefixed by an int8: -1 null, 1 present.
"""

from __future__ import annotations

import functools
import json
import re
import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "SPECS_DIR",
    "FieldSpec",
    "MessageCodec",
    "MessageSpec",
    "SchemaError",
    "VersionRange",
    "load_spec",
    "packaged_spec",
    "packaged_specs",
    "parse_spec",
    "read_uvarint",
    "records_view_codec",
    "snake_case",
    "strip_comments",
    "write_uvarint",
]

SPECS_DIR = Path(__file__).parent / "specs"
ZERO_UUID = uuid.UUID(int=0)
_MAX_VERSION = 0x7FFF

Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]


class SchemaError(ValueError):
    """A spec cannot be compiled, or bytes do not decode under it."""


# ---------------------------------------------------------------------------
# Spec model


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive version range; `none` is the empty range (low > high)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | int | None) -> VersionRange:
        if text is None:
            return NO_VERSIONS
        text = str(text).strip()
        if text in ("", "none"):
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), _MAX_VERSION)
        if "-" in text:
            low, high = text.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high

    def __iter__(self):
        return iter(range(self.low, self.high + 1))


NO_VERSIONS = VersionRange(1, 0)


@dataclass(frozen=True, slots=True)
class FieldSpec:
    name: str
    key: str
    type: str
    versions: VersionRange
    nullable_versions: VersionRange = NO_VERSIONS
    tagged_versions: VersionRange = NO_VERSIONS
    tag: int | None = None
    default: Any = None  # the raw JSON default, None when the spec gives none
    flexible_versions: VersionRange | None = None  # per-field override (strings/bytes)
    fields: tuple[FieldSpec, ...] = ()
    ignorable: bool = False

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type


@dataclass(frozen=True)
class MessageSpec:
    name: str
    type: str  # "metadata", "data", "request", "response", "header"
    api_key: int | None
    valid_versions: VersionRange
    flexible_versions: VersionRange
    fields: tuple[FieldSpec, ...]
    common_structs: Mapping[str, tuple[FieldSpec, ...]]
    codecs: Mapping[int, MessageCodec] = field(default_factory=dict, compare=False, repr=False)

    def codec(self, version: int) -> MessageCodec:
        try:
            return self.codecs[version]
        except KeyError:
            raise SchemaError(f"{self.name} has no version {version}") from None

    def encode(self, value: Mapping[str, Any], version: int) -> bytes:
        return self.codec(version).encode(value)

    def decode(self, buf: bytes | bytearray | memoryview, version: int) -> dict[str, Any]:
        return self.codec(version).decode(buf)

    @property
    def highest_version(self) -> int:
        return self.valid_versions.high


class MessageCodec:
    """The compiled reader/writer of one spec at one version."""

    def __init__(self, spec: MessageSpec, version: int, records_views: bool = False) -> None:
        self.spec = spec
        self.version = version
        self.flexible = version in spec.flexible_versions
        compiled = _StructCompiler(spec.common_structs, version, self.flexible, records_views).struct(spec.fields)
        self._read, self._write, self._default = compiled
        self._complete: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None

    def write(self, out: bytearray, value: Mapping[str, Any]) -> None:
        self._write(out, value)

    def encode(self, value: Mapping[str, Any]) -> bytes:
        out = bytearray()
        self._write(out, value)
        return bytes(out)

    def read(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[dict[str, Any], int]:
        try:
            return self._read(buf, pos)
        except (struct.error, IndexError, UnicodeDecodeError) as exc:
            raise SchemaError(f"cannot decode {self.spec.name} v{self.version}: {exc}") from exc

    def decode(self, buf: bytes | bytearray | memoryview) -> dict[str, Any]:
        """Decode a whole buffer; trailing bytes are an error, as in Kafka's serdes."""
        value, pos = self.read(buf, 0)
        if pos != len(buf):
            raise SchemaError(f"{len(buf) - pos} trailing bytes after {self.spec.name} v{self.version}")
        return value

    def default(self) -> dict[str, Any]:
        """A value with every field at its default."""
        return self._default()

    def complete(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """What decode(encode(value)) gives, without the bytes: every field of this version present (missing
        ones, and those this version lacks, at their defaults), arrays as lists, bytes as bytes, a null uuid
        as the zero uuid. For a value that encodes; one that cannot is not checked here."""
        if self._complete is None:
            self._complete = _Completer(self.spec.common_structs, self.version).struct(self.spec.fields)
        return self._complete(value)


# ---------------------------------------------------------------------------
# Loading


def strip_comments(text: str) -> str:
    """Remove // comments (Kafka's specs are JSON with comments), leaving strings intact."""
    out = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


_SNAKE_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """Kafka field name to the dict key: TopicId -> topic_id, protocolType -> protocol_type."""
    return _SNAKE_2.sub(r"\1_\2", _SNAKE_1.sub(r"\1_\2", name)).lower()


def _parse_field(raw: Mapping[str, Any]) -> FieldSpec:
    tagged = VersionRange.parse(raw.get("taggedVersions"))
    # A tagged field may omit "versions"; it then exists exactly where it is tagged.
    versions = VersionRange.parse(raw["versions"]) if "versions" in raw else tagged
    flexible = raw.get("flexibleVersions")
    tag = raw.get("tag")
    # JSON null and "null" both mean a null default; a missing default is None.
    default = "null" if "default" in raw and raw["default"] is None else raw.get("default")
    return FieldSpec(
        name=raw["name"],
        key=snake_case(raw["name"]),
        type=raw["type"],
        versions=versions,
        nullable_versions=VersionRange.parse(raw.get("nullableVersions")),
        tagged_versions=tagged,
        tag=None if tag is None else int(tag),
        default=default,
        flexible_versions=None if flexible is None else VersionRange.parse(flexible),
        fields=tuple(_parse_field(f) for f in raw.get("fields", ())),
        ignorable=bool(raw.get("ignorable", False)),
    )


def parse_spec(text: str) -> MessageSpec:
    """Parse the text of one spec file and compile a codec for each valid version."""
    raw = json.loads(strip_comments(text))
    structs = {s["name"]: tuple(_parse_field(f) for f in s.get("fields", ())) for s in raw.get("commonStructs", ())}
    spec = MessageSpec(
        name=raw["name"],
        type=raw["type"],
        api_key=raw.get("apiKey"),
        valid_versions=VersionRange.parse(raw["validVersions"]),
        flexible_versions=VersionRange.parse(raw.get("flexibleVersions", "none")),
        fields=tuple(_parse_field(f) for f in raw["fields"]),
        common_structs=MappingProxyType(structs),
    )
    # Codecs need the finished spec (common structs), so they are attached after construction.
    codecs = {version: MessageCodec(spec, version) for version in spec.valid_versions}
    object.__setattr__(spec, "codecs", MappingProxyType(codecs))
    return spec


def load_spec(path: str | Path) -> MessageSpec:
    return parse_spec(Path(path).read_text(encoding="utf-8"))


@functools.cache
def packaged_spec(group: str, name: str) -> MessageSpec:
    """A vendored spec, e.g. packaged_spec("metadata", "TopicRecord"); compiled once."""
    return load_spec(SPECS_DIR / group / f"{name}.json")


@functools.cache
def records_view_codec(group: str, name: str, version: int) -> MessageCodec:
    """A vendored spec's codec at `version` whose records fields are slices of the decoded buffer, not copies."""
    spec = packaged_spec(group, name)
    if version not in spec.valid_versions:
        raise SchemaError(f"{spec.name} has no version {version}")
    return MessageCodec(spec, version, records_views=True)


def packaged_specs(group: str) -> dict[str, MessageSpec]:
    """Every vendored spec of a group ("metadata", "group-coordinator", ...) by name."""
    return {path.stem: packaged_spec(group, path.stem) for path in sorted((SPECS_DIR / group).glob("*.json"))}


# ---------------------------------------------------------------------------
# Varints


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise SchemaError(f"negative unsigned varint {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise SchemaError("unsigned varint longer than 5 bytes")


# ---------------------------------------------------------------------------
# Primitive codecs


def _fixed(fmt: str) -> tuple[Reader, Writer]:
    packer = struct.Struct(fmt)
    size = packer.size
    unpack_from = packer.unpack_from
    pack = packer.pack

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        return unpack_from(buf, pos)[0], pos + size

    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return read, write


def _read_bool(buf: Any, pos: int) -> tuple[bool, int]:
    return buf[pos] != 0, pos + 1


def _write_bool(out: bytearray, value: bool) -> None:
    out.append(1 if value else 0)


def _read_uuid(buf: Any, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise IndexError("truncated uuid")
    return uuid.UUID(bytes=bytes(buf[pos:end])), end


def _write_uuid(out: bytearray, value: uuid.UUID | None) -> None:
    out += (value or ZERO_UUID).bytes


_SCALARS: dict[str, tuple[Reader, Writer]] = {
    "int8": _fixed(">b"),
    "int16": _fixed(">h"),
    "int32": _fixed(">i"),
    "int64": _fixed(">q"),
    "uint16": _fixed(">H"),
    "uint32": _fixed(">I"),
    "float64": _fixed(">d"),
    "bool": (_read_bool, _write_bool),
    "uuid": (_read_uuid, _write_uuid),
}
_INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
# struct's code and size of the scalars an array packs in one call
_PACKED = {"int8": ("b", 1), "int16": ("h", 2), "int32": ("i", 4), "int64": ("q", 8), "uint16": ("H", 2),
           "uint32": ("I", 4), "float64": ("d", 8)}


def _length_codec(compact: bool, wide: bool) -> tuple[Reader, Writer]:
    """Length prefix returning -1 for null: compact uvarint(n+1), else int16/int32."""
    if compact:

        def read(buf: Any, pos: int) -> tuple[int, int]:
            n, pos = read_uvarint(buf, pos)
            return n - 1, pos

        def write(out: bytearray, n: int) -> None:
            write_uvarint(out, n + 1)

        return read, write
    return _fixed(">i" if wide else ">h")


def _sized_codec(compact: bool, nullable: bool, wide: bool, is_text: bool, what: str,
                 view: bool = False) -> tuple[Reader, Writer]:
    """Strings (int16 length) and bytes/records (int32 length); `view`: the value is a slice of the buffer."""
    read_len, write_len = _length_codec(compact, wide)

    def read(buf: Any, pos: int) -> tuple[Any, int]:
        n, pos = read_len(buf, pos)
        if n < 0:
            if not nullable:
                raise SchemaError(f"null {what} in a non-nullable field")
            return None, pos
        end = pos + n
        if end > len(buf):
            raise IndexError(f"truncated {what}")
        if view:
            return buf[pos:end], end
        data = bytes(buf[pos:end])
        return (data.decode("utf-8") if is_text else data), end

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise SchemaError(f"null {what} in a non-nullable field")
            write_len(out, -1)
            return
        data = value.encode("utf-8") if is_text else value
        write_len(out, len(data))
        out += data

    return read, write


# ---------------------------------------------------------------------------
# Defaults


def _scalar_default(type_name: str, raw: Any, nullable: bool) -> Any:
    if raw == "null" or (raw is None and nullable and type_name in ("records",)):
        return None
    if type_name in _INT_TYPES:
        if raw is None or raw == "":
            return 0
        return int(raw, 0) if isinstance(raw, str) else int(raw)
    if type_name == "float64":
        return float(raw) if raw not in (None, "") else 0.0
    if type_name == "bool":
        return raw in (True, "true")
    if type_name == "uuid":
        return ZERO_UUID if raw in (None, "") else uuid.UUID(str(raw))
    if type_name == "string":
        return "" if raw is None else str(raw)
    if type_name in ("bytes", "records"):
        return b""
    raise SchemaError(f"unknown type {type_name}")


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


# ---------------------------------------------------------------------------
# Struct compilation


class _StructCompiler:
    """Compiles fields at one version into (reader, writer, default factory) closures."""

    def __init__(self, common_structs: Mapping[str, tuple[FieldSpec, ...]], version: int, flexible: bool,
                 records_views: bool = False) -> None:
        self.common_structs = common_structs
        self.version = version
        self.flexible = flexible
        self.records_views = records_views

    def struct(self, fields: tuple[FieldSpec, ...]) -> tuple[Reader, Writer, Callable[[], dict]]:
        version = self.version
        regular: list[tuple[str, Reader, Writer, Callable[[], Any]]] = []
        tagged: list[tuple[int, str, Reader, Writer, Callable[[], Any]]] = []
        absent: list[tuple[str, Callable[[], Any]]] = []
        defaults: list[tuple[str, Callable[[], Any]]] = []
        for spec in fields:
            read, write, make_default = self.field(spec)
            defaults.append((spec.key, make_default))
            if version not in spec.versions:
                absent.append((spec.key, make_default))
            elif self.flexible and version in spec.tagged_versions:
                if spec.tag is None:
                    raise SchemaError(f"tagged field {spec.name} has no tag")
                tagged.append((spec.tag, spec.key, read, write, make_default))
            else:
                regular.append((spec.key, read, write, make_default))
        tagged.sort(key=lambda t: t[0])
        tagged_by_tag = {tag: (key, read) for tag, key, read, _, _ in tagged}
        flexible = self.flexible

        def make_default_struct() -> dict[str, Any]:
            return {key: make() for key, make in defaults}

        # Tagged fields are skipped when equal to their default; comparing the encoded
        # bytes makes partial struct values compare the same way as full ones.
        tagged_writers = [(tag, key, write, make, _default_bytes(write, make)) for tag, key, _, write, make in tagged]

        def read_struct(buf: Any, pos: int) -> tuple[dict[str, Any], int]:
            value: dict[str, Any] = {}
            for key, read, _, _ in regular:
                value[key], pos = read(buf, pos)
            for key, make in absent:
                value[key] = make()
            if flexible:
                for _, key, _, _, make in tagged:
                    value[key] = make()
                count, pos = read_uvarint(buf, pos)
                for _ in range(count):
                    tag, pos = read_uvarint(buf, pos)
                    size, pos = read_uvarint(buf, pos)
                    end = pos + size
                    known = tagged_by_tag.get(tag)
                    if known is not None:
                        value[known[0]], read_end = known[1](buf, pos)
                        if read_end != end:
                            raise SchemaError(f"tagged field {tag} size mismatch")
                    pos = end
            return value, pos

        def write_struct(out: bytearray, value: Mapping[str, Any]) -> None:
            get = value.get
            for key, _, write, make in regular:
                item = get(key, _MISSING)
                write(out, make() if item is _MISSING else item)
            if not flexible:
                return
            pieces = []
            for tag, key, write, _, default_bytes in tagged_writers:
                item = get(key, _MISSING)
                if item is _MISSING:
                    continue
                data = _encoded(write, item)
                if data != default_bytes:
                    pieces.append((tag, data))
            write_uvarint(out, len(pieces))
            for tag, data in pieces:
                write_uvarint(out, tag)
                write_uvarint(out, len(data))
                out += data

        return read_struct, write_struct, make_default_struct

    def field(self, spec: FieldSpec) -> tuple[Reader, Writer, Callable[[], Any]]:
        version = self.version
        nullable = version in spec.nullable_versions
        compact = self.flexible and (spec.flexible_versions is None or version in spec.flexible_versions)
        if spec.is_array:
            return self._array(spec, nullable, compact)
        if spec.type in _SCALARS or spec.type in ("string", "bytes", "records"):
            read, write = self._scalar(spec.type, nullable, compact)
            return read, write, _constant(_scalar_default(spec.type, spec.default, nullable))
        return self._struct_field(spec, nullable)

    def _scalar(self, type_name: str, nullable: bool, compact: bool) -> tuple[Reader, Writer]:
        if type_name in _SCALARS:
            return _SCALARS[type_name]
        if type_name == "string":
            return _sized_codec(compact, nullable, wide=False, is_text=True, what="string")
        view = self.records_views and type_name == "records"
        return _sized_codec(compact, nullable, wide=True, is_text=False, what=type_name, view=view)

    def _struct_fields(self, spec: FieldSpec, type_name: str) -> tuple[FieldSpec, ...]:
        if spec.fields:
            return spec.fields
        try:
            return self.common_structs[type_name]
        except KeyError:
            raise SchemaError(f"unknown type {type_name} of field {spec.name}") from None

    def _array(self, spec: FieldSpec, nullable: bool, compact: bool) -> tuple[Reader, Writer, Callable[[], Any]]:
        element = spec.element_type
        if element in _SCALARS or element in ("string", "bytes", "records"):
            read_item, write_item = self._scalar(element, False, compact)
        else:
            read_item, write_item, _ = self.struct(self._struct_fields(spec, element))
        read_len, write_len = _length_codec(compact, wide=True)
        packed = _PACKED.get(element)  # numbers of a fixed size: the whole array in one struct call

        def read(buf: Any, pos: int) -> tuple[list | None, int]:
            n, pos = read_len(buf, pos)
            if n < 0:
                if not nullable:
                    raise SchemaError(f"null array in non-nullable field {spec.name}")
                return None, pos
            if n > len(buf) - pos:  # every element takes at least one byte
                raise SchemaError(f"array length {n} exceeds the buffer")
            if packed is not None:
                size = n * packed[1]
                if pos + size > len(buf):
                    raise IndexError(f"truncated array {spec.name}")
                return list(struct.unpack_from(f">{n}{packed[0]}", buf, pos)), pos + size
            items = []
            for _ in range(n):
                item, pos = read_item(buf, pos)
                items.append(item)
            return items, pos

        def write(out: bytearray, items: Any) -> None:
            if items is None:
                if not nullable:
                    raise SchemaError(f"null array in non-nullable field {spec.name}")
                write_len(out, -1)
                return
            write_len(out, len(items))
            if packed is not None:
                out += struct.pack(f">{len(items)}{packed[0]}", *items)
                return
            for item in items:
                write_item(out, item)

        if spec.default == "null":
            make_default: Callable[[], Any] = _constant(None)
        else:
            make_default = list
        return read, write, make_default

    def _struct_field(self, spec: FieldSpec, nullable: bool) -> tuple[Reader, Writer, Callable[[], Any]]:
        read_struct, write_struct, make_struct = self.struct(self._struct_fields(spec, spec.type))
        make_default = _constant(None) if spec.default == "null" else make_struct
        if not nullable:
            return read_struct, write_struct, make_default

        def read(buf: Any, pos: int) -> tuple[dict | None, int]:
            if _signed_byte(buf[pos]) < 0:
                return None, pos + 1
            return read_struct(buf, pos + 1)

        def write(out: bytearray, value: Any) -> None:
            if value is None:
                out.append(0xFF)
            else:
                out.append(1)
                write_struct(out, value)

        return read, write, make_default


_MISSING = object()


class _Completer:
    """Compiles fields at one version into the function MessageCodec.complete calls: a value as decoding its
    encoding would give it back. The defaults are _StructCompiler's."""

    def __init__(self, common_structs: Mapping[str, tuple[FieldSpec, ...]], version: int) -> None:
        self.version = version
        self.defaults = _StructCompiler(common_structs, version, flexible=False)

    def struct(self, fields: tuple[FieldSpec, ...]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
        parts = []
        for spec in fields:
            make_default = self.defaults.field(spec)[2]
            present = self.version in spec.versions  # a field this version lacks is never written
            parts.append((spec.key, self.field(spec) if present else None, make_default))

        def complete(value: Mapping[str, Any]) -> dict[str, Any]:
            get = value.get
            out = {}
            for key, normalize, make_default in parts:
                item = get(key, _MISSING) if normalize is not None else _MISSING
                out[key] = make_default() if item is _MISSING else normalize(item)
            return out

        return complete

    def field(self, spec: FieldSpec) -> Callable[[Any], Any]:
        element = spec.element_type
        if element in _SCALARS or element in ("string", "bytes", "records"):
            item = _SCALAR_COMPLETERS.get(element, _same)
        else:
            struct = self.struct(self.defaults._struct_fields(spec, element))
            item = lambda value: None if value is None else struct(value)  # noqa: E731
        if not spec.is_array:
            return item
        if item is _same:
            return lambda items: None if items is None else list(items)
        return lambda items: None if items is None else [item(x) for x in items]


def _same(value: Any) -> Any:
    return value


def _as_bytes(value: Any) -> bytes | None:
    return value if value is None or type(value) is bytes else bytes(value)


_SCALAR_COMPLETERS: dict[str, Callable[[Any], Any]] = {
    "bool": bool,
    "uuid": lambda value: value or ZERO_UUID,
    "bytes": _as_bytes,
    "records": _as_bytes,
    "float64": float,
}


def _signed_byte(byte: int) -> int:
    return byte - 256 if byte >= 128 else byte


def _default_bytes(write: Writer, make_default: Callable[[], Any]) -> bytes | None:
    try:
        return _encoded(write, make_default())
    except SchemaError:  # a default the field cannot encode (null in a non-nullable field)
        return None


def _encoded(write: Writer, value: Any) -> bytes:
    out = bytearray()
    write(out, value)
    return bytes(out)
