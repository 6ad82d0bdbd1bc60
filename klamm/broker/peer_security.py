"""How a node secures its own connections to other nodes: TLS and SASL on the client side.

A broker reaches other brokers on `inter.broker.listener.name` (replica fetchers,
transaction markers, the transaction verifier), and the controllers on the first
of `controller.listener.names` (registration, heartbeats, the metadata log,
forwarded writes, and Raft between voters). Whatever that listener's security
protocol asks of a client, the node does, as Kafka's broker does:

- SSL / SASL_SSL: TLS verified against `ssl.truststore.*` (the system's CAs
  without one), the host name checked unless `ssl.endpoint.identification.algorithm`
  is empty, and the node's `ssl.keystore.*` as its certificate when it has one
  (mutual TLS);
- SASL_PLAINTEXT / SASL_SSL: the mechanism `sasl.mechanism.inter.broker.protocol`
  (or `sasl.mechanism.controller.protocol`), PLAIN or SCRAM-SHA-256/512, with the
  `username` and `password` options of that listener's
  `listener.name.<listener>.<mechanism>.sasl.jaas.config` — the same entry whose
  `user_<name>` options (PLAIN) list the users the listener accepts.

The other side authorizes the principal it authenticated: inter-broker requests
need CLUSTER_ACTION on the cluster, which `super.users` usually grants.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from klamm.broker.tls import client_context
from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from klamm.broker.jaas import listener_jaas_entry
from klamm.protocol.sasl import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, SCRAM_MECHANISMS
from klamm.protocol.sasl_client import SaslClient, sasl_client

__all__ = ["PLAINTEXT_PEER", "PeerSecurity", "controller_security", "inter_broker_security"]

_LOGIN_MODULES = {"PLAIN": PLAIN_LOGIN_MODULE, **{m: SCRAM_LOGIN_MODULE for m in SCRAM_MECHANISMS}}


@dataclass(frozen=True)
class PeerSecurity:
    """What a connection to another node goes through: TLS (a client context) and SASL (mechanism, credentials)."""

    protocol: str = "PLAINTEXT"
    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)

    def sasl_client(self) -> SaslClient:
        assert self.mechanism is not None
        return sasl_client(self.mechanism, self.username, self.password)


PLAINTEXT_PEER = PeerSecurity()


def inter_broker_security(config: BrokerConfig) -> PeerSecurity:
    """How this broker connects to the others (ConfigError when its listener asks what it cannot do)."""
    return _peer_security(config, config.inter_broker_listener, "sasl.mechanism.inter.broker.protocol",
                          config.sasl_mechanism_inter_broker_protocol)


def controller_security(config: BrokerConfig) -> PeerSecurity:
    """How this node connects to the controllers: their listener is the first of controller.listener.names."""
    names = [n.strip().upper() for n in (config.controller_listener_names or "").split(",") if n.strip()]
    if not names:
        return PLAINTEXT_PEER
    security = _peer_security(config, names[0], "sasl.mechanism.controller.protocol",
                              config.sasl_mechanism_controller_protocol)
    quorum_voter = "controller" in config.process_roles and len(config.controller_quorum_voters) > 1
    if quorum_voter and security.mechanism in SCRAM_MECHANISMS:
        raise ConfigError("sasl.mechanism.controller.protocol", security.mechanism,
                          "the controllers of a quorum must authenticate to each other before anything is committed, "
                          "SCRAM credentials included (they live in the metadata log): use PLAIN or TLS between "
                          "controllers, as with Kafka")
    return security


def _peer_security(config: BrokerConfig, listener: str, mechanism_key: str, mechanism: str) -> PeerSecurity:
    protocol = config.security_protocol_of(listener)
    tls = client_context(config) if protocol in ("SSL", "SASL_SSL") else None
    if not protocol.startswith("SASL_"):
        return PeerSecurity(protocol, tls)
    mechanism = mechanism.strip().upper()
    if mechanism not in _LOGIN_MODULES:
        raise ConfigError(mechanism_key, mechanism, f"listener {listener} uses {protocol}: klamm authenticates "
                          f"to it with {', '.join(_LOGIN_MODULES)}; set {mechanism_key}")
    username, password = _credentials(config, listener, mechanism)
    return PeerSecurity(protocol, tls, mechanism, username, password)


def _credentials(config: BrokerConfig, listener: str, mechanism: str) -> tuple[str, str]:
    """The username and password options of listener.name.<listener>.<mechanism>.sasl.jaas.config."""
    key, entry = listener_jaas_entry(config, listener, mechanism, _LOGIN_MODULES[mechanism],
                                     f"a node authenticates to listener {listener} with {mechanism}",
                                     'username="<name>" password="<password>"')
    username, password = entry.options.get("username"), entry.options.get("password")
    if not username or password is None:
        raise ConfigError(key, "(hidden)", f"the node's own credentials for {mechanism} on listener {listener} are "
                          "the username and password options of this entry; one is missing")
    return username, password
