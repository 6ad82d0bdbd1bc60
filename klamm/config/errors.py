"""The single error type of the config package.

Messages follow Kafka's ConfigException wording so that operators (and
DescribeConfigs / CreateTopics error messages) read the same as with Kafka.
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A configuration value (or name) was rejected.

    `key` is the offending configuration name, `value` the raw value (None when
    the name itself is the problem), `message` the reason. `unknown` is True when
    the name is not a known config (Kafka: "Unknown topic config name").
    """

    def __init__(self, key: str, value: object | None, message: str, *, unknown: bool = False) -> None:
        self.key = key
        self.value = value
        self.message = message
        self.unknown = unknown
        super().__init__(self._render())

    @classmethod
    def unknown_key(cls, key: str, kind: str = "topic") -> "ConfigError":
        return cls(key, None, f"Unknown {kind} config name: {key}", unknown=True)

    def _render(self) -> str:
        if self.unknown:
            return self.message
        return f"Invalid value {self.value} for configuration {self.key}: {self.message}"
