"""WriteTxnMarkers to other brokers: how a transaction coordinator ends a transaction on partitions led elsewhere.

Kafka's TransactionMarkerChannelManager, reduced to what the coordinator needs:
one connection per leader (klamm.broker.client), one WriteTxnMarkers v1 request
per marker, the partition's error as the answer. An unreachable leader is
KAFKA_STORAGE_ERROR-like for the caller: it retries the marker later.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from klamm.broker.client import BrokerConnections, BrokerUnavailable
from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity
from klamm.protocol.errors import ErrorCode

log = logging.getLogger("klamm.txn_markers")

WRITE_TXN_MARKERS = 27


class TxnMarkerChannel:
    def __init__(self, node_id: int, endpoint_of: Callable[[int], tuple[str, int] | None],
                 timeout_ms: int, security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.node_id = node_id
        self._connections = BrokerConnections(endpoint_of, f"klamm-txn-markers-{node_id}", timeout_ms / 1000,
                                              security)

    async def write(self, leader_id: int, topic: str, index: int, producer_id: int, producer_epoch: int,
                    coordinator_epoch: int, commit: bool) -> ErrorCode:
        """Ask `leader_id` to write the marker; its answer for the partition (NOT_LEADER_OR_FOLLOWER if unreachable)."""
        connection = self._connections.get(leader_id)
        if connection is None:
            return ErrorCode.not_leader_or_follower
        try:
            response = await connection.request(WRITE_TXN_MARKERS, 1, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                "coordinator_epoch": coordinator_epoch, "topics": [{"name": topic, "partition_indexes": [index]}]}]})
        except BrokerUnavailable as exc:
            log.info("WriteTxnMarkers to broker %d: %s", leader_id, exc)
            return ErrorCode.not_leader_or_follower
        for marker in response.markers:
            for answer in marker.topics:
                for partition in answer.partitions:
                    return partition.error_code
        return ErrorCode.unknown_server_error

    def close(self) -> None:
        self._connections.close()
