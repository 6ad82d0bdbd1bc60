"""Typed broker and topic configuration with Kafka's names, defaults and validation."""

from klamm.config.broker import BrokerConfig
from klamm.config.broker_keys import BROKER_CONFIG_DEF
from klamm.config.definition import (
    ConfigDef,
    ConfigKey,
    ConfigSource,
    ConfigType,
    DescribedConfig,
    DescribedSynonym,
    Importance,
)
from klamm.config.errors import ConfigError
from klamm.config.properties import load_properties, parse_properties
from klamm.config.topic import TOPIC_CONFIG_NAMES, TopicConfig, validate_topic_overrides
from klamm.config.topic_keys import TOPIC_CONFIG_DEF

__all__ = [
    "BROKER_CONFIG_DEF",
    "BrokerConfig",
    "ConfigDef",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigType",
    "DescribedConfig",
    "DescribedSynonym",
    "Importance",
    "TOPIC_CONFIG_DEF",
    "TOPIC_CONFIG_NAMES",
    "TopicConfig",
    "load_properties",
    "parse_properties",
    "validate_topic_overrides",
]
