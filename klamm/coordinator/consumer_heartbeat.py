"""ConsumerGroupHeartbeat as records, after Kafka's GroupMetadataManager (KIP-848).

A heartbeat reads the group and returns the records of what changes plus the
response; nothing changes until the records replay (consumer_group.py). Its
three steps:
1. the member joins or updates its subscription; a new subscription, or
   subscribed topics that appeared, vanished or grew, bump the group epoch;
2. a group epoch ahead of the target assignment's reruns the assignor;
3. the member's current assignment takes a step towards its target
   (reconciliation.py).
A member leaves with epoch -1 (fenced: its records go, the group epoch is
bumped), a static member pauses with -2 (it keeps its partitions until its
session expires or it returns with a new member id).

Regular expressions (`subscribed_topic_regex`, in RE2/J's syntax as Kafka's:
re2j.py, a pattern RE2/J refuses is INVALID_REGULAR_EXPRESSION; matched against
whole topic names, internal topics excluded) are resolved against the topics
given at every heartbeat, so a topic created or deleted is seen on the next
heartbeat of any member. A member's regex keeps only the matching topics its
principal may DESCRIBE (Kafka 4's filterTopicDescribeAuthorizedTopics): the
topics come as `AuthorizedTopics`, which knows each member's principal from its
last heartbeat. Kafka resolves a group's regexes with the principal of the
heartbeat that triggered the refresh; here each member's with its own, so
members of different principals do not undo each other's resolution.

A known dynamic member that heartbeats with epoch 0 (a client rejoining after
FENCED_MEMBER_EPOCH: same member id, nothing owned) is accepted, as Kafka does
since KAFKA-19233 (before it, Kafka fenced it again). It starts over with an
empty current assignment; Kafka keeps its current assignment and answers with
it. Either way it is then given its target assignment.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Set
from dataclasses import dataclass, field
from typing import Any

from klamm.coordinator.assignors import Assignor, MemberSpec
from klamm.coordinator.consumer_group import (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, Assignment,
                                              ClassicMetadata, ConsumerGroup, ConsumerGroupRecord, ConsumerMember, CurrentAssignment,
                                              CurrentAssignmentRecord, GroupEpochRecord, MemberState,
                                              MemberSubscriptionRecord, Subscription, SubscriptionMetadataRecord,
                                              TargetEpochRecord, TargetMemberRecord, TopicMetadata)
from klamm.coordinator.re2j import Re2jPattern, Re2jSyntaxError, compile_re2j
from klamm.coordinator.reconciliation import reconcile
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import is_internal

Topics = Mapping[str, TopicMetadata]  # the cluster's topics by name
DeniedTopics = Callable[[Iterable[str]], Set[str]]  # a principal's check: which of these it may not DESCRIBE


class AuthorizedTopics(Mapping[str, TopicMetadata]):
    """The cluster's topics, and which of those a member's regex matches its principal may DESCRIBE."""

    def __init__(self, topics: Topics, denied_for: Callable[[str], DeniedTopics | None]) -> None:
        self._topics = topics
        self._denied_for = denied_for  # by member id; None: no principal known (since a reload), nothing hidden

    def __getitem__(self, name: str) -> TopicMetadata:
        return self._topics[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)

    def describable(self, member_id: str, names: set[str]) -> set[str]:
        denied = self._denied_for(member_id)
        return names if denied is None or not names else names - set(denied(names))


@dataclass(frozen=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    topic_names: tuple[str, ...] | None = None  # None: unchanged
    topic_regex: str | None = None  # None: unchanged; "": none any more
    server_assignor: str | None = None
    owned: Assignment | None = None  # None: not reported
    client_id: str = ""
    client_host: str = ""
    classic: ClassicMetadata | None = None  # a classic member's JoinGroup (classic_members.py), not a heartbeat
    denied_topics: DeniedTopics | None = field(default=None, compare=False)  # the principal's DESCRIBE check


@dataclass(frozen=True)
class GroupSettings:
    assignors: Mapping[str, Assignor]  # group.consumer.assignors: the first is the default
    heartbeat_interval_ms: int = 5000
    max_size: int = 2**31 - 1


@dataclass
class Outcome:
    records: list[ConsumerGroupRecord] = field(default_factory=list)
    response: dict[str, Any] = field(default_factory=dict)
    member: ConsumerMember | None = None  # the member as the records leave it
    replaced: str | None = None  # a static member's previous member id, gone


def validate(req: HeartbeatRequest, settings: GroupSettings) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.invalid_request, message)

    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    if not req.member_id:
        raise invalid("MemberId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if req.topic_names is None and not req.topic_regex:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_MEMBER_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if req.topic_regex:
        compile_regex(req.topic_regex)
    if req.server_assignor is not None and req.server_assignor not in settings.assignors:
        raise KafkaError(ErrorCode.unsupported_assignor,
                         f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                         f"{', '.join(settings.assignors)}.")


def compile_regex(pattern: str) -> Re2jPattern:
    """The member's regex as RE2/J compiles it (Kafka's throwIfRegularExpressionIsInvalid)."""
    try:
        return _compiled(pattern)
    except Re2jSyntaxError as exc:
        raise KafkaError(ErrorCode.invalid_regular_expression,
                         f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {exc}.") from None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Re2jPattern:
    return compile_re2j(pattern)  # every heartbeat of a regex member resolves it again


def subscribed_topics(subscription: Subscription, topics: Topics, member_id: str | None = None) -> set[str]:
    """The member's topics that exist: those it names and those its regular expression matches (of those, the
    ones the member's principal may DESCRIBE, when `topics` knows it)."""
    names = {name for name in subscription.topic_names if name in topics}
    if subscription.topic_regex:
        pattern = compile_regex(subscription.topic_regex)
        matched = {name for name in topics if not is_internal(name) and pattern.fullmatch(name)}
        if member_id is not None and isinstance(topics, AuthorizedTopics):
            matched = topics.describable(member_id, matched)
        names |= matched
    return names


