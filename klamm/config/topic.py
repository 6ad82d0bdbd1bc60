"""TopicConfig: the effective configuration of one topic.

`TopicConfig.resolve(broker, overrides)` layers the topic's own overrides over
the broker defaults (BrokerConfig.topic_defaults), like Kafka's
LogConfig.fromProps. Unknown names and bad values raise ConfigError; the
overrides that were given are kept in `overrides` for DescribeConfigs.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from klamm.config.broker import BrokerConfig
from klamm.config.broker_keys import BROKER_CONFIG_DEF
from klamm.config.definition import (
    ConfigKey,
    ConfigSource,
    DescribedConfig,
    DescribedSynonym,
    build_model,
    format_value,
)
from klamm.config.errors import ConfigError
from klamm.config.topic_keys import TOPIC_CONFIG_DEF

__all__ = ["TopicConfig", "TOPIC_CONFIG_NAMES", "check_supported_overrides", "validate_topic_overrides"]

# Names accepted in topic overrides (Kafka accepts its internal ones too).
TOPIC_CONFIG_NAMES: frozenset[str] = TOPIC_CONFIG_DEF.names(include_internal=True)


def validate_topic_overrides(overrides: Mapping[str, str]) -> dict[str, Any]:
    """Check names and values of topic overrides (CreateTopics / AlterConfigs) -> parsed values."""
    for name in overrides:
        if name not in TOPIC_CONFIG_DEF:
            raise ConfigError.unknown_key(name)
    values = TOPIC_CONFIG_DEF.parse(overrides)
    for name, value in values.items():
        if value is None and TOPIC_CONFIG_DEF[name].default is not None:
            raise ConfigError(name, None, "Value must not be null")
    return values


def check_supported_overrides(overrides: Mapping[str, str]) -> None:
    """Refuse overrides klamm cannot honour (see Support): CreateTopics and AlterConfigs call this.

    Overrides already in the metadata log are not re-checked, so a stored value
    never stops the broker from loading its topics.
    """
    for name, value in validate_topic_overrides(overrides).items():
        TOPIC_CONFIG_DEF[name].check_supported(value, overrides[name])


class _TopicConfigBase(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    # The topic-level overrides exactly as given (Kafka name -> string).
    overrides: dict[str, str] = Field(default_factory=dict, exclude=True)

    @classmethod
    def resolve(cls, broker: BrokerConfig, overrides: Mapping[str, str]) -> "TopicConfig":
        """Effective topic config: `overrides` over the broker's topic defaults."""
        parsed = validate_topic_overrides(overrides)
        raw: dict[str, Any] = {name: list(value) if isinstance(value, list) else value
                               for name, value in broker.topic_base.items()}
        raw.update(parsed)
        _check_compaction_lags(raw)
        fields = {TOPIC_CONFIG_DEF[name].attr: value for name, value in raw.items()}
        kept = {name: str(value) for name, value in overrides.items()}
        return cls(**fields, overrides=kept)  # type: ignore[return-value]

    @classmethod
    def validate(cls, broker: BrokerConfig, overrides: Mapping[str, str]) -> "TopicConfig":
        """resolve() for a change a client asks for: values klamm cannot honour are refused too."""
        check_supported_overrides(overrides)
        return cls.resolve(broker, overrides)

    def value_of(self, name: str) -> Any:
        """The effective value of a topic config, by Kafka name."""
        return getattr(self, TOPIC_CONFIG_DEF[name].attr)

    def to_properties(self) -> dict[str, str]:
        """All effective (non-internal) values in Kafka's string form."""
        return {
            key.name: format_value(key.type, self.value_of(key.name))  # type: ignore[misc]
            for key in TOPIC_CONFIG_DEF
            if not key.internal and self.value_of(key.name) is not None
        }

    @property
    def compact(self) -> bool:
        return "compact" in self.value_of("cleanup.policy")

    @property
    def delete(self) -> bool:
        return "delete" in self.value_of("cleanup.policy")

    @property
    def effective_segment_bytes(self) -> int:
        """segment.bytes, unless the testing-only internal.segment.bytes overrides it (as in Kafka)."""
        internal = self.value_of("internal.segment.bytes")
        return internal if internal is not None else self.value_of("segment.bytes")

    @property
    def max_segment_ms(self) -> int:
        """Roll age: segment.ms, capped by max.compaction.lag.ms for compacted topics (Kafka's maxSegmentMs)."""
        segment_ms = self.value_of("segment.ms")
        lag = self.value_of("max.compaction.lag.ms")
        return min(lag, segment_ms) if self.compact and lag > 0 else segment_ms

    def describe(self, broker: BrokerConfig) -> list[DescribedConfig]:
        """DescribeConfigs entries for every (non-internal) topic config."""
        return [self._describe_key(key, broker) for key in TOPIC_CONFIG_DEF if not key.internal]

    def _describe_key(self, key: ConfigKey, broker: BrokerConfig) -> DescribedConfig:
        value = format_value(key.type, self.value_of(key.name))
        default = _FORMATTED_DEFAULTS[key.name]
        synonyms = self._synonyms(key, value, broker)
        return DescribedConfig(
            name=key.name,
            value=value,
            default=default,
            source=synonyms[0].source if synonyms else ConfigSource.DEFAULT_CONFIG,
            read_only=key.read_only,
            sensitive=key.sensitive,
            synonyms=tuple(synonyms),
            documentation=key.documentation,
            type=key.type,
        )

    def _synonyms(self, key: ConfigKey, value: str | None, broker: BrokerConfig) -> list[DescribedSynonym]:
        """Kafka's synonym list, most specific first: topic override, broker settings, default."""
        synonyms: list[DescribedSynonym] = []
        if key.name in self.overrides:
            synonyms.append(DescribedSynonym(key.name, value, ConfigSource.TOPIC_CONFIG))
        for synonym in key.synonyms:
            if synonym.name in broker.explicit_keys:
                broker_key = BROKER_CONFIG_DEF[synonym.name]
                raw = format_value(broker_key.type, broker.value_of(synonym.name))
                synonyms.append(DescribedSynonym(synonym.name, raw, ConfigSource.STATIC_BROKER_CONFIG))
        default_source = _DEFAULT_SUPPLIERS[key.name]
        if default_source is not None:
            name, default = default_source
            synonyms.append(DescribedSynonym(name, default, ConfigSource.DEFAULT_CONFIG))
        return synonyms


