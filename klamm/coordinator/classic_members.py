"""Classic-protocol members of a consumer group (online migration), after Kafka's classicGroup*ToConsumerGroup.

Once a classic group is upgraded, its remaining members still speak
JoinGroup/SyncGroup/Heartbeat/LeaveGroup. Here those requests are answered
from the consumer group, as records and responses like a heartbeat's:
- JoinGroup is a heartbeat in disguise: the member's subscription (from its
  consumer protocol metadata) may bump the group epoch, the assignor reruns,
  and the member reconciles a step with the partitions its subscription says it
  still owns. The response's generation is the member epoch; no member is the
  leader, nobody computes an assignment.
- SyncGroup answers with the member's current assignment, in its own
  consumer-protocol version.
- Heartbeat answers REBALANCE_IN_PROGRESS when the member has to rejoin: the
  group epoch moved past its epoch, it must revoke partitions, or partitions it
  waited for are free now.
- LeaveGroup removes the member and bumps the group epoch.
Timers (session, join, sync) are the caller's (consumer_coordinator.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from klamm.coordinator.consumer_group import (ClassicMetadata, ConsumerGroup, ConsumerGroupRecord, ConsumerMember,
                                              GroupEpochRecord, MemberState, SubscriptionMetadataRecord, TopicMetadata)
from klamm.coordinator.consumer_heartbeat import (GroupSettings, HeartbeatRequest, Outcome, heartbeat, remove_member,
                                                  subscription_metadata)
from klamm.coordinator.consumer_protocol import PROTOCOL_TYPE, by_id, by_name, decode_subscription, encode_assignment, \
    metadata_version
from klamm.protocol.errors import ErrorCode, KafkaError

Topics = Mapping[str, TopicMetadata]


@dataclass(frozen=True)
class ClassicJoin:
    group_id: str
    member_id: str  # never empty here: the caller gives a new member its id first
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]


def check_join(group: ConsumerGroup, req: ClassicJoin, settings: GroupSettings) -> None:
    """Kafka's throwIfConsumerGroupIsFull and throwIfClassicProtocolIsNotSupported."""
    if len(group.members) >= settings.max_size and req.member_id not in group.members \
            and group.static_member(req.instance_id) is None:
        raise KafkaError(ErrorCode.group_max_size_reached,
                         f"The consumer group has reached its maximum capacity of {settings.max_size} members.")
    if not req.protocols or not group.supports_classic_protocols(req.protocol_type, {n for n, _ in req.protocols}):
        raise KafkaError(ErrorCode.inconsistent_group_protocol, f"Member {req.member_id}'s protocols are not supported.")


def join(group: ConsumerGroup, req: ClassicJoin, topics: Topics, settings: GroupSettings) -> Outcome:
    """A classic JoinGroup to a non-empty consumer group (checked by check_join); a JoinGroup response."""
    subscription = decode_subscription(req.protocols[0][1])
    ids = {name: t.topic_id for name, t in topics.items()}
    out = heartbeat(group, HeartbeatRequest(
        group.group_id, req.member_id, 0, instance_id=req.instance_id, rack_id=subscription.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms, topic_names=subscription.topics,
        owned=by_id(subscription.owned, ids), client_id=req.client_id, client_host=req.client_host,
        classic=ClassicMetadata(req.session_timeout_ms, req.protocols)), topics, settings)
    assert out.member is not None
    out.response = {"error_code": ErrorCode.none, "generation_id": out.member.member_epoch,
                    "protocol_type": PROTOCOL_TYPE, "protocol_name": req.protocols[0][0], "leader": "",
                    "skip_assignment": False, "member_id": out.member.member_id, "members": []}
    return out


def classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
    """Kafka's validateConsumerGroupMember plus throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id,
                             f"Member {member_id} is not a member of group {group.group_id}.")
    else:
        member = group.static_member(instance_id)
        if member is None:
            raise KafkaError(ErrorCode.unknown_member_id,
                             f"Member with instance id {instance_id} is not a member of group {group.group_id}.")
        if member_id and member.member_id != member_id:
            raise KafkaError(ErrorCode.fenced_instance_id, f"Static member {member_id} with instance id "
                             f"{instance_id} was fenced by member {member.member_id}.")
    if not member.uses_classic:
        raise KafkaError(ErrorCode.unknown_member_id, f"Member {member.member_id} does not use the classic protocol.")
    return member


def _check_generation(member: ConsumerMember, generation: int) -> None:
    if member.member_epoch != generation:
        raise KafkaError(ErrorCode.illegal_generation,
                         f"The request generation id {generation} is not equal to the member epoch "
                         f"{member.member_epoch} of member {member.member_id}.")


def must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Kafka's throwIfRebalanceInProgress: the group moved on, and the member is not mid-revocation."""
    return group.group_epoch > member.member_epoch and member.current.state is not MemberState.UNREVOKED_PARTITIONS


def sync(group: ConsumerGroup, member: ConsumerMember, generation: int, protocol_type: str | None,
         protocol_name: str | None, topics: Topics) -> dict[str, Any]:
    """A classic SyncGroup of `member` (from classic_member): its response, its current assignment.
    Raises the request's error."""
    _check_generation(member, generation)
    classic = member.subscription.classic
    assert classic is not None
    if protocol_type is not None and protocol_type != PROTOCOL_TYPE:
        raise KafkaError(ErrorCode.inconsistent_group_protocol,
                         f"The protocol type {protocol_type} is not the group's, {PROTOCOL_TYPE}.")
    if protocol_name is not None and protocol_name != classic.protocol_name:
        raise KafkaError(ErrorCode.inconsistent_group_protocol,
                         f"The protocol name {protocol_name} is not {classic.protocol_name}, the join response's.")
    if must_rejoin(group, member):
        raise KafkaError(ErrorCode.rebalance_in_progress, f"A new rebalance is triggered in group {group.group_id} "
                         f"and member {member.member_id} should rejoin to catch up.")
    names = {t.topic_id: t.name for t in topics.values()}
    assignment = encode_assignment(by_name(member.current.assigned, names), metadata_version(classic.protocols[0][1]))
    return {"error_code": ErrorCode.none, "protocol_type": PROTOCOL_TYPE, "protocol_name": classic.protocol_name,
            "assignment": assignment}


def heartbeat_error(group: ConsumerGroup, member: ConsumerMember) -> ErrorCode:
    """A classic Heartbeat's answer (the member and generation already checked)."""
    if (member.member_epoch < group.group_epoch or member.current.state is MemberState.UNREVOKED_PARTITIONS
            or (member.current.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))):
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def check_heartbeat(group: ConsumerGroup, member_id: str, instance_id: str | None, generation: int) -> ConsumerMember:
    member = classic_member(group, member_id, instance_id)
    _check_generation(member, generation)
    return member


def leave(group: ConsumerGroup, leaving: list[ConsumerMember], topics: Topics) -> list[ConsumerGroupRecord]:
    """Records removing classic members (LeaveGroup): their tombstones, then one group epoch bump."""
    if not leaving:
        return []
    records: list[ConsumerGroupRecord] = []
    for member in leaving:
        records.extend(remove_member(group.group_id, member.member_id))
    gone = {m.member_id for m in leaving}
    metadata = subscription_metadata([m for m in group.members.values() if m.member_id not in gone], topics)
    if metadata != group.subscription_metadata:
        records.append(SubscriptionMetadataRecord(group.group_id, metadata))
    records.append(GroupEpochRecord(group.group_id, group.group_epoch + 1))
    return records
