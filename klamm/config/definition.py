"""Kafka-style config definitions: one `ConfigKey` per configuration, as data.

A `ConfigDef` is the table of keys. From it we parse/validate raw string
properties with Kafka's semantics and error messages, format values back to
Kafka's string form (DescribeConfigs, topic defaults), and build the frozen
pydantic models (`build_model`) so every key is declared exactly once.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from pydantic import BaseModel, Field, SecretStr, create_model

from klamm.config.errors import ConfigError

__all__ = [
    "ConfigType",
    "Importance",
    "ConfigSource",
    "Support",
    "Range",
    "OneOf",
    "Synonym",
    "ConfigKey",
    "ConfigDef",
    "DescribedConfig",
    "DescribedSynonym",
    "python_name",
    "parse_value",
    "format_value",
    "build_model",
    "INT_MAX",
    "LONG_MAX",
    "DOUBLE_MAX",
]

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
DOUBLE_MAX = 1.7976931348623157e308
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


class ConfigType(enum.Enum):
    """Kafka ConfigDef.Type; `.value` is the DescribeConfigs (v3+) ConfigType wire id."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class Importance(enum.Enum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


class Support(enum.Enum):
    """What klamm does with a key: it is applied or refused, never accepted and ignored.

    APPLIED: klamm reads it and it changes behaviour. CLUSTER: it concerns other
    brokers or replication; a single node accepts the values it can honour (as Kafka
    does with one broker) and refuses the others. UNSUPPORTED: klamm does not
    implement it; only its default (and the values listed in `ConfigKey.accepts`)
    are accepted, anything else is refused at start-up and by AlterConfigs.
    """

    APPLIED = "applied"
    CLUSTER = "cluster"
    UNSUPPORTED = "unsupported"


class ConfigSource(enum.IntEnum):
    """DescribeConfigs config source ids (Kafka's DescribeConfigsResponse.ConfigSource)."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8  # a group's dynamic config (KIP-848); the admin client calls it DYNAMIC_GROUP_CONFIG


_INT_BOUNDS = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}
_INTEGER = re.compile(r"[+-]?[0-9]+")
_LIST_SPLIT = re.compile(r"\s*,\s*")


# --------------------------------------------------------------------------- validators


@dataclass(frozen=True)
class Range:
    """Kafka ConfigDef.Range: inclusive bounds, either may be open."""

    min: int | float | None = None
    max: int | float | None = None

    def check(self, name: str, value: Any, raw: object) -> None:
        if value is None:
            return
        if self.min is not None and value < self.min:
            raise ConfigError(name, raw, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise ConfigError(name, raw, f"Value must be no more than {self.max}")

    def describe(self) -> str:
        """Kafka's "valid values" text: [min,...], [...,max] or [min,...,max]."""
        if self.max is None:
            return f"[{self.min},...]"
        if self.min is None:
            return f"[...,{self.max}]"
        return f"[{self.min},...,{self.max}]"


@dataclass(frozen=True)
class OneOf:
    """Kafka ValidString.in / ValidList.in: each value (each list item) must be listed."""

    options: tuple[str, ...]
    case_insensitive: bool = False

    def check(self, name: str, value: Any, raw: object) -> None:
        if value is None:
            return
        items = value if isinstance(value, list) else [value]
        allowed = {o.lower() for o in self.options} if self.case_insensitive else set(self.options)
        for item in items:
            probe = item.lower() if self.case_insensitive else item
            if probe not in allowed:
                qualifier = " (case insensitive)" if self.case_insensitive else ""
                raise ConfigError(name, item, f"String must be one of{qualifier}: {', '.join(self.options)}")

    def describe(self) -> str:
        return "[" + ", ".join(self.options) + "]"


@dataclass(frozen=True)
class LevelRange:
    """Compression level: a range, plus the codec's "use default" sentinel value."""

    min: int
    max: int
    sentinel: int | None = None

    def check(self, name: str, value: Any, raw: object) -> None:
        if value is None or value == self.sentinel:
            return
        if not self.min <= value <= self.max:
            raise ConfigError(name, raw, f"Value must be between {self.min} and {self.max}")

    def describe(self) -> str:
        return f"[{self.min},...,{self.max}]"


Validator = Range | OneOf | LevelRange


@dataclass(frozen=True)
class Synonym:
    """A broker config that supplies a topic config's default; `scale` converts units (e.g. hours -> ms)."""

    name: str
    scale: int = 1


# --------------------------------------------------------------------------- keys


def python_name(kafka_name: str) -> str:
    """Kafka name -> python attribute name: dots and dashes become underscores."""
    return kafka_name.replace(".", "_").replace("-", "_")


