"""Transaction verification with a coordinator on another broker (KIP-890 part 1).

A partition leader accepts the first transactional batch of a producer only once
the producer's transaction coordinator confirms the partition is in its ongoing
transaction; otherwise a late or stray batch would open a transaction there that
no marker ever ends (a "hanging" transaction that pins the last stable offset).
When the coordinator is this broker, the produce path asks it directly. When it is
another broker, this module asks it with AddPartitionsToTxn v5 `verify_only`, as
Kafka's AddPartitionsToTxnManager does: the requests waiting for one coordinator go
in a single AddPartitionsToTxn while the previous one is in flight, one entry per
transactional id.

The answer is already a produce error: the coordinator's retriable answers and a
broken connection become NOT_ENOUGH_REPLICAS, which every producer retries without
a metadata refresh, as Kafka maps them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from klamm.broker.client import BrokerConnections, BrokerUnavailable
from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity
from klamm.protocol.errors import ErrorCode

log = logging.getLogger("klamm.txn_verification")

ADD_PARTITIONS_TO_TXN, VERSION = 24, 5

# what the coordinator (or the way to it) answered -> what the producer is told
_RETRIABLE = {ErrorCode.concurrent_transactions, ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
              ErrorCode.coordinator_not_available, ErrorCode.not_coordinator}
_RENAMED = {ErrorCode.producer_fenced: ErrorCode.invalid_producer_epoch,
            ErrorCode.transaction_abortable: ErrorCode.invalid_txn_state,
            ErrorCode.cluster_authorization_failed: ErrorCode.invalid_txn_state}


def produce_error(code: ErrorCode) -> ErrorCode:
    """The produce answer for a verification that ended with `code` (Kafka's ReplicaManager mapping)."""
    if code in _RETRIABLE:
        return ErrorCode.not_enough_replicas
    return _RENAMED.get(code, code)


@dataclass
class _Txn:
    producer_id: int
    producer_epoch: int
    waiting: dict[tuple[str, int], list[asyncio.Future[ErrorCode]]] = field(default_factory=dict)

    def answer(self, errors: dict[tuple[str, int], ErrorCode] | ErrorCode) -> None:
        for tp, futures in self.waiting.items():
            code = errors if isinstance(errors, ErrorCode) else errors.get(tp, ErrorCode.none)
            for future in futures:
                if not future.done():
                    future.set_result(produce_error(code))


class TxnVerifier:
    """Verifies transactional partitions with coordinators on other brokers, a batched request per coordinator."""

    def __init__(self, node_id: int, endpoint_of: Callable[[int], tuple[str, int] | None], timeout_ms: int,
                 security: PeerSecurity = PLAINTEXT_PEER) -> None:
        self.node_id = node_id
        self._connections = BrokerConnections(endpoint_of, f"klamm-txn-verification-{node_id}", timeout_ms / 1000,
                                              security)
        self._waiting: dict[int, dict[str, _Txn]] = {}  # coordinator -> transactional id -> what to ask
        self._senders: dict[int, asyncio.Task[None]] = {}

    def verify(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
               tp: tuple[str, int]) -> asyncio.Future[ErrorCode]:
        """A future of the produce error (NONE: the partition is in the ongoing transaction)."""
        future: asyncio.Future[ErrorCode] = asyncio.get_running_loop().create_future()
        waiting = self._waiting.setdefault(coordinator, {})
        txn = waiting.get(transactional_id)
        if txn is not None and (txn.producer_id, txn.producer_epoch) != (producer_id, producer_epoch):
            if producer_epoch < txn.producer_epoch:  # fenced by the request already waiting
                future.set_result(ErrorCode.invalid_producer_epoch)
                return future
            txn.answer(ErrorCode.invalid_producer_epoch)  # fenced by this one
            txn = None
        if txn is None:
            txn = waiting[transactional_id] = _Txn(producer_id, producer_epoch)
        txn.waiting.setdefault(tp, []).append(future)
        if coordinator not in self._senders:
            self._senders[coordinator] = asyncio.ensure_future(self._send(coordinator))
        return future

    async def _send(self, coordinator: int) -> None:
        """Ask `coordinator` until nothing waits for it; what arrives meanwhile goes in the next request."""
        try:
            while txns := self._waiting.pop(coordinator, None):
                try:
                    errors = await self._ask(coordinator, txns)
                except Exception:  # never leave a produce waiting
                    log.exception("transaction verification with broker %d failed", coordinator)
                    errors = {}
                for transactional_id, txn in txns.items():
                    txn.answer(errors.get(transactional_id, ErrorCode.network_exception))
        finally:
            del self._senders[coordinator]

    async def _ask(self, coordinator: int, txns: dict[str, _Txn]
                   ) -> dict[str, dict[tuple[str, int], ErrorCode] | ErrorCode]:
        connection = self._connections.get(coordinator)
        if connection is None:
            return {transactional_id: ErrorCode.coordinator_not_available for transactional_id in txns}
        try:
            response = await connection.request(ADD_PARTITIONS_TO_TXN, VERSION, {"transactions": [
                {"transactional_id": transactional_id, "producer_id": txn.producer_id,
                 "producer_epoch": txn.producer_epoch, "verify_only": True, "topics": _topics(txn)}
                for transactional_id, txn in txns.items()]})
        except BrokerUnavailable as exc:
            log.info("AddPartitionsToTxn (verify) to broker %d: %s", coordinator, exc)
            return {transactional_id: ErrorCode.network_exception for transactional_id in txns}
        if response.error_code != ErrorCode.none:
            return {transactional_id: ErrorCode(response.error_code) for transactional_id in txns}
        return {result.transactional_id: {(topic.name, partition.partition_index): ErrorCode(partition.partition_error_code)
                                          for topic in result.topic_results
                                          for partition in topic.results_by_partition}
                for result in response.results_by_transaction}

    def close(self) -> None:
        for sender in self._senders.values():
            sender.cancel()
        self._connections.close()


def _topics(txn: _Txn) -> list[dict[str, object]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in txn.waiting:
        by_topic.setdefault(topic, []).append(index)
    return [{"name": topic, "partitions": indexes} for topic, indexes in by_topic.items()]
