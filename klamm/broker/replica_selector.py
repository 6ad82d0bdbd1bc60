"""The preferred read replica of a consumer's fetch (KIP-392, `replica.selector.class`).

With a selector configured, a partition's leader may name another replica for a consumer to read from:
one in the consumer's rack (`client.rack`, the Fetch request's rack_id from v11). Kafka's
RackAwareReplicaSelector picks the leader when it is in that rack (or when no replica is), else the most
caught-up replica there: the largest log end offset, then the most recent catch-up, then the largest id.

The leader only offers replicas that can serve the fetch now, as Kafka's ReplicaManager.findPreferredReadReplica
does: in the ISR, holding the fetch offset between their log start and log end, and reachable on the listener
the request came in on. Without a selector every consumer reads from the leader (Kafka's default).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the selector weighs of one replica (Kafka's ReplicaView)."""

    node_id: int
    rack: str | None
    log_end_offset: int
    time_since_caught_up_ms: int


def select_rack_aware(client_rack: str | None, leader: ReplicaView, followers: Iterable[ReplicaView]) -> ReplicaView:
    """Kafka's RackAwareReplicaSelector: the replica a client in `client_rack` should read from."""
    if not client_rack or leader.rack == client_rack:
        return leader
    same_rack = [f for f in followers if f.rack == client_rack]
    if not same_rack:
        return leader
    return max(same_rack, key=lambda f: (f.log_end_offset, -f.time_since_caught_up_ms, f.node_id))


def preferred_read_replica(client_rack: str | None, leader: ReplicaView, followers: Iterable[ReplicaView]) -> int:
    """The node id a consumer in `client_rack` should fetch from instead of the leader; -1 for the leader."""
    chosen = select_rack_aware(client_rack, leader, followers)
    return -1 if chosen is leader else chosen.node_id
