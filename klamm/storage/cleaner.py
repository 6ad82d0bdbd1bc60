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

Threads and processes: choosing a log and preparing a CleanPlan happen on the
thread that owns the log (the event loop). The plan's CleanJob (paths, sizes,
mtimes, offsets, configs: plain values) goes to the Cleaner's own process, which
does the expensive part out of the broker's interpreter lock: it opens the plan's
inactive segments by path (a segment renamed, deleted or rewritten since the plan
stops the cleaning: SegmentChanged), maps and rewrites them into new `.cleaned`
files, fsyncs them, and answers with a CleanOutcome (offsets, counters, each new
segment's SegmentSummary). A worker thread waits for that answer and opens the
`.cleaned` segments; the swap (Log.replace_segments -> swap_in) runs on the owner
thread again, so readers never see a half-swapped log. A process that dies only
fails its cleaning (CleanerCrashed: its `.cleaned` files are removed).

On-disk protocol of a swap (files named as in klamm.storage.segment, plus a suffix):

    1. worker:  write <B>.log.cleaned (+ .index.cleaned, .timeindex.cleaned), fsync (the cleaner process)
    2. owner:   rename the replaced segments except the first to *.deleted
    3. owner:   rename the cleaned files to *.swap (the .log last)
    4. owner:   rename the first replaced segment (base B) to *.deleted
    5. owner:   rename the .swap files to their final names (the .log last)
    6. thread:  fsync the directory, then write cleaner-offset-checkpoint
    7. later:   close and unlink the *.deleted files (after file.delete.delay.ms, and after 6)

The renames are not fsynced one by one, as in Kafka's LocalLog.replaceSegments (which flushes the
directory once, after the last): a journaling filesystem (ext4, xfs) makes metadata changes durable in
the order they were made, so a crash leaves a prefix of steps 2-5 on disk, which the invariant below
covers. Step 6 runs off the event loop (a directory fsync waits for the journal, tens of milliseconds
while other files are being written); until it has run the swap may be lost in a crash, leaving the old
segments, and the checkpoint never claims a cleaning that is not on disk.

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

import ctypes
import logging
import multiprocessing
import os
import pickle
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
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
from klamm.steps import Steps, run_steps
from klamm.storage.checkpoint import CorruptCheckpoint, fsync_dir, read_offset_checkpoint, write_offset_checkpoint
from klamm.storage.config import LogConfig
from klamm.storage.offset_map import OffsetMap
from klamm.storage.segment import (
    INDEX_SUFFIX,
    INT32_MAX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentSummary,
    file_name,
)
from klamm.storage.throttler import Throttler
from klamm.storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from klamm.storage.log import Log

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT",
    "PROCESS_CONTEXT",
    "CleanJob",
    "CleanOutcome",
    "CleanPlan",
    "CleanResult",
    "Cleaner",
    "CleanerCheckpoints",
    "CleanerCrashed",
    "CleaningAborted",
    "CompactionConfig",
    "LogToClean",
    "SegmentChanged",
    "commit_clean",
    "commit_clean_steps",
    "grab_filthiest",
    "needs_cleaning",
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
_STOP_POLL_S = 0.05  # how soon a throttled cleaner process sees the stop flag
_LEFTOVER = re.compile(r"^(\d{20})\.log(\.cleaned|\.swap|\.deleted)?$")
# Cleaner processes start as fresh interpreters: forking a process that runs an event loop
# and threads would copy locks held by other threads. As with any spawned process, the
# parent's main script is imported again there (not `python -m` modules): a program that
# embeds a Broker must keep its start-up under `if __name__ == "__main__":`.
PROCESS_CONTEXT = multiprocessing.get_context("spawn")
# The cleaner process's CPU priority (nice). Where the cores are busy (clients on the broker's machine, a
# compacted topic taking tens of thousands of records a second) a process of the broker's priority took a
# whole core beside the event loop's thread, which waited on a run queue for it at every wake-up: the loop and
# the clients come first, and a cleaning takes the CPU left (compaction is best-effort, as Kafka's is).
CLEANER_NICE = 19


class CleaningAborted(Exception):
    """The cleaning was stopped (broker shutdown); its `.cleaned` files are gone."""


