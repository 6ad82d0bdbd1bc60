"""Where the controller keeps metadata records: the `__cluster_metadata` log.

The controller needs of it: append a list of record values atomically (one
batch) and learn their last offset, replay the records from an offset on, and
keep snapshots of the image (klamm/controller/snapshot.py) beside the log so
start-up loads the newest one and replays only the tail.

What is kept behind the snapshots follows Kafka's KafkaMetadataLog.maybeClean:
while the log plus the snapshots exceed metadata.max.retention.bytes, or the
oldest snapshot is older than metadata.max.retention.ms, the oldest snapshot is
deleted and the log start offset moves to the next snapshot, deleting every
segment wholly below it. The newest snapshot is never deleted, so the log
always reaches back to some valid snapshot (or to offset 0). `InMemoryMetadataLog` serves tests;
`FileMetadataLog` keeps Kafka v2 record batches (null keys, framed values, see
records.py) in `<log dir>/__cluster_metadata-0/` segments via klamm.storage.

A replicated (Raft) quorum will replace the append with "append, replicate,
wait for commit" behind the same protocol.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Protocol

from klamm.controller.meta_properties import ensure_meta_properties  # re-exported for the broker
from klamm.controller.snapshot import (Snapshot, SnapshotError, SnapshotId, list_snapshots, read_snapshot,
                                       remove_partial_snapshots, snapshot_path, write_snapshot)
from klamm.protocol.batch import split_batches
from klamm.protocol.records import NewRecord, batch_of_records, build_batch, decode_batch
from klamm.protocol.topics import METADATA_TOPIC
from klamm.storage.config import LogConfig
from klamm.storage.log import FlushJob, Log
from klamm.storage.log_manager import LogManager

__all__ = [
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "FileMetadataLog",
    "InMemoryMetadataLog",
    "MetadataLog",
    "ensure_meta_properties",
]

log = logging.getLogger(__name__)

METADATA_PARTITION = 0
_READ_CHUNK = 1 << 20


class MetadataLog(Protocol):
    @property
    def end_offset(self) -> int:
        """The offset the next appended record gets."""
        ...

    def append(self, records: Sequence[bytes], *, flush: bool = True, encoded: bytes | None = None) -> int:
        """Append record values as one atomic batch, durably (not `flush`: its fsync left to a flush job, and
        it is not committed until then); return the last offset. `encoded`: the values' records joined, made
        ahead (klamm.protocol.records.value_record)."""
        ...

    def replay(self, from_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        """(offset, value) of every record from `from_offset` on, in order."""
        ...

    @property
    def committed_end_offset(self) -> int:
        """The end of what is committed: the log end for a single voter, a quorum's high watermark."""
        ...

    def epoch_of(self, offset: int) -> int:
        """The leader epoch the record at `offset` was written in (what a snapshot ending after it is named by)."""
        ...

    @property
    def log_start_offset(self) -> int:
        """The first offset still in the log (records below it live only in snapshots)."""
        ...

    def snapshots(self) -> list[SnapshotId]:
        """Ids of the stored snapshots, oldest first."""
        ...

    def write_snapshot(self, snapshot_id: SnapshotId, values: Iterable[bytes], last_contained_ms: int) -> None:
        """Store a snapshot durably. Touches no log state: safe to run in a worker thread."""
        ...

    def read_snapshot(self, snapshot_id: SnapshotId) -> Snapshot:
        """The snapshot's records; SnapshotError when it is not whole and valid."""
        ...

    def start_at_snapshot(self, snapshot_id: SnapshotId) -> None:
        """The log ends before the snapshot (its tail was lost): restart the log empty at its end offset."""
        ...

    def maybe_clean(self, retention_bytes: int, retention_ms: int, now_ms: int) -> bool:
        """Delete old snapshots and the log wholly behind the next one, per the retention limits."""
        ...

    @property
    def bootstrap_directory(self) -> Path | None:
        """The log directory holding this log, where `bootstrap.checkpoint` is (klamm/controller/bootstrap.py)."""
        ...

    def close(self) -> None: ...


