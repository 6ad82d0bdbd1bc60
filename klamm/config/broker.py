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
import re
from functools import cached_property
from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field

from klamm.config.broker_keys import BROKER_CONFIG_DEF, SECURITY_PROTOCOLS, check_consumer_group_bounds
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

__all__ = ["BrokerConfig", "LISTENER_PREFIX", "inter_broker_listener", "parse_listener"]

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
            _check_single_node(values, frozenset(explicit))
        check_consumer_group_bounds(values)
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

    def controller_listener_name_set(self) -> set[str]:
        return {n.strip().upper() for n in (self.controller_listener_names or "").split(",") if n.strip()}

    def client_listeners(self) -> list[tuple[str, str, int]]:
        """The broker's own listeners, as (name, host, port) in the order of `listeners`: every one
        that is not a controller's (controller.listener.names)."""
        controllers = self.controller_listener_name_set()
        return [e for e in (parse_listener(listener) for listener in self.listeners) if e[0] not in controllers]

    def advertised_listener(self, name: str) -> tuple[str, int] | None:
        """(host, port) advertised.listeners gives listener `name` (an empty host or port 0: the bound one)."""
        for listener in self.advertised_listeners or self.listeners:
            advertised, host, port = parse_listener(listener, "advertised.listeners")
            if advertised == name:
                return host, port
        return None

    @property
    def inter_broker_listener(self) -> str:
        """The listener other brokers reach this one on (inter.broker.listener.name, else the listener
        named after security.inter.broker.protocol, as Kafka)."""
        return inter_broker_listener({"inter.broker.listener.name": self.inter_broker_listener_name,
                                      "security.inter.broker.protocol": self.security_inter_broker_protocol})[0]

    @cached_property
    def topic_base(self) -> Mapping[str, Any]:
        """Every topic config's value where a topic sets none (Kafka name -> parsed value): the broker's
        defaults over the built-in ones. Made once per config (a config is never changed, only replaced): each
        topic's config starts from it."""
        base = TOPIC_CONFIG_DEF.defaults()
        base.update(TOPIC_CONFIG_DEF.parse(self.topic_defaults()))
        return base

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


def _check_single_node(values: Mapping[str, Any], explicit: frozenset[str] = frozenset()) -> None:
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
    _check_listeners(values, controllers, explicit, broker_only=roles == ["broker"],
                     alone=roles != ["broker"] and len(voters) <= 1)


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
        if protocols.get(name) not in SECURITY_PROTOCOLS:
            raise ConfigError("listeners", ",".join(values["listeners"]),
                              f"listener {name} uses {protocols.get(name)}, which is not a security protocol: "
                              f"{', '.join(SECURITY_PROTOCOLS)}")


def _voter(entry: str) -> tuple[int, str]:
    voter_id, at, address = entry.partition("@")
    if not at or not voter_id.strip().isdigit() or ":" not in address:
        raise ConfigError("controller.quorum.voters", entry, "Expected an entry of the form id@host:port")
    return int(voter_id), address.strip()


