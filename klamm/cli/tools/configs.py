"""`klamm configs`: kafka-configs.sh (ConfigCommand) for topics, brokers, users, clients and ips.

    klamm configs --bootstrap-server B --entity-type topics|brokers [--entity-name N | --entity-default]
                  --describe [--all]
    klamm configs --bootstrap-server B --entity-type topics|brokers (--entity-name N | --entity-default)
                  --alter [--add-config k=v,k2=[a,b]] [--delete-config k,k2]
    klamm configs --bootstrap-server B --entity-type users [--entity-name U] --describe
    klamm configs --bootstrap-server B --entity-type users --entity-name U --alter
                  [--add-config 'SCRAM-SHA-256=[iterations=8192,password=P]'] [--delete-config SCRAM-SHA-512]
    klamm configs --bootstrap-server B --entity-type users|clients|ips (--entity-name N | --entity-default)
                  [--entity-type clients (--entity-name C | --entity-default)]
                  --alter [--add-config producer_byte_rate=1024,consumer_byte_rate=2048] [--delete-config k]
    klamm configs --bootstrap-server B --entity-type users|clients|ips [--entity-name N | --entity-default]
                  [--entity-type clients [--entity-name C | --entity-default]] --describe

--describe prints only dynamic configs (those set on the entity) unless --all, as
"  name=value sensitive=false synonyms={SOURCE:name=value, ...}". --alter uses
IncrementalAlterConfigs (SET and DELETE operations) for topics and brokers
(topics and brokers use librdkafka's admin client). A user's configs are its
quotas and SCRAM credentials (klamm/cli/tools/scram_configs.py); clients and
ips have quotas (klamm/cli/tools/quota_configs.py). Each --entity-type pairs
with the --entity-name or --entity-default in the same position, as in
kafka-configs.sh; only users and clients may be given together.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from klamm.cli.tools import quota_configs, scram_configs
from klamm.cli.tools.common import ToolError, add_bootstrap, admin_config, kafka_error_message

TIMEOUT_S = 30.0
ENTITY_TYPES = {"topics": "topic", "brokers": "broker"}
DYNAMIC_SOURCE = {"topics": ConfigSource.DYNAMIC_TOPIC_CONFIG, "brokers": ConfigSource.DYNAMIC_BROKER_CONFIG}
DEFAULT_BROKER = ""  # the entity name of cluster-wide broker defaults
USERS = "users"  # quotas and SCRAM credentials, not a config resource
QUOTA_TYPES = tuple(quota_configs.QUOTA_ENTITY_TYPES)  # users, clients, ips
_KEY = re.compile(r"[a-zA-Z0-9._-]*")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    parser.add_argument("--entity-type", dest="entity_types", action="append", required=True,
                        choices=sorted([*ENTITY_TYPES, *QUOTA_TYPES]), help="repeatable: users and clients together")
    parser.add_argument("--entity-name", dest="entity_names", action=_EntityName, default=[],
                        help="a topic name, broker id, user principal name, client id or ip, for the --entity-type "
                             "in the same position")
    parser.add_argument("--entity-default", dest="entity_names", action=_EntityDefault, nargs=0,
                        help="the default entity of the --entity-type in the same position (brokers: the "
                             "cluster-wide defaults)")
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--describe", action="store_true")
    actions.add_argument("--alter", action="store_true")
    parser.add_argument("--all", action="store_true", help="--describe: every config, not only dynamic ones")
    parser.add_argument("--add-config", help="k1=v1,k2=[v1,v2] to set")
    parser.add_argument("--delete-config", action="append", default=[], help="k1,k2 to remove (repeatable)")


class _EntityName(argparse.Action):
    """--entity-name and --entity-default fill one list, in command-line order (ConfigCommand.entityNames)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        getattr(namespace, self.dest).append(values)


class _EntityDefault(_EntityName):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        super().__call__(parser, namespace, "", option_string)


def run(args: argparse.Namespace) -> int:
    admin = AdminClient(admin_config(args))
    try:
        _single_entity(args)
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


def _single_entity(args: argparse.Namespace) -> None:
    """args.entity_type, entity_name and entity_default: the first entity type and its name."""
    args.entity_type = args.entity_types[0]
    first = args.entity_names[0] if args.entity_names else None
    args.entity_name = first or None
    args.entity_default = first == ""


