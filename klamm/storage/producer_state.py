"""Idempotent-producer state of one partition: epochs and recent sequence ranges per producer id.

Follows Kafka's ProducerStateManager / ProducerAppendInfo / ProducerStateEntry:
per producer id we keep the current epoch and the metadata of its last 5 batches
(first/last sequence, first/last offset, max timestamp), which is what detects a
retried batch (duplicate) and checks sequence continuity.

Validation rules for a client append (Kafka 3.9/4.0, KIP-360 semantics):
  * epoch lower than the current one          -> INVALID_PRODUCER_EPOCH
  * new (higher) epoch, first sequence != 0    -> OUT_OF_ORDER_SEQUENCE_NUMBER
    (unless the producer has no epoch yet)
  * same epoch, first_seq != last_seq + 1 (int32 wraps to 0) -> OUT_OF_ORDER_SEQUENCE_NUMBER
  * unknown producer id: any sequence is accepted. Since KIP-360 Kafka no longer
    answers UNKNOWN_PRODUCER_ID here (state may be gone through retention or
    DeleteRecords); the only exception is Kafka 4's transactions-v2 verification
    path, which arrives with transactions.
  * a batch whose (epoch, first_seq, last_seq) matches one of the 5 cached ones
    is a duplicate: the caller skips the append and answers with the cached offsets.
Batches with base_sequence -1 (coordinator writes) only have their epoch checked.

Transactions (Kafka's ongoing transactions of ProducerStateManager): the first
transactional batch of a producer opens its transaction at that offset; a
control batch (COMMIT/ABORT marker) ends it and is reported as a CompletedTxn,
so the log can index an abort. The partition's first unstable offset is the
smallest first offset of the open transactions; the last stable offset is that
bound by the high watermark.

Expiry (Kafka's removeExpiredProducers): a producer whose last batch (its max
timestamp, a marker's timestamp included) is `producer.id.expiration.ms` old and
that has no open transaction is forgotten. Its next write then starts a new
entry: any sequence is accepted and retries are no longer recognised, as in Kafka.

Snapshot files `<20-digit offset>.snapshot` in the partition directory hold the
state built from every batch below that offset. Format (big endian; version 1,
without last_timestamp, is still read: the last batch's timestamp stands in):

    version                  int16   (2)
    crc                      uint32  CRC32C of everything after this field
    producer_count           int32
    producer_count times:
      producer_id              int64
      producer_epoch           int16
      coordinator_epoch        int32   (of the last marker; -1 before any)
      current_txn_first_offset int64   (-1 when no transaction is open)
      last_timestamp           int64   (v2: max timestamp of its last batch or marker)
      batch_count              int8    (<= 5)
      batch_count times:
        first_seq int32, last_seq int32, first_offset int64, last_offset int64, timestamp int64

Invariants: `map_end_offset` is the offset just past the last batch applied; a
snapshot at offset S is only taken when map_end_offset == S; snapshots above the
log end are deleted before loading, so a loaded snapshot never claims batches
the log does not hold.

A roll's snapshot is a PendingSnapshot: encoded on the owner's thread when the
segment rolls (so it describes exactly the batches below its offset), its file
written and fsynced later by a flush job in a worker thread (creating a file can
wait for the filesystem's journal for milliseconds while other logs fsync). Until
written it counts for `load` as if it were on disk; deleting snapshots cancels the
pending ones in the range first, so a write that comes later leaves no file behind.
"""

from __future__ import annotations

import os
import struct
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from crc32c import crc32c

from klamm.protocol.batch import BatchHeader
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import ControlRecordType
from klamm.storage.checkpoint import fsync_dir

SNAPSHOT_SUFFIX = ".snapshot"
NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
INT32_MAX = 2**31 - 1

_SNAPSHOT_VERSION = 2
_FILE_HEADER = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_PRODUCER = struct.Struct(">qhiqqb")
_PRODUCER_V1 = struct.Struct(">qhiqb")
_BATCH = struct.Struct(">iiqqq")


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerStateEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    last_timestamp: int = -1  # of its last batch or marker: what expiry measures from

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.epoch,
            deque(self.batches, maxlen=NUM_BATCHES_TO_RETAIN),
            self.coordinator_epoch,
            self.current_txn_first_offset,
            self.last_timestamp,
        )

    def update_epoch(self, epoch: int) -> None:
        """A new epoch starts a new sequence space, so the cached batches no longer apply."""
        if epoch != self.epoch:
            self.epoch = epoch
            self.batches.clear()

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        self.update_epoch(epoch)
        self.batches.append(batch)

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    is_aborted: bool


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def _has_sequence(header: BatchHeader) -> bool:
    return header.base_sequence != NO_SEQUENCE and not header.is_control


