"""Helpers shared by the network tools: option parsing and client configuration.

A client properties file may hold a Java client's SASL settings, as Kafka's
tools take them: `security.protocol` and `sasl.mechanism` are librdkafka's
names too, and `sasl.jaas.config` with PlainLoginModule or ScramLoginModule
becomes librdkafka's `sasl.username` and `sasl.password` (its `username` and
`password` options). Another login module is refused with the reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from klamm.config.properties import load_properties


class ToolError(Exception):
    """A user-facing error: the tool prints the message and exits with 1."""


def key_value(text: str) -> tuple[str, str]:
    """argparse type for `key=value` (the value may be empty or contain '=')."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


def add_bootstrap(parser: argparse.ArgumentParser, config_flag: str = "--command-config") -> None:
    """--bootstrap-server (required) and a client properties file, as every Kafka tool has."""
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT[,...]",
                        help="the broker(s) to connect to")
    parser.add_argument(config_flag, dest="client_config_file", type=Path, metavar="FILE",
                        help="a properties file of client configs (librdkafka names)")


def client_config(args: argparse.Namespace, defaults: dict[str, str] | None = None,
                  overrides: list[tuple[str, str]] | None = None) -> dict[str, str]:
    """librdkafka config: defaults < properties file < overrides < --bootstrap-server."""
    conf = dict(defaults or {})
    if getattr(args, "client_config_file", None):
        conf.update(librdkafka_sasl(load_properties(args.client_config_file)))
    conf.update(dict(overrides or []))
    if "debug" not in conf:
        # librdkafka logs its notices (level 6, e.g. a purged background queue at exit) on stderr; Kafka's
        # tools log warnings and errors only, and scripts read a tool's stderr.
        conf.setdefault("log_level", "4")
    conf["bootstrap.servers"] = args.bootstrap_server
    return conf


def librdkafka_sasl(properties: dict[str, str]) -> dict[str, str]:
    """`properties` with a Java client's sasl.jaas.config turned into sasl.username / sasl.password
    (ToolError for a login module librdkafka has no counterpart of, or a config that does not parse)."""
    jaas = properties.get("sasl.jaas.config")
    if jaas is None:
        return properties
    from klamm.protocol.sasl import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config

    try:
        entry = parse_jaas_config(jaas)
    except ValueError as exc:
        raise ToolError(f"sasl.jaas.config: {exc}") from None
    if entry.login_module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
        raise ToolError(f"sasl.jaas.config: login module {entry.login_module} has no librdkafka counterpart "
                        "(PlainLoginModule and ScramLoginModule are translated)")
    if "username" not in entry.options or "password" not in entry.options:
        raise ToolError("sasl.jaas.config: the username and password options are required")
    translated = {k: v for k, v in properties.items() if k != "sasl.jaas.config"}
    translated.setdefault("sasl.username", entry.options["username"])
    translated.setdefault("sasl.password", entry.options["password"])
    return translated


def peer_security_of(args: argparse.Namespace) -> Any:
    """The PeerSecurity of klamm's own client (the tools that speak the protocol themselves) from the
    --command-config properties: security.protocol; sasl.mechanism PLAIN or SCRAM with sasl.username /
    sasl.password or a Java sasl.jaas.config; the CA file (ssl.ca.location, or a PEM ssl.truststore.location),
    a client certificate (ssl.certificate.location and ssl.key.location, or a PEM ssl.keystore.location) and
    ssl.endpoint.identification.algorithm (https by default, as in Kafka's clients)."""
    import ssl

    from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity

    config_file = getattr(args, "client_config_file", None)
    if config_file is None:
        return PLAINTEXT_PEER
    properties = librdkafka_sasl(load_properties(config_file))
    protocol = properties.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ToolError(f"security.protocol={protocol} is not a security protocol")
    tls = None
    if protocol in ("SSL", "SASL_SSL"):
        ca = properties.get("ssl.ca.location") or properties.get("ssl.truststore.location")
        tls = ssl.create_default_context(cafile=ca)
        certificate = properties.get("ssl.certificate.location") or properties.get("ssl.keystore.location")
        if certificate:
            tls.load_cert_chain(certificate, properties.get("ssl.key.location"),
                                properties.get("ssl.key.password") or None)
        algorithm = properties.get("ssl.endpoint.identification.algorithm", "https").strip()
        tls.check_hostname = algorithm not in ("", "none")
    if not protocol.startswith("SASL_"):
        return PeerSecurity(protocol, tls)
    mechanism = properties.get("sasl.mechanism", "GSSAPI").strip().upper()
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        raise ToolError(f"sasl.mechanism={mechanism}: this tool authenticates with PLAIN, SCRAM-SHA-256 or "
                        "SCRAM-SHA-512")
    if "sasl.username" not in properties or "sasl.password" not in properties:
        raise ToolError("SASL needs sasl.username and sasl.password (or a sasl.jaas.config with both)")
    return PeerSecurity(protocol, tls, mechanism, properties["sasl.username"], properties["sasl.password"])


def admin_config(args: argparse.Namespace) -> dict[str, str]:
    # Fail within seconds against an unreachable broker instead of librdkafka's minutes.
    return client_config(args, {"socket.timeout.ms": "10000", "client.id": "klamm-admin"})


def error(message: str) -> int:
    print(message, file=sys.stderr)
    return 1


def kafka_error_message(exc: BaseException) -> str:
    """The message of a KafkaException (its KafkaError's str()), else str(exc)."""
    if exc.args and hasattr(exc.args[0], "str"):
        return exc.args[0].str()
    return str(exc)


def kafka_error_name(exc: BaseException) -> str | None:
    if exc.args and hasattr(exc.args[0], "name"):
        return exc.args[0].name()
    return None
