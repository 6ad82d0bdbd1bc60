"""What the Raft core needs of a log, and a log in memory that can lose what was never flushed.

The core appends whole batches, reads them back from an offset, truncates to an
epoch boundary when a follower diverges, and flushes before it relies on what
it wrote (a leader counts only its flushed end offset toward the high
watermark; a follower flushes before its next fetch reports its offset).
`end_offset_for_epoch` is Kafka's leader-epoch-cache question: where does the
largest epoch not above `epoch` end in this log?

Snapshots (KIP-630) are opaque bytes named by the offset they end at and the
epoch of the last record they contain. The state machine takes them of
committed state; a follower that fetches from below the leader's log start
downloads one and restarts its log at its end.

`MemoryRaftLog` is the simulator's disk: a crash (`lose_unflushed`) drops every
batch past the flushed end offset. Truncation counts as durable at once.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Protocol

from klamm.controller.raft.messages import Batch, OffsetAndEpoch

UNKNOWN = OffsetAndEpoch(-1, -1)


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def flushed_end_offset(self) -> int: ...

    def last_fetched_epoch(self) -> int: ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch: ...

    def append(self, batch: Batch) -> None: ...

    def read(self, offset: int, max_batches: int) -> list[Batch]: ...

    def truncate_to(self, offset: int) -> None: ...

    def flush(self) -> None: ...

    def latest_snapshot(self) -> OffsetAndEpoch | None: ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None: ...

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None: ...


def last_epoch(epochs: Sequence[tuple[int, int]], snapshot: OffsetAndEpoch | None, log_start: int) -> int:
    """The epoch of the last record: of the log's last batch, else of the snapshot it starts at, else 0."""
    if epochs:
        return epochs[-1][0]
    return snapshot.epoch if snapshot is not None and snapshot.offset == log_start else 0


def epoch_end(epochs: Sequence[tuple[int, int]], log_end: int, snapshot: OffsetAndEpoch | None, log_start: int,
              epoch: int) -> OffsetAndEpoch:
    """Where the largest epoch not above `epoch` ends, given the log's (epoch, first offset) entries, ascending;
    the snapshot the log starts at when no entry is that old; UNKNOWN when nothing is."""
    index = bisect_right(epochs, (epoch, float("inf"))) - 1
    if index >= 0:
        end = epochs[index + 1][1] if index + 1 < len(epochs) else log_end
        return OffsetAndEpoch(epochs[index][0], end)
    if snapshot is not None and snapshot.offset == log_start and snapshot.epoch <= epoch:
        return snapshot
    return UNKNOWN


class MemoryRaftLog:
    def __init__(self) -> None:
        self.batches: list[Batch] = []
        self._bases: list[int] = []
        self._epochs: list[tuple[int, int]] = []  # (epoch, first offset), ascending
        self._start = 0
        self._flushed = 0
        self.snapshots: dict[OffsetAndEpoch, bytes] = {}

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self.batches[-1].next_offset if self.batches else self._start

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed

    def last_fetched_epoch(self) -> int:
        return last_epoch(self._epochs, self.latest_snapshot(), self._start)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return epoch_end(self._epochs, self.end_offset, self.latest_snapshot(), self._start, epoch)

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset or not batch.records:
            raise ValueError(f"append at {batch.base_offset}, log ends at {self.end_offset}")
        if self._epochs and batch.epoch < self._epochs[-1][0]:
            raise ValueError(f"epoch {batch.epoch} after epoch {self._epochs[-1][0]}")
        self.batches.append(batch)
        self._bases.append(batch.base_offset)
        if not self._epochs or self._epochs[-1][0] != batch.epoch:
            self._epochs.append((batch.epoch, batch.base_offset))

    def read(self, offset: int, max_batches: int) -> list[Batch]:
        index = bisect_right(self._bases, offset) - 1
        if index < 0 or (index < len(self.batches) and self.batches[index].next_offset <= offset):
            index += 1
        return self.batches[index:index + max_batches]

    def truncate_to(self, offset: int) -> None:
        keep = bisect_right(self._bases, offset - 1)
        if keep and self.batches[keep - 1].next_offset > offset:
            keep -= 1  # never split a batch: drop the one the offset falls inside
        del self.batches[keep:], self._bases[keep:]
        while self._epochs and self._epochs[-1][1] >= self.end_offset:
            self._epochs.pop()
        self._flushed = min(self._flushed, self.end_offset)

    def flush(self) -> None:
        self._flushed = self.end_offset

    def lose_unflushed(self) -> None:
        """A crash: what was not flushed is gone."""
        self.truncate_to(self._flushed)

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        return max(self.snapshots, key=lambda s: s.offset) if self.snapshots else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        return self.snapshots.get(snapshot_id)

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """The state machine's snapshot of committed state up to `snapshot_id.offset` (durable)."""
        self.snapshots[snapshot_id] = data

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        """A snapshot fetched from the leader: the log restarts, empty, at its end offset."""
        self.snapshots[snapshot_id] = data
        self.batches, self._bases, self._epochs = [], [], []
        self._start = self._flushed = snapshot_id.offset

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Clean the log behind a snapshot: the log starts at its end offset; older snapshots go."""
        if not self._start < snapshot_id.offset <= self._flushed:
            return
        keep = bisect_right(self._bases, snapshot_id.offset - 1)
        if keep and self.batches[keep - 1].next_offset > snapshot_id.offset:
            return  # not on a batch boundary
        del self.batches[:keep], self._bases[:keep]
        self._epochs = []
        for batch in self.batches:
            if not self._epochs or self._epochs[-1][0] != batch.epoch:
                self._epochs.append((batch.epoch, batch.base_offset))
        self._start = snapshot_id.offset
        for older in [s for s in self.snapshots if s.offset < snapshot_id.offset]:
            del self.snapshots[older]
