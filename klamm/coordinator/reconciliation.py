"""Moving one member's current assignment towards its target, a step per heartbeat (Kafka's CurrentAssignmentBuilder).

The rules, for member M with target T at target epoch E:
- Partitions M holds that T no longer has must be revoked first: M stays in its
  epoch, in UNREVOKED_PARTITIONS, until a heartbeat no longer lists them as
  owned; then it moves on to epoch + 1 and reconciles again.
- Partitions of T that another member still holds (assigned or pending
  revocation) are not given yet: M reaches epoch E in UNRELEASED_PARTITIONS
  and gets them on a later heartbeat, once they are free.
- Otherwise M reaches epoch E with what T gives it: STABLE.
So no partition is ever owned by two members at once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from klamm.coordinator.consumer_group import Assignment, ConsumerMember, CurrentAssignment, MemberState
from klamm.protocol.errors import ErrorCode, KafkaError

# (topic id, partition) -> epoch of the member holding it, -1 when free
PartitionEpoch = Callable[[uuid.UUID, int], int]


def reconcile(member: ConsumerMember, target_epoch: int, target: Assignment, partition_epoch: PartitionEpoch,
              owned: Assignment | None) -> ConsumerMember:
    """The member after one reconciliation step; `owned` is what its heartbeat reports (None: not sent)."""
    current = member.current
    if current.state is MemberState.STABLE:
        if current.member_epoch == target_epoch:
            return member
        return member.with_current(_next(current, current.member_epoch, target_epoch, target, partition_epoch,
                                         owned))
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, current.pending_revocation):
            return member
        return member.with_current(_next(current, current.member_epoch + 1, target_epoch, target, partition_epoch,
                                         owned))
    if current.state is MemberState.UNRELEASED_PARTITIONS:
        return member.with_current(_next(current, current.member_epoch, target_epoch, target, partition_epoch,
                                         owned))
    if owned is None or owned:  # a state this coordinator does not know: start the member over
        raise KafkaError(ErrorCode.fenced_member_epoch, "The consumer group member is in an unknown state. "
                         "The member must abandon all its partitions and rejoin.")
    return member.with_current(_next(current, target_epoch, target_epoch, target, partition_epoch, owned))


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    """Whether the reported partitions include any of `partitions` (unknown when not reported: yes)."""
    if owned is None:
        return True
    return any(partitions.get(topic, frozenset()) & set(parts) for topic, parts in owned.items())


def _next(current: CurrentAssignment, epoch: int, target_epoch: int, target: Assignment,
          partition_epoch: PartitionEpoch, owned: Assignment | None) -> CurrentAssignment:
    kept: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    add: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic in _topics(target, current.assigned):
        wanted = target.get(topic, frozenset())
        have = current.assigned.get(topic, frozenset())
        keep = have & wanted
        missing = wanted - keep
        free = frozenset(p for p in missing if partition_epoch(topic, p) == -1)
        unreleased = unreleased or free != missing
        for into, parts in ((kept, keep), (revoke, have - keep), (add, free)):
            if parts:
                into[topic] = parts
    if revoke and _owns_any(owned, revoke):
        epochs = _epochs(current, (kept, revoke))
        return CurrentAssignment(epoch, _previous(current, epoch), MemberState.UNREVOKED_PARTITIONS, kept, revoke,
                                 epochs)
    assigned = {topic: kept.get(topic, frozenset()) | add.get(topic, frozenset()) for topic in _topics(kept, add)}
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    epochs = _epochs(current, (kept,), add, target_epoch)
    return CurrentAssignment(target_epoch, _previous(current, target_epoch), state, assigned, {}, epochs)


def _epochs(current: CurrentAssignment, held: tuple[Assignment, ...], added: Assignment | None = None,
            epoch: int = 0) -> dict[uuid.UUID, dict[int, int]]:
    """KIP-1251's assignment epochs: a partition the member keeps keeps the epoch it was given in; one it is given
    now takes `epoch`, the epoch the member moves to."""
    result: dict[uuid.UUID, dict[int, int]] = {}
    for assignment in held:
        for topic, parts in assignment.items():
            into = result.setdefault(topic, {})
            for p in parts:
                into[p] = current.given_in(topic, p)
    for topic, parts in (added or {}).items():
        result.setdefault(topic, {}).update(dict.fromkeys(parts, epoch))
    return result


def _previous(current: CurrentAssignment, epoch: int) -> int:
    """Each step records the epoch it left as the previous one (Kafka's updateMemberEpoch)."""
    return current.member_epoch


def _topics(*assignments: Assignment) -> list[uuid.UUID]:
    seen: dict[uuid.UUID, None] = {}
    for assignment in assignments:
        for topic in assignment:
            seen[topic] = None
    return sorted(seen, key=str)


def as_assignment(pairs: Iterable[tuple[uuid.UUID, Iterable[int]]]) -> dict[uuid.UUID, frozenset[int]]:
    """A heartbeat's topic partitions as an assignment (a topic listed twice: its partitions together)."""
    result: dict[uuid.UUID, frozenset[int]] = {}
    for topic, partitions in pairs:
        result[topic] = result.get(topic, frozenset()) | frozenset(partitions)
    return result
