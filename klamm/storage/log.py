"""The log of one partition: an ordered list of segments in `<topic>-<partition>/`.

Directory contents (Kafka's layout):

    <base>.log / .index / .timeindex   segments, see klamm.storage.segment
    <base>.txnindex                    aborted transactions, see klamm.storage.txn_index
    <offset>.snapshot                  producer state, see klamm.storage.producer_state
    leader-epoch-checkpoint            see klamm.storage.leader_epoch

Invariants:
  * segment base offsets strictly increase; the last segment is the active one
    and the only one appended to;
  * log_start_offset >= first segment base; log_end_offset is the next offset to
    assign, equal to the active segment's next_offset;
  * recovery_point <= log_end_offset and every batch below it has been fsynced,
    with the producer snapshots of the rolls below it and the leader epoch entries
    of its batches (written by the flush job that fsyncs them); so have the indexes
    of every segment before the one holding the last offset below it, which
    recovery after a crash trusts (it rebuilds those of that segment and after);
  * producer state and leader epoch cache describe exactly the batches below
    log_end_offset;
  * every abort marker below log_end_offset has its entry in its segment's
    transaction index (entries are rebuilt for whatever producer state replays).

Blocking file I/O throughout; a Log is not thread-safe (the broker serialises calls
per partition and decides what runs in an executor). ReadResult hands out the
segment's SharedFile: a reader that sends later takes a lease on it (see
klamm.storage.shared_file), so the descriptor outlives a deletion until then.
The log cleaner reads inactive segments in a worker thread through descriptors of
its own and swaps its result in with replace_segments on the owning thread, so
readers see the old or the new segments, never a mix (klamm.storage.cleaner).

Flushing is split so the fsyncs can run in a worker thread: `begin_flush` (owner's
thread) picks the segments and snapshots holding unflushed offsets into a FlushJob,
`FlushJob.run` writes the rolls' producer snapshots and the leader epoch checkpoint
and fsyncs it all (any thread),
`complete_flush` (owner's thread) advances the recovery point. Jobs may finish in
any order; the recovery point moves only over a contiguous run of finished jobs, so
it never passes data whose fsync has not completed. Appends and rolls never fsync,
and a roll creates no file (the producer snapshot is encoded at once, its file written
by the job; the new segment's files were made ahead by an earlier job, as spare files it
renames: klamm.storage.segment.SpareFiles, except at a log's first roll or if that job
has not finished): they report, through `flush_wanted` and
AppendResult.flush_due, that the flush policy (flush.messages, flush.ms, a roll)
asks for one, and the owner starts it (klamm.broker.log_flush). `flush()` does all
three steps at once, for shutdown and the metadata log.

A job leaves the indexes of the segment holding its last offset unsynced (and those of
the empty segment a roll may have put after it): recovery rebuilds them from the log,
so under flush.messages=1 each round fsyncs one file instead of three. The next job
starts at that segment, so once a later offset is covered its indexes are fsynced
too. Only a clean shutdown, after which nothing is rebuilt, fsyncs them all.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from klamm.protocol.batch import BatchHeader, InvalidBatch, patch_offsets, set_log_append_time
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import control_marker_of
from klamm.storage.checkpoint import fsync_dir
from klamm.storage.cleaner import recover_interrupted_swaps, swap_in
from klamm.storage.config import LogConfig
from klamm.storage import partition_metadata
from klamm.storage.leader_epoch import EpochSnapshot, LeaderEpochCache
from klamm.storage.producer_state import CompletedTxn, PendingSnapshot, ProducerStateManager
from klamm.storage.segment import LOG_SUFFIX, OS_FILE_IO, SPARE_SUFFIX, FileIO, LogSegment, SpareFiles
from klamm.storage.shared_file import SharedFile
from klamm.storage.txn_index import AbortedTxn, TransactionIndex

__all__ = ["AppendResult", "FlushJob", "Log", "LogConfig", "ReadResult", "InvalidAppendOffset", "parse_log_dir_name"]

_DIR_NAME = re.compile(r"^(.+)-(\d+)$")
_SEGMENT_FILE = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex|\.txnindex)$")
logger = logging.getLogger(__name__)

# Kafka's leftovers of interrupted operations, and klamm's spare files (klamm.storage.segment.SpareFiles);
# none is valid after a restart.
_STALE_SUFFIXES = (".deleted", ".cleaned", ".swap", ".tmp", SPARE_SUFFIX)


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def parse_log_dir_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) from "<topic>-<partition>", or None if the name does not match."""
    match = _DIR_NAME.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


