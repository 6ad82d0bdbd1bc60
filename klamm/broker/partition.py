"""One partition hosted by this broker: its log, leader epoch and high watermark.

The produce path validates batches from their headers (magic, sizes,
CRC32C), decodes records only when the header cannot vouch for them
(klamm.broker.validation: compacted topics, unreal or out-of-bounds timestamps),
recompresses only when the topic's compression.type differs from the batch's
(at its compression.<codec>.level), and hands the bytes to the log, which
assigns offsets in place.
Transactional batches are accepted only once the transaction coordinator
knows the partition is in the producer's transaction (`verify_txn`, asked for
the batch that opens the producer's transaction here). A coordinator on another
broker answers later: the batch then waits in the queue below, holding a
verification guard for its producer that any transactional append of that
producer (a marker that ended the transaction meanwhile, above all) takes away,
so that it cannot open a transaction the coordinator already ended (Kafka's
VerificationGuard). Markers are appended by the coordinator (`append_marker`). The last stable offset is
the high watermark bounded by the first offset of the oldest open transaction.
Invariant: log_start_offset <= high_watermark <= log_end_offset.

Replication (klamm.broker.replication holds the decisions): as leader the
partition keeps a `LeaderState`, and its high watermark moves as the ISR's
fetch positions show the followers have the records (on the append itself when
the ISR is this broker alone). acks=all appends wait in `wait_for_replication`
until the high watermark passes them. As follower (`become_follower`) it takes
no produce, and consumer fetches only from Fetch v11 (KIP-392); the replica fetcher appends the leader's
batches as they are and sets the high watermark. A Partition built on its own
(tools, storage tests) has neither role: its high watermark follows its log.

fsync: appends never fsync on the event loop. When the flush policy asks for a
flush (klamm.storage.log), the partition hands its log to the broker's
LogFlusher, and an append that flush.messages says must be durable before its
ack is awaited with `wait_durable`. Callers that cannot await (the group
coordinator, which appends synchronously and answers some writes at once) set
`flush_inline`: their flush.messages fsync runs here, before the append returns.
The transaction coordinator's writes wait for the high watermark instead. With
flush.messages=1 the high watermark stops at the recovery point, as in Kafka
(which fsyncs inside the append before moving it): consumers never read a
record a power loss could take back.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klamm.broker.replication import IsrProposal, LeaderState
from klamm.broker.validation import RecordRules, needs_records, validate_records
from klamm.config.topic import TopicConfig
from klamm.protocol import batch as batches
from klamm.protocol.batch import BatchHeader, InvalidBatch, TruncatedBatch, UnsupportedMagic, set_max_timestamp
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import ControlRecordType, build_control_batch
from klamm.storage.log import AppendResult, Log, LogConfig, ReadResult
from klamm.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from klamm.broker.log_flush import LogFlusher

_CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
# Batches at least this big have their record checks and recompression done in a worker
# thread. Record scanning is pure Python and holds the GIL (~14 us/KiB), so a worker only
# pays off once running it inline would block the loop for about the GIL switch interval
# (5 ms): below that the loop mostly trades a short block for waits at every GIL handoff.
# Measured (loop lag of a 1 ms ticker, compacted topic, 4 MB/s of batches, p99 inline vs
# offloaded): 16 KiB 3.7 vs 5.3 ms (before the key scan got 2x faster); 128 KiB 4.5 vs
# 3.5 ms; 256 KiB 7.3 vs 5.4 ms; 900 KiB max 34 vs 9 ms.
OFFLOAD_MIN_BYTES = 128 * 1024
_LEVEL_KEYS = {"gzip": "compression.gzip.level", "lz4": "compression.lz4.level", "zstd": "compression.zstd.level"}


def log_config(config: TopicConfig) -> LogConfig:
    """The storage view of a topic's configuration."""
    return LogConfig(
        segment_bytes=config.effective_segment_bytes,
        segment_ms=config.max_segment_ms,  # segment.ms, capped by max.compaction.lag.ms when compacted
        index_interval_bytes=config.index_interval_bytes,
        segment_index_bytes=config.segment_index_bytes,
        flush_messages=config.flush_messages,
        flush_ms=config.flush_ms,
        retention_ms=config.retention_ms,
        retention_bytes=config.retention_bytes,
    )


