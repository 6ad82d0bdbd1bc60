"""The transaction coordinator inside the broker: __transaction_state, markers and timers.

The topic is created on the first FindCoordinator(TRANSACTION) or transactional
InitProducerId (loaded at start-up when it exists):
`transaction.state.log.num.partitions` partitions, cleanup.policy=compact, and
a replication factor capped at the live brokers (as for __consumer_offsets).

`run` appends an operation's records, replays them, and for a prepared
transaction writes the markers locally — what Kafka's WriteTxnMarkers does — to
every partition of the transaction (a marker on __consumer_offsets also tells
the group coordinator to publish or drop the pending offsets) and then the
Complete record. Loading finishes transactions a crash left prepared; timed-out
transactions are aborted by the timer loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from klamm.coordinator.loading import read_batches
from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.runtime import wall_clock_ms
from klamm.coordinator.timer import Timer
from klamm.coordinator.timer_loop import run_timers
from klamm.coordinator.transactions.coordinator import Completion, TransactionCoordinator, TxnConfig, TxnResult
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import ControlRecordType, NewRecord, build_batch, decode_batch
from klamm.protocol.topics import CONSUMER_OFFSETS, TRANSACTION_STATE

log = logging.getLogger("klamm.transactions")

_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
}


class TransactionCoordinatorRuntime:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._wake = asyncio.Event()
        self.timer = Timer(wall_clock_ms, on_change=self._wake.set)
        self.coordinator: TransactionCoordinator | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # lifecycle
    async def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._run_timers()))
        if self._topic() is not None:
            self._load()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()

    def _topic(self) -> Any:
        return self.broker.controller.image.topics_by_name.get(TRANSACTION_STATE)

    def ensure_topic(self) -> None:
        """Create __transaction_state if missing and serve its (empty) partitions."""
        if self._topic() is None:
            config = self.broker.config
            self.broker.create_internal_topic(
                TRANSACTION_STATE, config.transaction_state_log_num_partitions,
                config.transaction_state_log_replication_factor,
                {"compression.type": "uncompressed", "segment.bytes": str(config.transaction_state_log_segment_bytes)})
        if self.coordinator is None:
            self._load()

    # loading
    def _load(self) -> None:
        partitions = len(self._topic().partitions)
        config = TxnConfig(num_partitions=partitions, max_timeout_ms=self.broker.config.transaction_max_timeout_ms)
        coordinator = TransactionCoordinator(config, self.timer, self.broker.allocate_producer_id)
        for index in range(partitions):
            coordinator.begin_loading(index)
        for index in range(partitions):
            for record in self._read_partition(index):
                coordinator.replay(record)
        self.coordinator = coordinator
        for index in range(partitions):
            for completion in coordinator.finish_loading(index):
                self._finish(completion)
        log.info("loaded %d transactional ids from %s", len(coordinator.txns), TRANSACTION_STATE)

    def _read_partition(self, index: int) -> list[CoordinatorRecord]:
        records = []
        for buf, header, start in read_batches(self.broker.replicas.get(TRANSACTION_STATE, index)):
            if header.is_control:
                continue
            records.extend(CoordinatorRecord(index, record.key, record.value)
                           for record in decode_batch(buf, header.position)[1]
                           if record.offset >= start and record.key is not None)
        return records

    # serving
    def ready(self) -> TransactionCoordinator:
        """The coordinator, creating __transaction_state on first use."""
        if self.coordinator is None:
            self.ensure_topic()
        assert self.coordinator is not None
        return self.coordinator

    def run(self, result: TxnResult) -> Any:
        """Append and replay the records; finish a prepared transaction; the response.

        A failed append raises KafkaError with the error a client should see.
        """
        self._append(result.records)
        if result.completion is not None:
            self._finish(result.completion)
        return result.response

    def _append(self, records: list[CoordinatorRecord]) -> None:
        by_partition: dict[int, list[NewRecord]] = {}
        for record in records:
            by_partition.setdefault(record.partition, []).append(NewRecord(record.key, record.value))
        try:
            for index, batch in by_partition.items():
                self.broker.replicas.get(TRANSACTION_STATE, index).append(build_batch(batch))
        except KafkaError as exc:
            log.warning("append to %s failed: %s", TRANSACTION_STATE, exc)
            raise KafkaError(_APPEND_ERRORS.get(exc.code, ErrorCode.unknown_server_error)) from None
        for record in records:
            self.ready().replay(record)

    def _finish(self, completion: Completion) -> None:
        """Write the markers of a prepared transaction, then its Complete record."""
        self._write_markers(completion)
        self.run(self.ready().complete(completion))

    def _write_markers(self, completion: Completion) -> None:
        control = ControlRecordType.COMMIT if completion.commit else ControlRecordType.ABORT
        coordinator_epoch = self._coordinator_epoch(completion.transactional_id)
        for topic, index in sorted(completion.partitions):
            try:
                partition = self.broker.replicas.get(topic, index)
                partition.append_marker(completion.producer_id, completion.producer_epoch, coordinator_epoch, control)
            except KafkaError as exc:
                # Kafka drops markers for partitions that are gone; nothing else can fail locally.
                log.warning("no %s marker for %s-%d (producer %d): %s", control.name, topic, index,
                            completion.producer_id, exc)
                continue
            if topic == CONSUMER_OFFSETS and self.broker.group_coordinator.coordinator is not None:
                self.broker.group_coordinator.coordinator.replay_marker(index, completion.producer_id,
                                                                        completion.commit)

    def _coordinator_epoch(self, transactional_id: str) -> int:
        index = self.ready().partition_for(transactional_id)
        return self.broker.replicas.get(TRANSACTION_STATE, index).leader_epoch

    def run_init(self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int) -> Any:
        """InitProducerId, aborting an ongoing transaction of the previous incarnation first."""
        for _ in range(3):
            result = self.ready().init_producer_id(transactional_id, timeout_ms, producer_id, epoch)
            response = self.run(result)
            if not result.retry:
                return response
        return ErrorCode.concurrent_transactions, -1, -1

    def check_produce(self, transactional_id: str, producer_id: int, epoch: int, tp: tuple[str, int]) -> None:
        coordinator = self.coordinator
        if coordinator is None:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping)
        coordinator.check_produce(transactional_id, producer_id, epoch, tp)

    async def _run_timers(self) -> None:
        await run_timers(self.timer, self._wake, self._fire_timers)

    def _fire_timers(self) -> None:
        if self.coordinator is None:
            return
        for result in self.coordinator.poll_timers():
            try:
                self.run(result)
                log.info("aborted a timed-out transaction of producer %d", result.completion.producer_id
                         if result.completion else -1)
            except KafkaError:
                pass  # logged by _append; the timer finds it again on the next expiry
            except Exception:
                log.exception("transaction timer failed")
