"""`klamm storage`: kafka-storage.sh (Kafka's StorageTool), offline.

    klamm storage random-uuid
    klamm storage format --cluster-id ID --config server.properties [--override k=v ...] [--ignore-formatted]
    klamm storage info --config server.properties

`format` writes `meta.properties` (version 1, node.id, cluster.id, a new
directory.id) into every log directory of the configuration, so that the nodes
of a cluster agree on its id before they first start; a node whose directories
name another cluster or node then refuses to start. An already formatted
directory is an error unless --ignore-formatted. Messages and exit codes are
Kafka's (1 on failure, the message on stderr). A single node started on empty
directories formats them itself, so `klamm serve` needs no format step.
"""

from __future__ import annotations

import argparse
import base64
import sys
from pathlib import Path

from klamm.cli.tools.common import ToolError, key_value

RELEASE_VERSION = "3.9-IV0"  # the metadata.version klamm writes at bootstrap (klamm.controller.METADATA_VERSION)


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
            write_meta_properties(directory, MetaProperties(args.cluster_id, node_id, random_base64_uuid()))
        except OSError as exc:
            raise ToolError(f"Error while writing meta.properties file {directory}: {exc}") from None


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