@dataclass(frozen=True)
class ConfigKey:
    """One configuration: Kafka name, type, default (python value), validator, docs.

    `default` None means "no default" (Kafka's null). `kafka_default` records
    Kafka's default where klamm deliberately differs. `synonyms` (topic keys
    only) lists the broker configs that provide the default, in priority order.
    `derived` marks broker keys whose value is always filled in from fallbacks
    (so the model field is not optional). `internal` keys are accepted but not
    described or documented.
    """

    name: str
    type: ConfigType
    default: Any
    importance: Importance
    doc: str
    validator: Validator | None = None
    synonyms: tuple[Synonym, ...] = ()
    derived: bool = False
    internal: bool = False
    read_only: bool = True
    kafka_default: Any = field(default=..., compare=False)
    support: Support = Support.APPLIED
    note: str = ""
    accepts: tuple[Any, ...] = ()
    # The python attribute name, kept rather than derived: TopicConfig.value_of looks it up on every append.
    attr: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.support is not Support.APPLIED and not self.note:
            raise ValueError(f"config {self.name} is {self.support.value} but gives no reason")
        object.__setattr__(self, "attr", python_name(self.name))

    @property
    def sensitive(self) -> bool:
        return self.type is ConfigType.PASSWORD

    @property
    def differs_from_kafka(self) -> bool:
        return self.kafka_default is not ...

    @property
    def documentation(self) -> str:
        """The doc, plus why klamm does not apply the key when it does not (DescribeConfigs, --help)."""
        if self.support is Support.APPLIED:
            return self.doc
        qualifier = "accepted, no effect on a single node" if self.support is Support.CLUSTER else "not supported"
        return f"{self.doc} klamm: {qualifier}: {self.note}."

    def parse(self, raw: object) -> Any:
        """Parse and validate one raw value (string or already-typed)."""
        value = parse_value(self.name, self.type, raw)
        if self.validator is not None:
            self.validator.check(self.name, value, raw)
        return value

    def refusal(self, value: Any) -> str | None:
        """Why klamm refuses `value` for an UNSUPPORTED key (None: accepted).

        The default and `accepts` pass; lists compare as sets (order carries no meaning
        in the list keys marked unsupported).
        """
        if self.support is not Support.UNSUPPORTED:
            return None
        if any(_same(value, ok) for ok in (self.default, *self.accepts)):
            return None
        values = [format_value(self.type, ok) for ok in (self.default, *self.accepts) if ok is not None]
        alternative = f" or set it to {' or '.join(repr(v) for v in values)}" if values else ""
        return f"klamm does not support {self.name}: {self.note}; leave it unset{alternative}"

    def check_supported(self, value: Any, raw: object) -> None:
        """Raise ConfigError when klamm cannot honour `value` for this key."""
        reason = self.refusal(value)
        if reason is not None:
            raise ConfigError(self.name, raw, reason)


class ConfigDef:
    """An ordered, immutable table of ConfigKeys."""

    def __init__(self, keys: list[ConfigKey]) -> None:
        by_name: dict[str, ConfigKey] = {}
        attrs: set[str] = set()
        for key in keys:
            if key.name in by_name or key.attr in attrs:
                raise ValueError(f"config {key.name} declared twice")
            by_name[key.name] = key
            attrs.add(key.attr)
        self._keys = by_name

    def __contains__(self, name: object) -> bool:
        return name in self._keys

    def __getitem__(self, name: str) -> ConfigKey:
        return self._keys[name]

    def __iter__(self) -> Iterator[ConfigKey]:
        return iter(self._keys.values())

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, name: str) -> ConfigKey | None:
        return self._keys.get(name)

    def names(self, include_internal: bool = True) -> frozenset[str]:
        return frozenset(k.name for k in self if include_internal or not k.internal)

    def parse(self, props: Mapping[str, object]) -> dict[str, Any]:
        """Parse the known keys of `props` (unknown ones are skipped) -> {kafka name: value}."""
        return {name: self._keys[name].parse(raw) for name, raw in props.items() if name in self._keys}

    def defaults(self) -> dict[str, Any]:
        return {k.name: _copy(k.default) for k in self}


# --------------------------------------------------------------------------- parse / format


def _java_trim(text: str) -> str:
    # Java's String.trim removes every char <= U+0020 at both ends.
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    return text[start:end]


