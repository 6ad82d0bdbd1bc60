"""One consumer-protocol group (KIP-848), changed only by replaying its records.

Everything a consumer group knows is in six record types, the typed forms of
Kafka's ConsumerGroup* records of __consumer_offsets (their bytes are in
consumer_records.py):

  GroupEpochRecord          the group epoch (bumped when subscriptions or topics change)
  SubscriptionMetadataRecord the subscribed topics that exist: id and partition count
  MemberSubscriptionRecord  a member's subscription, client and timeouts
  TargetMemberRecord        the partitions the assignor gave a member
  TargetEpochRecord         the group epoch the target assignment was computed for
  CurrentAssignmentRecord   a member's epoch, state, owned partitions and those it must revoke

A None payload is the record's tombstone. The heartbeat logic
(consumer_heartbeat.py) reads the group and returns records; `replay` applies
them, when they were appended or while a partition of __consumer_offsets loads.

Invariant (checked on replay): a partition is owned — assigned or pending
revocation — by at most one member. A member is given a partition only once
its previous owner has revoked it (reconciliation.py).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from klamm.coordinator.records import CommittedOffset

Assignment = Mapping[uuid.UUID, frozenset[int]]
AssignmentEpochs = Mapping[uuid.UUID, Mapping[int, int]]
EMPTY: Assignment = {}

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2


class MemberState(enum.IntEnum):
    """Kafka's MemberState, with its record values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class GroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True)
class ClassicMetadata:
    """What a member that speaks the classic protocol (JoinGroup/SyncGroup) keeps: Kafka's ClassicMemberMetadata."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup response names (Kafka: the member's first)."""
        return self.protocols[0][0]


@dataclass(frozen=True)
class Subscription:
    """A member's ConsumerGroupMemberMetadata."""

    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topic_names: tuple[str, ...] = ()
    topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMetadata | None = None  # set for a member that uses the classic protocol


@dataclass(frozen=True)
class CurrentAssignment:
    """A member's ConsumerGroupCurrentMemberAssignment."""

    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # KIP-1251: the member epoch each owned partition was assigned in (topic id -> partition -> epoch). A partition
    # missing here counts as assigned in the current member epoch, the strictest reading.
    assignment_epochs: AssignmentEpochs = field(default_factory=dict)

    def owned(self) -> set[tuple[uuid.UUID, int]]:
        """Partitions the member holds: assigned, or not yet revoked."""
        return _pairs(self.assigned) | _pairs(self.pending_revocation)

    def assignment_epoch(self, topic: uuid.UUID, partition: int) -> int | None:
        """The epoch the member was given an owned partition in; None when it does not own it."""
        if partition not in self.assigned.get(topic, ()) and partition not in self.pending_revocation.get(topic, ()):
            return None
        return self.given_in(topic, partition)

    def given_in(self, topic: uuid.UUID, partition: int) -> int:
        """The assignment epoch of a partition the member owns."""
        return self.assignment_epochs.get(topic, {}).get(partition, self.member_epoch)


@dataclass(frozen=True)
class ConsumerMember:
    member_id: str
    subscription: Subscription = field(default_factory=Subscription)
    current: CurrentAssignment = field(default_factory=CurrentAssignment)

    @property
    def member_epoch(self) -> int:
        return self.current.member_epoch

    @property
    def uses_classic(self) -> bool:
        return self.subscription.classic is not None

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.current.state is MemberState.STABLE and self.current.member_epoch == epoch

    def with_subscription(self, subscription: Subscription) -> ConsumerMember:
        return replace(self, subscription=subscription)

    def with_current(self, current: CurrentAssignment) -> ConsumerMember:
        return replace(self, current=current)


# records
@dataclass(frozen=True)
class GroupEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True)
class SubscriptionMetadataRecord:
    group_id: str
    topics: Mapping[str, TopicMetadata] | None


@dataclass(frozen=True)
class MemberSubscriptionRecord:
    group_id: str
    member_id: str
    subscription: Subscription | None


@dataclass(frozen=True)
class TargetMemberRecord:
    group_id: str
    member_id: str
    partitions: Assignment | None


@dataclass(frozen=True)
class TargetEpochRecord:
    group_id: str
    epoch: int | None


@dataclass(frozen=True)
class CurrentAssignmentRecord:
    group_id: str
    member_id: str
    current: CurrentAssignment | None


ConsumerGroupRecord = (GroupEpochRecord | SubscriptionMetadataRecord | MemberSubscriptionRecord | TargetMemberRecord
                       | TargetEpochRecord | CurrentAssignmentRecord)


def _pairs(assignment: Assignment) -> set[tuple[uuid.UUID, int]]:
    return {(topic, partition) for topic, partitions in assignment.items() for partition in partitions}