class InMemoryMetadataLog:
    """A MetadataLog in a list; `batches` shows the atomic units appended."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, bytes]]] = []
        self._end = 0
        self._start = 0
        self.stored_snapshots: dict[SnapshotId, Snapshot] = {}

    @property
    def end_offset(self) -> int:
        return self._end

    def append(self, records: Sequence[bytes]) -> int:
        if not records:
            raise ValueError("nothing to append")
        batch = [(self._end + i, bytes(value)) for i, value in enumerate(records)]
        self.batches.append(batch)
        self._end += len(batch)
        return self._end - 1

    def replay(self, from_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        for batch in self.batches:
            for offset, value in batch:
                if offset >= max(from_offset, self._start):
                    yield offset, value

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def committed_end_offset(self) -> int:
        return self._end

    def epoch_of(self, offset: int) -> int:
        return 0

    def snapshots(self) -> list[SnapshotId]:
        return sorted(self.stored_snapshots)

    def write_snapshot(self, snapshot_id: SnapshotId, values: Iterable[bytes], last_contained_ms: int) -> None:
        self.stored_snapshots[snapshot_id] = Snapshot(snapshot_id, last_contained_ms, list(values))

    def read_snapshot(self, snapshot_id: SnapshotId) -> Snapshot:
        try:
            return self.stored_snapshots[snapshot_id]
        except KeyError:
            raise SnapshotError(f"no snapshot {snapshot_id}") from None

    def start_at_snapshot(self, snapshot_id: SnapshotId) -> None:
        self.batches = []
        self._start = self._end = snapshot_id.end_offset

    def maybe_clean(self, retention_bytes: int, retention_ms: int, now_ms: int) -> bool:
        sizes = {s: sum(len(v) for v in snap.values) for s, snap in self.stored_snapshots.items()}
        log_size = sum(len(v) for batch in self.batches for _, v in batch)
        return _clean(self, sizes, lambda: log_size, retention_bytes, retention_ms, now_ms,
                      lambda s: self.stored_snapshots[s].last_contained_ms)

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> bool:
        if not self._start < snapshot_id.end_offset <= self._end:
            return False
        self._start = snapshot_id.end_offset
        self.batches = [b for b in self.batches if b[-1][0] >= self._start]
        for older in [s for s in self.stored_snapshots if s < snapshot_id]:
            del self.stored_snapshots[older]
        return True

    @property
    def bootstrap_directory(self) -> Path | None:
        return None

    def close(self) -> None:
        pass


class FileMetadataLog:
    """The metadata log on disk, one record batch per append, fsynced before returning.

    Construct from the broker's LogManager (the log is `__cluster_metadata-0` in
    one of its dirs) or, for tools and tests, with `FileMetadataLog.open(log_dir)`.

    An append may leave its fsync to a flush job (`append(..., flush=False)`, then `begin_flush`, the job's
    `run` in a worker thread, `complete_flush`): the committed end is the end of what is fsynced, as a single
    Raft voter's high watermark is the end of what it flushed.
    """

    def __init__(self, source: LogManager | Log, *, segment_bytes: int | None = None) -> None:
        if isinstance(source, LogManager):
            log = source.get_log(METADATA_TOPIC, METADATA_PARTITION)
            if log is None:
                log = source.create_log(METADATA_TOPIC, METADATA_PARTITION, _metadata_log_config(LogConfig()))
        else:
            log = source
        # The metadata log is the cluster's state: never delete segments by age or
        # size, and fsync every append (as Kafka's Raft log does).
        log.config = _metadata_log_config(log.config, segment_bytes)
        self.log = log
        self.directory = log.directory
        self._durable_end = log.log_end_offset  # what was there at open counts as committed
        self._owns_log = False  # a LogManager's log is closed by the LogManager
        remove_partial_snapshots(self.directory)

    @classmethod
    def open(cls, log_dir: Path | str, *, clean_shutdown: bool = True,
             segment_bytes: int | None = None) -> FileMetadataLog:
        """Open `<log_dir>/__cluster_metadata-0` directly (no LogManager); close() closes it."""
        directory = Path(log_dir) / f"{METADATA_TOPIC}-{METADATA_PARTITION}"
        config = _metadata_log_config(LogConfig(), segment_bytes)
        metadata_log = cls(Log.open(directory, config, clean_shutdown=clean_shutdown), segment_bytes=segment_bytes)
        metadata_log._owns_log = True
        return metadata_log

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, records: Sequence[bytes], *, flush: bool = True, encoded: bytes | None = None) -> int:
        """Append one batch; with `flush`, fsync the whole log here (this and any append left to a job).
        `encoded`: the records' value_records joined, made ahead (a batch of many records costs ~2 us a record
        to encode)."""
        if not records:
            raise ValueError("nothing to append")
        if encoded is not None:
            buf = bytearray(batch_of_records(encoded, len(records)))
        else:
            buf = bytearray(build_batch([NewRecord(None, value) for value in records]))
        result = self.log.append(buf, split_batches(buf), leader_epoch=0)
        if flush:
            self.log.flush()
            self._durable_end = self.log.log_end_offset
        return result.last_offset

    def begin_flush(self) -> FlushJob | None:
        """A job fsyncing the appends no job covers yet (None: none); run it anywhere, then `complete_flush`."""
        return self.log.begin_flush()

    def complete_flush(self, job: FlushJob) -> None:
        self.log.complete_flush(job)
        self._durable_end = max(self._durable_end, self.log.recovery_point)  # committed_end_offset clamps to the end

    def fail_flush(self, job: FlushJob) -> None:
        self.log.fail_flush(job)

    def replay(self, from_offset: int = 0, until: int | None = None) -> Iterator[tuple[int, bytes]]:
        """Records from `from_offset` below `until` (the log end); a quorum's control batches are no metadata."""
        offset = max(from_offset, self.log.log_start_offset)
        end = self.log.log_end_offset if until is None else min(until, self.log.log_end_offset)
        while offset < end:
            chunk = self.log.read_bytes(offset, _READ_CHUNK)
            if not chunk:
                break
            for header in split_batches(chunk):
                if header.base_offset >= end:
                    return
                if not header.is_control:
                    _, records = decode_batch(chunk, header.position, check_crc=True)
                    for record in records:
                        if offset <= record.offset < end and record.value is not None:
                            yield record.offset, record.value
                offset = max(offset, header.next_offset)

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def committed_end_offset(self) -> int:
        """The end of what is fsynced."""
        return min(self._durable_end, self.log.log_end_offset)

    def epoch_of(self, offset: int) -> int:
        """A single voter's batches carry epoch 0 (an older klamm's -1 reads as 0)."""
        return max(0, self.log.leader_epoch_cache.epoch_for_offset(offset))

    def snapshots(self) -> list[SnapshotId]:
        return list_snapshots(self.directory)

    def write_snapshot(self, snapshot_id: SnapshotId, values: Iterable[bytes], last_contained_ms: int) -> None:
        write_snapshot(self.directory, snapshot_id, values, last_contained_ms)

    def read_snapshot(self, snapshot_id: SnapshotId) -> Snapshot:
        return read_snapshot(self.directory, snapshot_id)

    @property
    def bootstrap_directory(self) -> Path | None:
        return self.directory.parent

    def snapshot_bytes(self, snapshot_id: SnapshotId) -> bytes:
        """The snapshot file as it is (what FetchSnapshot sends); OSError when there is none."""
        return snapshot_path(self.directory, snapshot_id).read_bytes()

    def start_at_snapshot(self, snapshot_id: SnapshotId) -> None:
        self.log.truncate_fully_and_start_at(snapshot_id.end_offset)
        self._durable_end = self.log.log_end_offset

    def maybe_clean(self, retention_bytes: int, retention_ms: int, now_ms: int) -> bool:
        sizes = {}
        for snapshot_id in self.snapshots():
            try:
                sizes[snapshot_id] = snapshot_path(self.directory, snapshot_id).stat().st_size
            except FileNotFoundError:
                pass
        cleaned = _clean(self, sizes, self.log.size_in_bytes, retention_bytes, retention_ms, now_ms,
                         self._snapshot_timestamp)
        # Segments that rolled since the log start moved may now lie wholly behind it.
        return self._delete_segments_behind_start() > 0 or cleaned

    def _snapshot_timestamp(self, snapshot_id: SnapshotId) -> int | None:
        try:
            return self.read_snapshot(snapshot_id).last_contained_ms
        except SnapshotError:
            return None

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> bool:
        """Kafka's deleteBeforeSnapshot: log start moves to the snapshot; older segments and snapshots go."""
        log_ = self.log
        if not log_.log_start_offset < snapshot_id.end_offset <= log_.log_end_offset:
            return False
        log_.maybe_increment_log_start_offset(snapshot_id.end_offset)
        behind = self._delete_segments_behind_start()
        for older in self.snapshots():
            if older < snapshot_id:
                snapshot_path(self.directory, older).unlink(missing_ok=True)
        log.info("metadata log now starts at %d (snapshot %s); %d segment(s) deleted",
                 log_.log_start_offset, snapshot_id.file_name, behind)
        return True

    def _delete_segments_behind_start(self) -> int:
        """Delete the segments wholly below the log start offset; how many."""
        segments = self.log.segments
        behind = 0
        while behind + 1 < len(segments) and segments[behind + 1].base_offset <= self.log.log_start_offset:
            behind += 1
        for segment in self.log.delete_oldest_segments(behind):
            segment.delete()  # no reads in flight on the metadata log: no delayed delete
        return behind

    def close(self) -> None:
        if self._owns_log:
            self.log.close()
        else:
            self.log.flush()