def _time_out(future: asyncio.Future[ErrorCode]) -> None:
    if not future.done():
        future.set_result(ErrorCode.request_timed_out)


class Partition:
    def __init__(self, topic: str, index: int, topic_id: uuid.UUID, log: Log, config: TopicConfig,
                 leader_epoch: int = 0, time_ms: Callable[[], int] | None = None,
                 flusher: LogFlusher | None = None, flush_inline: bool = False) -> None:
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = log
        self.config = config
        self.leader_epoch = leader_epoch
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.high_watermark = log.log_end_offset
        self.leader: LeaderState | None = None  # this broker leads the partition (replicated)
        self.leader_id: int | None = None  # the leader the image names, when it is another broker
        self.on_isr_proposal: Callable[[Partition, IsrProposal], None] | None = None  # sends AlterPartition
        # acks=all appends waiting for the HW: (end offset they need, future of their answer)
        self._replication_waiters: list[tuple[int, asyncio.Future[ErrorCode]]] = []
        self._time_ms = time_ms or (lambda: int(time.time() * 1000))
        self._waiters: set[asyncio.Future[None]] = set()
        self._rules: tuple[TopicConfig, BatchRules] | None = None
        # Appends waiting for an earlier one (prepared in a worker thread, or verified by another broker) to go
        # first: (prepared, result, check run just before the append).
        self._queue: deque[tuple[asyncio.Future[tuple[bytearray, list[BatchHeader]]], asyncio.Future[AppendResult],
                                 Callable[[], None] | None]] = deque()
        self._verification_guards: dict[int, tuple[object, int]] = {}  # producer id -> (guard, created ms)
        self.flusher = flusher  # None (tools, tests without a loop): every flush runs inline
        self.flush_inline = flush_inline
        if flusher is not None:
            flusher.watch(log, self._on_flushed)

    def become_leader(self, leader_epoch: int, *, node_id: int | None = None, partition_epoch: int = 0,
                      replicas: Sequence[int] = (), isr: Sequence[int] = (), lag_max_ms: int = 30_000) -> None:
        """Start a leader epoch: later appends carry it, and the epoch cache records where it began (its
        checkpoint is written by the log's next flush: klamm.storage.leader_epoch).

        With `node_id` the partition is replicated: a LeaderState tracks the followers of `replicas`.
        """
        self.leader_epoch = leader_epoch
        self._verification_guards.clear()
        cache = self.log.leader_epoch_cache
        if cache.latest_epoch < leader_epoch:
            cache.assign(leader_epoch, self.log.log_end_offset)
        self.replicas, self.isr = list(replicas), list(isr)
        self.leader_id = node_id
        if node_id is not None:
            end = self.log.log_end_offset
            self.high_watermark = min(self.high_watermark, end)
            self.leader = LeaderState(node_id, leader_epoch, partition_epoch, replicas, isr, end, self._committable_end(),
                                      self.high_watermark, self._time_ms(), lag_max_ms)
        self._advance_high_watermark()

    def become_follower(self, leader_id: int, leader_epoch: int, replicas: Sequence[int], isr: Sequence[int]) -> None:
        """Follow `leader_id` in `leader_epoch`: no more produce here; appends waiting for the ISR fail."""
        self.leader, self.leader_id, self.leader_epoch = None, leader_id, leader_epoch
        self.replicas, self.isr = list(replicas), list(isr)
        self._verification_guards.clear()
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        self._fail_replication_waiters(ErrorCode.not_leader_or_follower)
        self._wake_waiters()  # long polls answer NOT_LEADER_OR_FOLLOWER now

    def on_partition_change(self, partition_epoch: int, replicas: Sequence[int], isr: Sequence[int],
                            fenced_or_shutting_down: set[int]) -> None:
        """The image committed a new ISR (or replica set) in this leader epoch."""
        self.replicas, self.isr = list(replicas), list(isr)
        if self.leader is None:
            return
        self.leader.fenced_or_shutting_down = fenced_or_shutting_down
        if self.leader.on_partition_change(self.leader_epoch, partition_epoch, isr, replicas, self._time_ms()):
            self._high_watermark_moved()
        self._check_replication_waiters()

    @property
    def is_leader(self) -> bool:
        """Whether this broker takes produce and consumer fetches for the partition."""
        return self.leader is not None or self.leader_id is None

    def check_leader(self) -> None:
        if not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower)

    def check_min_insync(self) -> None:
        """An acks=all append is refused (NOT_ENOUGH_REPLICAS) while the ISR is below min.insync.replicas."""
        if len(self.isr) < self.config.min_insync_replicas:
            raise KafkaError(ErrorCode.not_enough_replicas,
                             f"the ISR of {self.topic}-{self.index} has {len(self.isr)} replicas, fewer than "
                             f"min.insync.replicas={self.config.min_insync_replicas}")

    # ------------------------------------------------------------ the leader's followers
    def on_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        """A follower fetched from `fetch_offset` (its log end): the HW may move, the ISR may grow."""
        if self.leader is None:
            return
        moved, proposal = self.leader.on_follower_fetch(replica_id, fetch_offset, self._committable_end(),
                                                        self._time_ms(), log_start_offset)
        if moved:
            self._high_watermark_moved()
        if proposal is not None:
            self._propose(proposal)

    def readable_followers(self, offset: int) -> list[tuple[int, int, int]]:
        """The ISR followers holding `offset` (node id, log end offset, ms since caught up); none unless leader."""
        return self.leader.readable_followers(offset, self._time_ms()) if self.leader is not None else []

    def check_isr(self) -> None:
        """The periodic ISR check (every replica.lag.time.max.ms / 2): propose a shrink if followers lag."""
        if self.leader is None:
            return
        proposal = self.leader.tick(self._time_ms(), self._committable_end())
        if proposal is None and self.leader.pending is not None:
            proposal = self.leader.pending  # not settled yet: its answer may have been lost, ask again
        if proposal is not None:
            self._propose(proposal)

    def _propose(self, proposal: IsrProposal) -> None:
        if self.on_isr_proposal is not None:
            self.on_isr_proposal(self, proposal)

    def on_proposal_failed(self, error: ErrorCode) -> None:
        if self.leader is not None:
            self.leader.on_proposal_failed(error)

    def replication_outcome(self, end_offset: int) -> ErrorCode | None:
        """acks=all's answer for what ends before `end_offset`, if there is one yet (None: waiting for the ISR)."""
        if self.leader is None:
            return ErrorCode.none if self.leader_id is None else ErrorCode.not_leader_or_follower
        return self.leader.acks_all_outcome(end_offset, self.config.min_insync_replicas)

    async def wait_for_replication(self, end_offset: int, timeout_s: float) -> ErrorCode:
        """acks=all: the answer once the HW reaches `end_offset` (or the ISR fell below min.insync.replicas)."""
        outcome = self.replication_outcome(end_offset)
        if outcome is not None:
            return outcome
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ErrorCode] = loop.create_future()
        entry = (end_offset, future)
        self._replication_waiters.append(entry)
        # a timer of its own rather than asyncio.wait_for around a shield: a quarter of an acks=all produce's cost
        # here (bench/acks_all_wait_cost.py)
        timer = loop.call_later(timeout_s, _time_out, future)
        try:
            return await future
        finally:
            timer.cancel()
            if entry in self._replication_waiters:
                self._replication_waiters.remove(entry)

    def _check_replication_waiters(self) -> None:
        if not self._replication_waiters or self.leader is None:
            return
        for entry in list(self._replication_waiters):
            end_offset, future = entry
            outcome = self.leader.acks_all_outcome(end_offset, self.config.min_insync_replicas)
            if outcome is not None:
                self._replication_waiters.remove(entry)
                if not future.done():
                    future.set_result(outcome)

    def _fail_replication_waiters(self, error: ErrorCode) -> None:
        waiters, self._replication_waiters = self._replication_waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_result(error)

    # ------------------------------------------------------------ as follower
    def append_as_follower(self, buf: bytes | bytearray, headers: list[BatchHeader], leader_high_watermark: int) -> None:
        """Append the leader's batches as they are, and take its high watermark (capped by this log)."""
        if headers:
            self.log.append_as_follower(buf, headers)
            if self.log.flush_wanted(self._time_ms()):
                self._maybe_flush_follower()
        self.follow_high_watermark(leader_high_watermark)

    def follow_high_watermark(self, leader_high_watermark: int) -> None:
        end = min(leader_high_watermark, self.log.log_end_offset)
        if end > self.high_watermark:
            self.high_watermark = end
            self._wake_waiters()

    def truncate_to(self, offset: int) -> None:
        """Remove what this follower has past `offset` (its log diverged from the leader's)."""
        self.log.truncate_to(offset)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.high_watermark = offset

    def _maybe_flush_follower(self) -> None:
        if self.flusher is None:
            self.log.flush()
        else:
            self.flusher.request(self.log)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        first_unstable = self.log.first_unstable_offset
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def aborted_transactions(self, fetch_offset: int) -> list[AbortedTxn]:
        """Aborted transactions a read_committed fetch from `fetch_offset` must filter (up to the LSO)."""
        return self.log.collect_aborted_txns(fetch_offset, self.last_stable_offset)

    def append(self, records: bytes | bytearray | memoryview,
               verify_txn: Callable[[BatchHeader], None] | None = None) -> AppendResult:
        """Validate and append one produce request's records; raises KafkaError.

        `verify_txn` checks a transactional batch against the producer's transaction.
        Inline, for callers without an event loop; the produce handler uses `submit`.
        """
        self.check_leader()
        buf, headers = self._validate(records)
        if verify_txn is not None and headers[0].is_transactional:
            verify_txn(headers[0])
        buf, headers = prepare_batches(buf, headers, self.batch_rules(), self._time_ms())
        return self._append(buf, headers)

    def batch_rules(self) -> BatchRules:
        """What the topic demands of a produced batch beyond its header (records, codec)."""
        if self._rules is None or self._rules[0] is not self.config:  # a new config object on every change
            self._rules = (self.config, BatchRules.of(self.topic, self.index, self.config))
        return self._rules[1]

    def submit(self, records: bytes | bytearray | memoryview,
               verify_txn: Callable[[BatchHeader], asyncio.Future[ErrorCode] | None] | None = None
               ) -> AppendResult | asyncio.Future[AppendResult]:
        """Append, as `append` does, or return a future when the append has to wait.

        Header checks run now. A batch whose record checks or recompression are costly
        (OFFLOAD_MIN_BYTES and up) is prepared in a worker thread, and a batch whose
        transaction another broker verifies (`verify_txn` returns a future of the produce
        error) waits for that answer; later appends to this partition queue behind them,
        so a partition's appends keep the order of their submit calls (a connection's
        pipelined requests, the requests of several connections). Must be called on the
        event loop thread.
        """
        self.check_leader()
        buf, headers = self._validate(records)
        verification = check = None
        if verify_txn is not None and headers[0].is_transactional and not self._in_transaction(headers[0].producer_id):
            verification = verify_txn(headers[0])
            if verification is not None:
                check = self._guard_check(headers[0].producer_id)
        rules, now = self.batch_rules(), self._time_ms()
        offload = len(buf) >= OFFLOAD_MIN_BYTES and rules.is_costly(headers, now)
        if not offload and verification is None and not self._queue:
            return self._append(*prepare_batches(buf, headers, rules, now))
        loop = asyncio.get_running_loop()
        prepared: asyncio.Future[tuple[bytearray, list[BatchHeader]]]
        if verification is not None:
            prepared = asyncio.ensure_future(_verified_then_prepared(verification, offload, buf, headers, rules, now))
        elif offload:
            prepared = loop.run_in_executor(None, prepare_batches, buf, headers, rules, now)
        else:
            prepared = loop.create_future()
            try:
                prepared.set_result(prepare_batches(buf, headers, rules, now))
            except KafkaError as exc:
                prepared.set_exception(exc)
        result: asyncio.Future[AppendResult] = loop.create_future()
        self._queue.append((prepared, result, check))
        prepared.add_done_callback(lambda _: self._drain_queue())
        return result

    def _in_transaction(self, producer_id: int) -> bool:
        """The producer's transaction is open here already: its first batch was verified (Kafka's sentinel)."""
        entry = self.log.producer_state.last_entry(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def _guard_check(self, producer_id: int) -> Callable[[], None]:
        """A check that the producer's transaction was not ended here while its verification was under way."""
        guard = self._verification_guards.setdefault(producer_id, (object(), self._time_ms()))

        def check() -> None:
            if not self._in_transaction(producer_id) and self._verification_guards.get(producer_id) is not guard:
                raise KafkaError(ErrorCode.invalid_txn_state,
                                 f"the transaction of producer {producer_id} ended while it was verified")
        return check

    def replace_log(self, log: Log) -> None:
        """Serve from `log`, a complete copy of the current one (klamm.broker.replica_moves)."""
        if self.flusher is not None:
            self.flusher.forget(self.log)
            self.flusher.watch(log, self._on_flushed)
        self.log = log

    def expire_verification_guards(self, before_ms: int) -> None:
        """Forget guards of verifications begun before `before_ms` that no append took (refused, given up)."""
        for producer_id, (_, created_ms) in list(self._verification_guards.items()):
            if created_ms < before_ms:
                del self._verification_guards[producer_id]

    def _drain_queue(self) -> None:
        """Append every prepared batch at the head of the queue, in order."""
        while self._queue and self._queue[0][0].done():
            prepared, result, check = self._queue.popleft()
            if prepared.cancelled():  # the executor shut down
                result.cancel()
                continue
            try:
                batch = prepared.result()
                self.check_leader()  # leadership may have moved while the batch waited
                if check is not None:
                    check()
                appended = self._append(*batch)
            except Exception as exc:  # a KafkaError, or a failed write: that request's answer
                if not result.done():
                    result.set_exception(exc)
                continue
            # appended even if the request was given up meanwhile, like an append done inline
            if not result.done():
                result.set_result(appended)

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      control: ControlRecordType) -> AppendResult:
        """Append a transaction marker (WriteTxnMarkers, or the coordinator's own write when it leads here).

        Markers are appended with acks=all, as Kafka's are: not at all while the ISR is below
        min.insync.replicas (the coordinator retries), rather than once per retry.
        """
        self.check_leader()
        if self.leader is not None:  # replicated
            self.check_min_insync()
        self.log.producer_state.check_marker(producer_id, coordinator_epoch)
        buf = bytearray(build_control_batch(control, producer_id=producer_id, producer_epoch=producer_epoch,
                                            coordinator_epoch=coordinator_epoch, timestamp_ms=self._time_ms()))
        return self._append(buf, batches.split_batches(buf))

    def _append(self, buf: bytearray, headers: list[BatchHeader]) -> AppendResult:
        append_time = self._time_ms() if self.config.message_timestamp_type == "LogAppendTime" else None
        result = self.log.append(buf, headers, leader_epoch=self.leader_epoch, log_append_time_ms=append_time)
        if self._verification_guards:
            for header in headers:
                if header.is_transactional:  # its transaction is open, or ended by this marker
                    self._verification_guards.pop(header.producer_id, None)
        self._maybe_flush(result)
        if not result.duplicate:
            self._advance_high_watermark()
        return result

    def _committable_end(self) -> int:
        """The leader's own end for the HW: its log end, or its recovery point when acks wait for fsync."""
        durable_only = self.flusher is not None and self.log.config.flush_messages <= 1
        return min(self.log.log_end_offset, self.log.recovery_point) if durable_only else self.log.log_end_offset

    def _advance_high_watermark(self) -> None:
        if self.leader is not None:
            if self.leader.on_local_append(self._committable_end(), self._time_ms()):
                self._high_watermark_moved()
            else:
                self._wake_waiters()  # followers' long polls take what was appended (consumers park again)
            self._check_replication_waiters()
            return
        if self.leader_id is not None:
            return  # a follower's HW is the leader's
        end = self._committable_end()
        if end > self.high_watermark:
            self.high_watermark = end
            self._wake_waiters()

    def _high_watermark_moved(self) -> None:
        assert self.leader is not None
        self.high_watermark = min(self.leader.high_watermark, self.log.log_end_offset)
        self._wake_waiters()
        self._check_replication_waiters()

    def _on_flushed(self) -> None:
        self._advance_high_watermark()

    def _maybe_flush(self, result: AppendResult) -> None:
        if not result.flush_due and not self.log.flush_wanted(self._time_ms()):
            return
        if self.flusher is None or (result.flush_due and self.flush_inline):
            self.log.flush()
        else:
            self.flusher.request(self.log)

    async def wait_durable(self, result: AppendResult) -> None:
        """Return once `result`'s offsets are fsynced, if flush.messages asks for it before the ack."""
        if result.flush_due and self.flusher is not None:
            await self.flusher.wait_durable(self.log, result.last_offset + 1)

    def _validate(self, records: bytes | bytearray | memoryview) -> tuple[bytearray | memoryview, list[BatchHeader]]:
        # A writable view is a large produce request's records in the request's own frame
        # (klamm.protocol.frame_views): its offsets are patched there. Anything else is copied first.
        buf = records if isinstance(records, memoryview) and not records.readonly else bytearray(records)
        try:
            headers = batches.split_batches(buf)
        except TruncatedBatch:
            headers = []
        except UnsupportedMagic as exc:
            raise KafkaError(ErrorCode.invalid_record, str(exc)) from None
        except InvalidBatch as exc:
            raise KafkaError(ErrorCode.corrupt_message, str(exc)) from None
        if len(headers) != 1:
            # Kafka: produce v3+ carries exactly one complete v2 batch per partition.
            raise KafkaError(ErrorCode.invalid_record,
                             "Produce requests with version 3 and above must have exactly one record batch per partition")
        if len(buf) > self.config.effective_segment_bytes:
            raise KafkaError(ErrorCode.record_list_too_large)
        for header in headers:
            if header.size > self.config.max_message_bytes:
                raise KafkaError(ErrorCode.message_too_large,
                                 f"batch of {header.size} bytes exceeds max.message.bytes={self.config.max_message_bytes}")
            if not batches.crc_ok(buf, header):
                raise KafkaError(ErrorCode.corrupt_message, "record batch CRC mismatch")
            if header.is_control:
                raise KafkaError(ErrorCode.invalid_record, "clients may not write control batches")
        return buf, headers

    def read(self, offset: int, max_bytes: int, *, read_committed: bool, min_one: bool,
             leader_only: bool = True) -> ReadResult:
        """A consumer's read: up to the HW (or the LSO). With `leader_only` False a follower serves it too,
        up to its own HW and LSO (KIP-392: Kafka's consumer fetch from v11)."""
        if leader_only:
            self.check_leader()
        limit = self.last_stable_offset if read_committed else self.high_watermark
        return self.log.read(offset, max_bytes, max_offset=limit, min_one=min_one)

    def read_for_follower(self, offset: int, max_bytes: int, *, min_one: bool) -> ReadResult:
        """A follower's read: up to the log end, whatever is committed."""
        self.check_leader()
        return self.log.read(offset, max_bytes, max_offset=self.log.log_end_offset, min_one=min_one)

    # Long-poll fetches wait here for the next append.
    def add_waiter(self, future: asyncio.Future[None]) -> None:
        self._waiters.add(future)

    def remove_waiter(self, future: asyncio.Future[None]) -> None:
        self._waiters.discard(future)

    def _wake_waiters(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            for future in waiters:
                if not future.done():
                    future.set_result(None)


@dataclass(frozen=True)
class BatchRules:
    """A topic's record rules and final codec: what prepare_batches needs, safe to hand to a thread."""

    records: RecordRules
    codec: int | None  # compression.type as a codec; None for "producer"
    level: int | None  # compression.<codec>.level; None for the codec's default

    @classmethod
    def of(cls, topic: str, index: int, config: TopicConfig) -> BatchRules:
        codec = _CODECS.get(config.compression_type)
        level_key = _LEVEL_KEYS.get(config.compression_type)
        return cls(RecordRules.of(topic, index, config), codec,
                   config.value_of(level_key) if level_key is not None else None)

    def is_costly(self, headers: list[BatchHeader], now_ms: int) -> bool:
        """Whether prepare_batches decodes or recompresses anything (else it returns at once)."""
        return any(self.recompresses(h) or needs_records(h, self.records, now_ms) for h in headers)

    def recompresses(self, header: BatchHeader) -> bool:
        return self.codec is not None and header.compression != self.codec


_VERIFICATION_MESSAGES = {
    ErrorCode.not_enough_replicas: "Unable to verify the partition has been added to the transaction",
    ErrorCode.invalid_txn_state: "Partition was not added to the transaction"}


async def _verified_then_prepared(verification: asyncio.Future[ErrorCode], offload: bool, buf: bytearray,
                                  headers: list[BatchHeader], rules: BatchRules,
                                  now_ms: int) -> tuple[bytearray, list[BatchHeader]]:
    """A batch whose transaction another broker verifies: prepared once the coordinator said yes."""
    error = await verification
    if error != ErrorCode.none:
        raise KafkaError(error, _VERIFICATION_MESSAGES.get(error))
    if offload:
        return await asyncio.get_running_loop().run_in_executor(None, prepare_batches, buf, headers, rules, now_ms)
    return prepare_batches(buf, headers, rules, now_ms)


def prepare_batches(buf: bytearray, headers: list[BatchHeader], rules: BatchRules,
                    now_ms: int) -> tuple[bytearray, list[BatchHeader]]:
    """Record-level validation (when the header cannot vouch for the batch) and recompression.

    Touches only its arguments, so it may run in a worker thread; raises KafkaError.
    """
    for header in headers:
        if needs_records(header, rules.records, now_ms):
            max_timestamp = validate_records(buf, header, rules.records, now_ms)
            if not rules.records.log_append_time:
                set_max_timestamp(buf, header, max_timestamp)
    if any(rules.recompresses(h) for h in headers):
        buf, headers = _recompress(buf, headers, rules.codec, rules.level,  # type: ignore[arg-type]
                                   rules.records.max_inflated)
    return buf, headers


def _recompress(buf: bytearray, headers: list[BatchHeader], codec: int,
                level: int | None, limit: int) -> tuple[bytearray, list[BatchHeader]]:
    from klamm.protocol.records import recompress_batch

    out = bytearray()
    for header in headers:
        out += buf[header.position: header.position + header.size] if header.compression == codec \
            else recompress_batch(buf, header, codec, level, limit)
    return out, batches.split_batches(out)