@dataclass
class ConsumerGroup:
    group_id: str
    partition: int  # of __consumer_offsets
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    targets: dict[str, Assignment] = field(default_factory=dict)  # member id -> target partitions
    subscription_metadata: dict[str, TopicMetadata] = field(default_factory=dict)
    owners: dict[tuple[uuid.UUID, int], tuple[str, int]] = field(default_factory=dict)  # -> (member id, epoch)
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    exists: bool = True  # False once its group epoch tombstone replays

    # state
    @property
    def state(self) -> GroupState:
        if not self.exists:
            return GroupState.DEAD
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return GroupState.RECONCILING
        return GroupState.STABLE

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = None if instance_id is None else self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target(self, member_id: str) -> Assignment:
        return self.targets.get(member_id, EMPTY)

    def partition_epoch(self, topic: uuid.UUID, partition: int, ignoring: str | None = None) -> int:
        """The epoch of the member holding the partition; -1 if free (or held by `ignoring`)."""
        owner = self.owners.get((topic, partition))
        if owner is None or owner[0] == ignoring:
            return -1
        return owner[1]

    def subscribed_topic_names(self) -> set[str]:
        """Topic names the members list explicitly (regular expressions are resolved by the heartbeat)."""
        return {name for m in self.members.values() for name in m.subscription.topic_names}

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's supportsClassicProtocols: a consumer-type protocol every classic member supports."""
        if protocol_type != "consumer":
            return False
        classic = [m.subscription.classic for m in self.members.values() if m.subscription.classic is not None]
        if not self.members:
            return bool(names)
        return any(all(name in {p for p, _ in c.protocols} for c in classic) for name in names)

    def all_classic_except(self, member_id: str) -> bool:
        """Whether every member but `member_id` uses the classic protocol, and `member_id` does not."""
        member = self.members.get(member_id)
        return (member is not None and not member.uses_classic
                and all(m.uses_classic for m in self.members.values() if m.member_id != member_id))

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Kafka's waitingOnUnreleasedPartition: a partition of its target is still held by someone else."""
        if member.current.state is not MemberState.UNRELEASED_PARTITIONS:
            return False
        for topic, partitions in self.target(member.member_id).items():
            have = member.current.assigned.get(topic, frozenset())
            if any(p not in have and self.partition_epoch(topic, p) != -1 for p in partitions):
                return True
        return False

    def preferred_assignor(self) -> str | None:
        """The server assignor most members ask for (Kafka's computePreferredServerAssignor)."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            name = member.subscription.server_assignor
            if name:
                counts[name] = counts.get(name, 0) + 1
        return max(sorted(counts), key=lambda name: counts[name]) if counts else None

    # replay
    def replay(self, record: ConsumerGroupRecord) -> None:
        if isinstance(record, GroupEpochRecord):
            if record.epoch is None:
                if self.members:
                    raise AssertionError(f"group {self.group_id}: deleted with members")
                self.exists = False
            else:
                self.group_epoch = record.epoch
        elif isinstance(record, SubscriptionMetadataRecord):
            self.subscription_metadata = dict(record.topics or {})
        elif isinstance(record, MemberSubscriptionRecord):
            self._replay_subscription(record.member_id, record.subscription)
        elif isinstance(record, TargetMemberRecord):
            if record.partitions is None:
                self.targets.pop(record.member_id, None)
            else:
                self.targets[record.member_id] = record.partitions
        elif isinstance(record, TargetEpochRecord):
            self.assignment_epoch = -1 if record.epoch is None else record.epoch
        elif isinstance(record, CurrentAssignmentRecord):
            self._replay_current(record.member_id, record.current)

    def _replay_subscription(self, member_id: str, subscription: Subscription | None) -> None:
        old = self.members.get(member_id)
        old_instance = None if old is None else old.subscription.instance_id
        if old_instance is not None and self.static_members.get(old_instance) == member_id:
            del self.static_members[old_instance]
        if subscription is None:
            if old is not None and old.current.owned():
                raise AssertionError(f"group {self.group_id}: member {member_id} removed while owning partitions")
            self.members.pop(member_id, None)
            return
        member = ConsumerMember(member_id) if old is None else old
        self.members[member_id] = member.with_subscription(subscription)
        if subscription.instance_id is not None:
            self.static_members[subscription.instance_id] = member_id

    def _replay_current(self, member_id: str, current: CurrentAssignment | None) -> None:
        member = self.members.get(member_id)
        if member is None:
            if current is None:
                return
            raise AssertionError(f"group {self.group_id}: assignment of unknown member {member_id}")
        for pair in member.current.owned():
            if self.owners.get(pair, ("",))[0] == member_id:
                del self.owners[pair]
        if current is None:
            current = CurrentAssignment(LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH)
        for pair in current.owned():
            holder = self.owners.get(pair)
            if holder is not None and holder[0] != member_id:
                raise AssertionError(f"group {self.group_id}: partition {pair} given to {member_id} "
                                     f"while {holder[0]} holds it")
            self.owners[pair] = (member_id, current.member_epoch)
        self.members[member_id] = member.with_current(current)
