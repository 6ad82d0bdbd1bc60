"""`klamm consumer-groups`: kafka-consumer-groups.sh (ConsumerGroupCommand) on confluent-kafka.

    --list [--state]
    --describe (--group G ... | --all-groups) [--offsets (default) | --members [--verbose] | --state]
        (a consumer-protocol group's --members --verbose adds member and target assignment epochs, and its
        --state the group and target assignment epochs, from ConsumerGroupDescribe as Kafka 4's tool shows)
    --reset-offsets (--group G | --all-groups) (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime YYYY-MM-DDTHH:mm:SS.sss | --shift-by N
         | --to-current) [--dry-run (default) | --execute]
    --delete (--group G ... | --all-groups)
    --delete-offsets --group G --topic T[:P,...] ...

Tables are printed as Kafka prints them (column widths, leading blank line), rows
in a deterministic order where Kafka iterates a hash map.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from confluent_kafka import (ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaException,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, OffsetSpec

from klamm.cli.tools import offset_delete
from klamm.cli.tools.common import (ToolError, add_bootstrap, admin_config, kafka_error_message, kafka_error_name,
                                    peer_security_of)

MISSING = "-"
STATE_NAMES = {
    ConsumerGroupState.STABLE: "Stable",
    ConsumerGroupState.EMPTY: "Empty",
    ConsumerGroupState.DEAD: "Dead",
    ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
    ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance",
}
RESET_SCENARIOS = ("to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by", "to_current")

TopicPartitionKey = tuple[str, int]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_bootstrap(parser)
    actions = parser.add_mutually_exclusive_group(required=True)
    for action in ("list", "describe", "reset-offsets", "delete", "delete-offsets"):
        actions.add_argument(f"--{action}", action="store_true")
    parser.add_argument("--group", action="append", default=[], help="a consumer group (repeatable)")
    parser.add_argument("--all-groups", action="store_true")
    parser.add_argument("--topic", action="append", default=[], help="T or T:0,1,2 (repeatable)")
    parser.add_argument("--all-topics", action="store_true", help="--reset-offsets: every partition with a committed offset")
    parser.add_argument("--timeout", type=int, default=5000, metavar="MS", help="admin request timeout (default 5000)")
    describe = parser.add_mutually_exclusive_group()
    describe.add_argument("--offsets", action="store_true", help="--describe: offsets and lag (default)")
    describe.add_argument("--members", action="store_true", help="--describe: members")
    describe.add_argument("--state", nargs="?", const="", default=None,
                          help="--describe: the group's state; --list: with states (optionally only these)")
    parser.add_argument("--verbose", action="store_true", help="--describe --members: with assignments")
    scenario = parser.add_mutually_exclusive_group()
    scenario.add_argument("--to-earliest", action="store_true")
    scenario.add_argument("--to-latest", action="store_true")
    scenario.add_argument("--to-current", action="store_true")
    scenario.add_argument("--to-offset", type=int)
    scenario.add_argument("--to-datetime", metavar="YYYY-MM-DDTHH:mm:SS.sss")
    scenario.add_argument("--shift-by", type=int)
    run_mode = parser.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true", help="--reset-offsets: only print the plan (default)")
    run_mode.add_argument("--execute", action="store_true", help="--reset-offsets: commit the new offsets")


def run(args: argparse.Namespace) -> int:
    try:
        check_args(args)
    except ToolError as exc:
        print(f"klamm consumer-groups: {exc}", file=sys.stderr)
        return 2
    service = GroupService(admin_config(args), args.timeout / 1000.0)
    try:
        if args.list:
            return list_groups(service, args)
        if args.describe:
            return describe_groups(service, args)
        if args.reset_offsets:
            return reset_offsets(service, args)
        if args.delete:
            return delete_groups(service, args)
        return delete_offsets(service, args)
    except ToolError as exc:
        print(f"\nError: {exc}")
        return 1
    except KafkaException as exc:
        print(f"\nError: Executing consumer group command failed due to {kafka_error_message(exc)}")
        return 1


def check_args(args: argparse.Namespace) -> None:
    needs_groups = args.describe or args.reset_offsets or args.delete
    if needs_groups and not args.group and not args.all_groups:
        raise ToolError("Option --group or --all-groups is required")
    if args.delete_offsets and (len(args.group) != 1 or not args.topic):
        raise ToolError("Option --delete-offsets takes exactly one --group and at least one --topic")
    if args.reset_offsets:
        if not any(getattr(args, s) not in (None, False) for s in RESET_SCENARIOS):
            raise ToolError("Option --reset-offsets requires one of --to-earliest, --to-latest, --to-current, "
                            "--to-offset, --to-datetime, --shift-by")
        if bool(args.topic) == bool(args.all_topics):
            raise ToolError("One of the reset scopes should be defined: --all-topics, --topic.")
        if not args.dry_run and not args.execute:
            print("WARN: No action will be performed as the --execute option is missing. In a future major release, "
                  "the default behavior of this command will be to prompt the user before executing the reset rather "
                  "than doing a dry run. You should add the --dry-run option explicitly if you are scripting this "
                  "command and want to keep the current default behavior without prompting.", file=sys.stderr)


# ---------------------------------------------------------------------- admin calls


class GroupService:
    """The admin calls ConsumerGroupCommand makes, each waited for with the --timeout."""

    def __init__(self, config: dict[str, str], timeout_s: float) -> None:
        self.config = config
        self.admin = AdminClient(config)
        self.timeout = timeout_s

    def list(self):
        return self.admin.list_consumer_groups(request_timeout=self.timeout).result(self.timeout + 5)

    def describe(self, groups: list[str]) -> dict:
        futures = self.admin.describe_consumer_groups(groups, request_timeout=self.timeout)
        return {g: f.result(self.timeout + 5) for g, f in futures.items()}

    def committed(self, group: str) -> dict[TopicPartitionKey, int]:
        """The group's committed offsets (librdkafka leaves out partitions without one)."""
        request = [ConsumerGroupTopicPartitions(group)]
        result = self.admin.list_consumer_group_offsets(request, request_timeout=self.timeout)[group]
        partitions = result.result(self.timeout + 5).topic_partitions or []
        return {(tp.topic, tp.partition): tp.offset for tp in partitions if tp.offset >= 0}

    def log_offsets(self, partitions: list[TopicPartitionKey], spec: OffsetSpec) -> dict[TopicPartitionKey, int]:
        """ListOffsets; a partition whose lookup fails or finds nothing is left out."""
        if not partitions:
            return {}
        request = {TopicPartition(t, p): spec for t, p in partitions}
        result = {}
        for tp, future in self.admin.list_offsets(request, request_timeout=self.timeout).items():
            try:
                offset = future.result(self.timeout + 5).offset
            except KafkaException:
                continue
            if offset >= 0:
                result[(tp.topic, tp.partition)] = offset
        return result

    def topic_partitions(self, topics: list[str]) -> list[TopicPartitionKey]:
        metadata = self.admin.list_topics(timeout=self.timeout)
        result = []
        for topic in topics:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                raise ToolError(f"Topic '{topic}' does not exist")
            result += [(topic, p) for p in sorted(info.partitions)]
        return result

    def group_ids(self, args: argparse.Namespace) -> list[str]:
        if args.all_groups:
            return sorted(g.group_id for g in self.list().valid)
        return list(dict.fromkeys(args.group))


