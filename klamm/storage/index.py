"""Sparse offset and time indexes of one log segment, in Kafka's on-disk format.

`<base>.index` (OffsetIndex), 8-byte big-endian entries:

    relative_offset int32   offset - segment base offset
    position        int32   byte position of a batch in the segment's .log file

`<base>.timeindex` (TimeIndex), 12-byte big-endian entries:

    timestamp       int64   largest timestamp seen in the segment so far
    relative_offset int32   offset of (the batch holding) that timestamp, minus base

Invariants: the file holds whole entries only; both columns of an offset index
are strictly increasing (offsets) / non-decreasing (positions); a time index has
strictly increasing timestamps and non-decreasing offsets. An offset index entry
(o, p) means the batch at p has last offset o, so scanning forward from p finds
any offset >= o.

Memory does not grow with retained data. An index is either writable (the
active segment's, plus any index being rebuilt or truncated): its entries are
buffered in memory (a bytearray, bounded by segment.index.bytes) and written
through to the file; or sealed (every older segment's, and every index loaded
at start-up until it is written again): only the entry count is kept, and each
lookup maps the file read-only, binary-searches the mapped bytes and unmaps it.
A sealed index therefore holds no descriptor and no mapping between lookups,
so 100k segments cost no file descriptors (Kafka keeps every index mapped and
asks for a high ulimit instead). Mapping per lookup costs a few system calls;
the pages themselves come from the page cache. Unlike Kafka we do not
preallocate: the file is exactly entries*size long.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from klamm.storage.stored_path import StoredPath

_Bytes = bytes | bytearray | mmap.mmap


class CorruptIndex(ValueError):
    """An index file violates its format invariants; rebuild it from the log."""


class _Index:
    """Shared machinery: an append-only array of fixed-size entries in a file."""

    ENTRY: struct.Struct
    path = StoredPath()
    _path: str  # what `path` stores

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_index_bytes // self.ENTRY.size, 1)
        self._entries = 0
        self._buffer: bytearray | None = bytearray()  # None: sealed, read through a mapping
        self._fd: int | None = None

    # -- loading -------------------------------------------------------------------

    def load(self) -> None:
        """Take the file as it is, sealed; raise CorruptIndex if its size is not whole entries."""
        size = self.path.stat().st_size
        if size % self.ENTRY.size:
            raise CorruptIndex(f"{self.path}: size {size} is not a multiple of {self.ENTRY.size}")
        self.close()
        self._entries = size // self.ENTRY.size
        self._buffer = None

    def exists(self) -> bool:
        return self.path.exists()

    # -- state -----------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def sealed(self) -> bool:
        """True when lookups read the mapped file and nothing is held in memory."""
        return self._buffer is None

    def entry(self, n: int) -> tuple[int, ...]:
        buffer = self._buffer
        if buffer is not None:  # the active segment's, read at every indexed append: no context manager
            return self.ENTRY.unpack_from(buffer, n * self.ENTRY.size)
        with self._view() as data:
            return self.ENTRY.unpack_from(data, n * self.ENTRY.size)

    def to_bytes(self) -> bytes:
        with self._view() as data:
            return bytes(data[: self._entries * self.ENTRY.size])

    @contextmanager
    def _view(self) -> Iterator[_Bytes]:
        """The entries' bytes: the write buffer, or the file mapped read-only for this one read."""
        if self._buffer is not None:
            yield self._buffer
            return
        length = self._entries * self.ENTRY.size
        if not length:
            yield b""
            return
        try:
            fd = os.open(self._path, os.O_RDONLY)  # the stored string: no Path made for each lookup
        except FileNotFoundError:
            # Deleted under a read in flight: no index means "scan the segment from its start".
            yield b""
            return
        try:
            mapped = mmap.mmap(fd, length, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)  # the mapping holds its own reference until closed
        try:
            yield mapped
        finally:
            mapped.close()

    # -- mutation ----------------------------------------------------------------

    def _writable(self) -> bytearray:
        """The write buffer, reading a sealed index back in first (its segment became active again)."""
        if self._buffer is None:
            with self._view() as data:
                self._buffer = bytearray(data[: self._entries * self.ENTRY.size])
            self._entries = len(self._buffer) // self.ENTRY.size
        return self._buffer

    def _append_raw(self, *fields: int) -> None:
        buffer = self._writable()
        packed = self.ENTRY.pack(*fields)
        os.pwrite(self._writer(), packed, len(buffer))
        buffer += packed
        self._entries += 1

    def _truncate_entries(self, entries: int) -> None:
        buffer = self._writable()
        del buffer[entries * self.ENTRY.size :]
        os.ftruncate(self._writer(), len(buffer))
        self._entries = entries

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._buffer = bytearray()
        self._entries = 0
        os.ftruncate(self._writer(), 0)

    def _writer(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the write descriptor and seal: later lookups read the file, nothing stays in memory."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._buffer = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    # -- search --------------------------------------------------------------------

    def _largest_le(self, target: int, field: int) -> tuple[int, tuple[int, ...] | None]:
        """(index, entry) of the last entry whose `field` is <= target, or (-1, None): binary search."""
        size = self.ENTRY.size
        unpack = self.ENTRY.unpack_from
        with self._view() as data:
            low, high = 0, min(self._entries, len(data) // size) - 1
            found, found_entry = -1, None
            while low <= high:
                mid = (low + high) // 2
                candidate = unpack(data, mid * size)
                if candidate[field] <= target:
                    found, found_entry = mid, candidate
                    low = mid + 1
                else:
                    high = mid - 1
        return found, found_entry

    def _iter_entries(self) -> Iterator[tuple[int, ...]]:
        """Every entry in order, read from the view (for sanity checks; nothing is kept)."""
        size = self.ENTRY.size
        with self._view() as data:
            for n in range(min(self._entries, len(data) // size)):
                yield self.ENTRY.unpack_from(data, n * size)


class OffsetIndex(_Index):
    """Maps offsets to byte positions in the segment's .log file."""

    ENTRY = struct.Struct(">ii")

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) if empty."""
        if not self.entries:
            return self.base_offset, 0
        relative, position = self.entry(self.entries - 1)
        return self.base_offset + relative, position

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); offsets must grow (Kafka raises InvalidOffsetException)."""
        if self.entries:
            last_offset, last_position = self.last_entry()
            if offset <= last_offset or position < last_position:
                raise ValueError(f"index entry ({offset}, {position}) not after ({last_offset}, {last_position})")
        self._append_raw(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the largest entry with offset <= `offset`, else (base_offset, 0)."""
        _, found = self._largest_le(offset - self.base_offset, 0)
        if found is None:
            return self.base_offset, 0
        relative, position = found
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        self._truncate_entries(self._largest_le(offset - self.base_offset - 1, 0)[0] + 1)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndex unless offsets increase, positions do not decrease and stay inside the log."""
        previous = (-1, -1)
        for relative, position in self._iter_entries():
            if relative <= previous[0] or position < previous[1] or position >= log_size:
                raise CorruptIndex(f"{self.path}: bad entry ({relative}, {position}) after {previous}")
            previous = (relative, position)


class TimeIndex(_Index):
    """Maps timestamps to offsets: each entry is a new maximum timestamp of the segment."""

    ENTRY = struct.Struct(">qi")

    @property
    def is_full(self) -> bool:
        # Kafka keeps one slot for the final entry written when the segment rolls.
        return self.entries >= max(self.max_entries - 1, 1)

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) if empty."""
        if not self.entries:
            return -1, self.base_offset
        timestamp, relative = self.entry(self.entries - 1)
        return timestamp, self.base_offset + relative

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) only if the timestamp is a new maximum."""
        if timestamp < 0:
            return
        if self.entries:
            last_timestamp, last_offset = self.last_entry()
            if timestamp <= last_timestamp:
                return
            if offset < last_offset:
                raise ValueError(f"time index offset {offset} below {last_offset}")
        self._append_raw(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the largest entry with timestamp <= `timestamp`, else (-1, base_offset)."""
        _, entry = self._largest_le(timestamp, 0)
        if entry is None:
            return -1, self.base_offset
        found, relative = entry
        return found, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset` (offsets are non-decreasing, so a suffix)."""
        self._writable()
        keep = self.entries
        while keep and self.entry(keep - 1)[1] + self.base_offset >= offset:
            keep -= 1
        self._truncate_entries(keep)

    def sanity_check(self, next_offset_bound: int) -> None:
        """Raise CorruptIndex unless timestamps increase and offsets stay in [base, bound)."""
        previous = (-1, 0)
        for timestamp, relative in self._iter_entries():
            if timestamp <= previous[0] or relative < previous[1]:
                raise CorruptIndex(f"{self.path}: bad entry ({timestamp}, {relative}) after {previous}")
            if self.base_offset + relative >= next_offset_bound:
                raise CorruptIndex(f"{self.path}: offset {self.base_offset + relative} past the log")
            previous = (timestamp, relative)