# ------------------------------------------------------------------ heartbeat
def heartbeat(group: ConsumerGroup, req: HeartbeatRequest, topics: Topics, settings: GroupSettings) -> Outcome:
    """A regular heartbeat (epoch >= 0). `group` may be a new one (epoch 0), not yet stored."""
    if len(group.members) >= settings.max_size and req.member_id not in group.members:
        raise KafkaError(ErrorCode.group_max_size_reached,
                         f"The consumer group has reached its maximum capacity of {settings.max_size} members.")
    out = Outcome()
    member, previous = _member(group, req, out)
    updated = member.with_subscription(_updated_subscription(member.subscription, req))
    if updated.subscription != member.subscription or updated.member_id not in group.members:
        out.records.append(MemberSubscriptionRecord(group.group_id, updated.member_id, updated.subscription))
    bump = (updated.subscription.topic_names != member.subscription.topic_names
            or updated.subscription.topic_regex != member.subscription.topic_regex)
    members = {**group.members, updated.member_id: updated}
    if previous is not None:
        members.pop(previous, None)
    metadata = subscription_metadata(members.values(), topics)
    if metadata != group.subscription_metadata:
        out.records.append(SubscriptionMetadataRecord(group.group_id, metadata))
        bump = True
    group_epoch = group.group_epoch + 1 if bump else group.group_epoch
    if bump:
        out.records.append(GroupEpochRecord(group.group_id, group_epoch))
    if group_epoch > group.assignment_epoch or previous is not None:
        target_epoch = group_epoch
        carried = {} if previous is None else {updated.member_id: group.target(previous)}
        target = _new_targets(group, members, topics, settings, carried, target_epoch, out)[updated.member_id]
    else:
        target_epoch, target = group.assignment_epoch, group.target(updated.member_id)
    reconciled = reconcile(updated, target_epoch, target,
                           lambda t, p: group.partition_epoch(t, p, ignoring=updated.member_id), req.owned)
    if reconciled.current != _stored_current(group, reconciled.member_id):
        out.records.append(CurrentAssignmentRecord(group.group_id, reconciled.member_id, reconciled.current))
    out.member = reconciled
    out.response = {"error_code": ErrorCode.none, "error_message": None, "member_id": reconciled.member_id,
                    "member_epoch": reconciled.member_epoch, "heartbeat_interval": settings.heartbeat_interval_ms,
                    "assignment": None}
    full = req.member_epoch == 0 or (req.rebalance_timeout_ms != -1 and req.owned is not None
                                     and (req.topic_names is not None or req.topic_regex is not None))
    if full or reconciled.current.assigned != member.current.assigned:
        out.response["assignment"] = response_assignment(reconciled.current.assigned)
    return out


