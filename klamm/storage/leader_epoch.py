"""Leader epoch cache of one partition: the start offset of each leader epoch (Kafka's LeaderEpochFileCache).

On disk: `leader-epoch-checkpoint` in the partition directory, Kafka's checkpoint
format (see klamm.storage.checkpoint) with "epoch startOffset" entries, rewritten
atomically (and fsynced) when an epoch is assigned or entries are truncated from
the end: the file never misses an entry (changes are rare: once per leader election).
A truncation from the start (retention, DeleteRecords, a follower following the
leader's log start) is written by the next write or by `write_if_changed` when the
log closes, not at once: it happens on every retention step, and the file's extra
entries below the log start are harmless, as opening a log truncates them again
(Kafka writes these asynchronously too, truncateFromStartAsyncFlush).

Invariants: epochs and start offsets both strictly increase along the list.
Assigning an entry removes every entry it would break that order with.
"""

from __future__ import annotations

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


class LeaderEpochCache:
    def __init__(self, directory: Path, log_end_offset: Callable[[], int]) -> None:
        self.path = directory / FILE_NAME
        self._log_end_offset = log_end_offset
        self.entries: list[EpochEntry] = self._read()
        self._unwritten = False  # entries truncated from the start since the last write

    def _read(self) -> list[EpochEntry]:
        try:
            rows = read_checkpoint(self.path, 2)
            entries = [EpochEntry(int(epoch), int(offset)) for epoch, offset in rows]
        except (CorruptCheckpoint, ValueError):
            # Rebuilt from the batches' partition_leader_epoch during recovery.
            return []
        return entries

    def _write(self) -> None:
        write_checkpoint(self.path, [(entry.epoch, entry.start_offset) for entry in self.entries])
        self._unwritten = False

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, write: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset` (no-op if it is already the latest epoch); whether the
        entries changed. The checkpoint is written (and fsynced) now, or with `write=False` by the caller's
        `write()` before anything is appended at the new epoch (klamm.broker.replica_manager writes many at once)."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid epoch entry ({epoch}, {start_offset})")
        latest = self.entries[-1] if self.entries else None
        if latest is not None and latest.epoch == epoch and latest.start_offset <= start_offset:
            return False
        self.entries = [e for e in self.entries if e.epoch < epoch and e.start_offset < start_offset]
        self.entries.append(EpochEntry(epoch, start_offset))
        if write:
            self._write()
        return True

    def write(self) -> None:
        """Write the checkpoint (after `assign(..., write=False)`)."""
        self._write()

    def write_if_changed(self) -> None:
        """Write a truncation from the start not written yet (a log closing)."""
        if self._unwritten:
            self._write()

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
        """Drop entries starting at or after `end_offset` (log truncated to it)."""
        kept = [e for e in self.entries if e.start_offset < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries below `start_offset`, moving the last of them up to start there (written later: see the
        module docstring)."""
        below = [e for e in self.entries if e.start_offset <= start_offset]
        if not below or (len(below) == 1 and below[0].start_offset == start_offset):
            return
        above = [e for e in self.entries if e.start_offset > start_offset]
        self.entries = [EpochEntry(below[-1].epoch, start_offset)] + above
        self._unwritten = True

    def clear(self) -> None:
        self.entries = []
        self._write()