class SegmentChanged(Exception):
    """A segment to clean was renamed, deleted or rewritten after the plan was made (retention,
    truncation); nothing was written. The log is cleaned again later from a new plan."""


class CleanerCrashed(Exception):
    """The cleaner process died during a cleaning; its `.cleaned` files are gone, a new process
    is started for the next cleaning."""


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
    if len(segments) == 1:  # the usual compacted log; what the walks below come to, without them
        clean_bytes = active.size if active.base_offset < first_dirty else 0
        return LogToClean(log, config, first_dirty, active.base_offset, clean_bytes, 0, False, reset)
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


def needs_cleaning(ltc: LogToClean) -> bool:
    """Kafka's rule: a dirty ratio strictly above min.cleanable.dirty.ratio, or max.compaction.lag.ms exceeded."""
    return ltc.total_bytes > 0 and ((ltc.needs_compaction_now and ltc.cleanable_bytes > 0)
                                    or ltc.cleanable_ratio > ltc.config.min_cleanable_ratio)


def grab_filthiest(candidates: Iterable[LogToClean]) -> LogToClean | None:
    """The log with the highest dirty ratio among those that need cleaning."""
    return max(filter(needs_cleaning, candidates), key=lambda ltc: ltc.cleanable_ratio, default=None)


# -- the plan: what the cleaner process is sent (picklable), and what stays on the owner side ---------


@dataclass(frozen=True)
class SourceFile:
    """One inactive segment to clean, as the cleaner process finds it: by path, checked by size and mtime."""

    path: Path
    base_offset: int
    next_base: int  # base offset of the following segment
    size: int
    mtime_ns: int
    index_bytes: int
    time_index_bytes: int


@dataclass(frozen=True)
class CleanJob:
    """Everything a cleaning reads besides the files: plain values only, sent to the cleaner process."""

    directory: Path
    log_config: LogConfig
    config: CompactionConfig
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    sources: tuple[SourceFile, ...]
    active_producers: dict[int, tuple[int | None, int]]  # producer id -> (last data offset, epoch)
    aborted_txns: tuple[AbortedTxn, ...] = ()  # of the whole cleanable range


@dataclass
class CleanPlan:
    """A job and, on the owner side, the segments it names (by base offset) for the swap."""

    log: Log
    job: CleanJob
    segments: dict[int, LogSegment]

    @property
    def directory(self) -> Path:
        return self.job.directory


def prepare_clean(ltc: LogToClean, now_ms: int) -> CleanPlan:
    """Snapshot what the cleaner process needs (owner thread): the inactive segments below the
    first uncleanable offset, each with the size and mtime it must still have when opened
    there (retention may rename or delete it meanwhile: the cleaning then stops, see
    SegmentChanged)."""
    log = ltc.log
    segments = log.segments
    sources = []
    for i, segment in enumerate(segments[:-1]):
        if segment.base_offset >= ltc.first_uncleanable_offset:
            break
        sources.append(SourceFile(
            segment.log_path, segment.base_offset, segments[i + 1].base_offset, segment.size,
            os.stat(segment.log_path).st_mtime_ns, segment.offset_index.entries * 8,
            segment.time_index.entries * 12,
        ))
    producers = {}
    for producer_id, entry in log.producer_state.producers.items():
        last_data = entry.batches[-1].last_offset if entry.batches else None
        producers[producer_id] = (last_data, entry.epoch)
    aborted = log.collect_aborted_txns(segments[0].base_offset, ltc.first_uncleanable_offset) if sources else []
    job = CleanJob(log.directory, log.config, ltc.config, ltc.first_dirty_offset, ltc.first_uncleanable_offset,
                   now_ms, tuple(sources), producers, tuple(aborted))
    return CleanPlan(log, job, {s.base_offset: s for s in segments[:len(sources)]})


# -- results --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CleanedFiles:
    """One group's `.cleaned` files as the cleaner process left them (written and fsynced)."""

    base_offset: int
    replaced: tuple[int, ...]  # base offsets of the segments it replaces
    aborted_txns: tuple[AbortedTxn, ...]  # the new segment's .txnindex
    summary: SegmentSummary