class _Cleanable(Protocol):
    def snapshots(self) -> list[SnapshotId]: ...

    def delete_before_snapshot(self, snapshot_id: SnapshotId) -> bool: ...


def _clean(target: _Cleanable, sizes: dict[SnapshotId, int], log_size: Callable[[], int], retention_bytes: int,
           retention_ms: int, now_ms: int, timestamp_of: Callable[[SnapshotId], int | None]) -> bool:
    """Kafka's maybeClean: by size, then by age, always keeping the newest snapshot."""
    cleaned = False
    if retention_bytes >= 0:
        total = sum(sizes.values())
        for snapshot_id, following in pairwise(target.snapshots()):
            if log_size() + total <= retention_bytes or snapshot_id not in sizes:
                break
            total -= sizes[snapshot_id]
            if not target.delete_before_snapshot(following):
                break
            cleaned = True
    if retention_ms >= 0:
        for snapshot_id, following in pairwise(target.snapshots()):
            timestamp = timestamp_of(snapshot_id)
            if timestamp is None or now_ms - timestamp <= retention_ms:
                break
            if not target.delete_before_snapshot(following):
                break
            cleaned = True
    return cleaned


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def _metadata_log_config(config: LogConfig, segment_bytes: int | None = None) -> LogConfig:
    config = replace(config, retention_ms=-1, retention_bytes=-1, flush_messages=1)
    return config if segment_bytes is None else replace(config, segment_bytes=segment_bytes)
