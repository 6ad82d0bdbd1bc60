"""How a broker reaches the active controller when the quorum has several voters.

Each of the broker's controller clients (the metadata fetcher, the lifecycle,
the writes) holds a `QuorumConnection`: it sends to the voter the broker last
learned leads, over a connection of its own (a long-polling fetch must not hold
up a heartbeat). The voters share one `ControllerLocator`. When a voter cannot
be reached or turns the request away (a standby closes the connection of a
write, as it cannot take it), the request fails with BrokerUnavailable, as with
a single controller, and the next try goes to the next voter; a metadata fetch
answered NOT_LEADER_OR_FOLLOWER names the leader, which the fetcher passes on
(and a combined node learns it from its own Raft node). When the broker turns
from one voter to another, every request in flight to the one it left, or
waiting its turn there, gives up at once and is tried again at the new one, as
Kafka's NodeToControllerChannelManager drops its connection to a controller that
is no longer active: a write sent to a controller cut off from the network would
otherwise hold the connection until its timeout (request.timeout.ms).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity

__all__ = ["ControllerLocator", "QuorumConnection"]


class ControllerLocator:
    def __init__(self, voters: Mapping[int, tuple[str, int]]) -> None:
        self.voters = dict(voters)
        self._order = sorted(self.voters)
        self.leader = self._order[0]
        self._on_move: list[Callable[[int], None]] = []

    def on_move(self, callback: Callable[[int], None]) -> None:
        """Call `callback(previous)` whenever the broker turns from voter `previous` to another."""
        self._on_move.append(callback)

    def learn(self, leader_id: int) -> None:
        if leader_id in self.voters:
            self._move(leader_id)

    def failed(self, voter: int) -> None:
        """`voter` did not serve: try the next one (unless another request already moved on)."""
        if self.leader == voter:
            self._move(self._order[(self._order.index(voter) + 1) % len(self._order)])

    def _move(self, voter: int) -> None:
        previous, self.leader = self.leader, voter
        if voter != previous:
            for callback in self._on_move:
                callback(previous)


class QuorumConnection:
    def __init__(self, locator: ControllerLocator, client_id: str, timeout_s: float,
                 security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.locator = locator
        self._connections = {voter: BrokerConnection(host, port, client_id, timeout_s, security)
                             for voter, (host, port) in locator.voters.items()}
        locator.on_move(lambda previous: self._connections[previous].reset())

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