class SnapshotGate:
    """What the pending snapshots of one log share: one writer at a time, and the cancelled check and the
    rename against cancellation, of one snapshot or of all of them at once (`close`, the log deleted)."""

    __slots__ = ("writing", "publishing", "closed")

    def __init__(self) -> None:
        self.writing = threading.Lock()  # one writer at a time (a job retried while the first still runs)
        self.publishing = threading.Lock()  # the cancelled check and the rename, against cancel() and close()
        self.closed = False

    def close(self) -> None:
        """No pending snapshot of the log creates its file any more; waits at most for a rename in progress."""
        with self.publishing:
            self.closed = True


class PendingSnapshot:
    """A snapshot's bytes, encoded at a roll, whose file a flush job writes (see module docstring).

    `write` runs in any thread; `cancel` runs on the owner's thread and waits at most for a
    rename in progress: after it returns no write of this snapshot creates its file any more,
    so a deletion that lists the directory after cancelling removes whatever one did create.
    The locks are the log's (`gate`): a roll's snapshot adds no lock for the collector to walk.
    """

    def __init__(self, path: Path, offset: int, data: bytes, gate: SnapshotGate) -> None:
        self.path = path
        self.offset = offset
        self.data = data
        self.written = False  # its file is in place, fsynced (its directory entry: by the caller)
        self._cancelled = False
        self._gate = gate

    @property
    def cancelled(self) -> bool:
        return self._cancelled or self._gate.closed

    def write(self) -> None:
        """Write the file (temp file, fsync, rename); nothing if cancelled or the directory is gone.
        The caller fsyncs the directory afterwards."""
        gate = self._gate
        with gate.writing:
            if self.written or self.cancelled:
                return
            # A name of its own: a superseded snapshot of the same offset may still be writing.
            tmp = self.path.with_name(f"{self.path.name}.{id(self):x}.tmp")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except FileNotFoundError:
                return  # the log was deleted meanwhile
            try:
                view = memoryview(self.data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            with gate.publishing:
                if not self.cancelled:
                    try:
                        os.replace(tmp, self.path)
                    except FileNotFoundError:
                        return  # the log was deleted meanwhile
                    self.written = True
                    return
            tmp.unlink(missing_ok=True)

    def cancel(self) -> None:
        with self._gate.publishing:
            self._cancelled = True


class ProducerStateManager:
    """Producer state of one partition log plus its snapshot files (see module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._gate = SnapshotGate()
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        self._pending: dict[int, PendingSnapshot] = {}  # offset -> a roll's snapshot not written yet

    # -- validation and update -----------------------------------------------------

    def check_append(self, headers: list[BatchHeader], first_offset: int) -> BatchMetadata | None:
        """Validate a client append whose batches will get offsets from `first_offset`.

        Returns the cached metadata if a batch is a retry of an already-appended one
        (the whole request is then treated as that duplicate, as Kafka does: it stops
        at the first duplicate batch). Raises KafkaError for fenced epochs and
        sequence gaps. Does not change any state.
        """
        pending: dict[int, ProducerStateEntry] = {}
        offset = first_offset
        for header in headers:
            base_offset, offset = offset, offset + header.last_offset_delta + 1
            if header.producer_id < 0:
                continue
            current = self.producers.get(header.producer_id)
            if current is not None and _has_sequence(header):
                duplicate = current.find_duplicate(header.producer_epoch, header.base_sequence, header.last_sequence)
                if duplicate is not None:
                    return duplicate
            entry = pending.get(header.producer_id)
            if entry is None:
                entry = current.copy() if current is not None else ProducerStateEntry(header.producer_id)
                pending[header.producer_id] = entry
            self._check_epoch(entry, header)
            if _has_sequence(header):
                committed_epoch = current.epoch if current is not None else NO_PRODUCER_EPOCH
                self._check_sequence(entry, committed_epoch, header)
                entry.add_batch(
                    header.producer_epoch,
                    BatchMetadata(header.base_sequence, header.last_sequence, base_offset, offset - 1, -1),
                )
            else:
                entry.update_epoch(header.producer_epoch)
        return None

    def check_marker(self, producer_id: int, coordinator_epoch: int) -> None:
        """A marker from an older coordinator than the last one that ended a transaction here is fenced."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.coordinator_epoch > coordinator_epoch:
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"coordinator epoch {coordinator_epoch} of producer {producer_id}'s marker is older than "
                f"{entry.coordinator_epoch}",
            )

    @staticmethod
    def _check_epoch(entry: ProducerStateEntry, header: BatchHeader) -> None:
        if header.producer_epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"epoch {header.producer_epoch} of producer {entry.producer_id} is older than {entry.epoch}",
            )

    @staticmethod
    def _check_sequence(entry: ProducerStateEntry, committed_epoch: int, header: BatchHeader) -> None:
        first_seq = header.base_sequence
        if header.producer_epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"new epoch {header.producer_epoch} of producer {entry.producer_id} starts at sequence {first_seq}",
                )
            return
        # A producer without an epoch (state lost to retention) may continue at any sequence.
        if committed_epoch != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"producer {entry.producer_id}: sequence {first_seq} does not follow {entry.last_seq}",
            )

    def apply(self, header: BatchHeader, control_type: ControlRecordType | None = None,
              coordinator_epoch: int = -1) -> CompletedTxn | None:
        """Record an appended batch (offsets final) without validation: leader, follower and replay.

        For a control batch the caller passes its marker type; the transaction it ends is returned.
        """
        self.map_end_offset = header.next_offset
        if header.producer_id < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            entry = self.producers[header.producer_id] = ProducerStateEntry(header.producer_id)
        entry.last_timestamp = header.max_timestamp
        if header.is_control:
            return self._end_txn(entry, header, control_type, coordinator_epoch)
        if header.base_sequence == NO_SEQUENCE:
            entry.update_epoch(header.producer_epoch)
        else:
            entry.add_batch(
                header.producer_epoch,
                BatchMetadata(
                    header.base_sequence,
                    header.last_sequence,
                    header.base_offset,
                    header.last_offset,
                    header.max_timestamp,
                ),
            )
        if header.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = header.base_offset
        return None

    @staticmethod
    def _end_txn(entry: ProducerStateEntry, header: BatchHeader, control_type: ControlRecordType | None,
                 coordinator_epoch: int) -> CompletedTxn | None:
        entry.update_epoch(header.producer_epoch)
        if control_type is None:
            return None  # not a transaction marker
        if coordinator_epoch >= 0:
            entry.coordinator_epoch = coordinator_epoch
        first = entry.current_txn_first_offset
        entry.current_txn_first_offset = -1
        if first < 0:
            return None  # a marker without data here (e.g. a retried marker): nothing to complete
        return CompletedTxn(entry.producer_id, first, header.base_offset, control_type == ControlRecordType.ABORT)

    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction; None when none is open."""
        firsts = [e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset >= 0]
        return min(firsts) if firsts else None

    def ongoing_txns(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return {e.producer_id: e.current_txn_first_offset
                for e in self.producers.values() if e.current_txn_first_offset >= 0}

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for `expiration_ms` with no open transaction; how many went."""
        expired = [pid for pid, entry in self.producers.items()
                   if entry.current_txn_first_offset < 0 and now_ms - entry.last_timestamp >= expiration_ms]
        for producer_id in expired:
            del self.producers[producer_id]
        return len(expired)

    # -- snapshots -------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        offsets = []
        for path in self.directory.glob("*" + SNAPSHOT_SUFFIX):
            stem = path.name[: -len(SNAPSHOT_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                offsets.append(int(stem))
        return sorted(offsets)

    def take_snapshot(self) -> Path:
        """Write the state as `<map_end_offset>.snapshot` durably (temp file, fsync, rename, fsync
        of the directory), here and now: for a close. A roll uses `snapshot_later`."""
        path = self.directory / snapshot_name(self.map_end_offset)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, self._encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.directory)
        return path

    def take_snapshot_if_new(self) -> Path | None:
        """take_snapshot, unless nothing was ever appended (map end offset 0) or `<map_end_offset>.snapshot` is
        on disk already (a roll's, or an earlier close's: the state at an offset is the same): as Kafka's
        takeSnapshot, which writes only past its last snapshot's offset. A broker restarted without traffic
        then rewrites no snapshot of its thousands of logs."""
        if self.map_end_offset == 0 or (self.directory / snapshot_name(self.map_end_offset)).exists():
            return None
        return self.take_snapshot()

    def snapshot_later(self) -> PendingSnapshot:
        """The state as of now, encoded here, for a flush job to write (a roll's snapshot)."""
        offset = self.map_end_offset
        pending = PendingSnapshot(self.directory / snapshot_name(offset), offset, self._encode(), self._gate)
        previous = self._pending.get(offset)
        if previous is not None:
            previous.cancel()  # superseded (an empty segment rolled again at the same offset)
        self._pending[offset] = pending
        return pending

    def snapshot_written(self, pending: PendingSnapshot) -> None:
        """A flush job wrote `pending` (owner's thread): its file now stands for it."""
        if pending.written and self._pending.get(pending.offset) is pending:
            del self._pending[pending.offset]

    def pending_snapshot_offsets(self) -> list[int]:
        return sorted(self._pending)

    def _cancel_pending(self, doomed: Callable[[int], bool]) -> None:
        for offset in [offset for offset in self._pending if doomed(offset)]:
            self._pending.pop(offset).cancel()

    def _encode(self) -> bytes:
        parts = [_COUNT.pack(len(self.producers))]
        for entry in self.producers.values():
            parts.append(
                _PRODUCER.pack(
                    entry.producer_id,
                    entry.epoch,
                    entry.coordinator_epoch,
                    entry.current_txn_first_offset,
                    entry.last_timestamp,
                    len(entry.batches),
                )
            )
            for batch in entry.batches:
                parts.append(
                    _BATCH.pack(batch.first_seq, batch.last_seq, batch.first_offset, batch.last_offset, batch.timestamp)
                )
        body = b"".join(parts)
        return _FILE_HEADER.pack(_SNAPSHOT_VERSION, crc32c(body)) + body

    @staticmethod
    def _decode(data: bytes) -> dict[int, ProducerStateEntry]:
        """Parse a snapshot; raises ValueError (struct.error included) if it is corrupt."""
        version, crc = _FILE_HEADER.unpack_from(data, 0)
        body = memoryview(data)[_FILE_HEADER.size :]
        if version not in (1, _SNAPSHOT_VERSION) or crc32c(body) != crc:
            raise ValueError("bad snapshot version or CRC")
        (count,) = _COUNT.unpack_from(body, 0)
        position = _COUNT.size
        producers = {}
        for _ in range(count):
            if version == 1:
                producer_id, epoch, coordinator_epoch, txn_first_offset, batch_count = \
                    _PRODUCER_V1.unpack_from(body, position)
                last_timestamp = -1
                position += _PRODUCER_V1.size
            else:
                producer_id, epoch, coordinator_epoch, txn_first_offset, last_timestamp, batch_count = \
                    _PRODUCER.unpack_from(body, position)
                position += _PRODUCER.size
            entry = ProducerStateEntry(producer_id, epoch, coordinator_epoch=coordinator_epoch,
                                       current_txn_first_offset=txn_first_offset, last_timestamp=last_timestamp)
            for _ in range(batch_count):
                entry.batches.append(BatchMetadata(*_BATCH.unpack_from(body, position)))
                position += _BATCH.size
            if version == 1 and entry.batches:
                entry.last_timestamp = entry.batches[-1].timestamp
            producers[producer_id] = entry
        if position != len(body):
            raise ValueError("trailing bytes in snapshot")
        return producers

    def load(self, log_start_offset: int, log_end_offset: int) -> int:
        """Load the newest readable snapshot <= log end; return the offset replay must start from.

        Snapshots above the log end are deleted first (they describe lost batches);
        unreadable ones are deleted too. With no snapshot the state starts empty at
        `log_start_offset`.
        """
        self.delete_snapshots_after(log_end_offset)
        for offset in sorted(set(self.snapshot_offsets()) | set(self._pending), reverse=True):
            path = self.directory / snapshot_name(offset)
            pending = self._pending.get(offset)
            try:
                self.producers = self._decode(pending.data if pending is not None else path.read_bytes())
            except (ValueError, struct.error, OSError):
                path.unlink(missing_ok=True)
                continue
            self.map_end_offset = offset
            return offset
        self.producers = {}
        self.map_end_offset = log_start_offset
        return log_start_offset

    def delete_snapshots_after(self, offset: int) -> None:
        """Delete snapshots at offsets > `offset` (pending ones included)."""
        self._cancel_pending(lambda pending: pending > offset)
        for snapshot in self.snapshot_offsets():
            if snapshot > offset:
                (self.directory / snapshot_name(snapshot)).unlink(missing_ok=True)

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete snapshots at offsets < `offset` (when segments below it are deleted; pending ones included)."""
        self._cancel_pending(lambda pending: pending < offset)
        for snapshot in self.snapshot_offsets():
            if snapshot < offset:
                (self.directory / snapshot_name(snapshot)).unlink(missing_ok=True)

    def remove_stray_snapshots(self, segment_base_offsets: list[int]) -> None:
        """Keep snapshots at segment boundaries plus the newest one; delete the rest."""
        offsets = self.snapshot_offsets()
        keep = set(segment_base_offsets)
        if offsets:
            keep.add(offsets[-1])
        for snapshot in offsets:
            if snapshot not in keep:
                (self.directory / snapshot_name(snapshot)).unlink(missing_ok=True)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.producers = {}
        self.delete_snapshots_after(-1)
        self.map_end_offset = offset

    def cancel_pending_snapshots(self) -> None:
        """The log is being deleted: no pending snapshot may create its file any more (one lock taken, not one
        a snapshot: a log of many rolled segments is deleted on the event loop)."""
        self._gate.close()
        self._pending.clear()