@dataclass(frozen=True)
class CleanOutcome:
    """What the cleaner process answers for one CleanJob."""

    end_offset: int
    groups: tuple[CleanedFiles, ...]
    bytes_read: int
    bytes_written: int
    records_read: int
    records_retained: int
    duration_ms: float


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


def _result_of(plan: CleanPlan, outcome: CleanOutcome) -> CleanResult:
    """Open the outcome's `.cleaned` segments on the owner side (all of them, or none: the files go)."""
    result = CleanResult(outcome.end_offset)
    try:
        for files in outcome.groups:
            new = LogSegment.reopen(plan.directory, files.base_offset, plan.job.log_config, files.summary,
                                    suffix=CLEANED_SUFFIX)
            old = [plan.segments[base] for base in files.replaced]
            result.groups.append(CleanedGroup(new, old, list(files.aborted_txns)))
    except BaseException:
        result.discard()
        _discard_cleaned_files(plan.job)
        raise
    return result


def _discard_cleaned_files(job: CleanJob) -> None:
    """Remove whatever `.cleaned` files a cleaning of `job` may have left (a group starts at a source)."""
    for source in job.sources:
        _unlink_segment_files(job.directory, source.base_offset, CLEANED_SUFFIX)


# -- the cleaner (owner side) and its process ------------------------------------------------------


class Cleaner:
    """One cleaner: a long-lived process that does the cleanings, and the counters read by metrics.

    The expensive part of a cleaning (mapping keys, decoding, filtering and rewriting
    batches) is pure Python; in a thread it would hold the interpreter lock for
    milliseconds at a time and delay the event loop. The process holds the offset map
    (log.cleaner.dedupe.buffer.size) and is started on the first cleaning; a process that
    dies fails that cleaning only (CleanerCrashed) and is started again for the next.
    `clean` blocks until the process answers: call it from a worker thread.
    """

    def __init__(self, dedupe_buffer_bytes: int, load_factor: float = 0.9, throttler: Throttler | None = None) -> None:
        # The map's capacity; its entries live in the process (this copy stays empty).
        self.offset_map = OffsetMap(dedupe_buffer_bytes, load_factor)
        # log.cleaner.io.max.bytes.per.second: reads and writes count, as in Kafka's cleaner
        self.throttler = throttler or Throttler(float("inf"), context=PROCESS_CONTEXT)
        # Set once, read by the process before each batch and while it throttles. A plain shared
        # byte, not an Event: a process killed (or stopped) inside Event.is_set would keep its lock.
        self._stop = PROCESS_CONTEXT.RawValue("b", 0)
        self._busy = threading.Lock()  # one cleaning at a time; held while the process works
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
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

    @property
    def pid(self) -> int | None:
        """The cleaner process's id while it runs (tests kill it)."""
        return self._process.pid if self._process is not None and self._process.is_alive() else None

    def stop(self) -> None:
        """Ask a running clean to stop at the next batch, and every later one not to start (any thread)."""
        self._stop.value = 1

    def clean(self, plan: CleanPlan) -> CleanResult:
        """Have the process write the cleaned segments (`*.cleaned`); open them here for the swap.

        Nothing visible changes until commit_clean swaps the result in. Raises CleaningAborted
        once stopped, SegmentChanged if a source segment went meanwhile, CleanerCrashed if the
        process died; none of them leaves a `.cleaned` file behind.
        """
        with self._busy:
            if self._stop.value:
                raise CleaningAborted()
            conn = self._start()
            try:
                conn.send(plan.job)
                reply = conn.recv()
            except (EOFError, OSError) as e:
                exitcode = self._reap()
                _discard_cleaned_files(plan.job)
                if self._stop.value:
                    raise CleaningAborted() from e
                raise CleanerCrashed(f"the cleaner process died (exit code {exitcode})") from e
        if isinstance(reply, BaseException):
            raise reply
        self.runs += 1
        self.bytes_read += reply.bytes_read
        self.bytes_written += reply.bytes_written
        self.records_read += reply.records_read
        self.records_retained += reply.records_retained
        self.last_duration_ms = reply.duration_ms
        return _result_of(plan, reply)

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop, and end the process: a cleaning still running after `timeout_s` is killed (its
        waiting `clean` then raises CleaningAborted and removes the `.cleaned` files)."""
        self.stop()
        if self._busy.acquire(timeout=timeout_s):
            try:
                self._end_process()
            finally:
                self._busy.release()
        else:
            process = self._process
            if process is not None:
                process.kill()

    def _start(self) -> Connection:
        if self._process is not None and self._conn is not None:
            return self._conn
        self.throttler.share()  # the shared lock, made by the first cleaning (it starts a resource tracker)
        ours, theirs = PROCESS_CONTEXT.Pipe()
        process = PROCESS_CONTEXT.Process(target=_process_main, name="klamm-cleaner",
                                   args=(theirs, self.offset_map, self.throttler, self._stop), daemon=True)
        process.start()
        theirs.close()  # the process's end: once it exits, recv here sees EOF
        self._process, self._conn = process, ours
        return ours

    def _reap(self) -> int | None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is None:
            return None
        process.join(1.0)
        if process.is_alive():
            process.kill()
            process.join()
        return process.exitcode

    def _end_process(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
        self._reap()


def _process_main(conn: Connection, offset_map: OffsetMap, throttler: Throttler, stop: ctypes.c_byte) -> None:
    """The cleaner process: answer each CleanJob with a CleanOutcome or the exception it raised."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the broker decides when its cleaner stops
    _lower_priority()
    work = _Cleaning(offset_map, throttler.with_sleep(partial(_sleep_unless, stop)), lambda: bool(stop.value))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return  # the broker is gone
        if job is None:
            return
        reply: CleanOutcome | BaseException
        try:
            reply = work.run(job)
        except Exception as e:  # noqa: BLE001 (anything: the broker decides what a failed cleaning means)
            reply = e
        try:
            conn.send(reply)
        except (TypeError, AttributeError, pickle.PicklingError):
            conn.send(RuntimeError(f"log cleaning failed: {reply!r}"))
        except OSError:
            return


