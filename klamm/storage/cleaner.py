"""Log compaction: Kafka's LogCleaner / Cleaner / LogCleanerManager for one log at a time.

What a cleaning does: for a log with cleanup.policy=compact, the dirty section
[first dirty offset, first uncleanable offset) is scanned into a key -> latest
offset map (klamm.storage.offset_map); then every segment from the start of the
log up to the last offset mapped is rewritten keeping, per key, only the record
with the latest offset. Batches keep their base and last offsets, records keep
their absolute offsets (so cleaned batches have gaps); a batch whose records all
survive is copied byte for byte, others are re-encoded with their original codec.
Tombstones (null values) survive their first cleaning, which stamps their batch
with a delete horizon (now + delete.retention.ms, KIP-534: attribute bit 0x40,
horizon in base_timestamp); a later cleaning after the horizon drops them.
Consecutive small segments are merged up to segment.bytes (Kafka's groupSegmentsBySize).

Transactions (Kafka's CleanedTransactionMetadata, fed from the `.txnindex`): batches of
aborted transactions are dropped at once and never enter the offset map (an aborted
write must not shadow the committed value of its key). A transaction marker is kept
while any batch of its transaction remains in the log; once none does, it is stamped
with a delete horizon like a tombstone and dropped by a cleaning after that horizon.
The cleaned segment's `.txnindex` keeps only the aborted transactions whose marker and
data both remain.

Threads: choosing a log and preparing a CleanPlan (segment snapshot, duplicated
descriptors) happen on the thread that owns the log (the event loop); the
expensive part, Cleaner.clean, runs in a worker thread and touches only the
plan's inactive segments (through its own descriptors) and its new `.cleaned`
files; the swap (Log.replace_segments -> swap_in) runs on the owner thread again,
so readers never see a half-swapped log.

On-disk protocol of a swap (files named as in klamm.storage.segment, plus a suffix):

    1. worker:  write <B>.log.cleaned (+ .index.cleaned, .timeindex.cleaned), fsync
    2. owner:   rename the replaced segments except the first to *.deleted
    3. owner:   rename the cleaned files to *.swap (the .log last), fsync the directory
    4. owner:   rename the first replaced segment (base B) to *.deleted
    5. owner:   rename the .swap files to their final names (the .log last), fsync the directory
    6. later:   close and unlink the *.deleted files (after file.delete.delay.ms)

Invariant for recovery (recover_interrupted_swaps, run by Log.open): while a
`<B>.log.swap` exists, every segment it replaces is `.deleted` except possibly
the one named B, so the swap is completed by dropping `<B>.*` and renaming; while
only `<B>.log.cleaned` exists, the segment named B is intact and the replaced
segments already renamed are exactly the `.deleted` ones between B and the next
intact segment, so the swap is rolled back by renaming those back. Either way the
log holds the old or the new contents, never both and never neither.

`cleaner-offset-checkpoint` in each log directory root is an offset checkpoint
(klamm.storage.checkpoint: "topic partition offset" lines): per compacted log,
the offset below which it is clean (the first dirty offset of the next cleaning).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from klamm.protocol.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    BatchHeader,
    read_batch_header,
)
from klamm.protocol.compression import compress
from klamm.protocol.records import (
    ControlRecordType,
    Record,
    assemble_batch,
    control_type_of,
    decode_batch,
    encode_record,
    record_keys,
)
from klamm.storage.checkpoint import CorruptCheckpoint, fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from klamm.storage.config import LogConfig
from klamm.storage.offset_map import OffsetMap
from klamm.storage.segment import INDEX_SUFFIX, INT32_MAX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, file_name
from klamm.storage.throttler import Throttler
from klamm.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from klamm.storage.log import Log

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "CleanPlan",
    "CleanResult",
    "Cleaner",
    "CleanerCheckpoints",
    "CleaningAborted",
    "CompactionConfig",
    "LogToClean",
    "commit_clean",
    "grab_filthiest",
    "log_to_clean",
    "prepare_clean",
    "recover_interrupted_swaps",
    "swap_in",
]

logger = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
DELETE_HORIZON_FLAG = 0x40  # batch attribute: base_timestamp holds the delete horizon (KIP-534)
MAX_LONG = 2**63 - 1
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_LEFTOVER = re.compile(r"^(\d{20})\.log(\.cleaned|\.swap|\.deleted)?$")


class CleaningAborted(Exception):
    """The cleaning was stopped (broker shutdown); its `.cleaned` files are gone."""


@dataclass(frozen=True)
class CompactionConfig:
    """The topic settings a cleaning depends on (besides the LogConfig of the log)."""

    min_cleanable_ratio: float = 0.5  # min.cleanable.dirty.ratio
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = MAX_LONG  # max.compaction.lag.ms
    delete_retention_ms: int = 86_400_000  # delete.retention.ms


# -- choosing what to clean (Kafka's LogCleanerManager) ---------------------------------------


@dataclass
class LogToClean:
    log: Log
    config: CompactionConfig
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base offset: cleaning never reaches it
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms exceeded
    reset_checkpoint: bool  # the checkpoint was outside the log and must be rewritten

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def log_to_clean(log: Log, config: CompactionConfig, checkpoint: int | None, now_ms: int,
                 last_stable_offset: int) -> LogToClean:
    """Kafka's cleanableOffsets + LogToClean for one log (owner thread: reads the segment list)."""
    segments = log.segments
    first_dirty, reset = _first_dirty_offset(log, checkpoint)
    active = segments[-1]
    uncleanable = min(last_stable_offset, active.base_offset)
    if config.min_compaction_lag_ms > 0:
        # Records younger than the lag stay: stop at the first dirty segment holding one.
        for segment in _non_active_from(segments, first_dirty):
            if segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    uncleanable = max(uncleanable, first_dirty)
    # The cleanable section ends at the base of the segment holding `uncleanable`.
    first_uncleanable = active.base_offset
    for segment in _non_active_from(segments, uncleanable):
        first_uncleanable = segment.base_offset
        break
    clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
    low = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(s.size for s in _overlapping(segments, low, first_uncleanable))
    return LogToClean(log, config, first_dirty, first_uncleanable, clean_bytes, cleanable_bytes,
                      _max_compaction_delay(segments, first_dirty, now_ms, config) > 0, reset)


