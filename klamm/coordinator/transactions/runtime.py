"""The transaction coordinator inside the broker: __transaction_state, markers and timers.

The topic is created on the first FindCoordinator(TRANSACTION) or transactional
InitProducerId: `transaction.state.log.num.partitions` partitions,
cleanup.policy=compact, and a replication factor capped at the live brokers (as
for __consumer_offsets). The coordinator serves the transactional ids of the
partitions this broker leads, following the metadata image: a partition it
becomes leader of is loaded (at start-up before serving, as before), and one it
stops leading is unloaded.

`run` appends an operation's records, replays them, and for a prepared
transaction writes the markers to every partition of the transaction once the
Prepare record is on the ISR of its __transaction_state partition (Kafka sends
them from the callback of that record's acks=all append; on a single node the
ISR's copy is the fsynced one, the topic being flushed on every write): here when
this broker leads the partition, else with WriteTxnMarkers to its leader (a marker on
__consumer_offsets also tells the group coordinator to publish or drop the
pending offsets). A marker counts once the partition's ISR has it, as Kafka
appends markers with acks=all; then the Complete record is written. Loading
finishes transactions a crash left prepared; timed-out transactions are aborted
by the timer loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from klamm.coordinator.loading import PartitionLoads, read_batches
from klamm.coordinator.partitioning import partition_for
from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.runtime import append_error, wall_clock_ms
from klamm.coordinator.timer import Timer
from klamm.coordinator.timer_loop import run_timers
from klamm.coordinator.transactions.coordinator import Completion, TransactionCoordinator, TxnConfig, TxnResult
from klamm.coordinator.transactions.metadata import PREPARE_STATES
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import ControlRecordType, NewRecord, build_batch, decode_batch
from klamm.protocol.topics import CONSUMER_OFFSETS, TRANSACTION_STATE

log = logging.getLogger("klamm.transactions")

# Append failures as a client sees them (Kafka's TransactionStateManager mapping; anything else is
# UNKNOWN_SERVER_ERROR). A local OSError is Kafka's KAFKA_STORAGE_ERROR.
_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}
# A marker write failing so is given up, as Kafka's marker channel does: the partition is gone, or a newer
# producer epoch owns it. Any other failure is retried until it succeeds.
_MARKER_GIVE_UP = frozenset({ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_producer_epoch,
                             ErrorCode.transaction_coordinator_fenced})
RETRY_BACKOFF_MS = 100


class TransactionCoordinatorRuntime:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._wake = asyncio.Event()
        self.timer = Timer(wall_clock_ms, on_change=self._wake.set)
        self.coordinator: TransactionCoordinator | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # the partitions of __transaction_state this broker leads are loaded and served
        self._loads = PartitionLoads(TRANSACTION_STATE, broker.node_id,
                                     lambda index: self.coordinator.begin_loading(index), self._load, self._unload)
        self._unsubscribe: Callable[[], None] | None = None
        self._retries: dict[str, Completion] = {}  # prepared transactions whose markers are due again
        self._storing: dict[str, asyncio.Task[None]] = {}  # transactional id -> waiting for its Prepare record
        self._failures: dict[str, int] = {}  # transactional id -> writes failed in a row (for the backoff)
        # (transactional id, producer id, epoch, topic, partition) -> sending / written / failed: markers
        # sent with WriteTxnMarkers to the broker leading their partition, or appended here and waiting for the ISR
        self._markers: dict[tuple, str] = {}
        self._sending: set[asyncio.Task[None]] = set()

    # lifecycle
    async def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._run_timers()))
        self._unsubscribe = self.broker.controller.on_change(lambda _old, new: self.follow_leadership(new))
        self.follow_leadership(self.broker.controller.image)
        self._loads.load_now()  # as at every start: prepared transactions are finished before serving

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._loads.stop()
        for task in [*self._tasks, *self._sending]:
            task.cancel()
        self._tasks.clear()

    def _topic(self) -> Any:
        return self.broker.controller.image.topics_by_name.get(TRANSACTION_STATE)

    def ensure_topic(self, *, deferred: bool = False) -> None:
        """Create __transaction_state if missing and serve the (empty) partitions led here (with `deferred`,
        COORDINATOR_NOT_AVAILABLE while it is created: Broker.create_internal_topic)."""
        if self._topic() is None:
            config = self.broker.config
            self.broker.create_internal_topic(
                TRANSACTION_STATE, config.transaction_state_log_num_partitions,
                config.transaction_state_log_replication_factor,
                {"compression.type": "uncompressed", "segment.bytes": str(config.transaction_state_log_segment_bytes)},
                deferred=deferred)
            self._loads.load_now()

    async def loads_settled(self) -> None:
        """Until the partitions this broker began to load have been loaded."""
        await self._loads.settled()

    # loading: a partition is served while this broker leads it
    def follow_leadership(self, image: Any) -> None:
        """Load the partitions of __transaction_state this broker now leads; unload those it stopped leading."""
        topic = image.topics_by_name.get(TRANSACTION_STATE)
        if topic is None:
            return
        if self.coordinator is None:
            self.coordinator = self._new_coordinator(len(topic.partitions))
        self._loads.follow(image, self.coordinator.owned)

    def _unload(self, index: int) -> None:
        assert self.coordinator is not None
        unloaded = set(self.coordinator.unload(index))
        for transactional_id in unloaded:
            self._retries.pop(transactional_id, None)
            self._failures.pop(transactional_id, None)
            self.timer.cancel(("txn-retry", transactional_id))
        # A marker's state kept would answer for the same producer's next transaction, should this broker
        # coordinate the id again: its marker taken as written, or as under way.
        for key in [key for key in self._markers if key[0] in unloaded]:
            del self._markers[key]

    def _new_coordinator(self, partitions: int) -> TransactionCoordinator:
        broker_config = self.broker.config
        config = TxnConfig(
            num_partitions=partitions, max_timeout_ms=broker_config.transaction_max_timeout_ms,
            id_expiration_ms=broker_config.transactional_id_expiration_ms,
            id_expiration_check_interval_ms=broker_config.transaction_remove_expired_transaction_cleanup_interval_ms)
        return TransactionCoordinator(config, self.timer, self.broker.allocate_producer_id)

    def _load(self, index: int) -> None:
        assert self.coordinator is not None
        self._load_partition(self.coordinator, index)

    def _load_partition(self, coordinator: TransactionCoordinator, index: int) -> None:
        """Replay the partition, then finish the transactions a crash or a leader change left prepared."""
        before = len(coordinator.txns)
        for record in self._read_partition(index):
            coordinator.replay(record)
        loaded = len(coordinator.txns) - before
        log.log(logging.INFO if loaded else logging.DEBUG, "loaded %d transactional ids from %s-%d", loaded,
                TRANSACTION_STATE, index)
        for completion in coordinator.finish_loading(index):
            self._finish_once_stored(completion)

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
        """The coordinator, creating __transaction_state on first use; NOT_COORDINATOR while this broker has not
        applied the topic (a broker-only node forwards its creation). Kafka's TransactionStateManager answers so
        for a partition it does not own, which sends the client back to FindCoordinator."""
        if self.coordinator is None:
            self.ensure_topic()
        if self.coordinator is None:
            raise KafkaError(ErrorCode.not_coordinator)
        return self.coordinator

    def run(self, result: TxnResult) -> Any:
        """Append and replay the records; finish a prepared transaction; the response.

        A failed append changes nothing and raises KafkaError with the error a
        client should see. Markers that fail to be written are retried later.
        """
        self._append(result.records)
        for action in result.after_write:
            action()
        if result.completion is not None:
            self._finish_once_stored(result.completion)
        return result.response

    def _append(self, records: list[CoordinatorRecord]) -> None:
        by_partition: dict[int, list[NewRecord]] = {}
        for record in records:
            by_partition.setdefault(record.partition, []).append(NewRecord(record.key, record.value))
        # One transactional id's records all go to its one partition: the write is all or nothing.
        try:
            for index, batch in by_partition.items():
                self.broker.replicas.get(TRANSACTION_STATE, index).append(build_batch(batch))
        except (KafkaError, OSError) as exc:
            log.warning("append to %s failed: %r", TRANSACTION_STATE, exc)
            raise KafkaError(_APPEND_ERRORS.get(append_error(exc), ErrorCode.unknown_server_error)) from None
        for record in records:
            self.ready().replay(record)

    def _finish_once_stored(self, completion: Completion) -> None:
        """`_finish` now if the transaction's Prepare record is on the ISR (the HW is past the log end, which
        the record is before), else once it is (in a task), or at a retry if it is not within request.timeout.ms.

        Markers written for a Prepare record the partition then loses (its leader failing before a follower
        had it, or power loss before the fsync on a single node) would commit on some partitions a transaction
        the next coordinator, finding it Ongoing, aborts on the others.
        """
        if not self._prepared(completion):
            return  # unloaded (its next coordinator finishes it), or finished already
        partition = self._state_partition(completion.transactional_id)
        if partition is None:
            return
        end = partition.log_end_offset
        outcome = partition.replication_outcome(end)
        if outcome is None:
            task = asyncio.ensure_future(self._finish_when_stored(completion, partition, end))
            self._storing[completion.transactional_id] = task
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        else:
            self._finish_if_stored(completion, outcome)

    async def _finish_when_stored(self, completion: Completion, partition: Any, end: int) -> None:
        try:
            outcome = await partition.wait_for_replication(end, self.broker.config.request_timeout_ms / 1000)
        finally:
            if self._storing.get(completion.transactional_id) is asyncio.current_task():
                del self._storing[completion.transactional_id]
        if self._prepared(completion):
            self._finish_if_stored(completion, outcome)

    def _finish_if_stored(self, completion: Completion, outcome: ErrorCode) -> None:
        # The HW passed the record when the ISR is merely short of min.insync.replicas now: it is stored.
        if outcome in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
            self._retry(completion)
        else:
            self._retry_later(completion)

    def _state_partition(self, transactional_id: str) -> Any:
        """The partition of __transaction_state holding the transactional id, if this broker hosts it."""
        assert self.coordinator is not None
        index = self.coordinator.partition_for(transactional_id)
        return self.broker.replicas.partitions.get((TRANSACTION_STATE, index))

    def _prepared(self, completion: Completion) -> bool:
        """Whether this broker still coordinates `completion`'s transaction, prepared as it was."""
        md = self.coordinator.txns.get(completion.transactional_id) if self.coordinator is not None else None
        return (md is not None and md.state in PREPARE_STATES and md.producer_id == completion.producer_id
                and md.producer_epoch == completion.producer_epoch)

    def _finish(self, completion: Completion) -> None:
        """Write the markers of a prepared transaction, then its Complete record; retry what fails."""
        self._retries.pop(completion.transactional_id, None)
        remaining = self._write_markers(completion)
        if not remaining:
            try:
                self.run(self.ready().complete(completion))
            except KafkaError:
                pass  # the Complete record is written on retry
            else:
                self._failures.pop(completion.transactional_id, None)
                return
        self._retry_later(Completion(completion.transactional_id, completion.producer_id,
                                     completion.producer_epoch, completion.commit, remaining))

    def _retry_later(self, completion: Completion) -> None:
        """Finish the transaction again after a backoff that doubles per failure (at most the abort interval)."""
        transactional_id = completion.transactional_id
        self._retries[transactional_id] = completion
        self.timer.schedule(("txn-retry", transactional_id), self._backoff_ms(transactional_id), lambda: None)

    def _backoff_ms(self, transactional_id: str) -> int:
        failures = self._failures[transactional_id] = self._failures.get(transactional_id, 0) + 1
        limit = self.broker.config.transaction_abort_timed_out_transaction_cleanup_interval_ms
        return min(RETRY_BACKOFF_MS << min(failures - 1, 16), limit)

    def _write_markers(self, completion: Completion) -> frozenset[tuple[str, int]]:
        """Write the markers; the partitions whose marker is not written yet (under way, or failed: written again
        at the transaction's next retry)."""
        coordinator_epoch = self._coordinator_epoch(completion.transactional_id)
        return frozenset((topic, index) for topic, index in sorted(completion.partitions)
                         if not self._marker_written(completion, topic, index, coordinator_epoch))

    def _marker_written(self, completion: Completion, topic: str, index: int, coordinator_epoch: int) -> bool:
        """Whether the marker on the partition is written, or given up; if not, write it or wait for it."""
        key = (completion.transactional_id, completion.producer_id, completion.producer_epoch, topic, index)
        state = self._markers.pop(key, None)
        if state == "sending":
            self._markers[key] = state
            return False
        if state == "written":
            return True
        leader = self._leader_of(topic, index)
        if leader is not None and leader != self.broker.node_id:
            self._await_marker(key, lambda: self.broker.txn_markers.write(
                leader, topic, index, completion.producer_id, completion.producer_epoch, coordinator_epoch,
                completion.commit))
            return False
        appended = self.append_marker(topic, index, completion.producer_id, completion.producer_epoch,
                                      coordinator_epoch, completion.commit)
        if isinstance(appended, ErrorCode):
            return self._settled(key, appended)
        # Written once the ISR has it, as Kafka appends markers with acks=all: a marker only this leader had
        # would be lost with its leadership, and the transaction left open on the partition for good.
        partition, offset = appended
        outcome = partition.replication_outcome(offset + 1)
        if outcome is not None:
            return self._settled(key, outcome)
        self._await_marker(key, lambda: self._replicated_marker(partition, offset))
        return False

    def _leader_of(self, topic: str, index: int) -> int | None:
        """The partition's leader in the image; None when the partition is gone (or has none)."""
        topic_image = self.broker.controller.image.topics_by_name.get(topic)
        partition = topic_image.partitions.get(index) if topic_image is not None else None
        return partition.leader if partition is not None and partition.leader >= 0 else None

    def _await_marker(self, key: tuple, outcome: Callable[[], Awaitable[ErrorCode]]) -> None:
        """Wait in a task for a marker's `outcome` (sent to its leader, or replicated from here)."""
        self._markers[key] = "sending"
        task = asyncio.ensure_future(self._marker_outcome(key, outcome))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _marker_outcome(self, key: tuple, outcome: Callable[[], Awaitable[ErrorCode]]) -> None:
        error = await outcome()
        if self._markers.get(key) != "sending":
            return  # its transaction is no longer coordinated here
        if self._settled(key, error):
            self._markers[key] = "written"
            transactional_id = key[0]
            if transactional_id in self._retries:  # finish the transaction now rather than at its backoff
                self.timer.schedule(("txn-retry", transactional_id), 0, lambda: None)
        else:
            self._markers[key] = "failed"  # written again at the transaction's next retry

    @staticmethod
    def _settled(key: tuple, error: ErrorCode) -> bool:
        """Whether a marker's `error` ends its writing: none, or one Kafka's marker channel gives up on (the
        partition gone, a newer producer epoch or coordinator there). Any other is retried."""
        if error == ErrorCode.none:
            return True
        _, producer_id, _, topic, index = key
        if error in _MARKER_GIVE_UP:
            log.warning("no marker for %s-%d (producer %d): %s", topic, index, producer_id, error.name)
            return True
        log.info("marker for %s-%d (producer %d) not written yet, will retry: %s", topic, index, producer_id,
                 error.name)
        return False

    async def write_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int,
                           coordinator_epoch: int, commit: bool) -> ErrorCode:
        """WriteTxnMarkers' work for one partition: append the marker, answer once the ISR has it (Kafka's
        acks=all append of markers; a marker answered sooner could be lost with this leader)."""
        appended = self.append_marker(topic, index, producer_id, producer_epoch, coordinator_epoch, commit)
        return appended if isinstance(appended, ErrorCode) else await self._replicated_marker(*appended)

    async def _replicated_marker(self, partition: Any, offset: int) -> ErrorCode:
        """acks=all's answer for the marker at `offset` (waiting at most request.timeout.ms)."""
        return await partition.wait_for_replication(offset + 1, self.broker.config.request_timeout_ms / 1000)

    def append_marker(self, topic: str, index: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool) -> tuple[Any, int] | ErrorCode:
        """Append one marker to a partition this broker leads: the partition and the marker's offset, or the error.

        A partition that no longer exists is UNKNOWN_TOPIC_OR_PARTITION (the marker is given up); one
        led elsewhere is NOT_LEADER_OR_FOLLOWER; a failed write KAFKA_STORAGE_ERROR. A marker on
        __consumer_offsets also publishes or drops the transaction's pending offsets in the group coordinator.
        """
        topic_image = self.broker.controller.image.topics_by_name.get(topic)
        partition_image = topic_image.partitions.get(index) if topic_image is not None else None
        if partition_image is None:
            return ErrorCode.unknown_topic_or_partition
        if partition_image.leader != self.broker.node_id:
            return ErrorCode.not_leader_or_follower
        control = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        partition = self.broker.replicas.get(topic, index)
        try:
            appended = partition.append_marker(producer_id, producer_epoch, coordinator_epoch, control)
        except KafkaError as exc:
            return exc.code
        except OSError:
            return ErrorCode.kafka_storage_error
        if topic == CONSUMER_OFFSETS:
            self.broker.group_coordinator.replay_marker(index, producer_id, commit, appended.first_offset)
        return partition, appended.first_offset

    def _coordinator_epoch(self, transactional_id: str) -> int:
        index = self.ready().partition_for(transactional_id)
        return self.broker.replicas.get(TRANSACTION_STATE, index).leader_epoch

    async def replicated(self, transactional_id: str) -> ErrorCode:
        """Wait until the transactional id's state written so far is on the ISR of its partition.

        A PrepareCommit answered before the followers have it could be lost with its leader, and the
        next coordinator would abort a transaction the client was told is committing. Waits at most
        request.timeout.ms; the error a client should see, or NONE.
        """
        if self.coordinator is None:
            return ErrorCode.none
        partition = self._state_partition(transactional_id)
        if partition is None:
            return ErrorCode.not_coordinator
        error = await partition.wait_for_replication(partition.log_end_offset,
                                                     self.broker.config.request_timeout_ms / 1000)
        return error if error == ErrorCode.none else _APPEND_ERRORS.get(error, ErrorCode.unknown_server_error)

    async def run_init(self, transactional_id: str, timeout_ms: int, producer_id: int, epoch: int) -> Any:
        """InitProducerId, aborting an ongoing transaction of the previous incarnation first, then trying again
        once the abort is done: CONCURRENT_TRANSACTIONS, as Kafka answers at once, if its PrepareAbort is not
        stored within a client's retry backoff, or its markers are still under way."""
        for _ in range(3):
            result = self.ready().init_producer_id(transactional_id, timeout_ms, producer_id, epoch)
            response = self.run(result)
            if not result.retry:
                return response
            storing = self._storing.get(transactional_id)
            if storing is not None:
                await asyncio.wait({storing}, timeout=RETRY_BACKOFF_MS / 1000)
        return ErrorCode.concurrent_transactions, -1, -1

    def verify_produce(self, transactional_id: str, producer_id: int, epoch: int,
                       tp: tuple[str, int]) -> asyncio.Future[ErrorCode] | None:
        """Verify a batch that opens the producer's transaction on `tp` (KIP-890); raises the coordinator's error.

        None when this broker coordinates the transactional id and the partition is in its
        ongoing transaction; a future of the produce error when another broker does
        (klamm.broker.txn_verification asks it).
        """
        topic = self.broker.controller.image.topics_by_name.get(TRANSACTION_STATE)
        if topic is None or not topic.partitions:
            raise KafkaError(ErrorCode.coordinator_not_available, "no transaction coordinator yet")
        index = partition_for(transactional_id, len(topic.partitions))
        coordinator = self.coordinator
        if coordinator is not None and index in coordinator.owned:
            coordinator.check_produce(transactional_id, producer_id, epoch, tp)
            return None
        leader = topic.partitions[index].leader
        if leader < 0 or leader == self.broker.node_id:  # led here but not served yet, or leaderless
            raise KafkaError(ErrorCode.coordinator_not_available,
                             f"the coordinator of {transactional_id!r} is not available")
        return self.broker.txn_verifier.verify(leader, transactional_id, producer_id, epoch, tp)

    async def _run_timers(self) -> None:
        await run_timers(self.timer, self._wake, self._fire_timers)

    def _fire_timers(self) -> None:
        if self.coordinator is None:
            return
        for result in self.coordinator.poll_timers():
            transactional_id = result.completion.transactional_id if result.completion else None
            try:
                self.run(result)
                if result.completion is not None:
                    log.info("aborted a timed-out transaction of producer %d", result.completion.producer_id)
                else:
                    log.info("expired %d transactional id(s)", len(result.records))
            except KafkaError:
                # logged by _append; the transaction is still Ongoing: try the abort again later
                if transactional_id is not None:
                    self.coordinator.retry_timeout(transactional_id, self._backoff_ms(transactional_id))
            except Exception:
                log.exception("transaction timer failed")
        for transactional_id, completion in list(self._retries.items()):
            if not self.timer.is_scheduled(("txn-retry", transactional_id)):
                del self._retries[transactional_id]
                self._finish_once_stored(completion)

    def _retry(self, completion: Completion) -> None:
        """`_finish`, its failure logged and retried later (once its Prepare record is stored)."""
        try:
            self._finish(completion)
        except Exception:
            log.exception("finishing the transaction of %s failed", completion.transactional_id)
            self._retry_later(completion)
