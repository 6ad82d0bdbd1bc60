"""`klamm topics`: kafka-topics.sh (TopicCommand) on confluent-kafka's AdminClient.

    klamm topics --bootstrap-server B --create --topic T [--partitions N] [--replication-factor R]
                 [--config k=v ...] [--if-not-exists]
    klamm topics --bootstrap-server B --list [--topic REGEX] [--exclude-internal]
    klamm topics --bootstrap-server B --describe [--topic REGEX] [--if-exists]
                 [--topics-with-overrides | --under-replicated-partitions | --unavailable-partitions]
    klamm topics --bootstrap-server B --alter --topic T --partitions N [--if-exists]
    klamm topics --bootstrap-server B --delete --topic T [--if-exists]

As in TopicCommand, --topic is a regular expression matched against whole names,
errors print "Error while executing topic command : ..." on stdout and exit 1.
"""

from __future__ import annotations

import argparse
import base64
import re
import sys
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from klamm.cli.tools.common import ToolError, add_bootstrap, admin_config, kafka_error_message, key_value
from klamm.protocol.topics import INTERNAL_TOPICS, SHARE_GROUP_STATE

TIMEOUT_S = 30.0
ACTIONS = ("create", "list", "describe", "alter", "delete")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    for action in ACTIONS:
        actions.add_argument(f"--{action}", action="store_true", help=f"{action} topics")
    parser.add_argument("--topic", help="a topic name, or for --list/--describe/--alter/--delete a regular expression")
    parser.add_argument("--partitions", type=int, help="partitions of a new topic, or the new count with --alter")
    parser.add_argument("--replication-factor", type=int, help="replication factor of a new topic")
    parser.add_argument("--config", action="append", type=key_value, default=[], metavar="KEY=VALUE",
                        help="a topic config override for --create (repeatable)")
    parser.add_argument("--if-not-exists", action="store_true", help="--create: do nothing if the topic exists")
    parser.add_argument("--if-exists", action="store_true", help="--alter/--describe/--delete: do nothing if no topic matches")
    parser.add_argument("--exclude-internal", action="store_true", help="--list/--describe: leave out internal topics")
    parser.add_argument("--topics-with-overrides", action="store_true", help="--describe: only topics with config overrides")
    parser.add_argument("--under-replicated-partitions", action="store_true", help="--describe: only under-replicated partitions")
    parser.add_argument("--unavailable-partitions", action="store_true", help="--describe: only partitions without a live leader")


def run(args: argparse.Namespace) -> int:
    try:
        check_args(args)
    except ToolError as exc:
        print(f"klamm topics: {exc}", file=sys.stderr)
        return 2
    admin = AdminClient(admin_config(args))
    try:
        if args.create:
            create(admin, args)
        elif args.list:
            list_topics(admin, args)
        elif args.describe:
            describe(admin, args)
        elif args.alter:
            alter(admin, args)
        else:
            delete(admin, args)
    except KafkaException as exc:
        print(f"Error while executing topic command : {kafka_error_message(exc)}")
        return 1
    except ToolError as exc:
        print(f"Error while executing topic command : {exc}")
        return 1
    return 0


def check_args(args: argparse.Namespace) -> None:
    """TopicCommandOptions.checkArgs: which options go with which action."""
    if (args.create or args.alter or args.delete) and not args.topic:
        raise ToolError("Missing required argument \"[topic]\"")
    if args.alter and args.partitions is None:
        raise ToolError("Missing required argument \"[partitions]\" (to alter topic configurations use klamm configs)")
    if args.config and not args.create:
        raise ToolError("Option \"[config]\" can't be used with this action (use klamm configs --alter)")
    if args.partitions is not None and not (args.create or args.alter):
        raise ToolError("Option \"[partitions]\" can only be used with --create or --alter")
    if args.replication_factor is not None and not args.create:
        raise ToolError("Option \"[replication-factor]\" can only be used with --create")
    if args.if_not_exists and not args.create:
        raise ToolError("Option \"[if-not-exists]\" can only be used with --create")
    if args.if_exists and not (args.alter or args.delete or args.describe):
        raise ToolError("Option \"[if-exists]\" can only be used with --alter, --describe or --delete")
    if args.exclude_internal and not (args.list or args.describe):
        raise ToolError("Option \"[exclude-internal]\" can only be used with --list or --describe")
    reports = args.topics_with_overrides or args.under_replicated_partitions or args.unavailable_partitions
    if reports and not args.describe:
        raise ToolError("the report options can only be used with --describe")


# ----------------------------------------------------------------------- actions


def create(admin: AdminClient, args: argparse.Namespace) -> None:
    name = args.topic
    if args.replication_factor is not None and not 1 <= args.replication_factor <= 32767:
        raise ToolError("The replication factor must be between 1 and 32767 inclusive")
    if args.partitions is not None and args.partitions < 1:
        raise ToolError("The partitions must be greater than 0")
    if "." in name and "_" in name:
        print("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
              "could collide. To avoid issues it is best to use either, but not both.")
    new = NewTopic(name, num_partitions=args.partitions if args.partitions is not None else -1,
                   replication_factor=args.replication_factor if args.replication_factor is not None else -1,
                   config=dict(args.config))
    future = admin.create_topics([new], request_timeout=TIMEOUT_S)[name]
    try:
        future.result(TIMEOUT_S)
    except KafkaException as exc:
        if args.if_not_exists and exc.args[0].name() == "TOPIC_ALREADY_EXISTS":
            return
        raise
    print(f"Created topic {name}.")


def list_topics(admin: AdminClient, args: argparse.Namespace) -> None:
    for name in matching_topics(admin, args.topic, args.exclude_internal):
        print(name)


