"""One log segment: a `.log` file of record batches plus its offset and time indexes.

On-disk format, all named by the segment's base offset zero-padded to 20 digits:

    <base>.log        v2 record batches back to back, exactly as produced/fetched
                      (see klamm.protocol.batch for the 61-byte header)
    <base>.index      OffsetIndex, see klamm.storage.index
    <base>.timeindex  TimeIndex, see klamm.storage.index
    <base>.txnindex   aborted transactions, see klamm.storage.txn_index (only once one aborts here)

Invariants:
  * every batch in the file has base_offset >= the segment base offset and
    last_offset - base offset fits an int32 (index entries are relative);
  * offsets strictly increase from batch to batch;
  * `size` is the byte length of the whole batches written; readers never look past it;
  * an offset index entry is added for a batch when more than index.interval.bytes
    were appended since the previous entry (per batch, as Kafka 4 does); the time
    index gets the segment's max timestamp so far at the same moments, and once
    more when the segment becomes inactive or is closed, so its last entry is the
    segment's largest timestamp.

Reads hand out the `.log` file as a SharedFile (klamm.storage.shared_file): the
segment holds one reference, a response that sends from it later takes a lease,
and the descriptor closes when the segment is closed or deleted and no lease is
left. A segment is not thread-safe: the owning Log serialises appends, truncation
and deletion; only `flush` may run in a worker thread (it fsyncs, it changes
nothing).

Every change to the `.log` file (open, write, truncate, fsync) goes through a
`FileIO`, the one seam a power-loss test replaces to learn which bytes were
fsynced (tests/unit/test_storage_power_loss.py). Reads use the descriptor directly.

Spare files (SpareFiles): a roll runs inside an append, on the event loop, and creating
a file there waits for the filesystem's journal while another thread fsyncs, longer than
renaming one does (BENCHMARKS.md, "A segment rolled"). So the flush job that follows
a roll creates the next segment's three files ahead, empty, in its worker thread, as
`spare.log.spare`, `spare.index.spare` and `spare.timeindex.spare`; the next roll
renames them to the new segment's names (the indexes first, the `.log` last) and opens
them. A `.spare` file is stale to Log.open, which deletes it: a crash leaves either spare files
(deleted), index files without their `.log` (deleted as orphans), or a whole empty
segment, as a crash after creating one leaves it.
"""

from __future__ import annotations

import os
import struct
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from klamm.protocol.batch import (
    ATTR_TIMESTAMP_TYPE,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    InvalidBatch,
    crc_ok,
    peek_offset_and_length,
    read_batch_header,
)
from klamm.storage.config import LogConfig
from klamm.storage.index import CorruptIndex, OffsetIndex, TimeIndex
from klamm.storage.shared_file import SharedFile
from klamm.storage.stored_path import StoredPath
from klamm.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

INT32_MAX = 2**31 - 1
_READ_CHUNK = 1 << 20  # recovery / gathering reads
_WALK_CHUNK = 16 << 10  # short walks from an index entry to a batch
# At most this many of the newest batches are kept for find_batch, whatever index.interval.bytes is.
_TAIL_BATCHES = 512
_NO_POSITIONS: list[int] = []  # never appended to: a segment with no newest batches shares it
_HEADER_WINDOW = 64 << 10  # header reads of a fetch's batches (see _whole_batches)
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23


class FileIO:
    """How a segment changes its `.log` file: the operating system's calls, nothing more."""

    def open(self, path: Path, flags: int, mode: int) -> int:
        return os.open(path, flags, mode)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> int:
        return os.pwrite(fd, data, position)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)


OS_FILE_IO = FileIO()  # stateless: every segment may share it


