"""Leader epoch cache of one partition: the start offset of each leader epoch (Kafka's LeaderEpochFileCache).

On disk: `leader-epoch-checkpoint` in the partition directory, Kafka's checkpoint
format (see klamm.storage.checkpoint) with "epoch startOffset" entries, rewritten
atomically and fsynced.

When it is written. Opening a log after a crash re-assigns the epoch of every batch
it recovers (from the segment holding the recovery point on) and then truncates the
entries to the log's start and end. So the file only has to hold the entries of
the batches below the recovery point, and its extra entries are harmless. A log
therefore writes its entries with the flush job that moves its recovery point
(klamm.storage.log.FlushJob, in a worker thread: `snapshot` on the owner's
thread, `EpochSnapshot.write` in the job) and when it closes, not when an epoch is
assigned: a leader election, a topic's creation or a follower's first batch of a
new epoch then fsyncs nothing on the event loop. A truncation from the end is
written at once: the batches it removes may be replaced below the recovery point
a crash finds. Kafka fsyncs assign where it happens (in threads that serve no
request) and writes truncations asynchronously (truncateFromEndAsyncFlush).

Invariants: epochs and start offsets both strictly increase along the list.
Assigning an entry removes every entry it would break that order with.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from klamm.storage.checkpoint import CorruptCheckpoint, read_checkpoint, write_checkpoint

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EpochSnapshot:
    """The entries of one version of a cache, for a flush job to write in any thread."""

    cache: LeaderEpochCache
    version: int
    entries: tuple[EpochEntry, ...]

    def write(self, *, sync_dir: bool = True) -> bool:
        return self.cache.write_version(self.version, self.entries, sync_dir=sync_dir)


class LeaderEpochCache:
    def __init__(self, directory: Path, log_end_offset: Callable[[], int]) -> None:
        self.path = directory / FILE_NAME
        self._log_end_offset = log_end_offset
        self.entries: list[EpochEntry] = self._read()
        self._version = 0  # changes to the entries (owner's thread)
        self._written = 0  # the version the file holds (any thread, under _lock)
        self._cancelled = False  # the log is being deleted: its directory is not this path any more
        self._lock = threading.Lock()

    def _read(self) -> list[EpochEntry]:
        try:
            rows = read_checkpoint(self.path, 2)
            entries = [EpochEntry(int(epoch), int(offset)) for epoch, offset in rows]
        except (CorruptCheckpoint, ValueError):
            # Rebuilt from the batches' partition_leader_epoch during recovery.
            return []
        return entries

    def _changed(self, entries: list[EpochEntry], *, write: bool) -> None:
        self.entries = entries
        self._version += 1
        if write:
            self.write()

    def write(self) -> None:
        """Write the entries now (if the file does not have them yet)."""
        self.write_version(self._version, tuple(self.entries))

    def snapshot(self) -> EpochSnapshot | None:
        """The entries for a flush job to write; None if the file has them."""
        if self._written >= self._version:
            return None
        return EpochSnapshot(self, self._version, tuple(self.entries))

    def write_version(self, version: int, entries: tuple[EpochEntry, ...], *, sync_dir: bool = True) -> bool:
        """Write `entries`, version `version` of the cache, unless a later version is written already or the log
        is being deleted (any thread); whether it was written. `sync_dir=False`: the caller fsyncs the
        directory before relying on it (a flush job, once for all it wrote)."""
        with self._lock:
            if self._cancelled or version <= self._written:
                return False
            write_checkpoint(self.path, [(entry.epoch, entry.start_offset) for entry in entries], sync_dir=sync_dir)
            self._written = version
            return True

    def cancel(self) -> None:
        """No more writes: the log's directory is renamed or removed (a write in progress finishes first)."""
        with self._lock:
            self._cancelled = True

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset` (no-op if it is already the latest epoch); whether the
        entries changed. Written by the log's next flush job (see the module docstring) or `write()`."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        latest = self.entries[-1] if self.entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        kept = [e for e in self.entries if e.epoch < epoch and e.start_offset < start_offset]
        self._changed(kept + [EpochEntry(epoch, start_offset)], write=False)
        return True

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers: the start offset of the first
        higher epoch (paired with the largest known epoch <= `epoch`), the log end offset
        for the latest epoch, or (-1, -1) if unknown.
        """
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.latest_epoch:
            return epoch, self._log_end_offset()
        higher = next((e for e in self.entries if e.epoch > epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = [e for e in self.entries if e.epoch <= epoch]
        return (floor[-1].epoch if floor else epoch), higher.start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds `offset`, or -1."""
        found = UNDEFINED_EPOCH
        for entry in self.entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (log truncated to it); written now."""
        kept = [e for e in self.entries if e.start_offset < end_offset]
        if kept != self.entries:
            self._changed(kept, write=True)

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries below `start_offset`, moving the last of them up to start there."""
        below = [e for e in self.entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        above = [e for e in self.entries if e.start_offset > start_offset]
        self._changed([EpochEntry(below[-1].epoch, start_offset)] + above, write=False)

    def clear(self) -> None:
        self._changed([], write=True)
