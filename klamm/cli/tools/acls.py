"""`klamm acls`: kafka-acls.sh (Kafka's AclCommand).

    klamm acls --bootstrap-server B [--command-config FILE]
               (--add | --remove [--force] | --list [--principal P ...])
               [--topic T ...] [--group G ...] [--cluster] [--transactional-id I ...]
               [--resource-pattern-type literal|prefixed|match|any]
               [--allow-principal P ...] [--deny-principal P ...] [--allow-host H ...] [--deny-host H ...]
               [--operation OP ...] [--producer [--idempotent]] [--consumer]

As AclCommand builds them: each resource (--topic, --group, --transactional-id,
and --cluster when the pattern type is LITERAL) gets one ACL per principal,
operation (default All) and host (default `*` for the principals given) of
--allow-* (ALLOW) and --deny-* (DENY). --producer gives topics Write, Describe
and Create, transactional ids Write and Describe, and with --idempotent the
cluster IdempotentWrite; --consumer gives topics Read and Describe and groups
Read. Operations are named as Kafka's SecurityUtils reads them (Read, READ,
DescribeConfigs, DESCRIBECONFIGS, case-insensitively without underscores);
each resource type accepts its own (AclEntry.supportedOperations) and All.

--add creates the ACLs (LITERAL or PREFIXED), --remove deletes those named, or
every ACL of each resource filter when no principal is given (after a y/n
question unless --force), --list describes the ACLs of the resources named
(every ACL when none) with their pattern type as a filter (MATCH: every ACL
that applies to the name; ANY: any pattern type of that exact name). Output is
kafka-acls.sh's, with Java's toString of ResourcePattern and
AccessControlEntry; like Kafka's current AclCommand it does not list again
after --add or --remove. A failure prints "Error while executing ACL command:"
and the message, exit code 1; a usage error its message on stderr, exit 1.

--command-config takes the Java client properties kafka-acls.sh takes
(security.protocol, sasl.mechanism, sasl.jaas.config with PlainLoginModule or
ScramLoginModule; klamm/cli/tools/common.py translates them) or librdkafka's.
--bootstrap-controller, --delegation-token and --user-principal are not
offered: librdkafka's admin client has no controller bootstrap and no
DELEGATION_TOKEN or USER resource types.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from klamm.cli.tools.common import ToolError, admin_config, error, kafka_error_message

TIMEOUT_S = 30.0
CLUSTER_NAME = "kafka-cluster"
WILDCARD_HOST = "*"
# Kafka's names of the resource types (confluent-kafka calls the cluster BROKER).
TYPE_NAMES = {ResourceType.TOPIC: "TOPIC", ResourceType.GROUP: "GROUP", ResourceType.BROKER: "CLUSTER",
              ResourceType.TRANSACTIONAL_ID: "TRANSACTIONAL_ID", ResourceType.ANY: "ANY",
              ResourceType.UNKNOWN: "UNKNOWN"}
OPS = AclOperation
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (OPS.READ, OPS.WRITE, OPS.CREATE, OPS.DELETE, OPS.ALTER, OPS.DESCRIBE, OPS.DESCRIBE_CONFIGS,
                         OPS.ALTER_CONFIGS),
    ResourceType.GROUP: (OPS.READ, OPS.DELETE, OPS.DESCRIBE, OPS.DESCRIBE_CONFIGS, OPS.ALTER_CONFIGS),
    ResourceType.BROKER: (OPS.CREATE, OPS.ALTER, OPS.DESCRIBE, OPS.CLUSTER_ACTION, OPS.DESCRIBE_CONFIGS,
                          OPS.ALTER_CONFIGS, OPS.IDEMPOTENT_WRITE),
    ResourceType.TRANSACTIONAL_ID: (OPS.WRITE, OPS.DESCRIBE),
}


def pascal_case(name: str) -> str:
    """SecurityUtils.toPascalCase: DESCRIBE_CONFIGS -> DescribeConfigs."""
    return "".join(part.capitalize() for part in name.split("_"))


# SecurityUtils.operation: the Pascal-case name, or its upper case (so "read" and "DESCRIBECONFIGS" work,
# "describe_configs" does not); anything else is UNKNOWN.
_OPERATION_NAMES: dict[str, AclOperation] = {}
for _op in AclOperation:
    _OPERATION_NAMES[pascal_case(_op.name)] = _op
    _OPERATION_NAMES[pascal_case(_op.name).upper()] = _op


def operation(name: str) -> AclOperation:
    return _OPERATION_NAMES.get(name) or _OPERATION_NAMES.get(name.upper(), AclOperation.UNKNOWN)


@dataclass(frozen=True)
class Pattern:
    """A ResourcePatternFilter (a ResourcePattern when its pattern type is LITERAL or PREFIXED)."""

    resource_type: ResourceType
    name: str | None
    pattern_type: ResourcePatternType

    def __str__(self) -> str:
        return (f"ResourcePattern(resourceType={TYPE_NAMES[self.resource_type]}, "
                f"name={'<any>' if self.name is None else self.name}, patternType={self.pattern_type.name})")


@dataclass(frozen=True)
class Entry:
    """An AccessControlEntry."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