def _lower_priority() -> None:
    """CLEANER_NICE for this process (its one thread: later ones inherit it), where the OS allows it."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, CLEANER_NICE)
    except (OSError, AttributeError) as exc:  # AttributeError: no setpriority on this platform
        logger.debug("the cleaner process keeps the broker's CPU priority: %s", exc)


def _sleep_unless(stop: ctypes.c_byte, seconds: float) -> None:
    """Sleep `seconds`, or less once `stop` is set."""
    deadline = time.monotonic() + seconds
    while not stop.value:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        time.sleep(min(remaining, _STOP_POLL_S))


# -- cleaning (the cleaner process) -----------------------------------------------------------------


class _Cleaning:
    """The work of one cleaning, in the cleaner process; the offset map is reused from one to the next."""

    def __init__(self, offset_map: OffsetMap, throttler: Throttler, stopped: Callable[[], bool]) -> None:
        self.offset_map = offset_map
        self.throttler = throttler
        self._stopped = stopped
        self.bytes_read = self.bytes_written = self.records_read = self.records_retained = 0

    def run(self, job: CleanJob) -> CleanOutcome:
        """Build the offset map and write the cleaned segments (`*.cleaned`, fsynced)."""
        started = time.monotonic()
        self.bytes_read = self.bytes_written = self.records_read = self.records_retained = 0
        fds: dict[int, int] = {}
        groups: list[CleanedFiles] = []
        try:
            for source in job.sources:
                fds[source.base_offset] = _open_source(source)
            end_offset = self._build_offset_map(job, fds)
            sources = [s for s in job.sources if s.base_offset < end_offset]
            txns = _TxnTracker(list(job.aborted_txns))
            for group in group_by_size(sources, job.log_config.segment_bytes,
                                       job.log_config.segment_index_bytes, job.first_uncleanable_offset):
                summary = self._clean_group(job, group, fds, txns)
                groups.append(CleanedFiles(group[0].base_offset, tuple(s.base_offset for s in group),
                                           tuple(txns.take_kept()), summary))
        except BaseException:
            for files in groups:
                _unlink_segment_files(job.directory, files.base_offset, CLEANED_SUFFIX)
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
        return CleanOutcome(end_offset, tuple(groups), self.bytes_read, self.bytes_written, self.records_read,
                            self.records_retained, (time.monotonic() - started) * 1000)

    def _check_stop(self) -> None:
        if self._stopped():
            raise CleaningAborted()

    # building the map

    def _build_offset_map(self, job: CleanJob, fds: dict[int, int]) -> int:
        """Map the dirty section, as far as the map holds; return the offset cleaning stops before."""
        offset_map = self.offset_map
        offset_map.clear()
        start, end = job.first_dirty_offset, job.first_uncleanable_offset
        txns = _TxnTracker([txn for txn in job.aborted_txns if txn.last_offset >= start])
        for source in job.sources:
            if source.next_base <= start or source.base_offset >= end:
                continue
            if self._map_segment(source, fds[source.base_offset], start, txns):
                break
            # Offsets may have gaps: the segment maps everything up to the next one.
            offset_map.update_latest_offset(min(source.next_base, end) - 1)
        return offset_map.latest_offset + 1

    def _map_segment(self, source: SourceFile, fd: int, start: int, txns: _TxnTracker) -> bool:
        """Add the segment's keyed records at offsets >= start, except aborted ones; True when the map filled up."""
        offset_map = self.offset_map
        for data in _batches(fd, source.size):
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

    def _clean_group(self, job: CleanJob, group: list[SourceFile], fds: dict[int, int],
                     txns: _TxnTracker) -> SegmentSummary:
        base = group[0].base_offset
        _unlink_segment_files(job.directory, base, CLEANED_SUFFIX)  # from an earlier aborted attempt
        cleaned = LogSegment.create(job.directory, base, job.log_config, job.now_ms, suffix=CLEANED_SUFFIX)
        try:
            out = bytearray()
            headers: list[BatchHeader] = []
            for source in group:
                for data in _batches(fds[source.base_offset], source.size):
                    self._check_stop()
                    self.throttler.maybe_throttle(len(data))
                    self.bytes_read += len(data)
                    kept = self._filter_batch(job, data, txns)
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
            summary = cleaned.summary()
            cleaned.close()
        except BaseException:
            cleaned.delete()
            raise
        return summary

    def _filter_batch(self, job: CleanJob, data: bytes, txns: _TxnTracker) -> bytes | None:
        """The batch as it survives cleaning: unchanged, rebuilt with fewer records, empty, or None
        (Kafka's cleanInto filter: checkBatchRetention, then shouldRetainRecord)."""
        header = read_batch_header(data)
        has_horizon = bool(header.attributes & DELETE_HORIZON_FLAG)
        if header.is_control:
            discardable = txns.on_control(header, data)
            # A marker whose transaction has no batch left waits out delete.retention.ms like a tombstone.
            if discardable and has_horizon and header.base_timestamp <= job.now_ms:
                return _empty_batch(header) if _keep_empty(job, header) else None
            if discardable and not has_horizon and header.records_count:
                return _rebuild_batch(header, decode_batch(data)[1], job.now_ms + job.config.delete_retention_ms)
            if header.records_count or _keep_empty(job, header):
                return data
            return None
        if txns.on_batch(header):  # aborted: the records go whatever their keys
            self.records_read += header.records_count
            return _empty_batch(header) if _keep_empty(job, header) else None
        _, records = decode_batch(data)
        self.records_read += len(records)
        retained = [r for r in records if self._retain(r, header, has_horizon, job.now_ms)]
        self.records_retained += len(retained)
        tombstones = any(r.value is None for r in retained)
        if retained and len(retained) == len(records) and (has_horizon or not tombstones):
            return data
        if retained:
            if has_horizon:
                horizon = header.base_timestamp
            elif tombstones:
                horizon = job.now_ms + job.config.delete_retention_ms
            else:
                horizon = None
            return _rebuild_batch(header, retained, horizon)
        if _keep_empty(job, header):
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