def state_name(state) -> str:
    return STATE_NAMES.get(state, "Unknown")


# ---------------------------------------------------------------------- --list


def list_groups(service: GroupService, args: argparse.Namespace) -> int:
    listings = sorted(service.list().valid, key=lambda g: g.group_id)
    if args.state is None:
        for listing in listings:
            print(listing.group_id)
        return 0
    wanted = {s.strip().lower() for s in args.state.split(",") if s.strip()}
    listings = [g for g in listings if not wanted or state_name(g.state).lower() in wanted]
    width = max([15] + [len(g.group_id) for g in listings]) + 10
    print(f"{'GROUP':<{width}} {'STATE':<20}")
    for listing in listings:
        print(f"{listing.group_id:<{width}} {state_name(listing.state):<20}")
    return 0


# ---------------------------------------------------------------------- --describe


@dataclass(frozen=True)
class OffsetRow:
    group: str
    topic: str
    partition: int
    offset: int | None
    log_end: int | None
    consumer_id: str = MISSING
    host: str = MISSING
    client_id: str = MISSING

    @property
    def lag(self) -> int | None:
        if self.offset is None or self.log_end is None:
            return None
        return self.log_end - self.offset


def describe_groups(service: GroupService, args: argparse.Namespace) -> int:
    groups = service.group_ids(args)
    descriptions = service.describe(groups)
    for group in sorted(descriptions):
        description = descriptions[group]
        modern = None
        if description.type == ConsumerGroupType.CONSUMER and (args.state is not None or args.members and args.verbose):
            modern = consumer_group_epochs(args, description)
        if args.members:
            describe_members(group, description, args.verbose, modern)
        elif args.state is not None:
            describe_state(group, description, modern)
        else:
            describe_offsets(service, group, description)
    return 0