CLUSTER_FILTER = Pattern(ResourceType.BROKER, CLUSTER_NAME, ResourcePatternType.LITERAL)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]",
                        help="the broker(s) to connect to. REQUIRED.")
    parser.add_argument("--command-config", dest="client_config_file", type=Path, metavar="FILE",
                        help="a properties file of admin client configs (security.protocol, sasl.mechanism, "
                             "sasl.jaas.config, or librdkafka names)")
    actions = parser.add_argument_group("actions (exactly one)")
    actions.add_argument("--add", action="store_true", help="add ACLs")
    actions.add_argument("--remove", action="store_true", help="remove ACLs")
    actions.add_argument("--list", action="store_true", help="list the ACLs of the resources given (or all)")
    parser.add_argument("--topic", action="append", default=[], help="a topic ('*' for all topics); repeatable")
    parser.add_argument("--group", action="append", default=[], help="a consumer group ('*' for all); repeatable")
    parser.add_argument("--cluster", action="store_true", help="the cluster's ACLs")
    parser.add_argument("--transactional-id", action="append", default=[],
                        help="a transactional id ('*' for all); repeatable")
    parser.add_argument("--resource-pattern-type", type=str.upper, default="LITERAL",
                        choices=("LITERAL", "PREFIXED", "MATCH", "ANY"), metavar="literal|prefixed|match|any",
                        help="adding: literal or prefixed; listing and removing: also match (every ACL that "
                             "applies to the names) or any (any pattern type of the names). Default literal")
    parser.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="a principal to allow, e.g. User:alice (User:* for everyone); repeatable")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                        help="a principal to deny; DENY wins over ALLOW; repeatable")
    parser.add_argument("--allow-host", action="append", default=[], help="a host of the allowed principals "
                                                                          "(default '*'); repeatable")
    parser.add_argument("--deny-host", action="append", default=[], help="a host of the denied principals "
                                                                         "(default '*'); repeatable")
    parser.add_argument("--operation", action="append", default=[],
                        help="an operation to allow or deny (default All): " + ", ".join(
                            pascal_case(op.name) for op in AclOperation if op > AclOperation.ANY))
    parser.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                        help="with --list: only this principal's ACLs; repeatable")
    parser.add_argument("--producer", action="store_true",
                        help="the producer's ACLs: Write, Describe and Create on the topics (and Write, Describe "
                             "on the transactional ids)")
    parser.add_argument("--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster")
    parser.add_argument("--consumer", action="store_true",
                        help="the consumer's ACLs: Read and Describe on the topics, Read on the groups")
    parser.add_argument("--force", action="store_true", help="do not ask before removing")


def run(args: argparse.Namespace) -> int:
    try:
        check_args(args)
    except ToolError as exc:
        return error(str(exc))
    try:
        if args.add:
            resources = resource_to_acls(args)  # usage errors first, then the connection
            add(AdminClient(admin_config(args)), resources)
        elif args.remove:
            remove(AdminClient(admin_config(args)), args)
        else:
            list_acls(AdminClient(admin_config(args)), args)
    except _Usage as exc:
        return error(str(exc))
    except (ToolError, KafkaException, ValueError) as exc:
        message = kafka_error_message(exc) if isinstance(exc, KafkaException) else str(exc)
        print(f"Error while executing ACL command: {message}")
        return 1
    return 0