def check_args(args: argparse.Namespace) -> None:
    if args.entity_type in QUOTA_TYPES:
        check_quota_args(args)
        return
    if len(args.entity_types) > 1:
        check_quota_args(args)  # Kafka's messages for several types
    if args.entity_default and args.entity_name is not None or len(args.entity_names) > 1:
        raise ToolError("Only one of --entity-name and --entity-default can be given")
    if args.entity_default and args.entity_type != "brokers":
        raise ToolError("--entity-default is only supported for --entity-type brokers")
    if args.entity_default:
        raise ToolError("--entity-default is not supported: librdkafka refuses a broker resource without a name")
    if args.alter and args.entity_name is None and not args.entity_default:
        raise ToolError("An entity name must be specified with --alter")
    if args.alter and not args.add_config and not args.delete_config:
        raise ToolError("At least one of --add-config or --delete-config must be specified with --alter")
    if args.entity_type == "brokers" and args.entity_name is not None and not args.entity_name.isdigit():
        raise ToolError(f"The entity name for brokers must be a valid integer broker id, found: {args.entity_name}")


def check_quota_args(args: argparse.Namespace) -> None:
    """ConfigCommandOptions.checkArgs for users, clients and ips (and Kafka's checks of several types)."""
    types, names = args.entity_types, args.entity_names
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise ToolError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    if len(types) > 1 and set(types) != {USERS, quota_configs.CLIENTS}:
        raise ToolError(f"Only '{USERS}' and '{quota_configs.CLIENTS}' entity types may be specified together")
    if len(names) > len(types):
        raise ToolError("More entity names specified than entity types")
    if quota_configs.IPS in types:
        for name in names:
            if name and not valid_ip_entity(name):
                raise ToolError(f"The entity name for {types[0]} must be a valid IP or resolvable host, "
                                f"but it is: {name}")
    if args.alter:
        if not names:
            raise ToolError("An entity-name or default entity must be specified with --alter of users, clients, "
                            "brokers or ips")
        if not args.add_config and not args.delete_config:
            raise ToolError("At least one of --add-config, --add-config-file, or --delete-config must be "
                            "specified with --alter")
        if len(names) != len(types):
            raise ToolError("An entity name must be specified for every entity type")


def valid_ip_entity(name: str) -> bool:
    """DynamicConfig.Ip.isValidIpEntity: an IP address or a host name that resolves."""
    import socket

    try:
        socket.getaddrinfo(name, None)
    except (OSError, UnicodeError):
        return False
    return True


def entity_name(args: argparse.Namespace) -> str | None:
    return DEFAULT_BROKER if args.entity_default else args.entity_name


# ----------------------------------------------------------------------- describe


def describe(admin: AdminClient, args: argparse.Namespace) -> None:
    if args.entity_type in QUOTA_TYPES:
        describe_quotas_and_users(admin, args)
        return
    name = entity_name(args)
    names = [name] if name is not None else all_entities(admin, args.entity_type)
    for entity in names:
        print(describe_header(args.entity_type, entity, args.all))
        for line in entry_lines(resource_configs(admin, args.entity_type, entity, args.all)):
            print(line)


def describe_quotas_and_users(admin: AdminClient, args: argparse.Namespace) -> None:
    """ConfigCommand.describeClientQuotaAndUserScramCredentialConfigs: the quotas of the matching entities,
    then, for users alone and not their default, their SCRAM credentials."""
    types, names = args.entity_types, args.entity_names
    for line in quota_configs.describe_lines(quota_configs.describe_quotas(args, types, names)):
        print(line)
    if types == [USERS] and "" not in names:
        for line in scram_configs.describe(admin, args.entity_name):
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
    if args.entity_type in QUOTA_TYPES:
        types, names = args.entity_types, args.entity_names
        if quota_configs.check_config_names(types, to_add, to_delete, scram_configs.MECHANISMS):
            quota_configs.alter_quotas(args, types, names, to_add, to_delete)
        else:
            scram_configs.alter(admin, names[0], to_add, to_delete)
        if names[0]:
            print(f"Completed updating config for {args.entity_type[:-1]} {names[0]}.")
        else:
            print(f"Completed updating default config for {args.entity_type} in the cluster.")
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
