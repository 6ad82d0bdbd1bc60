"""A listener's JAAS entry for one SASL mechanism, read as Kafka's brokers read it:
listener.name.<listener>.<mechanism>.sasl.jaas.config (or listener.name.<listener>.sasl.jaas.config), one login
module. The server side takes its users from it (PLAIN's user_<name> options), the client side of inter-broker
and controller connections its own username and password, OAUTHBEARER its validator's options."""

from __future__ import annotations

from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from klamm.protocol.sasl import JaasEntry, parse_jaas_config

__all__ = ["listener_jaas_entry"]


def listener_jaas_entry(config: BrokerConfig, listener: str, mechanism: str, login_module: str, why: str,
                        example: str = "") -> tuple[str, JaasEntry]:
    """(the key's name, the entry); ConfigError, naming the key, when it is missing, malformed or another module.
    `why` and `example` (the options to show) make the message for a missing one."""
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = config.listener_value(listener, "sasl.jaas.config", mechanism)
    if not (text or "").strip():
        raise ConfigError(key, "", f"{why}: set {key} to {login_module} required{' ' + example if example else ''};")
    try:
        entry = parse_jaas_config(text or "")
    except ValueError as exc:
        raise ConfigError(key, "(hidden)", str(exc)) from exc
    if entry.login_module != login_module:
        raise ConfigError(key, "(hidden)", f"{mechanism} needs {login_module}, not {entry.login_module}")
    return key, entry