def _first_dirty_offset(log: Log, checkpoint: int | None) -> tuple[int, bool]:
    """The checkpoint, unless it lies outside [log start, log end): then the log start (and reset it)."""
    start = log.log_start_offset
    if checkpoint is None:
        return start, False
    if checkpoint < start or checkpoint > log.log_end_offset:
        return start, True
    return checkpoint, False


def _non_active_from(segments: list[LogSegment], offset: int) -> list[LogSegment]:
    """Inactive segments from the one holding `offset` on (Kafka's nonActiveLogSegmentsFrom)."""
    return [s for s in _overlapping(segments, offset, MAX_LONG) if s is not segments[-1]]


def _overlapping(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """Segments holding offsets in [start, end): the floor segment of `start` and those after, below `end`."""
    result = []
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else MAX_LONG
        if next_base > start and segment.base_offset < end:
            result.append(segment)
    return result


def _max_compaction_delay(segments: list[LogSegment], first_dirty: int, now_ms: int, config: CompactionConfig) -> int:
    """How long past max.compaction.lag.ms the oldest dirty record is (0: not overdue)."""
    timestamps = [
        s.first_batch_timestamp
        for s in _non_active_from(segments, first_dirty)
        if s.first_batch_timestamp is not None and s.first_batch_timestamp > 0
    ]
    if not timestamps:
        return 0
    clean_until = now_ms - max(config.max_compaction_lag_ms, 0)
    return max(clean_until - min(timestamps), 0)


def grab_filthiest(candidates: Iterable[LogToClean]) -> LogToClean | None:
    """The log with the highest dirty ratio among those that need cleaning (Kafka's rule: ratio
    strictly above min.cleanable.dirty.ratio, or max.compaction.lag.ms exceeded)."""
    cleanable = [
        ltc
        for ltc in candidates
        if ltc.total_bytes > 0
        and ((ltc.needs_compaction_now and ltc.cleanable_bytes > 0) or ltc.cleanable_ratio > ltc.config.min_cleanable_ratio)
    ]
    return max(cleanable, key=lambda ltc: ltc.cleanable_ratio, default=None)


# -- the plan handed to a worker thread ----------------------------------------------------------


@dataclass
class _Source:
    """One inactive segment to read in a worker thread, through a descriptor of its own."""

    segment: LogSegment
    base_offset: int
    next_base: int  # base offset of the following segment
    size: int
    fd: int
    mtime_ns: int
    index_bytes: int
    time_index_bytes: int


@dataclass
class CleanPlan:
    log: Log
    directory: Path
    log_config: LogConfig
    config: CompactionConfig
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    sources: list[_Source]
    active_producers: dict[int, tuple[int | None, int]]  # producer id -> (last data offset, epoch)
    aborted_txns: list[AbortedTxn] = field(default_factory=list)  # of the whole cleanable range

    def close(self) -> None:
        for source in self.sources:
            try:
                os.close(source.fd)
            except OSError:
                pass
        self.sources = []


def prepare_clean(ltc: LogToClean, now_ms: int) -> CleanPlan:
    """Snapshot what the worker needs (owner thread): the inactive segments below the first
    uncleanable offset, each with a duplicated descriptor so that retention closing the
    segment meanwhile cannot pull the file from under the worker."""
    log = ltc.log
    segments = log.segments
    sources = []
    for i, segment in enumerate(segments[:-1]):
        if segment.base_offset >= ltc.first_uncleanable_offset:
            break
        sources.append(_Source(
            segment, segment.base_offset, segments[i + 1].base_offset, segment.size, os.dup(segment.fd),
            os.stat(segment.log_path).st_mtime_ns, segment.offset_index.entries * 8,
            segment.time_index.entries * 12,
        ))
    producers = {}
    for producer_id, entry in log.producer_state.producers.items():
        last_data = entry.batches[-1].last_offset if entry.batches else None
        producers[producer_id] = (last_data, entry.epoch)
    aborted = log.collect_aborted_txns(segments[0].base_offset, ltc.first_uncleanable_offset) if sources else []
    return CleanPlan(log, log.directory, log.config, ltc.config, ltc.first_dirty_offset,
                     ltc.first_uncleanable_offset, now_ms, sources, producers, aborted)


# -- cleaning (worker thread) ---------------------------------------------------------------------


@dataclass
class CleanedGroup:
    new: LogSegment  # named *.cleaned until swapped in
    old: list[LogSegment]
    aborted_txns: list[AbortedTxn] = field(default_factory=list)  # the new segment's .txnindex


@dataclass
class CleanResult:
    end_offset: int  # the new checkpoint: everything below is clean
    groups: list[CleanedGroup] = field(default_factory=list)

    def discard(self) -> None:
        """Delete the cleaned files of groups never swapped in."""
        for group in self.groups:
            group.new.delete()
        self.groups = []


class Cleaner:
    """One cleaner thread's state: its offset map and counters (read by metrics)."""

    def __init__(self, dedupe_buffer_bytes: int, load_factor: float = 0.9, throttler: Throttler | None = None) -> None:
        self.offset_map = OffsetMap(dedupe_buffer_bytes, load_factor)
        # log.cleaner.io.max.bytes.per.second: reads and writes count, as in Kafka's cleaner
        self.throttler = throttler or Throttler(float("inf"))
        self._stop = threading.Event()
        # Counters since start, for a metrics module.
        self.runs = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_read = 0
        self.records_retained = 0
        self.last_duration_ms = 0.0

    @property
    def bytes_cleaned(self) -> int:
        return self.bytes_read

    def stop(self) -> None:
        """Ask a running clean to stop at the next batch (any thread)."""
        self._stop.set()

    def clean(self, plan: CleanPlan) -> CleanResult:
        """Build the offset map and write the cleaned segments (`*.cleaned`); closes the plan's descriptors.

        Nothing visible changes until commit_clean swaps the result in.
        """
        started = time.monotonic()
        try:
            end_offset = self._build_offset_map(plan)
            sources = [s for s in plan.sources if s.base_offset < end_offset]
            result = CleanResult(end_offset)
            txns = _TxnTracker(plan.aborted_txns)
            try:
                for group in group_by_size(sources, plan.log_config.segment_bytes,
                                           plan.log_config.segment_index_bytes, plan.first_uncleanable_offset):
                    cleaned = self._clean_group(plan, group, txns)
                    result.groups.append(CleanedGroup(cleaned, [s.segment for s in group], txns.take_kept()))
            except BaseException:
                result.discard()
                raise
        finally:
            plan.close()
        self.runs += 1
        self.last_duration_ms = (time.monotonic() - started) * 1000
        return result

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise CleaningAborted()

    # building the map

    def _build_offset_map(self, plan: CleanPlan) -> int:
        """Map the dirty section, as far as the map holds; return the offset cleaning stops before."""
        offset_map = self.offset_map
        offset_map.clear()
        start, end = plan.first_dirty_offset, plan.first_uncleanable_offset
        txns = _TxnTracker([txn for txn in plan.aborted_txns if txn.last_offset >= start])
        for source in plan.sources:
            if source.next_base <= start or source.base_offset >= end:
                continue
            if self._map_segment(source, start, txns):
                break
            # Offsets may have gaps: the segment maps everything up to the next one.
            offset_map.update_latest_offset(min(source.next_base, end) - 1)
        return offset_map.latest_offset + 1

    def _map_segment(self, source: _Source, start: int, txns: _TxnTracker) -> bool:
        """Add the segment's keyed records at offsets >= start, except aborted ones; True when the map filled up."""
        offset_map = self.offset_map
        for data in _batches(source.fd, source.size):
            self._check_stop()
            self.throttler.maybe_throttle(len(data))
            header = read_batch_header(data)
            if header.is_control:
                txns.on_control(header, data)
                aborted = False
            else:
                aborted = txns.on_batch(header)
            if header.last_offset < start:
                continue
            if not header.is_control and not aborted:
                for offset, _, key in record_keys(data, header):
                    if key is not None and offset >= start:
                        if offset_map.is_full:
                            return True
                        offset_map.put(key, offset)
            offset_map.update_latest_offset(header.last_offset)
        return False

    # rewriting

    def _clean_group(self, plan: CleanPlan, group: list[_Source], txns: _TxnTracker) -> LogSegment:
        base = group[0].base_offset
        _unlink_segment_files(plan.directory, base, CLEANED_SUFFIX)  # from an earlier aborted attempt
        cleaned = LogSegment.create(plan.directory, base, plan.log_config, plan.now_ms, suffix=CLEANED_SUFFIX)
        try:
            out = bytearray()
            headers: list[BatchHeader] = []
            for source in group:
                for data in _batches(source.fd, source.size):
                    self._check_stop()
                    self.throttler.maybe_throttle(len(data))
                    self.bytes_read += len(data)
                    kept = self._filter_batch(plan, data, txns)
                    if kept is None:
                        continue
                    headers.append(read_batch_header(kept))
                    headers[-1].position = len(out)
                    out += kept
                    if len(out) >= _WRITE_CHUNK:
                        cleaned.append(out, headers)
                        self.throttler.maybe_throttle(len(out))
                        out, headers = bytearray(), []
            if out:
                cleaned.append(out, headers)
                self.throttler.maybe_throttle(len(out))
            self.bytes_written += cleaned.size
            cleaned.on_become_inactive()
            cleaned.flush()
            # Keep the replaced files' age, as Kafka does (mtime-based retention looks at it).
            os.utime(cleaned.log_path, ns=(group[-1].mtime_ns, group[-1].mtime_ns))
        except BaseException:
            cleaned.delete()
            raise
        return cleaned

    def _filter_batch(self, plan: CleanPlan, data: bytes, txns: _TxnTracker) -> bytes | None:
        """The batch as it survives cleaning: unchanged, rebuilt with fewer records, empty, or None
        (Kafka's cleanInto filter: checkBatchRetention, then shouldRetainRecord)."""
        header = read_batch_header(data)
        has_horizon = bool(header.attributes & DELETE_HORIZON_FLAG)
        if header.is_control:
            discardable = txns.on_control(header, data)
            # A marker whose transaction has no batch left waits out delete.retention.ms like a tombstone.
            if discardable and has_horizon and header.base_timestamp <= plan.now_ms:
                return _empty_batch(header) if _keep_empty(plan, header) else None
            if discardable and not has_horizon and header.records_count:
                return _rebuild_batch(header, decode_batch(data)[1], plan.now_ms + plan.config.delete_retention_ms)
            if header.records_count or _keep_empty(plan, header):
                return data
            return None
        if txns.on_batch(header):  # aborted: the records go whatever their keys
            self.records_read += header.records_count
            return _empty_batch(header) if _keep_empty(plan, header) else None
        _, records = decode_batch(data)
        self.records_read += len(records)
        retained = [r for r in records if self._retain(r, header, has_horizon, plan.now_ms)]
        self.records_retained += len(retained)
        tombstones = any(r.value is None for r in retained)
        if retained and len(retained) == len(records) and (has_horizon or not tombstones):
            return data
        if retained:
            if has_horizon:
                horizon = header.base_timestamp
            elif tombstones:
                horizon = plan.now_ms + plan.config.delete_retention_ms
            else:
                horizon = None
            return _rebuild_batch(header, retained, horizon)
        if _keep_empty(plan, header):
            return _empty_batch(header)
        return None

    def _retain(self, record: Record, header: BatchHeader, has_horizon: bool, now_ms: int) -> bool:
        """Kafka's shouldRetainRecord: the latest record of its key, unless a tombstone past its horizon."""
        if record.offset > self.offset_map.latest_offset:
            return True  # beyond what was mapped: not known to be superseded
        if record.key is None:
            return False  # a compacted topic cannot hold keyless records
        if record.offset < self.offset_map.get(record.key):
            return False
        if record.value is not None:
            return True
        return not has_horizon or now_ms < header.base_timestamp


class _TxnTracker:
    """Kafka's CleanedTransactionMetadata: transaction state while the cleaner walks the log in order.

    Aborted transactions (from the .txnindex) become "ongoing" once the walk reaches their
    first offset; their batches are discardable; their abort marker is discardable only if
    none of their batches was seen (all removed by earlier cleanings). Likewise a commit
    marker is discardable once no batch of its transaction was seen since the last marker.
    """

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda txn: txn.first_offset)
        self._next = 0
        self._aborted: dict[int, tuple[AbortedTxn, bool]] = {}  # producer id -> (txn, a batch seen)
        self._committed: set[int] = set()  # producers with a batch of a (not aborted) transaction seen
        self._kept: list[AbortedTxn] = []

    def take_kept(self) -> list[AbortedTxn]:
        """Aborted transactions whose marker stays, since the last call: a cleaned segment's .txnindex."""
        kept, self._kept = self._kept, []
        return kept

    def _consume_up_to(self, offset: int) -> None:
        while self._next < len(self._pending) and self._pending[self._next].first_offset <= offset:
            txn = self._pending[self._next]
            self._aborted.setdefault(txn.producer_id, (txn, False))
            self._next += 1

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch read; True if it belongs to an aborted transaction."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborted.get(header.producer_id)
        if ongoing is not None:
            self._aborted[header.producer_id] = (ongoing[0], True)
            return True
        self._committed.add(header.producer_id)
        return False

    def on_control(self, header: BatchHeader, data: bytes) -> bool:
        """A control batch read; True if it may go (its transaction has no batch left)."""
        self._consume_up_to(header.last_offset)
        if not header.records_count:
            return True  # emptied by an earlier cleaning
        control = control_type_of(data)
        if control == ControlRecordType.ABORT:
            txn, seen = self._aborted.pop(header.producer_id, (None, False))
            if txn is not None and seen:
                self._kept.append(txn)
                return False
            return True
        if control == ControlRecordType.COMMIT:
            if header.producer_id in self._committed:
                self._committed.discard(header.producer_id)
                return False
            return True
        return False