def _check_listeners(values: Mapping[str, Any], controllers: set[str], explicit: frozenset[str], *,
                     broker_only: bool, alone: bool) -> None:
    """Kafka's checks of a broker's listeners (CoreUtils.listenerListToEndPoints, KafkaConfig.validateValues):
    names and ports unique, each with a security protocol, advertised.listeners a subset, and the
    inter-broker listener among them; a node `alone` (no other broker to reach) needs no inter-broker
    listener."""
    listeners = values["listeners"]
    text = ",".join(listeners)
    endpoints = [_endpoint("listeners", listener) for listener in listeners]
    names = [name for name, _, _ in endpoints]
    _check_distinct("listeners", text, endpoints, ports=True)
    protocols = _protocol_map(values["listener.security.protocol.map"])
    for name in names:
        if name not in protocols:
            raise ConfigError("listeners", text, f"No security protocol defined for listener {name}")
        if protocols[name] not in SECURITY_PROTOCOLS:
            raise ConfigError("listeners", text, f"listener {name} uses {protocols[name]}, which is not a security "
                                                 f"protocol: {', '.join(SECURITY_PROTOCOLS)}")
    if broker_only and any(n in controllers for n in names):
        raise ConfigError("controller.listener.names", ",".join(sorted(controllers)),
                          "controller.listener.names must not contain a value appearing in the 'listeners' "
                          "configuration when running KRaft with just the broker role")
    clients = [n for n in names if n not in controllers]
    if not clients:
        raise ConfigError("listeners", text, "process.roles contains broker, but every listener is a controller "
                                             "listener (controller.listener.names): clients would have none")
    advertised_text = ",".join(values["advertised.listeners"])
    advertised = [_endpoint("advertised.listeners", a) for a in values["advertised.listeners"]]
    _check_distinct("advertised.listeners", advertised_text, advertised, ports=False)
    unknown = {name for name, _, _ in advertised} - set(names)
    if unknown:
        raise ConfigError("advertised.listeners", advertised_text,
                          "advertised.listeners listener names must be equal to or a subset of the ones defined in "
                          f"listeners. Found {','.join(n for n, _, _ in advertised)}. The valid options based on the "
                          f"current configuration are {','.join(names)}")
    name, explicit_name = inter_broker_listener(values)
    if explicit_name and "security.inter.broker.protocol" in explicit:
        raise ConfigError("inter.broker.listener.name", values["inter.broker.listener.name"],
                          "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set.")
    if explicit_name and name not in protocols:
        raise ConfigError("inter.broker.listener.name", values["inter.broker.listener.name"],
                          f"Listener with name {name} defined in inter.broker.listener.name not found in "
                          "listener.security.protocol.map.")
    advertised_clients = [n for n, _, _ in advertised if n not in controllers]
    if name not in advertised_clients and (explicit_name or not alone):
        key = "inter.broker.listener.name" if explicit_name else "security.inter.broker.protocol"
        raise ConfigError(key, name, "inter.broker.listener.name must be a listener name defined in "
                                     "advertised.listeners. The valid options based on currently configured "
                                     f"listeners are {','.join(advertised_clients)}")


def inter_broker_listener(values: Mapping[str, Any]) -> tuple[str, bool]:
    """(the listener brokers reach each other on, whether inter.broker.listener.name names it): Kafka's
    default is the listener named after security.inter.broker.protocol (PLAINTEXT)."""
    explicit = values["inter.broker.listener.name"]
    if explicit:
        return explicit.strip().upper(), True
    return values["security.inter.broker.protocol"].strip().upper(), False


def parse_listener(listener: str, key: str = "listeners") -> tuple[str, str, int]:
    """'PLAINTEXT://host:port' -> (name, host, port); an empty host binds every interface."""
    match = _LISTENER.match(listener.strip())
    if match is None or not 0 <= int(match["port"]) <= 65535:
        raise ConfigError(key, listener, "expected NAME://host:port")
    return match["name"].upper(), match["host"], int(match["port"])


# Kafka's listener syntax: a name (SASL_SSL has an underscore, which URL schemes may not), then host:port
_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_.+-]+)://\[?(?P<host>[0-9a-zA-Z\-%._:]*?)\]?:(?P<port>[0-9]+)$")


def _endpoint(key: str, listener: str) -> tuple[str, str, int]:
    return parse_listener(listener, key)


def _check_distinct(key: str, text: str, endpoints: list[tuple[str, str, int]], *, ports: bool) -> None:
    """Kafka's CoreUtils.listenerListToEndPoints: a name once; a port once (0, an ephemeral port, aside)."""
    prefix = f"Error creating broker listeners from '{text}': "
    names = [name for name, _, _ in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(key, text, f"{prefix}Each listener must have a different name, listeners: {text}")
    bound = [port for _, _, port in endpoints if port != 0]
    if ports and len(set(bound)) != len(bound):
        port = next(p for p in bound if bound.count(p) > 1)
        raise ConfigError(key, text, f"{prefix}Each listener must have a different port, listeners: {text}, "
                                     f"port: {port}")


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
