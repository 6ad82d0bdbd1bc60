"""The transaction coordinator as a state machine, after Kafka's TransactionCoordinator.

Every operation returns a `TxnResult`: the __transaction_state records to append,
the response, and — when a transaction reached PrepareCommit/PrepareAbort — the
`Completion` whose markers the owner writes to every partition of the
transaction before it asks `complete` for the CompleteCommit/CompleteAbort
record. Metadata changes only in `replay`, for loading and running alike.

The owner (klamm.coordinator.transactions.runtime) writes the markers once the
Prepare record is stored on the ISR; a transaction stays in its Prepare state
while they are under way, or after a crash, which loading finishes
(`finish_loading`).

Fencing, as Kafka: InitProducerId bumps the epoch (a new producer id once the
epoch is exhausted); an ongoing transaction of the previous incarnation is first
aborted with a bumped epoch (`retry` asks the owner to run the init again).
A transaction older than its timeout is aborted the same way by a timer on the
injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from klamm.coordinator.partitioning import partition_for
from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.timer import Timer
from klamm.coordinator.transactions.metadata import COMPLETE_STATES, PREPARE_STATES, TxnMetadata, TxnState
from klamm.coordinator.transactions.records import decode_txn_key, decode_txn_value, txn_record, txn_tombstone
from klamm.protocol.errors import ErrorCode, KafkaError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 2**15 - 1
Partitions = frozenset[tuple[str, int]]


@dataclass(frozen=True)
class TxnConfig:
    num_partitions: int = 50
    max_timeout_ms: int = 15 * 60 * 1000
    id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    id_expiration_check_interval_ms: int = 3600 * 1000  # transaction.remove.expired.transaction.cleanup.interval.ms


@dataclass(frozen=True)
class Completion:
    """A prepared transaction: write these markers, then call `complete`."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: Partitions


@dataclass
class TxnResult:
    records: list[CoordinatorRecord] = field(default_factory=list)
    response: Any = None
    completion: Completion | None = None
    retry: bool = False  # InitProducerId aborted the previous incarnation's transaction: run it again
    after_write: list[Callable[[], None]] = field(default_factory=list)  # memory-only changes, once written


def _epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


