"""Online migration between classic and consumer groups (Kafka's group.consumer.migration.policy).

Upgrade: a consumer-protocol member's first heartbeat to a non-empty classic
group of protocol type "consumer" converts it (Kafka's convertToConsumerGroup).
The classic group's GroupMetadata is tombstoned and the consumer group is
written whole: each classic member becomes a member with its classic metadata
(session timeout, JoinGroup protocols), its subscription and its last
assignment as both target and current assignment, in epoch = the classic
generation. The heartbeat that triggered it then runs against that group, so
the new member bumps the group epoch and the classic members are told to
rejoin (classic_members.py).

Downgrade: when the last consumer-protocol member leaves or is fenced and
classic members remain, the consumer group is tombstoned and a classic group of
the remaining members is written, each assigned its target assignment in its
own consumer-protocol version; it then rebalances (Kafka's
convertToClassicGroup). So too when a classic static member's JoinGroup
replaces the last consumer-protocol member, a static one with the same
group.instance.id (Kafka's validateOnlineDowngradeWithReplacedMemberId): the
joining member takes the replaced one's place and target assignment, and the
classic group starts Stable, without a rebalance; the member's SyncGroup gets
that assignment.

Committed offsets are records of their own and survive both: the group's
replay hands them over (consumer_coordinator.py, coordinator.py).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping

from klamm.coordinator.consumer_group import (ClassicMetadata, ConsumerGroup, ConsumerGroupRecord, ConsumerMember,
                                              CurrentAssignment, CurrentAssignmentRecord, GroupEpochRecord, MemberState,
                                              MemberSubscriptionRecord, Subscription, TargetEpochRecord,
                                              TargetMemberRecord, TopicMetadata)
from klamm.coordinator.consumer_protocol import (PROTOCOL_TYPE, by_id, by_name, decode_assignment, decode_subscription,
                                                 encode_assignment, metadata_version)
from klamm.coordinator.group import ClassicGroup, GroupState, Member
from klamm.protocol.errors import ErrorCode, KafkaError

Topics = Mapping[str, TopicMetadata]


class MigrationPolicy(enum.Enum):
    """group.consumer.migration.policy."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


def can_upgrade(classic: ClassicGroup, policy: MigrationPolicy, max_size: int) -> bool:
    """Kafka's validateOnlineUpgrade."""
    return policy.upgrades and classic.protocol_type == PROTOCOL_TYPE and len(classic.members) <= max_size


def can_downgrade(group: ConsumerGroup, leaving: str, policy: MigrationPolicy, classic_max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMember: only classic members would remain, at least one."""
    return (group.all_classic_except(leaving) and len(group.members) > 1 and policy.downgrades
            and len(group.members) - 1 <= classic_max_size)


def can_downgrade_replacing(group: ConsumerGroup, replaced: str, policy: MigrationPolicy,
                            classic_max_size: int) -> bool:
    """Kafka's validateOnlineDowngradeWithReplacedMemberId: a classic static member replaces `replaced`, the
    only member that does not use the classic protocol."""
    return group.all_classic_except(replaced) and policy.downgrades and len(group.members) <= classic_max_size


def upgrade_records(classic: ClassicGroup, topics: Topics) -> list[ConsumerGroupRecord]:
    """The records of the consumer group a non-empty classic group becomes (Kafka's createConsumerGroupRecords)."""
    ids = {name: t.topic_id for name, t in topics.items()}
    epoch = classic.generation
    group_id = classic.group_id
    subscriptions: list[MemberSubscriptionRecord] = []
    targets: list[TargetMemberRecord] = []
    currents: list[CurrentAssignmentRecord] = []
    taken: set[tuple[uuid.UUID, int]] = set()
    for member in classic.members.values():
        metadata = member.metadata(classic.protocol) if classic.protocol else member.protocols[0][1]
        try:
            subscription = decode_subscription(metadata)
        except KafkaError:
            raise KafkaError(ErrorCode.group_id_not_found, f"Cannot upgrade the classic group {group_id} to a "
                             "consumer group because the embedded consumer protocol is malformed.") from None
        assigned = _unique(by_id(decode_assignment(member.assignment), ids), taken)
        subscriptions.append(MemberSubscriptionRecord(group_id, member.member_id, Subscription(
            instance_id=member.group_instance_id, rack_id=subscription.rack_id, client_id=member.client_id,
            client_host=member.client_host, topic_names=tuple(sorted(subscription.topics)),
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            classic=ClassicMetadata(member.session_timeout_ms, tuple(member.protocols)))))
        targets.append(TargetMemberRecord(group_id, member.member_id, assigned))
        currents.append(CurrentAssignmentRecord(group_id, member.member_id,
                                                CurrentAssignment(epoch, epoch, MemberState.STABLE, assigned, {})))
    return [*subscriptions, GroupEpochRecord(group_id, epoch), *targets, TargetEpochRecord(group_id, epoch), *currents]


def _unique(assignment: dict[uuid.UUID, frozenset[int]],
            taken: set[tuple[uuid.UUID, int]]) -> dict[uuid.UUID, frozenset[int]]:
    """A member's partitions that no earlier member holds (a consumer group never has two owners of one)."""
    result = {}
    for topic, partitions in assignment.items():
        free = frozenset(p for p in partitions if (topic, p) not in taken)
        taken |= {(topic, p) for p in free}
        if free:
            result[topic] = free
    return result


def scratch_group(group_id: str, partition: int, records: list[ConsumerGroupRecord]) -> ConsumerGroup:
    """The consumer group `records` create, for the heartbeat that follows them to read."""
    group = ConsumerGroup(group_id, partition)
    for record in records:
        group.replay(record)
    return group


def classic_group_from(group: ConsumerGroup, leaving: str, topics: Topics, now: int,
                       joining: ConsumerMember | None = None) -> ClassicGroup:
    """The Stable classic group of every member but `leaving`, each assigned its target (Kafka's fromConsumerGroup);
    with `joining` (a classic static member replacing `leaving`), that member too, with `leaving`'s target."""
    classic = ClassicGroup(group.group_id, group.partition, state=GroupState.STABLE, state_timestamp=now,
                           generation=group.group_epoch, protocol_type=PROTOCOL_TYPE, offsets=group.offsets)
    members = [m for m in group.members.values() if m.member_id != leaving] + ([joining] if joining else [])
    for member in members:
        metadata = member.subscription.classic
        if metadata is None:
            continue
        classic.add(Member(member.member_id, member.subscription.instance_id, member.subscription.client_id,
                           member.subscription.client_host, member.subscription.rebalance_timeout_ms,
                           metadata.session_timeout_ms, PROTOCOL_TYPE, list(metadata.protocols)), None)
    classic.protocol = classic.select_protocol()
    names = {t.topic_id: t.name for t in topics.values()}
    for member in classic.members.values():
        version = metadata_version(member.metadata(classic.protocol))
        target = group.target(leaving if joining is not None and member.member_id == joining.member_id
                              else member.member_id)
        member.assignment = encode_assignment(by_name(target, names), version)
    return classic