def _open_source(source: SourceFile) -> int:
    """A descriptor of the source segment, if it is still the file the plan saw; else SegmentChanged."""
    try:
        fd = os.open(source.path, os.O_RDONLY)
    except FileNotFoundError:
        raise SegmentChanged(f"{source.path} is gone (retention or truncation got there first)") from None
    stat = os.fstat(fd)
    if stat.st_size != source.size or stat.st_mtime_ns != source.mtime_ns:
        os.close(fd)
        raise SegmentChanged(f"{source.path} changed since the cleaning was planned")
    return fd


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


def _keep_empty(job: CleanJob, header: BatchHeader) -> bool:
    """Kafka keeps an emptied batch when it is an active producer's last one (its sequence
    numbers and epoch are needed after a restart) or the last batch of the cleaned range."""
    if header.next_offset == job.first_uncleanable_offset:
        return True
    if header.producer_id < 0:
        return False
    last = job.active_producers.get(header.producer_id)
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


def group_by_size(sources: list[SourceFile], max_size: int, max_index_size: int,
                  first_uncleanable_offset: int) -> list[list[SourceFile]]:
    """Kafka's groupSegmentsBySize: consecutive segments whose sizes (log and both indexes) fit
    one segment and whose offsets stay within an int32 of the group's base."""
    groups: list[list[SourceFile]] = []
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
    return run_steps(commit_clean_steps(log, result))


