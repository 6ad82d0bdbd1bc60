"""`klamm storage`: kafka-storage.sh (Kafka's StorageTool), offline.

    klamm storage random-uuid
    klamm storage format --cluster-id ID --config server.properties [--override k=v ...] [--ignore-formatted]
                         [--add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]' ...]
    klamm storage info --config server.properties

`format` writes `meta.properties` (version 1, node.id, cluster.id, a new
directory.id) into every log directory of the configuration, so that the nodes
of a cluster agree on its id before they first start; a node whose directories
name another cluster or node then refuses to start. An already formatted
directory is an error unless --ignore-formatted. Messages and exit codes are
Kafka's (1 on failure, the message on stderr). A single node started on empty
directories formats them itself, so `klamm serve` needs no format step.

--add-scram (repeatable) gives the new cluster SCRAM users from its start, as
kafka-storage.sh's does: `MECHANISM=[name=U,password=P]`, optionally with
`iterations=N` (4096..16384, default 4096) and `salt=<base64>`, or with
`saltedpassword=<base64>` and `salt` instead of a password. The credentials
(salt, stored key, server key, iterations: never the password) go with the
metadata.version into `bootstrap.checkpoint` in every directory formatted
(klamm/controller/bootstrap.py), which the controller appends as the first
records of the cluster's metadata log at its first start.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from klamm.cli.tools.common import ToolError, key_value

if TYPE_CHECKING:
    from klamm.controller.records import MetadataRecord

RELEASE_VERSION = "3.9-IV0"  # the metadata.version klamm writes at bootstrap (klamm.controller.METADATA_VERSION)
DEFAULT_ITERATIONS = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    commands = parser.add_subparsers(dest="storage_command", required=True)
    commands.add_parser("random-uuid", help="print a new cluster id")
    format_ = commands.add_parser("format", help="write meta.properties into the log directories")
    format_.add_argument("--config", "-c", type=Path, required=True, help="the node's server.properties")
    format_.add_argument("--cluster-id", "-t", required=True, help="the cluster id (klamm storage random-uuid)")
    format_.add_argument("--override", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                         help="set a property over the config file (repeatable)")
    format_.add_argument("--ignore-formatted", "-g", action="store_true",
                         help="skip directories already formatted instead of failing")
    format_.add_argument("--add-scram", "-S", action="append", default=[], metavar="SCRAM_CREDENTIAL",
                         help="a SCRAM credential to add to the __cluster_metadata log, e.g. "
                              "'SCRAM-SHA-256=[name=alice,password=alice-secret]' or "
                              "'SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]'")
    info = commands.add_parser("info", help="print the meta.properties of the log directories")
    info.add_argument("--config", "-c", type=Path, required=True, help="the node's server.properties")


def run(args: argparse.Namespace) -> int:
    from klamm.controller.meta_properties import random_base64_uuid

    try:
        if args.storage_command == "random-uuid":
            print(random_base64_uuid())
        elif args.storage_command == "format":
            format_dirs(args)
        else:
            info(args)
    except ToolError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


def _log_dirs(config_path: Path, overrides: list[tuple[str, str]]) -> tuple[list[Path], int]:
    from klamm.cli.main import load_config
    from klamm.config.errors import ConfigError

    try:
        config = load_config(config_path, overrides)
    except (ConfigError, OSError, ValueError) as exc:
        raise ToolError(str(exc)) from None
    return [Path(d) for d in config.log_dirs], config.node_id


def check_cluster_id(cluster_id: str) -> None:
    """Kafka's Uuid.fromString: 22 base64url characters of 16 bytes."""
    try:
        raw = base64.urlsafe_b64decode(cluster_id + "==")
    except ValueError:
        raw = b""
    if len(cluster_id) != 22 or len(raw) != 16:
        raise ToolError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: "
                        f"Input string `{cluster_id}` decoded as {len(raw)} bytes, which is not equal to "
                        "the expected 16 bytes of a base64-encoded UUID")