def parse_value(name: str, type_: ConfigType, raw: object) -> Any:
    """Convert a raw value to the python value for `type_`, like ConfigDef.parseType."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        return _parse_typed(name, type_, raw)
    text = _java_trim(raw)
    if type_ is ConfigType.BOOLEAN:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigError(name, raw, "Expected value to be either true or false")
    if type_ in _INT_BOUNDS:
        return _parse_int(name, type_, raw, text)
    if type_ is ConfigType.DOUBLE:
        return _parse_double(name, raw, text)
    if type_ is ConfigType.LIST:
        return [] if not text else _LIST_SPLIT.split(text)
    if type_ is ConfigType.PASSWORD:
        return SecretStr(text)
    return text  # STRING, CLASS


def _parse_int(name: str, type_: ConfigType, raw: object, text: str) -> int:
    low, high = _INT_BOUNDS[type_]
    if _INTEGER.fullmatch(text):
        value = int(text)
        if low <= value <= high:
            return value
    raise ConfigError(name, raw, f"Not a number of type {type_.name}")


def _parse_double(name: str, raw: object, text: str) -> float:
    try:
        if "_" in text:
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise ConfigError(name, raw, "Not a number of type DOUBLE") from None


def _parse_typed(name: str, type_: ConfigType, raw: object) -> Any:
    """Accept already-typed python values (used by code, not by .properties files)."""
    ok = {
        ConfigType.BOOLEAN: isinstance(raw, bool),
        ConfigType.DOUBLE: isinstance(raw, (int, float)) and not isinstance(raw, bool),
        ConfigType.LIST: isinstance(raw, (list, tuple)),
        ConfigType.PASSWORD: isinstance(raw, SecretStr),
    }.get(type_, False)
    if type_ in _INT_BOUNDS and isinstance(raw, int) and not isinstance(raw, bool):
        return _parse_int(name, type_, raw, str(raw))
    if not ok:
        raise ConfigError(name, raw, f"Expected value of type {type_.name}")
    if type_ is ConfigType.LIST:
        return [str(item) for item in raw]  # type: ignore[union-attr]
    if type_ is ConfigType.DOUBLE:
        return float(raw)  # type: ignore[arg-type]
    return raw


def _java_double(value: float) -> str:
    """Render a float as Java's Double.toString does (e.g. 1.0E7, 0.5)."""
    if value != value or value in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}[repr(value)]
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    mantissa, exponent = f"{value!r}".replace("E", "e").split("e") if "e" in repr(value) else (None, None)
    if mantissa is None:
        mantissa, exponent = f"{value:.16e}".split("e")
        mantissa = mantissa.rstrip("0")
    if "." not in mantissa:
        mantissa += ".0"
    elif mantissa.endswith("."):
        mantissa += "0"
    return f"{mantissa}E{int(exponent)}"


def format_value(type_: ConfigType, value: Any) -> str | None:
    """Python value -> Kafka's string form (None stays None)."""
    if value is None:
        return None
    if type_ is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if type_ is ConfigType.LIST:
        return ",".join(value)
    if type_ is ConfigType.DOUBLE:
        return _java_double(float(value))
    if type_ is ConfigType.PASSWORD:
        return value.get_secret_value() if isinstance(value, SecretStr) else str(value)
    return str(value)


def _same(value: Any, other: Any) -> bool:
    if isinstance(value, list) and isinstance(other, (list, tuple)):
        return set(value) == set(other)
    return bool(value == other)


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


# --------------------------------------------------------------------------- describe entries


@dataclass(frozen=True)
class DescribedSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class DescribedConfig:
    """Everything DescribeConfigs needs for one config entry."""

    name: str
    value: str | None
    default: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    synonyms: tuple[DescribedSynonym, ...]
    documentation: str
    type: ConfigType

    @property
    def is_default(self) -> bool:
        return self.source is ConfigSource.DEFAULT_CONFIG


# --------------------------------------------------------------------------- pydantic models


_PY_TYPES: dict[ConfigType, Any] = {
    ConfigType.BOOLEAN: bool,
    ConfigType.STRING: str,
    ConfigType.CLASS: str,
    ConfigType.INT: int,
    ConfigType.SHORT: int,
    ConfigType.LONG: int,
    ConfigType.DOUBLE: float,
    ConfigType.LIST: list[str],
    ConfigType.PASSWORD: SecretStr,
}


def _field_for(key: ConfigKey) -> tuple[Any, Any]:
    annotation = _PY_TYPES[key.type]
    if key.default is None and not key.derived:
        annotation = annotation | None
    constraints: dict[str, Any] = {}
    if isinstance(key.validator, Range):
        constraints = {"ge": key.validator.min, "le": key.validator.max}
    if isinstance(key.default, list):
        default_list = list(key.default)
        spec = Field(default_factory=lambda: list(default_list), alias=key.name, description=key.doc)
    else:
        spec = Field(default=key.default, alias=key.name, description=key.doc, **constraints)
    return annotation, spec


def build_model(name: str, base: type[BaseModel], config_def: ConfigDef, module: str) -> type[BaseModel]:
    """Create a frozen pydantic model with one field per ConfigKey (alias = Kafka name)."""
    fields = {key.attr: _field_for(key) for key in config_def}
    clash = set(fields) & set(base.model_fields)
    if clash:
        raise ValueError(f"config names clash with model fields: {sorted(clash)}")
    return create_model(name, __base__=base, __module__=module, **fields)  # type: ignore[call-overload]
