"""Per-group configs (KIP-848 "dynamic group configs"): the keys, their defaults, their checks.

A group's configs are ConfigRecords of resource type GROUP (32) in the metadata log,
set by (Incremental)AlterConfigs. Each key overrides a broker config for that group
only; a key the group does not set takes the broker's value. The checks are Kafka's
GroupConfig: only these names, each an INT of at least 1, within the broker's
group.consumer.min/max.* bounds, and the session longer than the heartbeat interval.
klamm has no share groups, so Kafka's share.* group keys are unknown names here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from klamm.config.errors import ConfigError

__all__ = ["CONSUMER_HEARTBEAT_INTERVAL_MS", "CONSUMER_SESSION_TIMEOUT_MS", "GROUP_CONFIG_BROKER_KEYS",
           "effective_group_configs", "validate_group_configs"]

CONSUMER_SESSION_TIMEOUT_MS = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL_MS = "consumer.heartbeat.interval.ms"

# Each group key and the broker key that supplies its default, in Kafka's declaration order
# (the order DescribeConfigs lists them and the order values are parsed).
GROUP_CONFIG_BROKER_KEYS: Mapping[str, str] = {
    CONSUMER_SESSION_TIMEOUT_MS: "group.consumer.session.timeout.ms",
    CONSUMER_HEARTBEAT_INTERVAL_MS: "group.consumer.heartbeat.interval.ms",
}


def effective_group_configs(broker_config: Any, overrides: Mapping[str, str]) -> dict[str, int]:
    """Every group key's value for one group: its override, else the broker's value.

    Overrides were validated when set; one that no longer parses (it cannot be written
    so) falls back to the broker's value rather than failing the group.
    """
    values = {}
    for name, broker_key in GROUP_CONFIG_BROKER_KEYS.items():
        value = int(broker_config.value_of(broker_key))
        text = overrides.get(name)
        if text is not None:
            try:
                value = int(text.strip())
            except ValueError:
                pass
        values[name] = value
    return values


def validate_group_configs(broker_config: Any, overrides: Mapping[str, str]) -> None:
    """Kafka's GroupConfigManager.validate of a group's resulting explicit configs; ConfigError to refuse."""
    for name in overrides:
        if name not in GROUP_CONFIG_BROKER_KEYS:
            raise ConfigError.unknown_key(name, "group")
    values: dict[str, int] = {}
    for name, broker_key in GROUP_CONFIG_BROKER_KEYS.items():
        text = overrides.get(name)
        if text is None:
            values[name] = int(broker_config.value_of(broker_key))
            continue
        try:
            value = int(text.strip())
        except ValueError:
            raise _invalid(name, text, "Not a number of type INT") from None
        if not -2**31 <= value < 2**31:
            raise _invalid(name, text, "Not a number of type INT")
        if value < 1:
            raise _invalid(name, text, "Value must be at least 1")
        values[name] = value

    # Kafka's GroupConfig.validateValues, in its order: the broker's bounds, then session > heartbeat.
    def bound(name: str, broker_key: str) -> None:
        limit = int(broker_config.value_of(broker_key))
        if broker_key.split(".")[2] == "min" and values[name] < limit:
            raise _message(f"{name} must be greater than or equal to {broker_key}")
        if broker_key.split(".")[2] == "max" and values[name] > limit:
            raise _message(f"{name} must be less than or equal to {broker_key}")

    bound(CONSUMER_HEARTBEAT_INTERVAL_MS, "group.consumer.min.heartbeat.interval.ms")
    bound(CONSUMER_HEARTBEAT_INTERVAL_MS, "group.consumer.max.heartbeat.interval.ms")
    bound(CONSUMER_SESSION_TIMEOUT_MS, "group.consumer.min.session.timeout.ms")
    bound(CONSUMER_SESSION_TIMEOUT_MS, "group.consumer.max.session.timeout.ms")
    if values[CONSUMER_SESSION_TIMEOUT_MS] <= values[CONSUMER_HEARTBEAT_INTERVAL_MS]:
        raise _message(f"{CONSUMER_SESSION_TIMEOUT_MS} must be greater than {CONSUMER_HEARTBEAT_INTERVAL_MS}")


class _GroupRuleError(ConfigError):
    """A refusal by a rule between values, whose text is Kafka's whole message (no "Invalid value ...")."""

    def __init__(self, key: str, text: str) -> None:
        self.text = text
        super().__init__(key, None, text)

    def __str__(self) -> str:
        return self.text


def _invalid(name: str, value: str, reason: str) -> ConfigError:
    return ConfigError(name, value, reason)  # "Invalid value <value> for configuration <name>: <reason>"


def _message(text: str) -> ConfigError:
    return _GroupRuleError(text.split(" ", 1)[0], text)