def format_dirs(args: argparse.Namespace) -> None:
    from klamm.controller.meta_properties import (MetaProperties, MetaPropertiesError, random_base64_uuid,
                                                  read_meta_properties, write_meta_properties)

    check_cluster_id(args.cluster_id)
    bootstrap = bootstrap_records(args.add_scram)
    dirs, node_id = _log_dirs(args.config, args.override)
    try:
        formatted = [d for d in dirs if read_meta_properties(d) is not None]
    except MetaPropertiesError as exc:
        raise ToolError(str(exc)) from None
    if formatted and not args.ignore_formatted:
        raise ToolError(f"Log directory {formatted[0]} is already formatted. "
                        "Use --ignore-formatted to ignore this directory and format the others.")
    empty = [d for d in dirs if d not in formatted]
    if not empty:
        print("All of the log directories are already formatted.")
        return
    for directory in empty:
        kind = "metadata directory" if directory == dirs[0] else "data directory"
        print(f"Formatting {kind} {directory} with metadata.version {RELEASE_VERSION}.")
        try:
            if bootstrap:
                from klamm.controller.bootstrap import write_bootstrap

                directory.mkdir(parents=True, exist_ok=True)
                write_bootstrap(directory, bootstrap, int(time.time() * 1000))
            write_meta_properties(directory, MetaProperties(args.cluster_id, node_id, random_base64_uuid()))
        except OSError as exc:
            raise ToolError(f"Error while writing meta.properties file {directory}: {exc}") from None


def bootstrap_records(scram_arguments: list[str]) -> list[MetadataRecord]:
    """The metadata.version and one credential per --add-scram; [] without any (no bootstrap file then)."""
    from klamm.controller.controller import METADATA_VERSION
    from klamm.controller.records import MetadataRecord

    if not scram_arguments:
        return []
    return [MetadataRecord("FeatureLevelRecord", {"name": "metadata.version", "feature_level": METADATA_VERSION}),
            *(scram_record(argument) for argument in scram_arguments)]


def scram_record(argument: str) -> MetadataRecord:
    """One --add-scram as a UserScramCredentialRecord; ToolError with Kafka's ScramParser messages."""
    from klamm.controller.scram import credential_record
    from klamm.protocol.sasl import (MAX_ITERATIONS, MIN_ITERATIONS, SCRAM_MECHANISMS,
                                     credential_from_salted_password, salted_password)

    argument = argument.strip()
    mechanism, sep, config = argument.partition("=")
    if not sep:
        raise ToolError(f"Failed to find equals sign in SCRAM argument '{argument}'")
    if mechanism not in SCRAM_MECHANISMS:
        raise ToolError(f"The add-scram mechanism {mechanism} is not supported.")
    if not config.startswith("["):
        raise ToolError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ToolError("Expected configuration string to end with ]")
    components = dict(_component(c) for c in config[1:-1].split(","))
    name = components.pop("name", None)
    if name is None:
        raise ToolError("You must supply 'name' to add-scram")
    salt = _base64(components.pop("salt", None), "salt")
    iterations_text = components.pop("iterations", None)
    try:
        iterations = DEFAULT_ITERATIONS if iterations_text is None else int(iterations_text)
    except ValueError:
        raise ToolError(f"Failed to parse iterations count: {iterations_text}") from None
    password = components.pop("password", None)
    salted = _base64(components.pop("saltedpassword", None), "saltedPassword")
    if password is None:
        if salted is None:
            raise ToolError("You must supply one of 'password' or 'saltedpassword' to add-scram")
        if salt is None:
            raise ToolError("You must supply 'salt' with 'saltedpassword' to add-scram")
    if components:
        raise ToolError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    enum_name = mechanism.replace("-", "_")
    if iterations < MIN_ITERATIONS:
        raise ToolError(f"The 'iterations' value must be >= {MIN_ITERATIONS} for add-scram using {enum_name}")
    if iterations > MAX_ITERATIONS:
        raise ToolError(f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram using {enum_name}")
    if salt is None:
        salt = os.urandom(32)
    if salted is None:
        assert password is not None
        salted = salted_password(mechanism, password, salt, iterations)
    return credential_record(name, mechanism, credential_from_salted_password(mechanism, salted, salt, iterations))


def _component(text: str) -> tuple[str, str]:
    """ScramParser.splitTrimmedConfigStringComponent: key=value, the value's surrounding quotes dropped."""
    key, sep, value = text.partition("=")
    if not sep:
        raise ToolError(f"No equals sign found in SCRAM component: {text}")
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    return key, value


def _base64(text: str | None, what: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError(f"Failed to decode given {what}: {text}") from None


def info(args: argparse.Namespace) -> None:
    from klamm.controller.meta_properties import META_PROPERTIES, MetaPropertiesError, read_meta_properties

    dirs, _ = _log_dirs(args.config, [])
    for directory in dirs:
        try:
            props = read_meta_properties(directory)
        except MetaPropertiesError as exc:
            raise ToolError(str(exc)) from None
        if props is None:
            print(f"{directory}: not formatted ({META_PROPERTIES} is missing)")
        else:
            print(f"{directory}: cluster.id={props.cluster_id} node.id={props.node_id} "
                  f"directory.id={props.directory_id} version={props.version}")
