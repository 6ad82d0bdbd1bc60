"""How a broker reaches the active controller when the quorum has several voters.

Each of the broker's controller clients (the metadata fetcher, the lifecycle,
the writes) holds a `QuorumConnection`: it sends to the voter the broker last
learned leads, over a connection of its own (a long-polling fetch must not hold
up a heartbeat). The voters share one `ControllerLocator`. When a voter cannot
be reached or turns the request away (a standby closes the connection of a
write, as it cannot take it), the request fails with BrokerUnavailable, as with
a single controller, and the next try goes to the next voter; a metadata fetch
answered NOT_LEADER_OR_FOLLOWER names the leader, which the fetcher passes on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity

__all__ = ["ControllerLocator", "QuorumConnection"]


class ControllerLocator:
    def __init__(self, voters: Mapping[int, tuple[str, int]]) -> None:
        self.voters = dict(voters)
        self._order = sorted(self.voters)
        self.leader = self._order[0]

    def learn(self, leader_id: int) -> None:
        if leader_id in self.voters:
            self.leader = leader_id

    def failed(self, voter: int) -> None:
        """`voter` did not serve: try the next one (unless another request already moved on)."""
        if self.leader == voter:
            self.leader = self._order[(self._order.index(voter) + 1) % len(self._order)]


class QuorumConnection:
    def __init__(self, locator: ControllerLocator, client_id: str, timeout_s: float,
                 security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.locator = locator
        self._connections = {voter: BrokerConnection(host, port, client_id, timeout_s, security)
                             for voter, (host, port) in locator.voters.items()}

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float | None = None) -> Any:
        voter = self.locator.leader
        try:
            return await self._connections[voter].request(api_key, version, body, timeout_s)
        except BrokerUnavailable:
            self.locator.failed(voter)
            raise

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