def commit_clean_steps(log: Log, result: CleanResult,
                       wanted: Callable[[], bool] = lambda: True) -> Steps[tuple[bool, list[LogSegment]]]:
    """commit_clean a group a step: nine renames each, so that a cleaning of many segments need not hold the loop
    for all of them. Between two steps the log is whole (the groups swapped in so far are the cleaning). Before
    each group `wanted()` says whether the log is still to be changed (not deleted meanwhile); once it is not,
    the groups left are discarded. The groups not yet taken stay in `result.groups` (`result.discard()`)."""
    replaced: list[LogSegment] = []
    complete = True
    while result.groups:
        if not wanted():
            result.discard()
            return False, replaced
        group = result.groups.pop(0)
        if log.replace_segments(group.new, group.old, group.aborted_txns):
            replaced.extend(group.old)
        else:
            complete = False
            group.new.delete()
        if result.groups:
            yield
    return complete, replaced


def swap_in(new: LogSegment, old: list[LogSegment]) -> None:
    """Steps 2-5 of the protocol in the module docstring: `new` (named *.cleaned) replaces `old`. Renames
    only: the caller makes them durable (step 6, `fsync_dir` of the log's directory, off the event loop)
    before the replaced files are unlinked."""
    for segment in old[1:]:
        _set_suffix(segment, DELETED_SUFFIX)
    _set_suffix(new, SWAP_SUFFIX)
    _set_suffix(old[0], DELETED_SUFFIX)
    _set_suffix(new, "")


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
        # By the log dir's path as a string: a Path made by `.parent` hashes in microseconds, and the cleaner
        # looks up every compacted log on each pass.
        self._offsets: dict[str, dict[tuple[str, int], int]] = {}
        for log_dir in log_dirs:
            path = Path(log_dir) / CLEANER_OFFSET_CHECKPOINT
            try:
                self._offsets[str(Path(log_dir))] = read_offset_checkpoint(path)
            except CorruptCheckpoint:
                logger.warning("ignoring corrupt %s: compacted logs are cleaned from their start", path)
                self._offsets[str(Path(log_dir))] = {}

    def get(self, log: Log) -> int | None:
        log_dir = os.path.dirname(log.directory) or "."  # as str(Path(".")) spells a relative log dir "."
        return self._offsets.get(log_dir, {}).get((log.topic, log.partition))

    def record(self, log: Log, offset: int, live: set[tuple[str, int]]) -> Callable[[], None]:
        """Record `offset` for `log`, dropping logs no longer `live`; the write of its dir's file, to run on
        any thread (writes of one dir must run in the order they were recorded)."""
        log_dir = log.directory.parent
        offsets = {key: value for key, value in self._offsets.get(str(log_dir), {}).items() if key in live}
        offsets[(log.topic, log.partition)] = offset
        self._offsets[str(log_dir)] = offsets
        return partial(write_offset_checkpoint, log_dir / CLEANER_OFFSET_CHECKPOINT, dict(offsets))
