"""The options of Spark's Kafka source and sink, parsed once, with Spark's names, defaults and checks.

Offsets travel in Spark's JSON form: {"topic": {"0": 23, "1": -2}}, where -2
means earliest and -1 latest. Everything that names the Kafka client is a
`kafka.`-prefixed option and goes to confluent-kafka, Java client names translated
(klamm.spark.client_properties), except the few that the source must own (Spark
refuses the same ones).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from klamm.spark.client_properties import UnsupportedProperty, librdkafka_properties
from klamm.spark.java_regex import to_python

EARLIEST = -2
LATEST = -1

# Spark refuses these: the source decides them (group ids are per query, offsets are Spark's).
_OWNED = {"group.id", "auto.offset.reset", "enable.auto.commit", "key.deserializer", "value.deserializer",
          "key.serializer", "value.serializer", "interceptor.classes"}


class OptionError(ValueError):
    """An option Spark's Kafka source would refuse too."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: "earliest", "latest", per-partition offsets, or a timestamp (global or per partition)."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp" | "timestamps"
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)  # offsets or per-partition timestamps
    timestamp: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    kafka: dict[str, str]
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: OffsetSpec = OffsetSpec("earliest")
    ending: OffsetSpec = OffsetSpec("latest")
    timestamp_strategy: str = "error"
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    poll_timeout_s: float = 120.0

    def matches(self, topic: str) -> bool:
        if self.subscribe:
            return topic in self.subscribe
        if self.pattern is not None:
            return re.fullmatch(to_python(self.pattern), topic) is not None
        return any(t == topic for t, _ in self.assign)


def kafka_properties(options: Mapping[str, str]) -> dict[str, str]:
    props = {k[len("kafka."):]: v for k, v in options.items() if k.lower().startswith("kafka.")}
    if "bootstrap.servers" not in props:
        raise OptionError("option 'kafka.bootstrap.servers' must be specified")
    owned = sorted(_OWNED & set(props))
    if owned:
        raise OptionError(f"Kafka option 'kafka.{owned[0]}' is not supported: the source manages it")
    try:
        return librdkafka_properties(props)
    except UnsupportedProperty as exc:
        raise OptionError(str(exc)) from None


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _positive(options: Mapping[str, str], name: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"option '{name}' must be a positive integer, not {value!r}") from None
    if number <= 0:
        raise OptionError(f"option '{name}' must be positive, not {number}")
    return number


def _partition_json(text: str, name: str) -> dict[tuple[str, int], int]:
    try:
        parsed = json.loads(text)
        return {(topic, int(p)): int(v) for topic, parts in parsed.items() for p, v in parts.items()}
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"option '{name}' must be JSON like {{\"topic\":{{\"0\":23}}}}, not {text!r}") from None


def _offset_spec(options: Mapping[str, str], prefix: str, default: str, streaming: bool) -> OffsetSpec:
    """{prefix}Timestamp > {prefix}OffsetsByTimestamp > {prefix}Offsets, as Spark orders them."""
    if options.get(f"{prefix}Timestamp") is not None:
        try:
            return OffsetSpec("timestamp", timestamp=int(options[f"{prefix}Timestamp"]))
        except ValueError:
            raise OptionError(f"option '{prefix}Timestamp' must be milliseconds since the epoch") from None
    if options.get(f"{prefix}OffsetsByTimestamp") is not None:
        return OffsetSpec("timestamps", _partition_json(options[f"{prefix}OffsetsByTimestamp"],
                                                        f"{prefix}OffsetsByTimestamp"))
    text = options.get(f"{prefix}Offsets", default).strip()
    if text.lower() in ("earliest", "latest"):
        spec = OffsetSpec(text.lower())
    else:
        spec = OffsetSpec("offsets", _partition_json(text, f"{prefix}Offsets"))
    if prefix == "starting" and not streaming and spec.kind == "latest":
        raise OptionError("starting offset can't be latest for batch queries on Kafka")
    if prefix == "starting" and not streaming and LATEST in spec.offsets.values():
        raise OptionError("starting offset for a partition can't be latest (-1) for batch queries on Kafka")
    if prefix == "ending" and spec.kind == "earliest":
        raise OptionError("ending offset can't be earliest for batch queries on Kafka")
    if prefix == "ending" and EARLIEST in spec.offsets.values():
        raise OptionError("ending offset for a partition can't be earliest (-2) for batch queries on Kafka")
    return spec


def _topics(options: Mapping[str, str]) -> dict[str, Any]:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if options.get(name) is not None]
    if len(given) != 1:
        raise OptionError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
                          f"specified (got {', '.join(given) or 'none'})")
    value = options[given[0]]
    if given[0] == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise OptionError("no topics to subscribe to in option 'subscribe'")
        return {"subscribe": topics}
    if given[0] == "subscribePattern":
        try:
            re.compile(to_python(value))
        except re.error as exc:
            raise OptionError(f"option 'subscribePattern' is not a valid pattern: {exc}") from None
        return {"pattern": value}
    try:
        parsed = json.loads(value)
        assign = tuple((topic, int(p)) for topic, parts in parsed.items() for p in parts)
    except (ValueError, AttributeError, TypeError):
        raise OptionError(f"option 'assign' must be JSON like {{\"topic\":[0,1]}}, not {value!r}") from None
    if not assign:
        raise OptionError("no partitions to assign in option 'assign'")
    return {"assign": assign}


def source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """The reading options; `options` is Spark's case-insensitive option map."""
    strategy = options.get("startingOffsetsByTimestampStrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option 'startingOffsetsByTimestampStrategy' must be error or latest")
    kafka = kafka_properties(options)
    kafka.setdefault("isolation.level", "read_committed")
    return SourceOptions(
        kafka=kafka, **_topics(options),
        starting=_offset_spec(options, "starting", "latest" if streaming else "earliest", streaming),
        ending=_offset_spec(options, "ending", "latest", streaming),
        timestamp_strategy=strategy,
        fail_on_data_loss=_flag(options, "failOnDataLoss", True),
        include_headers=_flag(options, "includeHeaders", False),
        min_partitions=_positive(options, "minPartitions"),
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger"),
        poll_timeout_s=(_positive(options, "kafkaConsumer.pollTimeoutMs") or 120_000) / 1000,
    )