def _default_supplier(key: ConfigKey) -> tuple[str, str | None] | None:
    """The config whose built-in default applies when nothing is set: a broker synonym, else the key."""
    for synonym in key.synonyms:
        broker_key = BROKER_CONFIG_DEF[synonym.name]
        if broker_key.default is not None:
            return broker_key.name, format_value(broker_key.type, broker_key.default)
    if key.default is not None:
        return key.name, format_value(key.type, key.default)
    return None


# Per topic config, from the definitions alone: its default in Kafka's string form, and its default's supplier.
_FORMATTED_DEFAULTS = {key.name: format_value(key.type, key.default) for key in TOPIC_CONFIG_DEF}
_DEFAULT_SUPPLIERS = {key.name: _default_supplier(key) for key in TOPIC_CONFIG_DEF}


def _check_compaction_lags(values: Mapping[str, Any]) -> None:
    low, high = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if low > high:
        raise ConfigError(
            "min.compaction.lag.ms", low,
            f"conflict topic config setting min.compaction.lag.ms ({low}) > max.compaction.lag.ms ({high})",
        )


TopicConfig = build_model("TopicConfig", _TopicConfigBase, TOPIC_CONFIG_DEF, __name__)
TopicConfig.__doc__ = "Frozen effective topic configuration; build it with TopicConfig.resolve(broker, overrides)."