def response_assignment(assigned: Assignment) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": topic, "partitions": sorted(parts)}
                                 for topic, parts in sorted(assigned.items(), key=lambda item: str(item[0]))]}


def _stored_current(group: ConsumerGroup, member_id: str) -> CurrentAssignment | None:
    member = group.members.get(member_id)
    return None if member is None else member.current


def _member(group: ConsumerGroup, req: HeartbeatRequest, out: Outcome) -> tuple[ConsumerMember, str | None]:
    """The member this heartbeat is from, and the member id of the static member it replaces."""
    if req.instance_id is None:
        return _dynamic_member(group, req), None
    existing = group.static_member(req.instance_id)
    if req.classic is not None and existing is not None and existing.member_id == req.member_id:
        return existing, None
    if req.member_epoch == 0 or req.classic is not None:
        if existing is None or existing.member_id == req.member_id:
            return _dynamic_member(group, req), None
        if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and not (req.classic or existing.uses_classic):
            raise KafkaError(ErrorCode.unreleased_instance_id,
                             f"Static member {req.member_id} with instance id {req.instance_id} cannot join the "
                             f"group because the instance id is owned by {existing.member_id} member.")
        # The returning instance takes over the partitions of its previous incarnation, at epoch 0.
        out.replaced = existing.member_id
        out.records.extend(remove_member(group.group_id, existing.member_id))
        current = CurrentAssignment(0, 0, existing.current.state, existing.current.assigned, {})
        return ConsumerMember(req.member_id, existing.subscription, current), existing.member_id
    if existing is None:
        raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
    if existing.member_id != req.member_id:
        raise KafkaError(ErrorCode.fenced_instance_id, f"Static member {req.member_id} with instance id "
                         f"{req.instance_id} was fenced by member {existing.member_id}.")
    _check_epoch(existing, req)
    return existing, None


def _dynamic_member(group: ConsumerGroup, req: HeartbeatRequest) -> ConsumerMember:
    member = group.members.get(req.member_id)
    if req.classic is not None:  # a classic member joins or rejoins: no epoch to check (Kafka's)
        return ConsumerMember(req.member_id) if member is None else member
    if member is None:
        if req.member_epoch != 0:
            raise KafkaError(ErrorCode.unknown_member_id,
                             f"Member {req.member_id} is not a member of group {group.group_id}.")
        return ConsumerMember(req.member_id)
    if req.member_epoch == 0:  # rejoining with nothing owned: it starts over
        return member.with_current(CurrentAssignment())
    _check_epoch(member, req)
    return member


def _check_epoch(member: ConsumerMember, req: HeartbeatRequest) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid: a lost response's previous epoch is still accepted."""
    epoch = member.member_epoch
    if req.member_epoch > epoch:
        raise KafkaError(ErrorCode.fenced_member_epoch,
                         f"The consumer group member has a greater member epoch ({req.member_epoch}) than the one "
                         f"known by the group coordinator ({epoch}). The member must abandon all its partitions "
                         "and rejoin.")
    if req.member_epoch < epoch and (req.member_epoch != member.current.previous_member_epoch
                                     or not _is_subset(req.owned, member.current.assigned)):
        raise KafkaError(ErrorCode.fenced_member_epoch,
                         f"The consumer group member has a smaller member epoch ({req.member_epoch}) than the one "
                         f"known by the group coordinator ({epoch}). The member must abandon all its partitions "
                         "and rejoin.")


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(set(parts) <= assigned.get(topic, frozenset()) for topic, parts in owned.items())


def _updated_subscription(old: Subscription, req: HeartbeatRequest) -> Subscription:
    regex = old.topic_regex if req.topic_regex is None else (req.topic_regex or None)
    return Subscription(
        instance_id=req.instance_id if req.instance_id is not None else old.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else old.rack_id,
        client_id=req.client_id, client_host=req.client_host,
        topic_names=tuple(sorted(req.topic_names)) if req.topic_names is not None else old.topic_names,
        topic_regex=regex,
        rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else old.rebalance_timeout_ms,
        server_assignor=req.server_assignor if req.server_assignor is not None else old.server_assignor,
        classic=req.classic)