@dataclass(frozen=True)
class Epochs:
    """What ConsumerGroupDescribe tells of a consumer-protocol group that librdkafka's description leaves out."""

    state: str
    group_epoch: int
    assignment_epoch: int
    members: dict[str, int]  # member id -> member epoch


def consumer_group_epochs(args: argparse.Namespace, description) -> Epochs:
    """ConsumerGroupDescribe (69) sent to the group's coordinator."""
    import asyncio

    from klamm.broker.client import BrokerConnection, BrokerUnavailable

    node = description.coordinator

    async def ask() -> Epochs:
        connection = BrokerConnection(node.host, node.port, "klamm-consumer-groups", args.timeout / 1000,
                                      peer_security_of(args))
        try:
            response = await connection.request(69, 0, {"group_ids": [description.group_id],
                                                        "include_authorized_operations": False})
        except BrokerUnavailable as exc:
            raise ToolError(f"cannot reach the coordinator {node.host}:{node.port}: {exc}") from None
        finally:
            connection.close()
        group = response.groups[0]
        if group.error_code != 0:
            raise ToolError(group.error_message or group.error_code.name)
        return Epochs(group.group_state, group.group_epoch, group.assignment_epoch,
                      {m.member_id: m.member_epoch for m in group.members})

    return asyncio.run(ask())


def describe_offsets(service: GroupService, group: str, description) -> None:
    rows = offset_rows(service, group, description)
    if not print_state_note(group, description.state, len(rows)):
        return
    for line in offset_table(rows):
        print(line)


def offset_rows(service: GroupService, group: str, description) -> list[OffsetRow]:
    """Rows of members with partitions (most partitions first), then of committed but unassigned partitions."""
    committed = service.committed(group)
    members = [m for m in description.members if m.assignment.topic_partitions]
    members.sort(key=lambda m: -len(m.assignment.topic_partitions))
    owners: list[tuple[list[TopicPartitionKey], str, str, str]] = []
    assigned: set[TopicPartitionKey] = set()
    for member in members:
        partitions = [(tp.topic, tp.partition) for tp in member.assignment.topic_partitions]
        assigned.update(partitions)
        owners.append((partitions, member.member_id, member.host, member.client_id))
    unassigned = [tp for tp in sorted(committed) if tp not in assigned]
    if unassigned:
        owners.append((unassigned, MISSING, MISSING, MISSING))
    everything = [tp for partitions, *_ in owners for tp in partitions]
    log_end = service.log_offsets(everything, OffsetSpec.latest())
    rows = []
    for partitions, consumer_id, host, client_id in owners:
        # Kafka sorts each owner's partitions by partition number only (stable: then by topic as listed).
        for topic, partition in sorted(partitions, key=lambda tp: (tp[1], tp[0])):
            rows.append(OffsetRow(group, topic, partition, committed.get((topic, partition)),
                                  log_end.get((topic, partition)), consumer_id, host, client_id))
    return rows