def _keep_empty(plan: CleanPlan, header: BatchHeader) -> bool:
    """Kafka keeps an emptied batch when it is an active producer's last one (its sequence
    numbers and epoch are needed after a restart) or the last batch of the cleaned range."""
    if header.next_offset == plan.first_uncleanable_offset:
        return True
    if header.producer_id < 0:
        return False
    last = plan.active_producers.get(header.producer_id)
    if last is None:
        return False
    last_data_offset, epoch = last
    if last_data_offset is not None:
        return header.last_offset == last_data_offset
    return header.is_control and header.producer_epoch == epoch


def _rebuild_batch(header: BatchHeader, retained: list[Record], horizon: int | None) -> bytes:
    """The batch with only `retained`: same base and last offset, codec and producer fields."""
    log_append_time = header.attributes & ATTR_TIMESTAMP_TYPE
    base_timestamp = horizon if horizon is not None else retained[0].timestamp
    max_timestamp = header.max_timestamp if log_append_time else max(r.timestamp for r in retained)
    raw = b"".join(
        encode_record(r.offset - header.base_offset, r.timestamp - base_timestamp, r.key, r.value, r.headers)
        for r in retained
    )
    attributes = header.attributes & ~DELETE_HORIZON_FLAG
    if horizon is not None:
        attributes |= DELETE_HORIZON_FLAG
    return assemble_batch(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=len(retained),
        body=compress(header.compression, raw),
    )