def subscription_metadata(members: Any, topics: Topics) -> dict[str, TopicMetadata]:
    names: set[str] = set()
    for member in members:
        names |= subscribed_topics(member.subscription, topics, member.member_id)
    return {name: topics[name] for name in sorted(names)}


def _new_targets(group: ConsumerGroup, members: Mapping[str, ConsumerMember], topics: Topics,
                 settings: GroupSettings, carried: Mapping[str, Assignment], epoch: int,
                 out: Outcome) -> dict[str, Assignment]:
    """Run the assignor over `members`; records for the targets that changed and the new target epoch.

    `carried`: the targets a static member's new incarnation starts from (its predecessor's).
    """
    current: dict[str, Assignment] = {m: group.target(m) for m in members}
    current.update(carried)
    subscribed = {m: subscribed_topics(member.subscription, topics, m) for m, member in members.items()}
    specs = {m: MemberSpec(frozenset(topics[name].topic_id for name in subscribed[m]),
                           member.subscription.instance_id, member.subscription.rack_id)
             for m, member in members.items()}
    counts = {topics[name].topic_id: topics[name].partitions for name in set().union(*subscribed.values())}
    name = _assignor_name(members.values(), settings)
    targets: dict[str, Assignment] = dict(settings.assignors[name](specs, counts, current))
    for member_id in members:
        target = targets.setdefault(member_id, {})
        if target != group.targets.get(member_id):
            out.records.append(TargetMemberRecord(group.group_id, member_id, target))
    out.records.append(TargetEpochRecord(group.group_id, epoch))
    return targets


def _assignor_name(members: Any, settings: GroupSettings) -> str:
    counts: dict[str, int] = {}
    for member in members:
        name = member.subscription.server_assignor
        if name:
            counts[name] = counts.get(name, 0) + 1
    if counts:
        return max(sorted(counts), key=lambda n: counts[n])
    return next(iter(settings.assignors))


# ---------------------------------------------------------------------- leave
def leave(group: ConsumerGroup, req: HeartbeatRequest, topics: Topics) -> Outcome:
    """A heartbeat with epoch -1 (leave) or -2 (a static member that will be back)."""
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id,
                             f"Member {req.member_id} is not a member of group {group.group_id}.")
    else:
        member = group.static_member(req.instance_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise KafkaError(ErrorCode.fenced_instance_id, f"Static member {req.member_id} with instance id "
                             f"{req.instance_id} was fenced by member {member.member_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            current = CurrentAssignment(LEAVE_GROUP_STATIC_MEMBER_EPOCH, member.current.previous_member_epoch,
                                        member.current.state, member.current.assigned, {})
            return Outcome([CurrentAssignmentRecord(group.group_id, member.member_id, current)],
                           _leave_response(member.member_id, LEAVE_GROUP_STATIC_MEMBER_EPOCH),
                           member.with_current(current))
    return Outcome(fence(group, member.member_id, topics), _leave_response(member.member_id, req.member_epoch))


def _leave_response(member_id: str, epoch: int) -> dict[str, Any]:
    return {"error_code": ErrorCode.none, "error_message": None, "member_id": member_id, "member_epoch": epoch,
            "heartbeat_interval": 0, "assignment": None}


def remove_member(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    """A member's tombstones, in the order replay needs: its partitions go before the member."""
    return [CurrentAssignmentRecord(group_id, member_id, None), TargetMemberRecord(group_id, member_id, None),
            MemberSubscriptionRecord(group_id, member_id, None)]


def fence(group: ConsumerGroup, member_id: str, topics: Topics) -> list[ConsumerGroupRecord]:
    """The records that remove a member (left, session or rebalance timeout) and bump the group epoch."""
    records = remove_member(group.group_id, member_id)
    metadata = subscription_metadata([m for m in group.members.values() if m.member_id != member_id], topics)
    if metadata != group.subscription_metadata:
        records.append(SubscriptionMetadataRecord(group.group_id, metadata))
    records.append(GroupEpochRecord(group.group_id, group.group_epoch + 1))
    return records


def unrevoked(member: ConsumerMember | None) -> bool:
    """Whether the member waits to revoke partitions (its rebalance timeout runs)."""
    return member is not None and member.current.state is MemberState.UNREVOKED_PARTITIONS
