"""One classic group: its members, state, generation and committed offsets.

States and transitions follow Kafka's ClassicGroupState:
  Empty -> PreparingRebalance (a member joins)
  PreparingRebalance -> CompletingRebalance (join complete, members remain) | Empty (none remain)
  CompletingRebalance -> Stable (the leader's assignment is stored) | PreparingRebalance
  Stable -> PreparingRebalance
  any -> Dead (the group is deleted, or expires empty)
Members hold the callbacks of their pending JoinGroup/SyncGroup: those requests
answer when the rebalance completes.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from klamm.coordinator.records import CommittedOffset, GroupRecord, MemberRecord
from klamm.protocol.errors import ErrorCode

Callback = Callable[[dict[str, Any]], None]
UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_callback: Callback | None = None
    sync_callback: Callback | None = None
    is_new: bool = False

    @property
    def awaiting_join(self) -> bool:
        return self.join_callback is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_callback is not None

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among `candidates`."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class ClassicGroup:
    group_id: str
    partition: int
    state: GroupState = GroupState.EMPTY
    state_timestamp: int = -1
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: set[str] = field(default_factory=set)  # got MEMBER_ID_REQUIRED, not joined yet
    pending_sync: set[str] = field(default_factory=set)  # joined this generation, not synced yet
    new_member_added: bool = False  # lets the initial rebalance delay extend
    in_initial_delay: bool = False  # the first rebalance of an empty group waits for more members
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)

    # state
    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition(self, state: GroupState, now: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise AssertionError(f"group {self.group_id}: illegal transition {self.state.value} -> {state.value}")
        self.state = state
        self.state_timestamp = now

    # members
    def add(self, member: Member, join_callback: Callback | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        member.join_callback = join_callback
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader_id == member_id:  # prefer a member that is rejoining
            joining = [m.member_id for m in self.members.values() if m.awaiting_join]
            self.leader_id = (joining or list(self.members) or [None])[0]
        return member

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        """A static member whose instance id now belongs to another member id was replaced."""
        if instance_id is None:
            return False
        current = self.static_members.get(instance_id)
        return current is not None and current != member_id

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    # protocols
    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type or not names:
            return False
        # A rebalancing group whose last member left has no members until its join completes, and each of
        # the joining member's protocols is then supported by all of them: Kafka takes the join.
        return not self.members or bool(names & self.candidate_protocols())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes its preferred candidate; the most votes win (ties: first in sorted order)."""
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(sorted(votes), key=lambda name: votes[name])

    # persistence
    def to_record(self, assignments: dict[str, bytes] | None = None) -> GroupRecord:
        """The group's hard state; `assignments` overlays the members' (the leader's SyncGroup)."""
        protocol = self.protocol
        assignments = assignments or {}
        return GroupRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=protocol,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=[MemberRecord(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                  m.rebalance_timeout_ms, m.session_timeout_ms,
                                  m.metadata(protocol) if protocol else b"",
                                  assignments.get(m.member_id, m.assignment))
                     for m in self.members.values()])

    @classmethod
    def from_record(cls, group_id: str, partition: int, record: GroupRecord) -> ClassicGroup:
        """A loaded group: Stable with its members if it has any (they must heartbeat), else Empty."""
        group = cls(group_id, partition, generation=record.generation, protocol_type=record.protocol_type or None,
                    protocol=record.protocol, leader_id=record.leader, state_timestamp=record.current_state_timestamp)
        for m in record.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                            m.session_timeout, record.protocol_type, [(record.protocol or "", m.subscription)],
                            m.assignment)
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        return group

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, for the consumer protocol; None when unknown."""
        if self.protocol_type != "consumer" or self.protocol is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = consumer_subscription_topics(member.metadata(self.protocol))
            if parsed is None:
                return None
            topics |= parsed
        return topics


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (v0-v3 start alike: int16 version, [string] topics)."""
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", metadata, pos)
        pos += 4
        topics = set()
        for _ in range(count):
            (length,) = struct.unpack_from(">h", metadata, pos)
            pos += 2
            topics.add(metadata[pos:pos + length].decode())
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


def join_error(error: ErrorCode, member_id: str = UNKNOWN_MEMBER_ID) -> dict[str, Any]:
    return {"error_code": error, "generation_id": NO_GENERATION, "protocol_type": None, "protocol_name": None,
            "leader": "", "skip_assignment": False, "member_id": member_id, "members": []}


def sync_response(error: ErrorCode, group: ClassicGroup | None = None, assignment: bytes = b"") -> dict[str, Any]:
    return {"error_code": error, "protocol_type": group.protocol_type if group else None,
            "protocol_name": group.protocol if group else None, "assignment": assignment}