def alter(admin: AdminClient, args: argparse.Namespace) -> None:
    names = existing_topics(admin, args)
    if not names:
        return
    futures = admin.create_partitions([NewPartitions(n, args.partitions) for n in names], request_timeout=TIMEOUT_S)
    for future in futures.values():
        future.result(TIMEOUT_S)


def delete(admin: AdminClient, args: argparse.Namespace) -> None:
    names = existing_topics(admin, args)
    if not names:
        return
    for future in admin.delete_topics(names, request_timeout=TIMEOUT_S).values():
        future.result(TIMEOUT_S)


def describe(admin: AdminClient, args: argparse.Namespace) -> None:
    names = existing_topics(admin, args)
    if not names:
        return
    described = admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
    descriptions = sorted((f.result(TIMEOUT_S) for f in described.values()), key=lambda d: d.name)
    configs = describe_configs(admin, [d.name for d in descriptions])
    live = {node.id for node in admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S).nodes}
    report = ReportFilter(args, live)
    for description in descriptions:
        for line in describe_lines(description, configs.get(description.name), report):
            print(line)


# ---------------------------------------------------------------------- describe


@dataclass(frozen=True)
class ReportFilter:
    """TopicCommand.DescribeOptions: which topic and partition lines to print."""

    args: argparse.Namespace
    live_brokers: set[int]

    @property
    def partition_reports(self) -> bool:
        return self.args.under_replicated_partitions or self.args.unavailable_partitions

    def topic_line(self, overrides: str) -> bool:
        if self.partition_reports:
            return False
        return not self.args.topics_with_overrides or bool(overrides)

    def partition_line(self, partition) -> bool:
        if self.args.topics_with_overrides:
            return False
        if not self.partition_reports:
            return True
        under = len(partition.isr) < len(partition.replicas)
        unavailable = partition.leader is None or partition.leader.id not in self.live_brokers
        return (self.args.under_replicated_partitions and under) or (self.args.unavailable_partitions and unavailable)


def describe_lines(description, configs: dict[str, str] | None, report: ReportFilter) -> list[str]:
    """kafka-topics.sh --describe lines of one topic: a topic line, then one per partition."""
    overrides = ",".join(f"{k}={v}" for k, v in (configs or {}).items())
    partitions = sorted(description.partitions, key=lambda p: p.id)
    lines = []
    if report.topic_line(overrides):
        lines.append(topic_line(description, partitions, overrides))
    lines += [partition_line(description.name, p) for p in partitions if report.partition_line(p)]
    return lines


def topic_line(description, partitions: list, overrides: str) -> str:
    fields = [f"Topic: {description.name}"]
    topic_id = uuid_string(description.topic_id)
    if topic_id is not None:
        fields.append(f"TopicId: {topic_id}")
    replication = len(partitions[0].replicas) if partitions else 0
    fields += [f"PartitionCount: {len(partitions)}", f"ReplicationFactor: {replication}", f"Configs: {overrides}"]
    return "\t".join(fields)


def uuid_string(uuid) -> str | None:
    """Kafka's Uuid.toString (URL-safe base64, no padding); None for a missing or zero id."""
    if uuid is None:
        return None
    msb, lsb = uuid.get_most_significant_bits(), uuid.get_least_significant_bits()
    if msb == 0 and lsb == 0:
        return None
    raw = msb.to_bytes(8, "big", signed=True) + lsb.to_bytes(8, "big", signed=True)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def partition_line(topic: str, partition) -> str:
    leader = str(partition.leader.id) if partition.leader is not None and partition.leader.id >= 0 else "none"
    replicas = ",".join(str(n.id) for n in partition.replicas)
    isr = ",".join(str(n.id) for n in partition.isr)
    # librdkafka reports no eligible leader replicas (KIP-966): N/A, as Kafka prints then.
    return (f"\tTopic: {topic}\tPartition: {partition.id}\tLeader: {leader}\tReplicas: {replicas}"
            f"\tIsr: {isr}\tElr: N/A\tLastKnownElr: N/A")


def describe_configs(admin: AdminClient, names: list[str]) -> dict[str, dict[str, str]]:
    """Non-default configs of each topic; empty if the broker has no DescribeConfigs."""
    if not names:
        return {}
    try:
        futures = admin.describe_configs([ConfigResource("topic", n) for n in names], request_timeout=TIMEOUT_S)
        result = {}
        for resource, future in futures.items():
            entries = future.result(TIMEOUT_S)
            result[resource.name] = {k: ("null" if e.value is None else e.value)
                                     for k, e in sorted(entries.items()) if not e.is_default}
        return result
    except KafkaException as exc:
        if exc.args[0].name() != "_UNSUPPORTED_FEATURE":
            raise
        print(f"WARNING: cannot describe topic configs: {kafka_error_message(exc)}", file=sys.stderr)
        return {}


# -------------------------------------------------------------------- selection


def matching_topics(admin: AdminClient, pattern: str | None, exclude_internal: bool) -> list[str]:
    """Sorted topic names matching `pattern` as a whole (TopicCommand's IncludeList)."""
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    regex = re.compile(pattern.strip().replace(",", "|")) if pattern else None
    names = []
    for name in sorted(metadata.topics):
        if exclude_internal and is_internal(name):
            continue
        if regex is None or regex.fullmatch(name):
            names.append(name)
    return names


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS or name == SHARE_GROUP_STATE


def existing_topics(admin: AdminClient, args: argparse.Namespace) -> list[str]:
    names = matching_topics(admin, args.topic, getattr(args, "exclude_internal", False))
    if args.topic and not names and not args.if_exists:
        raise ToolError(f"Topic '{args.topic}' does not exist as expected")
    return names
