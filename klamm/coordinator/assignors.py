"""Server-side assignors of consumer-protocol groups (KIP-848): `uniform` and `range`.

An assignor maps each member to the partitions it should own, from the
members' subscriptions (topic ids), the partition counts of those topics and
the group's current target assignment. It is a pure function: the coordinator
stores what it returns as the new target assignment.

- `uniform` (Kafka's default): balanced and sticky. A partition stays with its
  current target owner while that member still subscribes to its topic; the
  rest go to the least-loaded subscriber; then partitions move, one at a time,
  from a member to a subscriber holding at least two fewer, until no such move
  is left. With identical subscriptions every member ends with the floor or the
  ceiling of partitions/members.
- `range`: per topic, its subscribers sorted by member id take contiguous
  ranges, the first ones one partition more. Topics with the same subscribers
  and partition count are co-partitioned: partition i of each goes to the same
  member.

Neither looks at racks (a member's rack_id, the partitions' replica racks), as
Kafka 4.0's UniformAssignor and RangeAssignor do not: the uniform builders'
rack-aware code was taken out before 4.0 and the range assignor never had any;
rack awareness for the server-side uniform assignor is later work (KAFKA-19909).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

# topic id -> partitions
Assignment = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of a member."""

    subscribed: frozenset[uuid.UUID]  # topic ids, of existing topics only
    instance_id: str | None = None
    rack_id: str | None = None


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int], Mapping[str, Assignment]],
                    dict[str, dict[uuid.UUID, frozenset[int]]]]


def _freeze(owned: dict[str, dict[uuid.UUID, set[int]]]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    return {member: {topic: frozenset(parts) for topic, parts in sorted(topics.items()) if parts}
            for member, topics in owned.items()}


def uniform(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int],
            current: Mapping[str, Assignment]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    load = dict.fromkeys(members, 0)
    taken: set[tuple[uuid.UUID, int]] = set()
    # 1. stickiness: keep what each member is still subscribed to
    for member_id in sorted(members):
        spec = members[member_id]
        for topic, partitions in current.get(member_id, {}).items():
            if topic not in spec.subscribed or topic not in topics:
                continue
            for partition in sorted(partitions):
                if partition < topics[topic] and (topic, partition) not in taken:
                    taken.add((topic, partition))
                    owned[member_id].setdefault(topic, set()).add(partition)
                    load[member_id] += 1
    subscribers = {topic: sorted(m for m, spec in members.items() if topic in spec.subscribed) for topic in topics}
    # 2. the rest to the least-loaded subscriber
    for topic in sorted(topics, key=str):
        if not subscribers[topic]:
            continue
        for partition in range(topics[topic]):
            if (topic, partition) in taken:
                continue
            member_id = min(subscribers[topic], key=lambda m: (load[m], m))
            owned[member_id].setdefault(topic, set()).add(partition)
            load[member_id] += 1
    # 3. balance: each move lowers the sum of squared loads, so this ends
    moved = True
    while moved:
        moved = False
        for giver in sorted(members, key=lambda m: (-load[m], m)):
            for topic in sorted(owned[giver], key=str):
                for partition in sorted(owned[giver][topic], reverse=True):
                    taker = min(subscribers[topic], key=lambda m: (load[m], m))
                    if load[giver] > load[taker] + 1:
                        owned[giver][topic].discard(partition)
                        owned[taker].setdefault(topic, set()).add(partition)
                        load[giver] -= 1
                        load[taker] += 1
                        moved = True
    return _freeze(owned)


def range_(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int],
           current: Mapping[str, Assignment]) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    owned: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in members}
    for topic, count in topics.items():
        subscribers = sorted(m for m, spec in members.items() if topic in spec.subscribed)
        if not subscribers:
            continue
        base, extra = divmod(count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = base + (1 if index < extra else 0)
            if size:
                owned[member_id][topic] = set(range(start, start + size))
            start += size
    return _freeze(owned)


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
