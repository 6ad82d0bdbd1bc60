"""`klamm configs`: kafka-configs.sh (ConfigCommand) for topics, brokers and users, on confluent-kafka.

    klamm configs --bootstrap-server B --entity-type topics|brokers [--entity-name N | --entity-default]
                  --describe [--all]
    klamm configs --bootstrap-server B --entity-type topics|brokers (--entity-name N | --entity-default)
                  --alter [--add-config k=v,k2=[a,b]] [--delete-config k,k2]
    klamm configs --bootstrap-server B --entity-type users [--entity-name U] --describe
    klamm configs --bootstrap-server B --entity-type users --entity-name U --alter
                  [--add-config 'SCRAM-SHA-256=[iterations=8192,password=P]'] [--delete-config SCRAM-SHA-512]

--describe prints only dynamic configs (those set on the entity) unless --all, as
"  name=value sensitive=false synonyms={SOURCE:name=value, ...}". --alter uses
IncrementalAlterConfigs (SET and DELETE operations). A user's configs are its
SCRAM credentials (klamm/cli/tools/scram_configs.py).
"""

from __future__ import annotations

import argparse
import re
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from klamm.cli.tools import scram_configs
from klamm.cli.tools.common import ToolError, add_bootstrap, admin_config, kafka_error_message

TIMEOUT_S = 30.0
ENTITY_TYPES = {"topics": "topic", "brokers": "broker"}
DYNAMIC_SOURCE = {"topics": ConfigSource.DYNAMIC_TOPIC_CONFIG, "brokers": ConfigSource.DYNAMIC_BROKER_CONFIG}
DEFAULT_BROKER = ""  # the entity name of cluster-wide broker defaults
USERS = "users"  # SCRAM credentials, not a config resource
_KEY = re.compile(r"[a-zA-Z0-9._-]*")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--entity-type", required=True, choices=sorted([*ENTITY_TYPES, USERS]))
    parser.add_argument("--entity-name", help="a topic name, broker id or user name")
    parser.add_argument("--entity-default", action="store_true", help="brokers: the cluster-wide defaults")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true")
    actions.add_argument("--alter", action="store_true")
    parser.add_argument("--all", action="store_true", help="--describe: every config, not only dynamic ones")
    parser.add_argument("--add-config", help="k1=v1,k2=[v1,v2] to set")
    parser.add_argument("--delete-config", action="append", default=[], help="k1,k2 to remove (repeatable)")


def run(args: argparse.Namespace) -> int:
    admin = AdminClient(admin_config(args))
    try:
        check_args(args)
        if args.alter:
            alter(admin, args)
        else:
            describe(admin, args)
    except (ToolError, KafkaException, ValueError) as exc:
        print(f"Error while executing config command with args '{' '.join(sys.argv[1:])}'", file=sys.stderr)
        print(kafka_error_message(exc) if isinstance(exc, KafkaException) else str(exc), file=sys.stderr)
        return 1
    return 0


def check_args(args: argparse.Namespace) -> None:
    if args.entity_default and args.entity_type == USERS and args.alter:
        raise ToolError("The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials "
                        "using --bootstrap-server.")
    if args.entity_default and args.entity_type != "brokers":
        raise ToolError("--entity-default is only supported for --entity-type brokers")
    if args.entity_default:
        raise ToolError("--entity-default is not supported: librdkafka refuses a broker resource without a name")
    if args.entity_default and args.entity_name:
        raise ToolError("Only one of --entity-name and --entity-default can be given")
    if args.alter and args.entity_name is None and not args.entity_default:
        raise ToolError("An entity name must be specified with --alter")
    if args.alter and not args.add_config and not args.delete_config:
        raise ToolError("At least one of --add-config or --delete-config must be specified with --alter")
    if args.entity_type == "brokers" and args.entity_name is not None and not args.entity_name.isdigit():
        raise ToolError(f"The entity name for brokers must be a valid integer broker id, found: {args.entity_name}")


def entity_name(args: argparse.Namespace) -> str | None:
    return DEFAULT_BROKER if args.entity_default else args.entity_name


# ----------------------------------------------------------------------- describe


