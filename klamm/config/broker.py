"""BrokerConfig: the typed, frozen broker configuration.

Fields are generated from BROKER_CONFIG_DEF (python name = Kafka name with
dots/dashes as underscores; the pydantic alias is the Kafka name). Build it
with `BrokerConfig.from_properties(props)`, which parses strings with Kafka's
rules, applies Kafka's fallbacks (log.retention.ms > .minutes > .hours,
log.dirs > log.dir, advertised.listeners > listeners, broker.id <-> node.id)
and raises ConfigError naming the key on bad values. Unknown keys are kept in
`unknown_properties` and otherwise ignored (Kafka only logs them).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from klamm.config.broker_keys import BROKER_CONFIG_DEF, SECURITY_PROTOCOLS
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

__all__ = ["BrokerConfig", "LISTENER_PREFIX"]

LISTENER_PREFIX = "listener.name."

log = logging.getLogger(__name__)


class _BrokerConfigBase(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    # Bookkeeping, not Kafka configs: what the operator actually wrote.
    explicit_keys: frozenset[str] = Field(default=frozenset(), exclude=True)
    unknown_properties: dict[str, str] = Field(default_factory=dict, exclude=True)
    # Kafka's listener-prefixed keys (listener.name.<listener>[.<mechanism>].<key>), as written
    listener_properties: dict[str, str] = Field(default_factory=dict, exclude=True)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, check_support: bool = True) -> "BrokerConfig":
        """Build from raw Kafka properties (e.g. a parsed server.properties).

        Values klamm cannot honour (see Support) raise ConfigError, so nothing is
        accepted and ignored. `check_support=False` only re-reads values that were
        checked when they were set.
        """
        prefixed = {k: v for k, v in props.items() if k.startswith(LISTENER_PREFIX)}
        unknown = {k: v for k, v in props.items() if k not in BROKER_CONFIG_DEF and k not in prefixed}
        for key in unknown:
            log.warning("The configuration '%s' was supplied but isn't a known config.", key)
        explicit = BROKER_CONFIG_DEF.parse(props)
        if check_support:
            for name, value in explicit.items():
                BROKER_CONFIG_DEF[name].check_supported(value, props[name])
        values = BROKER_CONFIG_DEF.defaults()
        values.update(explicit)
        _apply_fallbacks(values, explicit)
        if check_support:
            _check_single_node(values)
        fields = {BROKER_CONFIG_DEF[name].attr: value for name, value in values.items()}
        return cls(**fields, explicit_keys=frozenset(explicit), unknown_properties=dict(unknown),  # type: ignore[return-value]
                   listener_properties=prefixed)

    def value_of(self, name: str) -> Any:
        """The current value of a broker config, by Kafka name."""
        return getattr(self, BROKER_CONFIG_DEF[name].attr)

    def listener_value(self, listener_name: str, key: str, mechanism: str | None = None) -> str | None:
        """A key as a listener sees it: listener.name.<listener>.<mechanism>.<key>, then
        listener.name.<listener>.<key> (both lower case, as Kafka spells them), else None."""
        prefix = f"{LISTENER_PREFIX}{listener_name.lower()}."
        if mechanism is not None:
            value = self.listener_properties.get(f"{prefix}{mechanism.lower()}.{key}")
            if value is not None:
                return value
        return self.listener_properties.get(prefix + key)

    def security_protocol_of(self, listener_name: str) -> str:
        """The protocol listener.security.protocol.map gives a listener (PLAINTEXT, SSL, ...)."""
        return _protocol_map(self.listener_security_protocol_map).get(listener_name.upper(), "PLAINTEXT")

    def topic_defaults(self) -> dict[str, str]:
        """Broker-level defaults of every topic config that has a broker synonym, keyed by topic name."""
        defaults: dict[str, str] = {}
        for key in TOPIC_CONFIG_DEF:
            resolved = self._topic_default(key)
            if resolved is not None:
                defaults[key.name] = format_value(key.type, resolved[1])  # type: ignore[assignment]
        return defaults

    def topic_default_source(self, topic_key: str) -> tuple[str, ConfigSource] | None:
        """Which broker config supplies a topic default, and whether it was set explicitly."""
        resolved = self._topic_default(TOPIC_CONFIG_DEF[topic_key])
        if resolved is None:
            return None
        name = resolved[0]
        source = ConfigSource.STATIC_BROKER_CONFIG if name in self.explicit_keys else ConfigSource.DEFAULT_CONFIG
        return name, source

    def _topic_default(self, key: ConfigKey) -> tuple[str, Any] | None:
        """(supplying broker config name, value) for a topic config's broker default.

        The first synonym's field already holds the resolved value (see
        _apply_fallbacks); the name is the synonym that actually supplied it.
        """
        if not key.synonyms:
            return None
        value = self.value_of(key.synonyms[0].name)
        for synonym in key.synonyms:
            if synonym.name in self.explicit_keys:
                return synonym.name, value
        for synonym in key.synonyms:
            if BROKER_CONFIG_DEF[synonym.name].default is not None:
                return synonym.name, value
        return key.synonyms[0].name, value

    def describe(self, include_internal: bool = False) -> list[DescribedConfig]:
        """DescribeConfigs entries for every broker config (all read-only: no dynamic configs yet)."""
        return [self._describe_key(k) for k in BROKER_CONFIG_DEF if include_internal or not k.internal]

    def _describe_key(self, key: ConfigKey) -> DescribedConfig:
        value = None if key.sensitive else format_value(key.type, self.value_of(key.name))
        default = format_value(key.type, key.default)
        synonyms: list[DescribedSynonym] = []
        explicit = key.name in self.explicit_keys
        if explicit:
            synonyms.append(DescribedSynonym(key.name, value, ConfigSource.STATIC_BROKER_CONFIG))
        if default is not None:
            synonyms.append(DescribedSynonym(key.name, None if key.sensitive else default, ConfigSource.DEFAULT_CONFIG))
        return DescribedConfig(
            name=key.name,
            value=value,
            default=default,
            source=ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG,
            read_only=key.read_only,
            sensitive=key.sensitive,
            synonyms=tuple(synonyms),
            documentation=key.documentation,
            type=key.type,
        )


def _scaled(value: Any, scale: int) -> Any:
    if value is None or scale == 1:
        return value
    return value * scale


def _apply_fallbacks(values: dict[str, Any], explicit: Mapping[str, Any]) -> None:
    """Fill derived keys from their fallbacks, exactly as Kafka's KafkaConfig does."""
    for key in TOPIC_CONFIG_DEF:
        if len(key.synonyms) > 1:
            values[key.synonyms[0].name] = _first_synonym(key, values, explicit)
    # Kafka: any negative retention time means "unlimited" and is reported as -1.
    if values["log.retention.ms"] < 0:
        values["log.retention.ms"] = -1
    if values["log.dirs"] is None:
        values["log.dirs"] = [values["log.dir"]]
    if values["advertised.listeners"] is None:
        values["advertised.listeners"] = list(values["listeners"])
    _resolve_ids(values, explicit)


