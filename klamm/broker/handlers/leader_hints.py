"""KIP-951: a NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH answer names the partition's current leader.

Produce (v10+) and Fetch (v12+, endpoints from v16) carry, per failed partition,
`current_leader` (leader id and epoch, from this broker's metadata image) and, for
the whole response, `node_endpoints` of those leaders, so a client moves to the
new leader without a metadata round trip. Other errors carry nothing. Endpoints are
those of the listener the request came in on; a leader without it is left out.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.services import BrokerServices
from klamm.protocol.errors import ErrorCode

__all__ = ["LeaderHints"]

HINTED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


class LeaderHints:
    """Collects the leaders named in one response's errors."""

    def __init__(self, broker: BrokerServices, listener: str = "") -> None:
        self._broker = broker
        self._listener = listener
        self._leaders: set[int] = set()

    def add(self, entry: dict[str, Any], topic: str, index: int) -> dict[str, Any]:
        """`entry` (a partition response) with its current_leader, when its error calls for one."""
        if entry.get("error_code") not in HINTED:
            return entry
        topic_image = self._broker.controller.image.topics_by_name.get(topic)
        partition = topic_image.partitions.get(index) if topic_image is not None else None
        if partition is None or partition.leader < 0:
            return entry
        self._leaders.add(partition.leader)
        entry["current_leader"] = {"leader_id": partition.leader, "leader_epoch": partition.leader_epoch}
        return entry

    def node_endpoints(self) -> list[dict[str, Any]]:
        brokers = self._broker.controller.image.brokers
        endpoints = []
        for node in sorted(self._leaders):
            endpoint = self._broker.endpoint_for(node, self._listener) if node in brokers else None
            if endpoint is not None:
                endpoints.append({"node_id": node, "host": endpoint[0], "port": endpoint[1],
                                  "rack": brokers[node].rack})
        return endpoints