def describe(admin: AdminClient, args: argparse.Namespace) -> None:
    if args.entity_type == USERS:
        for line in scram_configs.describe(admin, args.entity_name):
            print(line)
        return
    name = entity_name(args)
    names = [name] if name is not None else all_entities(admin, args.entity_type)
    for entity in names:
        print(describe_header(args.entity_type, entity, args.all))
        for line in entry_lines(resource_configs(admin, args.entity_type, entity, args.all)):
            print(line)


def all_entities(admin: AdminClient, entity_type: str) -> list[str]:
    if entity_type == "topics":
        return sorted(admin.list_topics(timeout=TIMEOUT_S).topics)
    nodes = admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S).nodes
    # Kafka lists the cluster default entity too; librdkafka cannot address it (empty name).
    return [str(n.id) for n in sorted(nodes, key=lambda n: n.id)]


def describe_header(entity_type: str, entity: str, describe_all: bool) -> str:
    if entity == DEFAULT_BROKER and entity_type == "brokers":
        return f"Default configs for {entity_type} in the cluster are:"
    return f"{'All' if describe_all else 'Dynamic'} configs for {ENTITY_TYPES[entity_type]} {entity} are:"


def resource_configs(admin: AdminClient, entity_type: str, entity: str, describe_all: bool) -> list[ConfigEntry]:
    """The entity's config entries sorted by name: all of them, or those of its dynamic source."""
    resource = ConfigResource(ENTITY_TYPES[entity_type], entity)
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    source = DYNAMIC_SOURCE[entity_type]
    if entity_type == "brokers" and entity == DEFAULT_BROKER:
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    chosen = [e for e in entries.values() if describe_all or e.source == source.value or e.source == source]
    return sorted(chosen, key=lambda e: e.name)


def entry_lines(entries: list[ConfigEntry]) -> list[str]:
    lines = []
    for entry in entries:
        synonyms = ", ".join(f"{source_name(s.source)}:{s.name}={_value(s.value)}" for s in entry.synonyms.values())
        lines.append(f"  {entry.name}={_value(entry.value)} sensitive={str(bool(entry.is_sensitive)).lower()} "
                     f"synonyms={{{synonyms}}}")
    return lines


def source_name(source) -> str:
    try:
        return ConfigSource(source).name
    except ValueError:
        return "UNKNOWN"


def _value(value: str | None) -> str:
    return "null" if value is None else value


# ----------------------------------------------------------------------- alter


def parse_add_config(text: str | None) -> dict[str, str]:
    """ConfigCommand.parseConfigsToBeAdded: split at commas outside [...]; brackets are dropped."""
    if not text:
        return {}
    result = {}
    for pair in _split_outside_brackets(text, ","):
        key, sep, value = pair.partition("=")
        if not sep:
            raise ToolError('Invalid entity config: all configs to be added must be in the format "key=val".')
        key = key.strip()
        if not _KEY.fullmatch(key):
            raise ToolError(f"Invalid character found for config key: {key}")
        result[key] = value.replace("[", "").replace("]", "").strip()
    return result


def _split_outside_brackets(text: str, separator: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        depth += char == "["
        depth -= char == "]"
        if char == separator and depth <= 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def parse_delete_config(values: list[str]) -> list[str]:
    return [k.strip() for value in values for k in value.split(",") if k.strip()]


def alter(admin: AdminClient, args: argparse.Namespace) -> None:
    entity = entity_name(args)
    to_add = parse_add_config(args.add_config)
    to_delete = parse_delete_config(args.delete_config)
    if args.entity_type == USERS:
        scram_configs.alter(admin, entity, to_add, to_delete)
        print(f"Completed updating config for user {entity}.")
        return
    current = {e.name for e in resource_configs(admin, args.entity_type, entity, describe_all=False)}
    invalid = [k for k in to_delete if k not in current]
    if invalid:
        raise ToolError(f"Invalid config(s): {','.join(invalid)}")
    ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in to_add.items()]
    ops += [ConfigEntry(k, "", incremental_operation=AlterConfigOpType.DELETE) for k in to_delete]
    resource = ConfigResource(ENTITY_TYPES[args.entity_type], entity, incremental_configs=ops)
    admin.incremental_alter_configs([resource], request_timeout=TIMEOUT_S)[resource].result(TIMEOUT_S)
    if entity:
        print(f"Completed updating config for {ENTITY_TYPES[args.entity_type]} {entity}.")
    else:
        print(f"Completed updating default config for {args.entity_type} in the cluster.")