class _Usage(Exception):
    """CommandLineUtils.printUsageAndExit: the message, exit code 1."""


def _used(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name)
    return bool(value)


def check_args(args: argparse.Namespace) -> None:
    """AclCommandOptions.checkArgs."""
    if not args.bootstrap_server:
        raise ToolError("One of --bootstrap-server or --bootstrap-controller must be specified")
    if sum((args.add, args.remove, args.list)) != 1:
        raise ToolError("Command must include exactly one action: --list, --add, --remove. ")
    _invalid_with(args, "list", "producer", "consumer", "allow_host", "allow_principal", "deny_host",
                  "deny_principal")
    _invalid_with(args, "producer", "operation", "deny_principal", "deny_host")
    _invalid_with(args, "consumer", "operation", "deny_principal", "deny_host")
    if args.principal and not args.list:
        raise ToolError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise ToolError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise ToolError("The --idempotent option is only available if --producer is set")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        raise ToolError("With --consumer you must specify a --topic and a --group and no --cluster or "
                        "--transactional-id option should be specified.")


def _invalid_with(args: argparse.Namespace, used: str, *invalid: str) -> None:
    if _used(args, used):
        for name in invalid:
            if _used(args, name):
                raise ToolError(f'Option "[{used.replace("_", "-")}]" can\'t be used with option '
                                f'"[{name.replace("_", "-")}]"')


# ------------------------------------------------------------------ what the options name


def resource_filters(args: argparse.Namespace, die_if_none: bool = True) -> list[Pattern]:
    """AclCommand.getResourceFilter, in the options' order."""
    pattern_type = ResourcePatternType[args.resource_pattern_type]
    filters: list[Pattern] = [Pattern(ResourceType.TOPIC, t.strip(), pattern_type) for t in args.topic]
    if pattern_type == ResourcePatternType.LITERAL and (args.cluster or args.idempotent):
        filters.append(CLUSTER_FILTER)
    filters += [Pattern(ResourceType.GROUP, g.strip(), pattern_type) for g in args.group]
    filters += [Pattern(ResourceType.TRANSACTIONAL_ID, t, pattern_type) for t in args.transactional_id]
    if not filters and die_if_none:
        raise _Usage("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or "
                     "--delegation-token <Delegation Token ID>")
    return list(dict.fromkeys(filters))


def principals(names: Iterable[str]) -> list[str]:
    """SecurityUtils.parseKafkaPrincipal of each: TYPE:NAME."""
    parsed = []
    for text in names:
        text = text.strip()
        kind, colon, name = text.partition(":")
        if not text or not colon:
            raise ToolError(f"expected a string in format principalType:principalName but got {text}")
        parsed.append(f"{kind}:{name}")
    return list(dict.fromkeys(parsed))


def _hosts(hosts: list[str], principals_given: list[str]) -> list[str]:
    if hosts:
        return list(dict.fromkeys(h.strip() for h in hosts))
    return [WILDCARD_HOST] if principals_given else []


