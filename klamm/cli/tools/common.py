"""Helpers shared by the network tools: option parsing and client configuration."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

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
        conf.update(load_properties(args.client_config_file))
    conf.update(dict(overrides or []))
    conf["bootstrap.servers"] = args.bootstrap_server
    return conf


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