def fsync_path(path: Path) -> None:
    """fsync a file by name (a descriptor of any open file description flushes the file);
    a file that is gone (never written, or deleted meanwhile) needs nothing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


SPARE_SUFFIX = ".spare"  # stale to Log.open
_SPARE_ORDER = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)  # renamed in this order: the .log last


class SpareFiles:
    """A log's next segment's files, made empty ahead of its roll (see the module docstring).

    `make` runs in any thread; `cancel` and `take` on the log owner's. Once cancel returns
    no file is created any more, so a deletion that lists the directory afterwards removes
    whatever `make` created. O_TRUNC empties a spare in its open, never after: a file renamed
    into a segment meanwhile is never written by `make`.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.made = False
        self.cancelled = False
        self._making = threading.Lock()

    def path(self, suffix: str) -> Path:
        return self.directory / f"spare{suffix}{SPARE_SUFFIX}"

    def make(self) -> None:
        """Create the three files, empty; nothing if cancelled, or if the directory is gone."""
        with self._making:
            if self.made or self.cancelled:
                return
            try:
                for suffix in _SPARE_ORDER:
                    os.close(os.open(self.path(suffix), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            except OSError:
                return  # the log deleted or its directory renamed meanwhile, or no room: the roll creates them
            self.made = True

    def cancel(self) -> None:
        with self._making:
            self.cancelled = True

    def take(self, base_offset: int) -> None:
        """Rename the files to the segment `base_offset`'s names, if made and that segment has no `.log` yet
        (a file of its own is never replaced: LogSegment.create refuses one holding data). A file missing is
        left to LogSegment.create, which creates it."""
        if not self.made or self.cancelled or (self.directory / file_name(base_offset, LOG_SUFFIX)).exists():
            return
        self.made = False  # used once, whatever happens
        for suffix in _SPARE_ORDER:
            try:
                os.rename(self.path(suffix), self.directory / file_name(base_offset, suffix))
            except FileNotFoundError:
                return


def scan_batches(
    fd: int, start: int, end: int, *, verify: bool = False, chunk: int = _READ_CHUNK
) -> Iterator[BatchHeader]:
    """Headers of the batches in fd[start:end], `position` being the file position.

    Reads in chunks; raises InvalidBatch at the first malformed or truncated batch
    (and, with `verify`, at the first CRC mismatch), after yielding the good ones.
    """
    buf = b""
    buf_start = start
    position = start
    while position < end:
        relative = position - buf_start
        if relative + HEADER_SIZE > len(buf):
            buf = os.pread(fd, min(max(chunk, HEADER_SIZE), end - position), position)
            buf_start, relative = position, 0
        header = read_batch_header(buf, relative)
        if position + header.size > end:
            raise InvalidBatch(f"batch at {position} runs past the end ({end})")
        if verify:
            if relative + header.size > len(buf):
                buf = os.pread(fd, max(chunk, header.size), position)
                buf_start, relative = position, 0
                header.position = 0
            if not crc_ok(buf, header):
                raise InvalidBatch(f"CRC mismatch in batch at {position}")
        header.position = position
        yield header
        position += header.size


@dataclass(frozen=True)
class SegmentSummary:
    """What a segment knows of its contents beyond its files: handed from the process that
    wrote a segment (the log cleaner's) to the one that opens it (LogSegment.reopen)."""

    size: int
    next_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    first_batch_timestamp: int | None
    created_ms: int


class LogSegment:
    """A `.log` file with its indexes; see the module docstring for format and invariants."""

    log_path = StoredPath()

    def __init__(
        self, directory: Path, base_offset: int, config: LogConfig, created_ms: int, suffix: str = "",
        io: FileIO = OS_FILE_IO,
    ) -> None:
        # `suffix` (e.g. ".cleaned") names a segment being built beside the log's own files.
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / (file_name(base_offset, LOG_SUFFIX) + suffix)
        self.offset_index = OffsetIndex(
            directory / (file_name(base_offset, INDEX_SUFFIX) + suffix), base_offset, config.segment_index_bytes
        )
        self.time_index = TimeIndex(
            directory / (file_name(base_offset, TIME_INDEX_SUFFIX) + suffix), base_offset, config.segment_index_bytes
        )
        self.txn_index = TransactionIndex(directory / (file_name(base_offset, TXN_INDEX_SUFFIX) + suffix))
        self.index_interval_bytes = config.index_interval_bytes
        self.created_ms = created_ms
        self.io = io
        self.file = SharedFile(io.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644))
        self.size = 0
        self.next_offset = base_offset  # maintained for the active segment; see load_tail
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1  # last offset of the batch holding max_timestamp
        self.first_batch_timestamp: int | None = None  # Kafka's rollingBasedTimestamp
        self._bytes_since_index = 0
        # The batches appended since the offset index's last entry, or since this object's first append: the
        # newest, which tailing fetches ask for, found without a walk from that entry (see find_batch).
        # None while there are none (no list per sealed segment for the collector to track).
        self._tail_from = 0  # base offset of the first of them
        self._tail_last: list[int] | None = None  # last offset of each
        self._tail_positions = _NO_POSITIONS  # file position of each
        self._closed = False

    @property
    def fd(self) -> int:
        """The `.log` descriptor; ValueError once the segment is closed (never a reused number)."""
        return self.file.fileno()

    # -- creation and loading --------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int, suffix: str = "",
               io: FileIO = OS_FILE_IO, spare: SpareFiles | None = None) -> LogSegment:
        """A new empty segment; stale index files of that name are discarded. With `spare`, its files
        become the segment's where they can (renamed, not created)."""
        if spare is not None and not suffix:
            spare.take(base_offset)
        segment = cls(directory, base_offset, config, now_ms, suffix, io)
        if os.fstat(segment.fd).st_size:
            segment.close()
            raise FileExistsError(f"{segment.log_path} already holds data")
        segment.offset_index.reset()
        segment.time_index.reset()
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, config: LogConfig, now_ms: int,
             io: FileIO = OS_FILE_IO) -> LogSegment:
        """An existing segment with its files trusted; call check_indexes/load_tail or recover next."""
        segment = cls(directory, base_offset, config, now_ms, io=io)
        segment.size = os.fstat(segment.fd).st_size
        return segment

    @classmethod
    def reopen(cls, directory: Path, base_offset: int, config: LogConfig, summary: SegmentSummary,
               suffix: str = "") -> LogSegment:
        """A sealed segment another process wrote (and fsynced), as that process's `summary` describes
        it; the indexes are taken as written. FileNotFoundError if its `.log` file is gone."""
        if not (directory / (file_name(base_offset, LOG_SUFFIX) + suffix)).exists():
            raise FileNotFoundError(directory / (file_name(base_offset, LOG_SUFFIX) + suffix))
        segment = cls(directory, base_offset, config, summary.created_ms, suffix)
        segment.size = summary.size
        segment.next_offset = summary.next_offset
        segment.max_timestamp = summary.max_timestamp
        segment.offset_of_max_timestamp = summary.offset_of_max_timestamp
        segment.first_batch_timestamp = summary.first_batch_timestamp
        try:
            segment.offset_index.load()
            segment.time_index.load()
        except BaseException:
            segment.close()
            raise
        return segment

    def summary(self) -> SegmentSummary:
        return SegmentSummary(self.size, self.next_offset, self.max_timestamp, self.offset_of_max_timestamp,
                              self.first_batch_timestamp, self.created_ms)

    def load_indexes(self, next_offset_bound: int) -> bool:
        """Load both indexes; False if either is missing or fails its sanity check (rebuild it)."""
        try:
            if not self.offset_index.exists() or not self.time_index.exists():
                return False
            self.offset_index.load()
            self.time_index.load()
            self.offset_index.sanity_check(self.size)
            self.time_index.sanity_check(next_offset_bound)
        except CorruptIndex:
            return False
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if self.max_timestamp < 0:
            self.offset_of_max_timestamp = -1
        return True

    def load_tail(self) -> None:
        """Find next_offset (and the first batch's timestamp) by walking from the last index entry.

        Raises InvalidBatch if the tail is torn, in which case the caller recovers the segment.
        """
        _, position = self.offset_index.last_entry()
        next_offset = self.base_offset
        for header in scan_batches(self.fd, position, self.size):
            next_offset = header.next_offset
        self.next_offset = next_offset
        if self.size:
            self.first_batch_timestamp = self._header_at(0).max_timestamp

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Validate every batch (header, CRC, increasing offsets), cut the file at the first bad one,
        rebuild both indexes. Returns the number of bytes truncated.
        """
        file_size = os.fstat(self.fd).st_size
        self._reset_indexes()
        valid_end = 0
        next_offset = self.base_offset
        try:
            for header in scan_batches(self.fd, 0, file_size, verify=True):
                if header.base_offset < next_offset or header.last_offset - self.base_offset > INT32_MAX:
                    raise InvalidBatch(f"offset {header.base_offset} out of order at {header.position}")
                self._index_batch(header, header.position)
                if on_batch is not None:
                    on_batch(header)
                valid_end = header.position + header.size
                next_offset = header.next_offset
        except InvalidBatch:
            pass
        if valid_end < file_size:
            self.io.ftruncate(self.fd, valid_end)
        self.size = valid_end
        self.next_offset = next_offset
        return file_size - valid_end

    def rebuild_indexes(self) -> None:
        """Rebuild indexes from trusted batch headers (no CRC check)."""
        self._reset_indexes()
        for header in scan_batches(self.fd, 0, self.size):
            self._index_batch(header, header.position)
            self.next_offset = header.next_offset

    def _reset_indexes(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.first_batch_timestamp = None
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        self._forget_tail()

    def _forget_tail(self) -> None:
        self._tail_last = None
        self._tail_positions = _NO_POSITIONS

    # -- appending -----------------------------------------------------------------

    def append(self, buf: bytes | bytearray | memoryview, headers: list[BatchHeader]) -> None:
        """Write whole batches (header positions relative to `buf`) at the end of the file."""
        start = self.size
        written = self.io.pwrite(self.fd, buf, start)
        if written != len(buf):
            raise OSError(f"short write to {self.log_path}: {written} of {len(buf)} bytes")
        for header in headers:
            position = start + header.position
            tail_last = self._tail_last
            if self._index_batch(header, position) or not tail_last or len(tail_last) >= _TAIL_BATCHES:
                self._tail_from = header.base_offset
                self._tail_last, self._tail_positions = [header.last_offset], [position]
            else:
                tail_last.append(header.last_offset)
                self._tail_positions.append(position)
        self.size = start + len(buf)
        self.next_offset = headers[-1].next_offset

    def _index_batch(self, header: BatchHeader, position: int) -> bool:
        """Account one batch at file `position` in the max timestamp and the sparse indexes; whether it got an
        offset index entry."""
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        indexed = self._bytes_since_index > self.index_interval_bytes
        if indexed:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self._bytes_since_index = 0
        self._bytes_since_index += header.size
        return indexed

    def time_waited_for_roll(self, now_ms: int, incoming_max_timestamp: int) -> int:
        """Kafka's rule: age measured by record timestamps when known, else by wall clock."""
        if self.first_batch_timestamp is not None and self.first_batch_timestamp >= 0:
            return incoming_max_timestamp - self.first_batch_timestamp
        return now_ms - self.created_ms

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # -- reading -------------------------------------------------------------------

    def _header_at(self, position: int) -> BatchHeader:
        header = read_batch_header(os.pread(self.fd, HEADER_SIZE, position))
        header.position = position
        return header

    def find_batch(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset >= `offset`, found among the newest batches or from the offset index
        (a walk from its entry); None if none."""
        if self._tail_last and offset >= self._tail_from:  # among the newest batches: no walk
            index = bisect_left(self._tail_last, offset)
            return self._header_at(self._tail_positions[index]) if index < len(self._tail_last) else None
        _, position = self.offset_index.lookup(offset)
        for header in scan_batches(self.fd, position, self.size, chunk=_WALK_CHUNK):
            if header.last_offset >= offset:
                return header
        return None

    def read(self, offset: int, max_bytes: int, max_offset: int, min_one: bool) -> tuple[int, int, int] | None:
        """(position, length, first batch base offset) of whole batches from the one holding `offset`.

        None if no batch in this segment reaches `offset` (the caller moves to the next segment).
        """
        first = self.find_batch(offset)
        if first is None:
            return None
        if first.last_offset >= max_offset:
            return first.position, 0, first.base_offset
        if first.size > max_bytes:
            return first.position, first.size if min_one else 0, first.base_offset
        return first.position, self._whole_batches(first.position, max_bytes, max_offset), first.base_offset

    def _whole_batches(self, position: int, budget: int, max_offset: int) -> int:
        """Bytes of consecutive whole batches from `position`: at most `budget` bytes, each
        batch's last offset below `max_offset`.

        Only the headers are read: a window of up to _HEADER_WINDOW bytes from the first
        header it lacks, so a window of small batches serves many headers, and a batch
        larger than the window costs one small read instead of a copy of all its bytes
        (the fetch sends them with sendfile; a follower's fetch is mostly large batches).
        """
        limit = min(position + budget, self.size)
        at = position
        window, window_start = b"", position
        while limit - at >= HEADER_SIZE:
            relative = at - window_start
            if relative + HEADER_SIZE > len(window):
                window, window_start, relative = os.pread(self.fd, min(_HEADER_WINDOW, limit - at), at), at, 0
                if len(window) < HEADER_SIZE:
                    break
            base_offset, length = peek_offset_and_length(window, relative)
            size = length + LOG_OVERHEAD
            delta = _LAST_OFFSET_DELTA.unpack_from(window, relative + _LAST_OFFSET_DELTA_AT)[0]
            if base_offset + delta >= max_offset or size < HEADER_SIZE or at + size > limit:
                break
            at += size
        return at - position

    def read_bytes(self, position: int, length: int) -> bytes:
        return os.pread(self.fd, length, position)

    def batch_bytes(self, header: BatchHeader) -> bytes:
        return os.pread(self.fd, header.size, header.position)

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches that may hold offsets >= `offset` (from the index position)."""
        _, position = self.offset_index.lookup(offset)
        return scan_batches(self.fd, position, self.size)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int, record_timestamps: Callable
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record >= `timestamp` at or after `starting_offset`."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        for header in self.headers_from(max(indexed_offset, starting_offset)):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            for offset, record_ts in self._record_timestamps(header, record_timestamps):
                if record_ts >= timestamp and offset >= starting_offset:
                    return offset, record_ts
        return None

    def offset_of_max_timestamp_record(self, record_timestamps: Callable) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying this segment's largest timestamp."""
        if self.max_timestamp < 0:
            return None
        for header in self.headers_from(self.offset_of_max_timestamp):
            if header.max_timestamp == self.max_timestamp:
                for offset, record_ts in self._record_timestamps(header, record_timestamps):
                    if record_ts == self.max_timestamp:
                        return offset, record_ts
        return None

    def _record_timestamps(self, header: BatchHeader, record_timestamps: Callable) -> Iterable[tuple[int, int]]:
        if header.attributes & ATTR_TIMESTAMP_TYPE:
            # LogAppendTime: every record carries the batch's max timestamp; no decoding needed.
            return ((offset, header.max_timestamp) for offset in range(header.base_offset, header.next_offset))
        data = self.batch_bytes(header)
        local = read_batch_header(data)
        return record_timestamps(data, local)

    # -- truncation and lifecycle ----------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose last offset >= `offset` (a batch is never split); bytes removed."""
        self.txn_index.truncate_to(offset)
        first = self.find_batch(offset)
        if first is None:
            self.load_tail()  # nothing to cut; make sure next_offset is known (segment may become active)
            return 0
        removed = self.size - first.position
        self.io.ftruncate(self.fd, first.position)
        self.size = first.position
        self.rebuild_indexes()
        return removed

    def on_become_inactive(self) -> None:
        """Record the final max timestamp and release the index descriptors.

        No fsync here: this runs inside an append on the event loop. The owner's next
        flush job fsyncs the segment with its indexes (`flush`) in a worker thread.
        """
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.close()
        self.time_index.close()
        self._forget_tail()  # appends are over: only the active segment's tail saves walks worth its memory

    def flush(self, *, indexes: bool = True) -> None:
        """fsync the .log file and (unless `indexes` is False) its offset and time indexes; safe in a worker
        thread: it changes nothing. The transaction index is fsynced either way: recovery rebuilds only the
        entries past the producer snapshot it starts from.

        Indexes are fsynced by name: an inactive segment has closed their descriptors.
        """
        self.io.fsync(self.fd)
        if indexes:
            fsync_path(self.offset_index.path)
            fsync_path(self.time_index.path)
        self.txn_index.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self.offset_index.close()
        self.time_index.close()
        self.file.release()

    def release_files(self) -> None:
        """Close the files, writing nothing more into them: the segment is being deleted."""
        if not self._closed:
            self._closed = True
            self.offset_index.close()
            self.time_index.close()
            self.file.release()

    def delete(self) -> None:
        self.release_files()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size})"