def _check_single_node(values: Mapping[str, Any]) -> None:
    """Refuse roles, quorums and listeners klamm cannot honour (KRaft's rules, one controller)."""
    roles = sorted(set(values["process.roles"]))
    node_id = values["node.id"]
    voters = [_voter(v) for v in values["controller.quorum.voters"]]
    controllers = {n.strip().upper() for n in (values["controller.listener.names"] or "").split(",") if n.strip()}
    if roles not in (["broker"], ["controller"], ["broker", "controller"]):
        raise ConfigError("process.roles", ",".join(values["process.roles"]),
                          "process.roles takes broker, controller, or both")
    if roles == ["broker"]:
        if not voters:
            raise ConfigError("controller.quorum.voters", "",
                              "process.roles=broker needs controller.quorum.voters naming the controller")
        if any(voter_id == node_id for voter_id, _ in voters):
            raise ConfigError("controller.quorum.voters", ",".join(values["controller.quorum.voters"]),
                              f"If process.roles contains just the 'broker' role, the node id {node_id} must not "
                              "be included in the set of voters controller.quorum.voters")
        if not controllers:
            raise ConfigError("controller.listener.names", "",
                              "controller.listener.names must contain at least one value when running in KRaft mode")
    elif voters and all(voter_id != node_id for voter_id, _ in voters):
        raise ConfigError("controller.quorum.voters", ",".join(values["controller.quorum.voters"]),
                          f"a controller must be one of the voters: node {node_id} is not")
    if roles == ["controller"]:
        _check_controller_only(values, voters, controllers)
        return
    _check_listeners(values["listeners"], controllers, values["listener.security.protocol.map"],
                     broker_only=roles == ["broker"], alone=roles != ["broker"] and len(voters) <= 1)


def _check_controller_only(values: Mapping[str, Any], voters: list[tuple[int, str]], controllers: set[str]) -> None:
    """A dedicated controller (process.roles=controller): a voter, with controller listeners only (KRaft's rules)."""
    if not voters:
        raise ConfigError("controller.quorum.voters", "",
                          "process.roles=controller needs controller.quorum.voters naming this node")
    if not controllers:
        raise ConfigError("controller.listener.names", "",
                          "controller.listener.names must contain at least one value when running in KRaft mode")
    names = [listener.partition("://")[0].strip().upper() for listener in values["listeners"] if "://" in listener]
    others = [n for n in names if n not in controllers]
    if others or not names:
        raise ConfigError("listeners", ",".join(values["listeners"]),
                          "The listeners config must only contain KRaft controller listeners from "
                          "controller.listener.names when process.roles=controller")
    protocols = _protocol_map(values["listener.security.protocol.map"])
    for name in names:
        if protocols.get(name) != "PLAINTEXT":
            raise ConfigError("listeners", ",".join(values["listeners"]),
                              f"listener {name} uses {protocols.get(name)}, but klamm serves PLAINTEXT only")