class InvalidAppendOffset(ValueError):
    """A follower append whose offsets do not lie after the log end (Kafka's UnexpectedAppendOffsetException)."""


@dataclass
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless LogAppendTime
    log_start_offset: int
    duplicate: bool  # a producer retry of an already-appended batch; offsets are the original ones
    # flush.messages says these offsets are fsynced before they are acknowledged (Kafka flushes
    # inside such an append; klamm's owner waits for the flush job covering last_offset).
    flush_due: bool = False


@dataclass(eq=False)
class FlushJob:
    """The fsyncs that make offsets [start, target) of a log durable. `run` is safe in a worker
    thread; hand the job back to the log's complete_flush (or fail_flush) on the owner's thread."""

    start: int
    target: int
    segments: list[LogSegment]
    snapshots: list[PendingSnapshot]  # producer snapshots of rolls, to write and fsync
    directory: Path
    new_files: bool  # a segment was created at or after `start`: its directory entry needs an fsync too
    epochs: EpochSnapshot | None = None  # the leader epoch entries, if the checkpoint lacks them
    indexed: int = -1  # segments[:indexed] get their indexes fsynced too (-1: all of them)
    done: bool = False
    spare: SpareFiles | None = None  # the next segment's files, to make after the fsyncs

    def run(self) -> None:
        indexed = len(self.segments) if self.indexed < 0 else self.indexed
        for n, segment in enumerate(self.segments):
            try:
                segment.flush(indexes=n < indexed)
            except FileNotFoundError:
                pass  # an index or the directory deleted meanwhile (topic deletion): nothing to recover
            except (OSError, ValueError):
                if not segment.closed:
                    raise
                # Deleted meanwhile (retention, cleaner, topic deletion): nothing of it to recover.
        for snapshot in self.snapshots:
            snapshot.write()  # nothing if cancelled meanwhile (retention, truncation, topic deletion)
        # Nothing if a later version is written or the log is being deleted; the directory fsync below.
        wrote_epochs = self.epochs is not None and self.epochs.write(sync_dir=False)
        if self.snapshots or self.new_files or wrote_epochs:
            fsync_dir(self.directory, missing_ok=True)  # the whole log may have been deleted meanwhile
        if self.spare is not None:
            self.spare.make()  # after the fsyncs: the acknowledgements waiting on them do not wait for it


@dataclass
class ReadResult:
    file: SharedFile  # the segment's .log file; lease it to send after this call returns
    position: int  # byte position in that file
    length: int  # bytes to send (whole batches only); 0 when nothing to read
    first_offset: int  # base offset of the first batch returned (<= the requested offset)

    @property
    def fd(self) -> int:
        return self.file.fileno()