def _empty_batch(header: BatchHeader) -> bytes:
    """A header-only batch keeping the offsets and producer fields (Kafka's writeEmptyHeader)."""
    return assemble_batch(
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        attributes=header.attributes & ~(ATTR_COMPRESSION_MASK | DELETE_HORIZON_FLAG),
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.max_timestamp,
        max_timestamp=header.max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        records_count=0,
        body=b"",
    )


def _batches(fd: int, size: int) -> Iterator[bytes]:
    """Each whole batch of the file fd[0:size], read in large chunks."""
    position = 0
    while position < size:
        chunk = os.pread(fd, min(_READ_CHUNK, size - position), position)
        relative = 0
        while relative + HEADER_SIZE <= len(chunk):
            batch_size = read_batch_header(chunk, relative).size
            if relative + batch_size > len(chunk):
                break
            yield bytes(chunk[relative:relative + batch_size])
            relative += batch_size
        if relative == 0:  # one batch bigger than a chunk
            batch_size = read_batch_header(chunk).size
            data = os.pread(fd, batch_size, position)
            if len(data) != batch_size:
                raise OSError(f"short read of a {batch_size}-byte batch at {position}")
            yield data
            relative = batch_size
        position += relative


def group_by_size(sources: list[_Source], max_size: int, max_index_size: int,
                  first_uncleanable_offset: int) -> list[list[_Source]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose sizes (log and both indexes) fit
    one segment and whose offsets stay within an int32 of the group's base."""
    groups: list[list[_Source]] = []
    i = 0
    while i < len(sources):
        group = [sources[i]]
        log_size, index_size, time_size = sources[i].size, sources[i].index_bytes, sources[i].time_index_bytes
        i += 1
        while i < len(sources):
            candidate = sources[i]
            last_offset = sources[i + 1].base_offset - 1 if i + 1 < len(sources) else first_uncleanable_offset - 1
            if (
                log_size + candidate.size > max_size
                or index_size + candidate.index_bytes > max_index_size
                or time_size + candidate.time_index_bytes > max_index_size
                or (candidate.size and last_offset - group[0].base_offset > INT32_MAX)
            ):
                break
            group.append(candidate)
            log_size += candidate.size
            index_size += candidate.index_bytes
            time_size += candidate.time_index_bytes
            i += 1
        groups.append(group)
    return groups


# -- swapping in (owner thread) -----------------------------------------------------------------


def commit_clean(log: Log, result: CleanResult) -> tuple[bool, list[LogSegment]]:
    """Swap every cleaned group in (owner thread). Returns (all swapped, replaced segments).

    The replaced segments are renamed `*.deleted` but still open: the caller closes and
    deletes them later (fetches in flight may be sending from them). A group whose
    segments are no longer in the log (retention removed them meanwhile) is dropped.
    """
    replaced: list[LogSegment] = []
    complete = True
    for group in result.groups:
        if log.replace_segments(group.new, group.old, group.aborted_txns):
            replaced.extend(group.old)
        else:
            complete = False
            group.new.delete()
    result.groups = []
    return complete, replaced


def swap_in(new: LogSegment, old: list[LogSegment]) -> None:
    """Steps 2-5 of the protocol in the module docstring: `new` (named *.cleaned) replaces `old`."""
    directory = new.log_path.parent
    for segment in old[1:]:
        _set_suffix(segment, DELETED_SUFFIX)
    _set_suffix(new, SWAP_SUFFIX)
    fsync_dir(directory)
    _set_suffix(old[0], DELETED_SUFFIX)
    _set_suffix(new, "")
    fsync_dir(directory)


def _set_suffix(segment: LogSegment, suffix: str) -> None:
    """Rename the segment's three files to `<base><ext><suffix>`, the .log last."""
    directory, base = segment.log_path.parent, segment.base_offset
    for index in (segment.offset_index, segment.time_index):
        ext = INDEX_SUFFIX if index is segment.offset_index else TIME_INDEX_SUFFIX
        target = directory / (file_name(base, ext) + suffix)
        try:
            os.rename(index.path, target)
        except FileNotFoundError:
            pass  # never written; rebuilt when needed
        index.path = target
    target = directory / (file_name(base, LOG_SUFFIX) + suffix)
    os.rename(segment.log_path, target)
    segment.log_path = target


def _unlink_segment_files(directory: Path, base: int, suffix: str) -> None:
    for ext in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (directory / (file_name(base, ext) + suffix)).unlink(missing_ok=True)


# -- recovery (Log.open) ----------------------------------------------------------------------------


def recover_interrupted_swaps(directory: Path) -> None:
    """Complete or roll back swaps a crash interrupted (see the module docstring).

    Runs before the log removes stale `.cleaned/.swap/.deleted` files; indexes of a
    completed or restored segment are dropped and rebuilt from the log file.
    """
    files: dict[str, set[int]] = {"": set(), CLEANED_SUFFIX: set(), SWAP_SUFFIX: set(), DELETED_SUFFIX: set()}
    for path in directory.iterdir():
        match = _LEFTOVER.match(path.name)
        if match is not None:
            files[match.group(2) or ""].add(int(match.group(1)))
    changed = False
    for base in sorted(files[SWAP_SUFFIX]):
        logger.info("completing the interrupted swap of %s/%s", directory.name, file_name(base, LOG_SUFFIX))
        _unlink_segment_files(directory, base, "")  # the old segment B (or new indexes half renamed)
        for ext in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            (directory / (file_name(base, ext) + SWAP_SUFFIX)).unlink(missing_ok=True)  # rebuilt from the log
        os.rename(directory / (file_name(base, LOG_SUFFIX) + SWAP_SUFFIX), directory / file_name(base, LOG_SUFFIX))
        files[""].add(base)
        changed = True
    for base in sorted(files[CLEANED_SUFFIX] - files[SWAP_SUFFIX]):
        later = [b for b in files[""] if b > base]
        upper = min(later) if later else MAX_LONG
        for deleted in sorted(b for b in files[DELETED_SUFFIX] if base < b < upper):
            logger.info("rolling back the interrupted swap of %s/%s: restoring %s", directory.name,
                        file_name(base, LOG_SUFFIX), file_name(deleted, LOG_SUFFIX))
            _unlink_segment_files(directory, deleted, "")
            os.rename(directory / (file_name(deleted, LOG_SUFFIX) + DELETED_SUFFIX),
                      directory / file_name(deleted, LOG_SUFFIX))
            changed = True
    if changed:
        fsync_dir(directory)


# -- the cleaner-offset-checkpoint ---------------------------------------------------------------------


class CleanerCheckpoints:
    """The cleaner-offset-checkpoint of each log dir, cached in memory (owner thread only)."""

    def __init__(self, log_dirs: Iterable[Path]) -> None:
        self._offsets: dict[Path, dict[tuple[str, int], int]] = {}
        for log_dir in log_dirs:
            path = Path(log_dir) / CLEANER_OFFSET_CHECKPOINT
            try:
                self._offsets[Path(log_dir)] = read_offset_checkpoint(path)
            except CorruptCheckpoint:
                logger.warning("ignoring corrupt %s: compacted logs are cleaned from their start", path)
                self._offsets[Path(log_dir)] = {}

    def get(self, log: Log) -> int | None:
        return self._offsets.get(log.directory.parent, {}).get((log.topic, log.partition))

    def update(self, log: Log, offset: int, live: set[tuple[str, int]]) -> None:
        """Record `offset` for `log` and rewrite its dir's file, dropping logs no longer `live`."""
        log_dir = log.directory.parent
        offsets = {key: value for key, value in self._offsets.get(log_dir, {}).items() if key in live}
        offsets[(log.topic, log.partition)] = offset
        self._offsets[log_dir] = offsets
        write_offset_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT, offsets)