def _voter(entry: str) -> tuple[int, str]:
    voter_id, at, address = entry.partition("@")
    if not at or not voter_id.strip().isdigit() or ":" not in address:
        raise ConfigError("controller.quorum.voters", entry, "Expected an entry of the form id@host:port")
    return int(voter_id), address.strip()


def _check_listeners(listeners: list[str], controllers: set[str], protocol_map: str, *, broker_only: bool,
                     alone: bool) -> None:
    """The first listener is the broker's (PLAINTEXT, or SSL on a node `alone`: one with no other broker to
    reach); a controller's own listeners may follow it (PLAINTEXT)."""
    names = [listener.partition("://")[0].strip().upper() for listener in listeners if "://" in listener]
    if not names:
        return  # the broker reports a malformed listener when it parses it
    protocols = _protocol_map(protocol_map)
    if names[0] in controllers:
        raise ConfigError("listeners", ",".join(listeners),
                          f"the first listener is the one klamm serves, but {names[0]} is a controller listener")
    for name in names:
        if name not in protocols:
            raise ConfigError("listeners", ",".join(listeners), f"No security protocol defined for listener {name}")
    if protocols[names[0]] != "PLAINTEXT" and not alone:
        raise ConfigError("listeners", ",".join(listeners),
                          f"listener {names[0]} uses {protocols[names[0]]}, which klamm serves on a single node only: "
                          "its brokers and controllers reach each other in PLAINTEXT")
    if protocols[names[0]] not in SECURITY_PROTOCOLS:
        raise ConfigError("listeners", ",".join(listeners),
                          f"listener {names[0]} uses {protocols[names[0]]}, which is not a security protocol: "
                          f"{', '.join(SECURITY_PROTOCOLS)}")
    for name in (n for n in names[1:] if n in controllers):
        if protocols[name] != "PLAINTEXT":
            raise ConfigError("listeners", ",".join(listeners),
                              f"listener {name} uses {protocols[name]}, but klamm's controllers speak PLAINTEXT only")
    if broker_only and any(n in controllers for n in names):
        raise ConfigError("controller.listener.names", ",".join(sorted(controllers)),
                          "controller.listener.names must not contain a value appearing in the 'listeners' "
                          "configuration when running KRaft with just the broker role")
    extra = [n for n in names[1:] if n not in controllers]
    if extra:
        raise ConfigError("listeners", ",".join(listeners),
                          f"klamm serves one listener ({names[0]}); {', '.join(extra)} would not be bound")


def _protocol_map(text: str) -> dict[str, str]:
    """listener.security.protocol.map 'NAME:PROTOCOL,...' -> {NAME: PROTOCOL}."""
    result: dict[str, str] = {}
    for entry in (e.strip() for e in text.split(",") if e.strip()):
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError("listener.security.protocol.map", text, f"Expected NAME:PROTOCOL entries, got {entry}")
        result[name.strip().upper()] = protocol.strip().upper()
    return result


def _first_synonym(key: ConfigKey, values: Mapping[str, Any], explicit: Mapping[str, Any]) -> Any:
    """Value of the highest-priority synonym that is set (explicitly first, then by default)."""
    for synonym in key.synonyms:
        if synonym.name in explicit and explicit[synonym.name] is not None:
            return _scaled(explicit[synonym.name], synonym.scale)
    for synonym in key.synonyms:
        if values[synonym.name] is not None:
            return _scaled(values[synonym.name], synonym.scale)
    return None


def _resolve_ids(values: dict[str, Any], explicit: Mapping[str, Any]) -> None:
    broker_id, node_id = values["broker.id"], values["node.id"]
    if "node.id" not in explicit and broker_id >= 0:
        values["node.id"] = broker_id
    elif broker_id < 0:
        values["broker.id"] = node_id
    elif broker_id != node_id:
        raise ConfigError("broker.id", broker_id, f"broker.id must be equal to node.id ({node_id}) when both are set")
    if values["node.id"] < 0:
        raise ConfigError("node.id", values["node.id"], "Missing required configuration node.id which has no default value.")


BrokerConfig = build_model("BrokerConfig", _BrokerConfigBase, BROKER_CONFIG_DEF, __name__)
BrokerConfig.__doc__ = "Frozen broker configuration; build it with BrokerConfig.from_properties(props)."