class Log:
    """See the module docstring. Create with Log.open()."""

    def __init__(self, directory: Path, config: LogConfig, time_ms: Callable[[], int],
                 io: FileIO = OS_FILE_IO) -> None:
        parsed = parse_log_dir_name(directory.name)
        if parsed is None:
            raise ValueError(f"log directory name {directory.name!r} is not <topic>-<partition>")
        self.directory = directory
        self.topic, self.partition = parsed
        self.topic_id: uuid.UUID | None = None  # as its partition.metadata names it (None: no such file)
        self.config = config
        self._time_ms = time_ms
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self._io = io
        self._last_flush_ms = time_ms()
        self._flush_jobs: list[FlushJob] = []  # begun, not yet counted in the recovery point
        self._flush_issued_to = 0  # offsets below are covered by a flush job begun (maybe not finished)
        self._unsynced_snapshots: list[PendingSnapshot] = []  # producer snapshots of rolls, not yet in a job
        self._roll_flush_wanted = False  # Kafka flushes a finished segment soon after its roll
        self._indexes_behind = False  # a job begun left the last segments' indexes unsynced
        self._spare: SpareFiles | None = None  # the next segment's files, asked of a flush job
        self._closed = False
        # Makes the rename of the directory to `directory`, if LogManager's writer has not (delete_log).
        self.pending_rename: Callable[[], None] | None = None
        self.producer_state = ProducerStateManager(directory)
        # through a weak reference: a log in no cycle is freed when dropped (a deleted one, its producer state
        # and pending snapshots with it), not by the next full collection on the event loop
        log = weakref.ref(self)
        self.leader_epoch_cache = LeaderEpochCache(directory, lambda: log().log_end_offset)  # type: ignore[union-attr]

    # -- opening and recovery ---------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = True,
        time_ms: Callable[[], int] = _wall_clock_ms,
        io: FileIO = OS_FILE_IO,
    ) -> Log:
        """Open (creating if needed) the log in `directory`, recovering it after an unclean shutdown.

        Clean: files are trusted, but a missing or insane index is rebuilt (and a torn
        tail still recovered). Unclean: every batch from the segment holding
        `recovery_point` on is validated; the log is cut at the first bad batch and
        later segments are deleted. Producer state is then rebuilt from the newest
        snapshot plus the batch headers after it. `io` is the segments' file seam
        (klamm.storage.segment.FileIO).
        """
        directory.mkdir(parents=True, exist_ok=True)
        log = cls(directory, config, time_ms, io)
        log._load(recovery_point, log_start_offset, clean_shutdown)
        return log

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        now = self._time_ms()
        bases = self._clean_directory()
        if not bases:
            segment = LogSegment.create(self.directory, log_start_offset, self.config, now, io=self._io)
            self._segments, self._bases = [segment], [log_start_offset]
        else:
            self._segments = [LogSegment.open(self.directory, base, self.config, now, self._io) for base in bases]
            self._bases = list(bases)
        if clean_shutdown:
            first_unflushed = len(self._segments)
        else:  # from the segment of the last flushed offset: its indexes may not have been fsynced
            first_unflushed = self._holding(recovery_point - 1)
        self._load_segments(first_unflushed)
        self.log_end_offset = self.active_segment.next_offset
        self.log_start_offset = max(log_start_offset, self._bases[0])
        if self.log_start_offset > self.log_end_offset:
            self.truncate_fully_and_start_at(self.log_start_offset)
        if first_unflushed < len(self._segments):
            for segment in self._segments[first_unflushed:]:
                segment.flush()
        self.recovery_point = self._flush_issued_to = self.log_end_offset
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        self.leader_epoch_cache.write()  # the epochs of recovered batches: the recovery point is past them now
        self.producer_state.remove_stray_snapshots(self._bases)
        if not clean_shutdown:
            # A roll's snapshot is written and fsynced by a flush job that may not have finished
            # (the recovery point moves past it once it has). Above the recovery point, a snapshot
            # may describe batches that power loss took back: rebuild from one below it instead.
            self.producer_state.delete_snapshots_after(recovery_point)
        self._rebuild_producer_state()

    def _clean_directory(self) -> list[int]:
        """Delete leftovers and orphan index files; return the base offsets of the .log files."""
        recover_interrupted_swaps(self.directory)  # a cleaner swap cut short: finish or undo it first
        logs, others = set(), []
        for path in self.directory.iterdir():
            if path.name.endswith(_STALE_SUFFIXES):
                path.unlink(missing_ok=True)
                continue
            if path.name == partition_metadata.FILE_NAME:
                self.topic_id = partition_metadata.read(self.directory)
                continue
            match = _SEGMENT_FILE.match(path.name)
            if match is None:
                continue
            if match.group(2) == LOG_SUFFIX:
                logs.add(int(match.group(1)))
            else:
                others.append((int(match.group(1)), path))
        for base, path in others:
            if base not in logs:
                path.unlink(missing_ok=True)
        return sorted(logs)

    def _holding(self, offset: int) -> int:
        """The index of the segment holding `offset` (the first segment for an offset below them all)."""
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def _load_segments(self, first_unflushed: int) -> None:
        """Trust segments before `first_unflushed` (fixing their indexes), recover the rest."""
        n = 0
        while n < len(self._segments):
            if n >= first_unflushed:
                truncated = self._segments[n].recover(self._on_recovered_batch)
            else:
                truncated = self._load_trusted_segment(n)
            if truncated:
                self._delete_segments_after(n)
            n += 1
        for segment in self._segments[:-1]:
            segment.on_become_inactive()

    def _load_trusted_segment(self, n: int) -> int:
        """Load segment n's indexes, recovering it if they are missing/insane or its tail is torn."""
        segment = self._segments[n]
        last = n == len(self._segments) - 1
        bound = 2**63 - 1 if last else self._bases[n + 1]
        if not segment.load_indexes(bound):
            return segment.recover(self._on_recovered_batch)
        if last:
            try:
                segment.load_tail()
            except InvalidBatch:
                return segment.recover(self._on_recovered_batch)
        return 0

    def _on_recovered_batch(self, header: BatchHeader) -> None:
        self._maybe_assign_epoch(header.partition_leader_epoch, header.base_offset)

    def _delete_segments_after(self, n: int) -> None:
        for segment in self._segments[n + 1 :]:
            segment.delete()
        del self._segments[n + 1 :]
        del self._bases[n + 1 :]

    def _rebuild_producer_state(self) -> None:
        """Newest snapshot <= log end, then replay the batch headers from there.

        The replayed range's aborted-transaction entries are rebuilt on the way: the
        snapshot's open transactions are exactly what the markers after it complete.
        """
        start = self.producer_state.load(self.log_start_offset, self.log_end_offset)
        index = self._holding(start)
        for segment in self._segments[index:]:
            segment.txn_index.truncate_to(start)
            for header in segment.headers_from(start):
                if header.base_offset >= start:
                    self._apply_to_producer_state(segment, header, segment.batch_bytes(header) if header.is_control
                                                  else None)
        self.producer_state.map_end_offset = self.log_end_offset

    def _apply_to_producer_state(self, segment: LogSegment, header: BatchHeader, control_batch: bytes | None) -> None:
        """Apply one batch; an abort marker adds its transaction to `segment`'s index."""
        marker = control_marker_of(control_batch) if control_batch is not None else None
        control, coordinator_epoch = marker if marker is not None else (None, -1)
        completed = self.producer_state.apply(header, control, coordinator_epoch)
        if completed is not None and completed.is_aborted:
            segment.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                                                self._last_stable_offset_after(completed)))

    def _last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """Kafka's: the first offset of the oldest transaction still open, else just past the marker."""
        first_unstable = self.producer_state.first_unstable_offset()
        return first_unstable if first_unstable is not None else completed.last_offset + 1

    # -- properties ------------------------------------------------------------------

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    def size_in_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    # -- appending -----------------------------------------------------------------

    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        *,
        leader_epoch: int,
        log_append_time_ms: int | None = None,
    ) -> AppendResult:
        """Append validated batches as leader: assign offsets, check producer state, write.

        If any batch is a producer retry of a cached batch, nothing is written and the
        result carries the original batch's offsets with duplicate=True (Kafka answers
        the whole request with the first duplicate it meets).
        """
        self._check_whole(buf, headers)
        first_offset = self.log_end_offset
        duplicate = self.producer_state.check_append(headers, first_offset)
        if duplicate is not None:
            return AppendResult(
                duplicate.first_offset,
                duplicate.last_offset,
                duplicate.timestamp if log_append_time_ms is not None else -1,
                self.log_start_offset,
                True,
                # A retry of a batch acknowledged only once fsynced must wait for that fsync too.
                self.config.flush_messages <= 1 and duplicate.last_offset >= self.recovery_point,
            )
        offset = first_offset
        for header in headers:
            patch_offsets(buf, header, offset, leader_epoch)
            if log_append_time_ms is not None:
                set_log_append_time(buf, header, log_append_time_ms)
            offset = header.next_offset
        self._append_batches(buf, headers)
        return AppendResult(
            first_offset,
            offset - 1,
            log_append_time_ms if log_append_time_ms is not None else -1,
            self.log_start_offset,
            False,
            self.unflushed_messages >= self.config.flush_messages,
        )

    def append_as_follower(self, buf: bytes | bytearray, headers: list[BatchHeader]) -> None:
        """Append batches that already carry their offsets (replication); no producer validation."""
        self._check_whole(buf, headers)
        if headers[0].base_offset < self.log_end_offset:
            raise InvalidAppendOffset(
                f"batch at offset {headers[0].base_offset} is below the log end offset {self.log_end_offset}"
            )
        previous = headers[0].base_offset
        for header in headers:
            if header.base_offset < previous:
                raise InvalidAppendOffset(f"offsets go backwards at {header.base_offset}")
            previous = header.next_offset
        self._append_batches(buf, headers)

    @staticmethod
    def _check_whole(buf: bytes | bytearray, headers: list[BatchHeader]) -> None:
        if not headers:
            raise ValueError("nothing to append")
        if headers[0].position != 0 or headers[-1].position + headers[-1].size != len(buf):
            raise ValueError("headers do not cover the buffer exactly")

    def _append_batches(self, buf: bytes | bytearray, headers: list[BatchHeader]) -> None:
        """Roll if needed, write to the active segment, then update producer state and epochs."""
        now = self._time_ms()
        max_timestamp = max(header.max_timestamp for header in headers)
        segment = self._maybe_roll(len(buf), max_timestamp, headers[0].base_offset, headers[-1].last_offset, now)
        for header in headers:
            self._maybe_assign_epoch(header.partition_leader_epoch, header.base_offset)
        segment.append(buf, headers)
        for header in headers:
            control = bytes(buf[header.position: header.position + header.size]) if header.is_control else None
            self._apply_to_producer_state(segment, header, control)
        self.log_end_offset = headers[-1].next_offset

    def _maybe_assign_epoch(self, epoch: int, start_offset: int) -> None:
        if epoch >= 0 and epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(epoch, start_offset)

    def _maybe_roll(self, size: int, max_timestamp: int, first_offset: int, last_offset: int, now: int) -> LogSegment:
        """Kafka's shouldRoll: segment.bytes, segment.ms, full index, or relative offset overflow."""
        segment = self.active_segment
        if segment.size == 0 and segment.can_hold_offset(last_offset) and segment.base_offset <= first_offset:
            return segment
        if (
            segment.size + size > self.config.segment_bytes
            or segment.time_waited_for_roll(now, max_timestamp) > self.config.segment_ms
            or segment.offset_index.is_full
            or segment.time_index.is_full
            or not segment.can_hold_offset(last_offset)
        ):
            return self.roll(max(first_offset, self.log_end_offset))
        return segment

    def roll(self, new_base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or `new_base_offset` for a follower gap)."""
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        old = self.active_segment
        if old.size == 0:
            # An empty active segment is replaced rather than kept (Kafka does the same).
            old.delete()
            self._segments.pop()
            self._bases.pop()
        else:
            old.on_become_inactive()
        segment = LogSegment.create(self.directory, base, self.config, self._time_ms(), io=self._io,
                                    spare=self._take_spare())
        self._segments.append(segment)
        self._bases.append(base)
        # Encoded now (it must describe the state at `base`); its file is written and fsynced by
        # the next flush job, with the finished segment and its indexes, in a worker thread: no
        # file creation but the segment's, and no fsync, inside an append.
        self._unsynced_snapshots.append(self.producer_state.snapshot_later())
        self._roll_flush_wanted = True
        return segment

    def _take_spare(self) -> SpareFiles | None:
        """The spare files a finished job made, for a new segment (the next job makes others)."""
        spare = self._spare
        if spare is None or not spare.made:
            return None  # not asked yet, or its job still runs: this segment's files are created
        self._spare = None
        return spare

    # -- flushing ----------------------------------------------------------------------

    @property
    def unflushed_messages(self) -> int:
        """Offsets appended that no flush job begun so far covers (Kafka's unflushedMessages)."""
        return self.log_end_offset - self._flush_issued_to

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    def flush_wanted(self, now_ms: int) -> bool:
        """The flush policy asks for a flush job now: a roll happened, flush.messages appends
        are uncovered, or unflushed data waited flush.ms since the last flush."""
        if self._roll_flush_wanted:
            return True
        unflushed = self.unflushed_messages
        return unflushed > 0 and (unflushed >= self.config.flush_messages
                                  or now_ms - self._last_flush_ms >= self.config.flush_ms)

    def begin_flush(self, *, from_recovery_point: bool = False, all_indexes: bool = False) -> FlushJob | None:
        """A job fsyncing what no earlier job covers, up to the log end (None: nothing to do).

        from_recovery_point: cover everything from the recovery point instead, so the job alone
        makes the whole log durable, whatever other jobs are still running.
        all_indexes: fsync the indexes of the last segments too (a clean shutdown's, as nothing
        rebuilds them at the next start).
        """
        self._last_flush_ms = self._time_ms()
        self._roll_flush_wanted = False
        start = self.recovery_point if from_recovery_point else self._flush_issued_to
        target = self.log_end_offset
        self._unsynced_snapshots = [snapshot for snapshot in self._unsynced_snapshots if not snapshot.cancelled]
        epochs = self.leader_epoch_cache.snapshot()
        indexes_wanted = all_indexes and self._indexes_behind
        if target <= start and not self._unsynced_snapshots and epochs is None and not indexes_wanted:
            return None
        # From the segment of the offset before `start`: an earlier job left its indexes unsynced.
        first = self._holding(start - 1)
        segments = self._segments[first:] if target > start or indexes_wanted else []
        job = FlushJob(start, target, segments, self._unsynced_snapshots, self.directory,
                       any(segment.base_offset >= start for segment in segments), epochs)
        if segments:
            if not all_indexes:
                job.indexed = self._holding(target - 1) - first
            self._indexes_behind = not all_indexes
        if self._spare is None and not from_recovery_point and not self._closed:
            self._spare = job.spare = SpareFiles(self.directory)
        self._unsynced_snapshots = []
        self._flush_issued_to = max(self._flush_issued_to, target)
        self._flush_jobs.append(job)
        return job

    def complete_flush(self, job: FlushJob) -> None:
        """`job` ran: advance the recovery point over the contiguous run of finished jobs from it."""
        job.done = True
        for snapshot in job.snapshots:
            self.producer_state.snapshot_written(snapshot)
        if job not in self._flush_jobs:
            return  # dropped by a truncation or a failed flush: its range is covered again later
        moved = True
        while moved:
            moved = False
            for done in self._flush_jobs:
                if done.done and done.start <= self.recovery_point < done.target:
                    self.recovery_point = min(done.target, self.log_end_offset)
                    moved = True
        self._flush_jobs = [j for j in self._flush_jobs if not (j.done and j.target <= self.recovery_point)]

    def fail_flush(self, job: FlushJob) -> None:
        """`job` raised: forget every job still open, so the next flush covers their ranges again."""
        if job.spare is not None and job.spare is self._spare and not job.spare.made:
            self._spare = None  # asked of the next job
        if job not in self._flush_jobs:
            return
        self._forget_flush_jobs()

    def _forget_flush_jobs(self) -> None:
        for open_job in self._flush_jobs:
            if not open_job.done:
                self._unsynced_snapshots.extend(open_job.snapshots)
        self._flush_jobs = []
        self._flush_issued_to = self.recovery_point
        self._indexes_behind = True  # a forgotten job may have been the one to fsync them

    def flush(self, *, all_indexes: bool = False) -> None:
        """fsync everything from the recovery point on, here and now; the recovery point becomes the log end.
        all_indexes: the last segments' indexes too (see begin_flush)."""
        job = self.begin_flush(from_recovery_point=True, all_indexes=all_indexes)
        if job is None:
            return
        try:
            job.run()
        except BaseException:
            self.fail_flush(job)
            raise
        self.complete_flush(job)

    # -- reading -------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, max_offset: int, min_one: bool) -> ReadResult:
        """Whole batches from the one holding `offset`, from a single segment.

        Only batches whose last offset < `max_offset` (the high watermark); at most
        `max_bytes`, except that with `min_one` a first batch bigger than that is
        returned whole.
        """
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]"
                f" of {self.topic}-{self.partition}",
            )
        index = self._holding(offset)
        if offset < self.log_end_offset:
            for segment in self._segments[index:]:
                found = segment.read(offset, max_bytes, max_offset, min_one)
                if found is not None:
                    position, length, first_offset = found
                    return ReadResult(segment.file, position, length, first_offset if length else offset)
        active = self.active_segment
        return ReadResult(active.file, active.size, 0, offset)

    def read_bytes(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> bytes:
        """The bytes `read` would send (min_one); convenience for internal readers and tests."""
        bound = self.log_end_offset if max_offset is None else max_offset
        result = self.read(offset, max_bytes, max_offset=bound, min_one=True)
        if not result.length:
            return b""
        return os.pread(result.fd, result.length, result.position)

    @property
    def first_unstable_offset(self) -> int | None:
        """First offset of the oldest open transaction (None: none open)."""
        return self.producer_state.first_unstable_offset()

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound), from the segment holding
        `fetch_offset` on, until an entry shows later segments cannot add any (Kafka's rule)."""
        index = self._holding(fetch_offset)
        found: list[AbortedTxn] = []
        for segment in self._segments[index:]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound)
            found.extend(entries)
            if complete:
                break
        return found

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp_ms`; None if none."""
        from klamm.protocol.records import record_timestamps

        for segment in self._segments:
            if segment.max_timestamp >= timestamp_ms:
                found = segment.find_offset_by_timestamp(timestamp_ms, self.log_start_offset, record_timestamps)
                if found is not None:
                    return found
        return None

    def max_timestamp_offset(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the log's largest timestamp (KIP-734)."""
        from klamm.protocol.records import record_timestamps

        best = max(self._segments, key=lambda segment: segment.max_timestamp)
        return best.offset_of_max_timestamp_record(record_timestamps)

    # -- retention and record deletion -------------------------------------------------

    def maybe_increment_log_start_offset(self, offset: int) -> bool:
        """Raise the log start offset to `offset` (DeleteRecords, retention); True if it moved.

        The caller bounds `offset` by the high watermark (OFFSET_OUT_OF_RANGE above it);
        segments wholly below the new start are removed by the next retention pass.
        """
        if offset > self.log_end_offset:
            raise ValueError(f"log start offset {offset} beyond the log end offset {self.log_end_offset}")
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.leader_epoch_cache.truncate_from_start(offset)
        return True

    def delete_oldest_segments(self, count: int) -> list[LogSegment]:
        """Detach the `count` oldest segments and rename their files to `*.deleted`.

        Deleting every segment rolls a fresh active segment first (a log always has
        one). The log start offset moves to the new first segment. The returned
        segments keep their descriptors open (reads in flight may still use them):
        the caller deletes them after file.delete.delay.ms, off the event loop.
        """
        if count <= 0:
            return []
        count = min(count, len(self._segments))
        if count == len(self._segments):
            self.roll()
        removed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        for segment in removed:
            _rename_to_deleted(segment)
        self.maybe_increment_log_start_offset(self._bases[0])
        self.producer_state.delete_snapshots_before(self._bases[0])
        return removed

    # -- compaction ---------------------------------------------------------------------

    def replace_segments(self, new: LogSegment, old: list[LogSegment],
                         aborted_txns: list[AbortedTxn] | None = None) -> bool:
        """Swap the cleaner's `new` segment (files named *.cleaned) in for the consecutive inactive
        segments `old`, crash-safely (klamm.storage.cleaner.swap_in).

        False, changing nothing, when `old` are no longer consecutive inactive segments of
        this log (retention or truncation got there first). The old segments' files are
        renamed *.deleted but stay open for reads in flight; the caller deletes them later.
        `aborted_txns` is the new segment's transaction index (None: every entry of `old`).
        """
        start = next((i for i, segment in enumerate(self._segments) if segment is old[0]), None)
        if start is None:
            return False
        end = start + len(old)
        if end >= len(self._segments) or any(a is not b for a, b in zip(self._segments[start:end], old)):
            return False
        swap_in(new, old)
        self._merge_txn_indexes(new, old, aborted_txns)
        self._segments[start:end] = [new]
        self._bases[start:end] = [new.base_offset]
        return True

    @staticmethod
    def _merge_txn_indexes(new: LogSegment, old: list[LogSegment], entries: list[AbortedTxn] | None) -> None:
        """The cleaned segment's transaction index: the cleaner's `entries` (the aborted transactions
        whose marker it kept), by default every one of the segments it replaces."""
        if entries is None:
            entries = [entry for segment in old for entry in segment.txn_index.entries]
        final_path = old[0].txn_index.path
        for segment in old:
            if segment.txn_index.path != final_path:
                segment.txn_index.delete()
            # The old segments' later delete must not remove the file the new segment now owns.
            segment.txn_index = TransactionIndex(segment.txn_index.path.with_name(
                segment.txn_index.path.name + DELETED_SUFFIX))
        new.txn_index = TransactionIndex(final_path)
        new.txn_index.rewrite(entries)

    # -- truncation and lifecycle ----------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after `offset` (a batch holding it is removed whole)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            # Nothing to remove, but an epoch this replica began as leader without appending to
            # it must go: kept, it would be the "last fetched epoch" of every fetch, which the new
            # leader answers with the same diverging epoch forever (Kafka does the same).
            self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        keep = self._holding(offset)
        if self._bases[keep] == offset and keep > 0:
            keep -= 1  # the segment starting at `offset` goes entirely
        self._delete_segments_after(keep)
        segment = self.active_segment
        segment.truncate_to(offset)
        self.log_end_offset = segment.next_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._forget_flush_jobs()  # a job in flight covers removed offsets, not those appended next
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        self.producer_state.delete_snapshots_after(self.log_end_offset)
        self._rebuild_producer_state()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the log empty at `offset` (follower far behind)."""
        for segment in self._segments:
            segment.delete()
        self._segments = [LogSegment.create(self.directory, offset, self.config, self._time_ms(), io=self._io,
                                            spare=self._take_spare())]
        self._bases = [offset]
        self.log_start_offset = offset
        self.log_end_offset = offset
        self.recovery_point = offset
        self._forget_flush_jobs()
        self.leader_epoch_cache.clear()
        self.producer_state.truncate_fully_and_start_at(offset)

    def close(self) -> None:
        """Flush, snapshot producer state at the log end (if no snapshot of it is on disk), and close every file
        (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._cancel_spare()
        self.flush(all_indexes=True)  # its job writes epoch entries the checkpoint lacks
        self.producer_state.map_end_offset = self.log_end_offset
        self.producer_state.take_snapshot_if_new()
        for segment in self._segments:
            segment.close()

    def record_topic_id(self, topic_id: uuid.UUID) -> None:
        """Write the topic id the log belongs to into its partition.metadata. A write that fails is logged: the
        log serves without the file, as a log from before it did."""
        try:
            partition_metadata.write(self.directory, topic_id)
        except OSError as exc:
            logger.warning("%s: could not write %s: %s", self.directory, partition_metadata.FILE_NAME, exc)
            return
        self.topic_id = topic_id

    def stop_writes(self) -> None:
        """Nothing more is written into the directory by a flush job in flight or to come (producer snapshots,
        epoch entries, spare segment files): it is about to be renamed or removed."""
        self.producer_state.cancel_pending_snapshots()
        self.leader_epoch_cache.cancel()
        self._cancel_spare()

    def delete(self) -> None:
        """Close and remove the whole partition directory (its files removed once, by the directory's removal)."""
        self.release()
        shutil.rmtree(self.directory, ignore_errors=True)

    def release(self) -> None:
        """Close the files of a log LogManager detached, writing nothing more into its directory, which is
        renamed first if it is not yet (`pending_rename`)."""
        if self.pending_rename is not None:  # the rename to `directory`, unless LogManager's writer made it
            self.pending_rename()
        self._closed = True
        self.stop_writes()
        for segment in self._segments:
            segment.release_files()
        self._segments, self._bases = [], []

    def _cancel_spare(self) -> None:
        if self._spare is not None:
            self._spare.cancel()
            self._spare = None

    def __repr__(self) -> str:
        return (
            f"Log({self.topic}-{self.partition}, start={self.log_start_offset}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )


DELETED_SUFFIX = ".deleted"


def _rename_to_deleted(segment: LogSegment) -> None:
    """Kafka's asynchronous delete, step one: the files get a `.deleted` suffix at once, so a
    restart before the delayed delete finds them stale and removes them (see _clean_directory).
    """
    for owner in (segment, segment.offset_index, segment.time_index, segment.txn_index):
        path: Path = owner.log_path if owner is segment else owner.path  # type: ignore[attr-defined]
        target = path.with_name(path.name + DELETED_SUFFIX)
        try:
            path.rename(target)
        except FileNotFoundError:
            pass  # an index that was never written
        if owner is segment:
            segment.log_path = target
        else:
            owner.path = target  # type: ignore[attr-defined]