class TransactionCoordinator:
    def __init__(self, config: TxnConfig, timer: Timer, allocate_producer_id: Callable[[], int]) -> None:
        self.config = config
        self.timer = timer
        self.allocate_producer_id = allocate_producer_id
        self.txns: dict[str, TxnMetadata] = {}
        self._last_epochs: dict[str, int] = {}  # epoch before a coordinator bump (memory only, as Kafka)
        self._owned: set[int] = set()
        self._loading: set[int] = set()
        self._expired: list[str] = []  # timed-out transactional ids the timer found
        self._expire_ids = False  # the timer says: look for transactional ids to expire

    @property
    def now(self) -> int:
        return self.timer.clock()

    # ---------------------------------------------------------------- loading
    def begin_loading(self, partition: int) -> None:
        self._owned.add(partition)
        self._loading.add(partition)

    def finish_loading(self, partition: int) -> list[Completion]:
        """Serve the partition: time ongoing transactions out, and finish those a crash left prepared."""
        self._loading.discard(partition)
        if not self.timer.is_scheduled("txn-id-expiration"):
            self._schedule_id_expiration()
        pending = []
        for md in self.txns.values():
            if self.partition_for(md.transactional_id) != partition:
                continue
            if md.state == TxnState.ONGOING:
                self._schedule_timeout(md)
            elif md.state in PREPARE_STATES:
                pending.append(_completion(md))
        return pending

    def unload(self, partition: int) -> list[str]:
        """Stop serving a partition this broker no longer leads; the transactional ids it drops.

        Their state stays in the log for the new leader, which finishes what they left prepared.
        """
        self._owned.discard(partition)
        self._loading.discard(partition)
        gone = [tid for tid in self.txns if self.partition_for(tid) == partition]
        for transactional_id in gone:
            del self.txns[transactional_id]
            self._last_epochs.pop(transactional_id, None)
            self.timer.cancel(("txn-timeout", transactional_id))
        return gone

    @property
    def owned(self) -> frozenset[int]:
        """Partitions of __transaction_state served here (loaded or loading)."""
        return frozenset(self._owned)

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.config.num_partitions)

    def _validate(self, transactional_id: str | None) -> None:
        if not transactional_id:
            raise KafkaError(ErrorCode.invalid_request, "transactional id is empty")
        partition = self.partition_for(transactional_id)
        if partition not in self._owned:
            raise KafkaError(ErrorCode.not_coordinator)
        if partition in self._loading:
            raise KafkaError(ErrorCode.coordinator_load_in_progress)

    # ----------------------------------------------------------------- replay
    def replay(self, record: CoordinatorRecord) -> None:
        transactional_id = decode_txn_key(record.key)
        if transactional_id is None:
            return
        if record.value is None:
            self.txns.pop(transactional_id, None)
            self._last_epochs.pop(transactional_id, None)
            self.timer.cancel(("txn-timeout", transactional_id))
            return
        md = decode_txn_value(transactional_id, record.value)
        self.txns[transactional_id] = md
        if md.state == TxnState.ONGOING and record.partition not in self._loading:
            self._schedule_timeout(md)
        elif md.state != TxnState.ONGOING:
            self.timer.cancel(("txn-timeout", transactional_id))

    def _write(self, md: TxnMetadata) -> CoordinatorRecord:
        return txn_record(self.partition_for(md.transactional_id), md)

    # --------------------------------------------------------- InitProducerId
    def init_producer_id(self, transactional_id: str | None, timeout_ms: int, expected_producer_id: int = -1,
                         expected_epoch: int = -1) -> TxnResult:
        """Response: (error, producer id, epoch)."""
        try:
            self._validate(transactional_id)
            assert transactional_id is not None
            if not 0 < timeout_ms <= self.config.max_timeout_ms:
                raise KafkaError(ErrorCode.invalid_transaction_timeout)
            return self._init(transactional_id, timeout_ms, expected_producer_id, expected_epoch)
        except KafkaError as exc:
            return TxnResult(response=(exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH))

    def _init(self, transactional_id: str, timeout_ms: int, expected_producer_id: int,
              expected_epoch: int) -> TxnResult:
        md = self.txns.get(transactional_id)
        now = self.now
        if md is None:
            md = TxnMetadata(transactional_id, self.allocate_producer_id(), 0, timeout_ms, TxnState.EMPTY,
                             update_ms=now)
            return TxnResult([self._write(md)], (ErrorCode.none, md.producer_id, md.producer_epoch))
        if md.state in PREPARE_STATES or md.state == TxnState.PREPARE_EPOCH_FENCE:
            raise KafkaError(ErrorCode.concurrent_transactions)
        last_epoch = self._last_epochs.get(transactional_id, NO_PRODUCER_EPOCH)
        if expected_producer_id != NO_PRODUCER_ID:
            if expected_producer_id != md.producer_id or expected_epoch not in (md.producer_epoch, last_epoch):
                raise KafkaError(ErrorCode.producer_fenced)
            if expected_epoch == last_epoch != md.producer_epoch and md.state != TxnState.ONGOING:
                # The coordinator already bumped this producer's epoch (timeout abort): hand that one out.
                return TxnResult(response=(ErrorCode.none, md.producer_id, md.producer_epoch))
        if md.state == TxnState.ONGOING:
            return self._fence_and_abort(md, retry=True)
        if _epoch_exhausted(md.producer_epoch):
            new = md.but(producer_id=self.allocate_producer_id(), producer_epoch=0,
                         previous_producer_id=md.producer_id)
        else:
            new = md.but(producer_epoch=md.producer_epoch + 1)
        new = new.but(timeout_ms=timeout_ms, state=TxnState.EMPTY, partitions=frozenset(), start_ms=-1,
                      update_ms=now)
        return TxnResult([self._write(new)], (ErrorCode.none, new.producer_id, new.producer_epoch),
                         after_write=[lambda: self._last_epochs.pop(transactional_id, None)])

    def _fence_and_abort(self, md: TxnMetadata, *, retry: bool = False) -> TxnResult:
        """Abort an ongoing transaction with a bumped epoch, fencing its producer (Kafka's PrepareEpochFence)."""
        epoch = md.producer_epoch if _epoch_exhausted(md.producer_epoch) else md.producer_epoch + 1
        prepared = md.but(producer_epoch=epoch, state=TxnState.PREPARE_ABORT, update_ms=self.now)

        def remember_epoch() -> None:
            self._last_epochs[md.transactional_id] = md.producer_epoch

        return TxnResult([self._write(prepared)], completion=_completion(prepared), retry=retry,
                         after_write=[remember_epoch])

    # ------------------------------------------------------ AddPartitionsToTxn
    def _current(self, transactional_id: str | None, producer_id: int, epoch: int) -> TxnMetadata:
        self._validate(transactional_id)
        assert transactional_id is not None
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping)
        if md.producer_epoch != epoch:
            raise KafkaError(ErrorCode.producer_fenced)
        return md

    def add_partitions(self, transactional_id: str | None, producer_id: int, epoch: int,
                       partitions: Iterable[tuple[str, int]]) -> TxnResult:
        """Response: the error for every partition (Kafka fails or adds them all)."""
        try:
            md = self._current(transactional_id, producer_id, epoch)
            if md.state in PREPARE_STATES:
                raise KafkaError(ErrorCode.concurrent_transactions)
            if md.state == TxnState.PREPARE_EPOCH_FENCE:
                raise KafkaError(ErrorCode.producer_fenced)
        except KafkaError as exc:
            return TxnResult(response=exc.code)
        wanted = frozenset(partitions)
        if md.state == TxnState.ONGOING and wanted <= md.partitions:
            return TxnResult(response=ErrorCode.none)
        now = self.now
        start = md.start_ms if md.state == TxnState.ONGOING else now
        new = md.but(state=TxnState.ONGOING, partitions=md.partitions | wanted, start_ms=start, update_ms=now)
        return TxnResult([self._write(new)], ErrorCode.none)

    def verify_partitions(self, transactional_id: str | None, producer_id: int, epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ verify_only: which partitions are in the ongoing transaction."""
        try:
            md = self._current(transactional_id, producer_id, epoch)
        except KafkaError as exc:
            return {tp: exc.code for tp in partitions}
        ongoing = md.state == TxnState.ONGOING
        return {tp: ErrorCode.none if ongoing and tp in md.partitions else ErrorCode.invalid_txn_state
                for tp in partitions}

    def check_produce(self, transactional_id: str, producer_id: int, epoch: int, tp: tuple[str, int]) -> None:
        """A transactional batch may go to `tp` only once the partition is in the producer's transaction."""
        self._validate(transactional_id)
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping)
        if epoch < md.producer_epoch:
            raise KafkaError(ErrorCode.invalid_producer_epoch)
        if md.state != TxnState.ONGOING or epoch != md.producer_epoch or tp not in md.partitions:
            raise KafkaError(ErrorCode.invalid_txn_state,
                             f"{tp[0]}-{tp[1]} is not part of the ongoing transaction of {transactional_id}")

    # ----------------------------------------------------------------- EndTxn
    def end_txn(self, transactional_id: str | None, producer_id: int, epoch: int, commit: bool) -> TxnResult:
        """Response: error code."""
        try:
            md = self._current(transactional_id, producer_id, epoch)
        except KafkaError as exc:
            return TxnResult(response=exc.code)
        state = md.state
        if state == TxnState.ONGOING:
            prepared = md.but(state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                              update_ms=self.now)
            return TxnResult([self._write(prepared)], ErrorCode.none, _completion(prepared))
        if state == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return TxnResult(response=ErrorCode.none)  # a retry of the EndTxn that completed it
        if state == (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return TxnResult(response=ErrorCode.concurrent_transactions)
        return TxnResult(response=ErrorCode.invalid_txn_state)

    def complete(self, completion: Completion) -> TxnResult:
        """The Complete record once every marker of `completion` is written."""
        md = self.txns.get(completion.transactional_id)
        if md is None or md.state not in PREPARE_STATES or md.producer_id != completion.producer_id \
                or md.producer_epoch != completion.producer_epoch:
            return TxnResult()
        state = TxnState.COMPLETE_COMMIT if md.state == TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return TxnResult([self._write(md.but(state=state, partitions=frozenset(), update_ms=self.now))])

    # --------------------------------------------------------------- timeouts
    def _schedule_timeout(self, md: TxnMetadata) -> None:
        deadline = md.start_ms + md.timeout_ms
        self.timer.schedule(("txn-timeout", md.transactional_id), deadline - self.now,
                            lambda: self._expired.append(md.transactional_id))

    def retry_timeout(self, transactional_id: str, delay_ms: int) -> None:
        """Its timed-out transaction could not be aborted: look at it again in `delay_ms`."""
        self.timer.schedule(("txn-timeout", transactional_id), delay_ms,
                            lambda: self._expired.append(transactional_id))

    def poll_timers(self) -> list[TxnResult]:
        """Abort (fencing the producer) every ongoing transaction past its timeout."""
        for callback in self.timer.pop_expired():
            callback()
        expired, self._expired = self._expired, []
        results = []
        now = self.now
        for transactional_id in expired:
            md = self.txns.get(transactional_id)
            if md is not None and md.state == TxnState.ONGOING and md.start_ms + md.timeout_ms <= now:
                results.append(self._fence_and_abort(md))
        if self._expire_ids:
            self._expire_ids = False
            results.extend(self._expire_transactional_ids())
        return results

    def _schedule_id_expiration(self) -> None:
        def due() -> None:
            self._expire_ids = True
            self._schedule_id_expiration()

        self.timer.schedule("txn-id-expiration", self.config.id_expiration_check_interval_ms, due)

    def _expire_transactional_ids(self) -> list[TxnResult]:
        """Tombstones for ids idle longer than transactional.id.expiration.ms with no transaction under way
        (Kafka's removeExpiredTransactionalIds): one write per partition; the ids go when they replay."""
        deadline = self.now - self.config.id_expiration_ms
        by_partition: dict[int, list[CoordinatorRecord]] = {}
        for md in self.txns.values():
            partition = self.partition_for(md.transactional_id)
            if md.state in COMPLETE_STATES and md.update_ms <= deadline and partition not in self._loading:
                by_partition.setdefault(partition, []).append(txn_tombstone(partition, md.transactional_id))
        return [TxnResult(records) for records in by_partition.values()]

    # ------------------------------------------------------------------ admin
    def list_transactions(self, states: list[str], producer_ids: list[int],
                          min_duration_ms: int = -1) -> tuple[ErrorCode, list[str], list[dict[str, Any]]]:
        """(error, unknown state filters, listed transactions)."""
        if self._loading:
            return ErrorCode.coordinator_load_in_progress, [], []
        unknown = [s for s in states if TxnState.from_display(s) is None]
        wanted = {TxnState.from_display(s) for s in states} - {None}
        now = self.now
        listed = [{"transactional_id": md.transactional_id, "producer_id": md.producer_id,
                   "transaction_state": md.state.display}
                  for md in self.txns.values()
                  if (not states or md.state in wanted) and (not producer_ids or md.producer_id in producer_ids)
                  and (min_duration_ms < 0 or (md.state == TxnState.ONGOING and now - md.start_ms >= min_duration_ms))]
        return ErrorCode.none, unknown, listed

    def describe(self, transactional_id: str) -> dict[str, Any]:
        try:
            self._validate(transactional_id)
            md = self.txns.get(transactional_id)
            if md is None:
                raise KafkaError(ErrorCode.transactional_id_not_found)
        except KafkaError as exc:
            return {"error_code": exc.code, "transactional_id": transactional_id, "transaction_state": "",
                    "transaction_timeout": 0, "transaction_start_time": -1, "producer_id": -1,
                    "producer_epoch": -1, "topics": []}
        by_topic: dict[str, list[int]] = {}
        for topic, index in sorted(md.partitions):
            by_topic.setdefault(topic, []).append(index)
        return {"error_code": ErrorCode.none, "transactional_id": transactional_id,
                "transaction_state": md.state.display, "transaction_timeout": md.timeout_ms,
                "transaction_start_time": md.start_ms, "producer_id": md.producer_id,
                "producer_epoch": md.producer_epoch,
                "topics": [{"topic": topic, "partitions": ids} for topic, ids in by_topic.items()]}


def _completion(md: TxnMetadata) -> Completion:
    return Completion(md.transactional_id, md.producer_id, md.producer_epoch,
                      md.state == TxnState.PREPARE_COMMIT, md.partitions)