def entries(args: argparse.Namespace, operations: Iterable[AclOperation]) -> list[Entry]:
    """AclCommand.getAcl: principal x operation x host, ALLOW and DENY."""
    operations = list(dict.fromkeys(operations))
    result: list[Entry] = []
    for names, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                     (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        chosen = principals(names)
        for principal in chosen:
            for op in operations:
                for host in _hosts(hosts, names):
                    result.append(Entry(principal, host, op, permission))
    return list(dict.fromkeys(result))


def filter_to_acls(args: argparse.Namespace) -> dict[Pattern, list[Entry]]:
    """AclCommand.getResourceFilterToAcls: the ACLs of each resource filter (none: all of it, for --remove)."""
    acls: dict[Pattern, list[Entry]] = {}
    if not args.producer and not args.consumer:
        named = entries(args, (operation(o.strip()) for o in args.operation or ["All"]))
        acls.update({f: list(named) for f in resource_filters(args)})
    if args.producer:
        filters = resource_filters(args)
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                acls[f] = entries(args, (OPS.WRITE, OPS.DESCRIBE, OPS.CREATE))
            elif f.resource_type == ResourceType.TRANSACTIONAL_ID:
                acls[f] = entries(args, (OPS.WRITE, OPS.DESCRIBE))
        if args.idempotent:
            acls[CLUSTER_FILTER] = entries(args, (OPS.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in resource_filters(args):
            if f.resource_type == ResourceType.TOPIC:
                consumer = entries(args, (OPS.READ, OPS.DESCRIBE))
            elif f.resource_type == ResourceType.GROUP:
                consumer = entries(args, (OPS.READ,))
            else:
                continue
            acls[f] = list(dict.fromkeys(consumer + acls.get(f, [])))
    for f, named in acls.items():  # AclCommand.validateOperation
        valid = SUPPORTED_OPERATIONS[f.resource_type] + (OPS.ALL,)
        if any(e.operation not in valid for e in named):
            raise _Usage(f"ResourceType {TYPE_NAMES[f.resource_type]} only supports operations "
                         + ", ".join(pascal_case(op.name) for op in sorted(valid, key=lambda o: o.value)))
    return acls


def resource_to_acls(args: argparse.Namespace) -> dict[Pattern, list[Entry]]:
    """AclCommand.getResourceToAcls: --add needs a specific pattern type and a principal."""
    if args.resource_pattern_type not in ("LITERAL", "PREFIXED"):
        raise _Usage(f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not valid when "
                     "adding acls.")
    acls = filter_to_acls(args)
    if any(not named for named in acls.values()):
        raise _Usage("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    return acls


def _block(entries_: Iterable[Entry]) -> str:
    return "\n".join(f"\t{e}" for e in entries_)


# ------------------------------------------------------------------ the actions


def add(admin: AdminClient, resources: dict[Pattern, list[Entry]]) -> None:
    for resource, named in resources.items():
        print(f"Adding ACLs for resource `{resource}`: \n {_block(named)} \n")
        bindings = [AclBinding(resource.resource_type, resource.name, resource.pattern_type, e.principal, e.host,
                               e.operation, e.permission) for e in named]
        for future in admin.create_acls(bindings).values():
            future.result(TIMEOUT_S)


def _confirm(args: argparse.Namespace, message: str) -> bool:
    if args.force:
        return True
    print(message)
    sys.stdout.flush()
    return sys.stdin.readline().strip().lower() == "y"


def remove(admin: AdminClient, args: argparse.Namespace) -> None:
    for resource, named in filter_to_acls(args).items():
        if not named:
            if not _confirm(args, f"Are you sure you want to delete all ACLs for resource filter `{resource}`? "
                                  "(y/n)"):
                continue
            filters = [AclBindingFilter(resource.resource_type, resource.name, resource.pattern_type, None, None,
                                        AclOperation.ANY, AclPermissionType.ANY)]
        else:
            if not _confirm(args, f"Are you sure you want to remove ACLs: \n {_block(named)} \n from resource "
                                  f"filter `{resource}`? (y/n)"):
                continue
            filters = [AclBindingFilter(resource.resource_type, resource.name, resource.pattern_type, e.principal,
                                        e.host, e.operation, e.permission) for e in named]
        for future in admin.delete_acls(filters).values():
            future.result(TIMEOUT_S)


def list_acls(admin: AdminClient, args: argparse.Namespace) -> None:
    filters = resource_filters(args, die_if_none=False)
    if filters:
        asked = [AclBindingFilter(f.resource_type, f.name, f.pattern_type, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY) for f in filters]
    else:
        asked = [AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)]
    resources: dict[Pattern, list[Entry]] = {}
    for acl_filter in asked:
        for binding in admin.describe_acls(acl_filter).result(TIMEOUT_S):
            pattern = Pattern(binding.restype, binding.name, binding.resource_pattern_type)
            entry = Entry(binding.principal, binding.host, binding.operation, binding.permission_type)
            named = resources.setdefault(pattern, [])
            if entry not in named:
                named.append(entry)
    wanted = principals(args.principal)
    if not wanted:
        _print_resources(resources)
    for principal in wanted:
        print(f"ACLs for principal `{principal}`")
        _print_resources({p: [e for e in named if e.principal == principal] for p, named in resources.items()})


def _print_resources(resources: dict[Pattern, list[Entry]]) -> None:
    for resource, named in resources.items():
        if named:
            print(f"Current ACLs for resource `{resource}`: \n {_block(named)} \n")