def offset_table(rows: list[OffsetRow]) -> list[str]:
    """ConsumerGroupCommand's offsets table: a blank line, the header, one line per row."""
    widths = [max([15] + [len(getattr(r, f)) for r in rows]) for f in ("group", "topic", "consumer_id", "host")]
    g, t, c, h = widths

    def line(*cols: object) -> str:
        text = [MISSING if v is None else str(v) for v in cols]
        return (f"{text[0]:<{g}} {text[1]:<{t}} {text[2]:<10} {text[3]:<15} {text[4]:<15} {text[5]:<15} "
                f"{text[6]:<{c}} {text[7]:<{h}} {text[8]}")

    lines = ["", line("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                      "HOST", "CLIENT-ID")]
    lines += [line(r.group, r.topic, r.partition, r.offset, r.log_end, r.lag, r.consumer_id, r.host, r.client_id)
              for r in rows]
    return lines


def print_state_note(group: str, state, rows: int) -> bool:
    """shouldPrintMemberState: a note for dead, empty and rebalancing groups; True if rows follow."""
    if state == ConsumerGroupState.DEAD:
        print(f"\nError: Consumer group '{group}' does not exist.")
        return False
    if state == ConsumerGroupState.EMPTY:
        print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
    elif state in (ConsumerGroupState.PREPARING_REBALANCING, ConsumerGroupState.COMPLETING_REBALANCING):
        print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
    return rows > 0


def describe_members(group: str, description, verbose: bool, modern: Epochs | None = None) -> None:
    members = description.members
    if not print_state_note(group, description.state, len(members)):
        return
    with_instance = any(m.group_instance_id for m in members)
    g = max([15] + [len(group)])
    c = max([15] + [len(m.member_id) for m in members])
    i = max([17] + [len(m.group_instance_id or "") for m in members])
    h = max([15] + [len(m.host) for m in members])
    k = max([15] + [len(m.client_id) for m in members])

    def line(group_id, member_id, instance, host, client, count) -> str:
        middle = f"{instance:<{i}} " if with_instance else ""
        return f"{group_id:<{g}} {member_id:<{c}} {middle}{host:<{h}} {client:<{k}} {count!s:<15} "

    print()
    if modern is not None:  # Kafka 4's columns for a consumer-protocol group
        current = {m.member_id: assignment_text(m.assignment.topic_partitions) for m in members}
        a = max([20] + [len(text) for text in current.values()])
        print(line("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
              + f"{'CURRENT-EPOCH':<15} {'CURRENT-ASSIGNMENT':<{a}} {'TARGET-EPOCH':<15} TARGET-ASSIGNMENT")
        for m in members:
            target = m.target_assignment.topic_partitions if m.target_assignment is not None else []
            epoch = modern.members.get(m.member_id, MISSING)
            print(line(group, m.member_id, m.group_instance_id or "", m.host, m.client_id,
                       len(m.assignment.topic_partitions))
                  + f"{epoch!s:<15} {current[m.member_id]:<{a}} {modern.assignment_epoch!s:<15} "
                  + assignment_text(target))
        return
    print(line("GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
          + ("ASSIGNMENT" if verbose else ""))
    for m in members:
        partitions = m.assignment.topic_partitions
        text = line(group, m.member_id, m.group_instance_id or "", m.host, m.client_id, len(partitions))
        print(text + (assignment_text(partitions) if verbose else ""))


def assignment_text(partitions: list[TopicPartition]) -> str:
    if not partitions:
        return MISSING
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = [f"{topic}(" + ",".join(str(p) for p in sorted(ps)) + ")" for topic, ps in sorted(by_topic.items())]
    return ", ".join(parts)


def describe_state(group: str, description, modern: Epochs | None = None) -> None:
    if not print_state_note(group, description.state, 1):
        return
    node = description.coordinator
    coordinator = f"{node.host}:{node.port}  ({node.id})"
    width = max(25, len(coordinator))
    state = modern.state if modern is not None else state_name(description.state)
    epochs_header = f"{'GROUP-EPOCH':<15} {'TARGET-ASSIGNMENT-EPOCH':<25} " if modern is not None else ""
    epochs = f"{modern.group_epoch!s:<15} {modern.assignment_epoch!s:<25} " if modern is not None else ""
    header = (f"{'GROUP':<{width}} {'COORDINATOR (ID)':<25} {'ASSIGNMENT-STRATEGY':<20} {'STATE':<15} "
              f"{epochs_header}#MEMBERS")
    row = (f"{group:<{width}} {coordinator:<25} {description.partition_assignor or '':<20} "
           f"{state:<15} {epochs}{len(description.members)}")
    print(f"\n{header}\n{row}")


# ---------------------------------------------------------------------- --reset-offsets


def reset_offsets(service: GroupService, args: argparse.Namespace) -> int:
    plans: dict[str, dict[TopicPartitionKey, int]] = {}
    failed = False
    descriptions = service.describe(service.group_ids(args))
    for group in sorted(descriptions):
        state = descriptions[group].state
        if state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD):
            print(f"\nError: Assignments can only be reset if the group '{group}' is inactive, "
                  f"but the current state is {state_name(state)}.")
            plans[group] = {}
            failed = True
            continue
        plan = plan_reset(service, group, args)
        if args.execute and plan:
            alter_offsets(service, group, plan)
        plans[group] = plan
    for line in reset_table(plans):
        print(line)
    return 1 if failed else 0


def plan_reset(service: GroupService, group: str, args: argparse.Namespace) -> dict[TopicPartitionKey, int]:
    partitions = sorted(service.committed(group)) if args.all_topics else parse_topic_args(service, args.topic)
    if args.to_earliest:
        return required_offsets(service.log_offsets(partitions, OffsetSpec.earliest()), partitions, "starting")
    if args.to_latest:
        return required_offsets(service.log_offsets(partitions, OffsetSpec.latest()), partitions, "ending")
    if args.to_offset is not None:
        return clamp(service, {tp: args.to_offset for tp in partitions})
    if args.shift_by is not None:
        committed = service.committed(group)
        missing = [tp for tp in partitions if tp not in committed]
        if missing:
            t, p = missing[0]
            raise ToolError(f"Cannot shift offset for partition {t}-{p} since there is no current committed offset")
        return clamp(service, {tp: committed[tp] + args.shift_by for tp in partitions})
    if args.to_datetime is not None:
        return offsets_for_time(service, partitions, parse_datetime(args.to_datetime))
    committed = service.committed(group)  # --to-current
    latest = service.log_offsets([tp for tp in partitions if tp not in committed], OffsetSpec.latest())
    return {tp: committed[tp] if tp in committed else latest[tp] for tp in partitions}


def required_offsets(found: dict[TopicPartitionKey, int], partitions: list[TopicPartitionKey], what: str):
    for topic, partition in partitions:
        if (topic, partition) not in found:
            raise ToolError(f"Error getting {what} offset of topic partition: {topic}-{partition}")
    return {tp: found[tp] for tp in partitions}


def clamp(service: GroupService, requested: dict[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
    """checkOffsetsRange: an offset past the log end or before its start is moved there."""
    partitions = list(requested)
    start = service.log_offsets(partitions, OffsetSpec.earliest())
    end = service.log_offsets(partitions, OffsetSpec.latest())
    result = {}
    for tp, offset in requested.items():
        if tp in end and offset > end[tp]:
            offset = end[tp]
        elif tp in start and offset < start[tp]:
            offset = start[tp]
        result[tp] = offset
    return result


def offsets_for_time(service: GroupService, partitions: list[TopicPartitionKey], timestamp: int):
    found = service.log_offsets(partitions, OffsetSpec.for_timestamp(timestamp))
    empty = [tp for tp in partitions if tp not in found]
    for topic, partition in empty:
        print(f"\nWarn: Partition {partition} from topic {topic} is empty. Falling back to latest known offset.")
    found.update(service.log_offsets(empty, OffsetSpec.latest()))
    return required_offsets(found, partitions, "offset by timestamp")


_DATETIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3})(Z|[+-]\d{2}(?::?\d{2})?)?")


def parse_datetime(text: str) -> int:
    """Utils.getDateTime: yyyy-MM-dd'T'HH:mm:ss.SSS with an optional zone (UTC if none); epoch ms."""
    match = _DATETIME.fullmatch(text.strip())
    if not match:
        raise ToolError(f"Error parsing timestamp '{text}': expected YYYY-MM-DDTHH:mm:SS.sss[Z|+hh:mm]")
    zone = match.group(2) or "Z"
    if zone != "Z" and len(zone) == 3:
        zone += ":00"
    elif zone != "Z" and ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    moment = datetime.fromisoformat(match.group(1) + ("+00:00" if zone == "Z" else zone))
    return int(moment.astimezone(timezone.utc).timestamp() * 1000)


def parse_topic_args(service: GroupService, topics: list[str]) -> list[TopicPartitionKey]:
    """`T:0,1` names partitions; a bare `T` means all of its partitions."""
    explicit: list[TopicPartitionKey] = []
    whole: list[str] = []
    for arg in topics:
        if ":" not in arg:
            whole.append(arg)
            continue
        topic, _, partitions = arg.partition(":")
        try:
            explicit += [(topic, int(p)) for p in partitions.split(",")]
        except ValueError:
            raise ToolError(f"Invalid topic arg '{arg}', expected topic name and partitions") from None
    return list(dict.fromkeys(explicit + service.topic_partitions(whole)))


def alter_offsets(service: GroupService, group: str, plan: dict[TopicPartitionKey, int]) -> None:
    partitions = [TopicPartition(t, p, o) for (t, p), o in sorted(plan.items())]
    request = [ConsumerGroupTopicPartitions(group, partitions)]
    result = service.admin.alter_consumer_group_offsets(request, request_timeout=service.timeout)[group]
    for tp in result.result(service.timeout + 5).topic_partitions or []:
        if tp.error is not None:
            raise KafkaException(tp.error)


def reset_table(plans: dict[str, dict[TopicPartitionKey, int]]) -> list[str]:
    """printOffsetsToReset: a blank line, the header if there are groups, then the rows."""
    def line(group, topic, partition, offset) -> str:
        return f"{group!s:<30} {topic!s:<30} {partition!s:<10} {offset!s:<15}"

    lines = [""]
    if plans:
        lines.append(line("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"))
    for group in sorted(plans):
        lines += [line(group, t, p, o) for (t, p), o in sorted(plans[group].items())]
    return lines


# ---------------------------------------------------------------------- --delete


def delete_groups(service: GroupService, args: argparse.Namespace) -> int:
    groups = service.group_ids(args)
    futures = service.admin.delete_consumer_groups(groups, request_timeout=service.timeout)
    succeeded, failed = [], {}
    for group in groups:
        try:
            futures[group].result(service.timeout + 5)
            succeeded.append(group)
        except KafkaException as exc:
            failed[group] = describe_group_error(exc, group)
    if not failed:
        print(f"Deletion of requested consumer groups ('{', '.join(succeeded)}') was successful.")
        return 0
    print("\nError: Deletion of some consumer groups failed:")
    for group, reason in failed.items():
        print(f"* Group '{group}' could not be deleted due to: {reason}")
    if succeeded:
        print(f"\nThese consumer groups were deleted successfully: '{', '.join(succeeded)}'")
    return 1


def describe_group_error(exc: KafkaException, group: str) -> str:
    """The Java exception text for the usual DeleteGroups errors."""
    name = kafka_error_name(exc)
    messages: dict[str, Callable[[], str]] = {
        "GROUP_ID_NOT_FOUND": lambda: "org.apache.kafka.common.errors.GroupIdNotFoundException: "
                                      "The group id does not exist.",
        "NON_EMPTY_GROUP": lambda: "org.apache.kafka.common.errors.GroupNotEmptyException: "
                                   "The group is not empty.",
    }
    return messages.get(name or "", lambda: kafka_error_message(exc))()


# ---------------------------------------------------------------------- --delete-offsets


def delete_offsets(service: GroupService, args: argparse.Namespace) -> int:
    group = args.group[0]
    partitions = parse_topic_args(service, args.topic)
    top_error, results = offset_delete.delete_group_offsets(service.config, group, partitions,
                                                            service.timeout)
    messages = {
        None: f"Request succeed for deleting offsets with topic {', '.join(args.topic)} group {group}",
        "INVALID_GROUP_ID": f"\nError: '{group}' is not valid.",
        "GROUP_ID_NOT_FOUND": f"\nError: '{group}' does not exist.",
        "GROUP_AUTHORIZATION_FAILED": f"\nError: Access to '{group}' is not authorized.",
        "NON_EMPTY_GROUP": f"\nError: Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.",
    }
    partition_level = ("GROUP_SUBSCRIBED_TO_TOPIC", "TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PART")
    if top_error in messages:
        print(messages[top_error])
    elif top_error in partition_level:
        print("\nError: Encounter some partition level error, see the follow-up details:")
    else:
        print(f"\nError: Encounter some unknown error: {top_error}")
    print()
    print(f"{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}")
    for (topic, partition), err in sorted(results.items()):
        status = "Successful" if err is None else f"Error: :{err}"
        print(f"{topic:<30} {partition!s:<15} {status:<15}")
    return 0 if top_error is None else 1
