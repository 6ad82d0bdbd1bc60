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

Unlike Kafka we do not preallocate or mmap: the file is exactly entries*size
long, and its bytes are mirrored in memory (a bytearray) for binary search.
The write descriptor is opened lazily and closed when the segment becomes
inactive, so old segments hold no index descriptors.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path


class CorruptIndex(ValueError):
    """An index file violates its format invariants; rebuild it from the log."""


class _Index:
    """Shared machinery: an append-only array of fixed-size entries mirrored to a file."""

    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_bytes: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_index_bytes // self.ENTRY.size, 1)
        self._data = bytearray()
        self._fd: int | None = None

    # -- loading -------------------------------------------------------------------

    def load(self) -> None:
        """Read the file into memory; raise CorruptIndex if its size is not whole entries."""
        self._data = bytearray(self.path.read_bytes())
        if len(self._data) % self.ENTRY.size:
            raise CorruptIndex(f"{self.path}: size {len(self._data)} is not a multiple of {self.ENTRY.size}")

    def exists(self) -> bool:
        return self.path.exists()

    # -- state -----------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._data) // self.ENTRY.size

    def entry(self, n: int) -> tuple[int, ...]:
        return self.ENTRY.unpack_from(self._data, n * self.ENTRY.size)

    def to_bytes(self) -> bytes:
        return bytes(self._data)

    # -- mutation ----------------------------------------------------------------

    def _append_raw(self, *fields: int) -> None:
        packed = self.ENTRY.pack(*fields)
        os.pwrite(self._writer(), packed, len(self._data))
        self._data += packed

    def _truncate_entries(self, entries: int) -> None:
        del self._data[entries * self.ENTRY.size :]
        os.ftruncate(self._writer(), len(self._data))

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate_entries(0)

    def _writer(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the write descriptor; the in-memory entries stay usable for lookups."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    # -- search --------------------------------------------------------------------

    def _largest_le(self, target: int, field: int) -> int:
        """Index of the last entry whose `field` is <= target, or -1 (binary search)."""
        low, high = 0, self.entries - 1
        found = -1
        unpack = self.ENTRY.unpack_from
        size = self.ENTRY.size
        while low <= high:
            mid = (low + high) // 2
            if unpack(self._data, mid * size)[field] <= target:
                found = mid
                low = mid + 1
            else:
                high = mid - 1
        return found


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
        n = self._largest_le(offset - self.base_offset, 0)
        if n < 0:
            return self.base_offset, 0
        relative, position = self.entry(n)
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset`."""
        self._truncate_entries(self._largest_le(offset - self.base_offset - 1, 0) + 1)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndex unless offsets increase, positions do not decrease and stay inside the log."""
        previous = (-1, -1)
        for relative, position in self.ENTRY.iter_unpack(self._data):
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
        n = self._largest_le(timestamp, 0)
        if n < 0:
            return -1, self.base_offset
        found, relative = self.entry(n)
        return found, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        """Remove entries with offset >= `offset` (offsets are non-decreasing, so a suffix)."""
        keep = self.entries
        while keep and self.entry(keep - 1)[1] + self.base_offset >= offset:
            keep -= 1
        self._truncate_entries(keep)

    def sanity_check(self, next_offset_bound: int) -> None:
        """Raise CorruptIndex unless timestamps increase and offsets stay in [base, bound)."""
        previous = (-1, 0)
        for timestamp, relative in self.ENTRY.iter_unpack(self._data):
            if timestamp <= previous[0] or relative < previous[1]:
                raise CorruptIndex(f"{self.path}: bad entry ({timestamp}, {relative}) after {previous}")
            if self.base_offset + relative >= next_offset_bound:
                raise CorruptIndex(f"{self.path}: offset {self.base_offset + relative} past the log")
            previous = (timestamp, relative)
