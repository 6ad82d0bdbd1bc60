"""The aborted-transaction index of one segment: `<base>.txnindex`, Kafka's TransactionIndex.

One entry per transaction whose ABORT marker lies in the segment, in marker
order. Format (big endian, 34 bytes, no header):

    version            int16  (0)
    producer_id        int64
    first_offset       int64  first offset of the aborted transaction
    last_offset        int64  offset of its abort marker
    last_stable_offset int64  the partition's LSO right after the marker

A read_committed fetch returns the entries overlapping the fetched range so the
client can drop the aborted batches. The file is created on the first entry
(most segments never see an abort); entries are kept in memory once read. The
log rebuilds the entries of every segment it replays in recovery, so a torn or
missing file only costs a rebuild.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from klamm.storage.stored_path import StoredPath

TXN_INDEX_SUFFIX = ".txnindex"
_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


class TransactionIndex:
    path = StoredPath()

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # None: not read from disk yet
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        whole = len(data) - len(data) % ENTRY_SIZE  # a torn last entry is dropped
        entries = []
        for position in range(0, whole, ENTRY_SIZE):
            version, producer_id, first, last, lso = _ENTRY.unpack_from(data, position)
            if version != _VERSION:
                break
            entries.append(AbortedTxn(producer_id, first, last, lso))
        return entries

    def append(self, entry: AbortedTxn) -> None:
        entries = self.entries
        if entries and entry.last_offset < entries[-1].last_offset:
            raise ValueError(f"aborted txn at {entry.last_offset} is below the last one {entries[-1].last_offset}")
        with open(self.path, "ab") as f:
            f.write(entry.encode())
        entries.append(entry)
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound); True once an entry shows later segments
        cannot hold more (its LSO reached the bound), as Kafka's collectAbortedTxns."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after `offset` (truncation, recovery replay)."""
        kept = [entry for entry in self.entries if entry.last_offset < offset]
        if len(kept) != len(self.entries):
            self.rewrite(kept)

    def rewrite(self, entries: list[AbortedTxn]) -> None:
        """Replace the file's content (written beside it, then renamed); no file when empty."""
        self._entries = list(entries)
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(b"".join(entry.encode() for entry in entries))
        os.replace(tmp, self.path)
        self._dirty = True

    def flush(self) -> None:
        if not self._dirty or not self.path.exists():
            return
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
