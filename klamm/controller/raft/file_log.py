"""The Raft log on disk: `__cluster_metadata-0` as Kafka keeps it.

Batches are Kafka v2 record batches whose partition leader epoch is the epoch
they were appended in, so klamm.storage's leader-epoch cache answers
`end_offset_for_epoch`; a leader's LeaderChange opens its epoch as a control
batch (control type 2, Kafka's LeaderChangeMessage). A follower stores the
leader's bytes as they came. Snapshots are the `.checkpoint` files of
klamm/controller/snapshot.py, named by end offset and epoch; one fetched from
the leader is checked whole before the log restarts at its end.
"""

from __future__ import annotations

import struct

from klamm.controller.metadata_log import FileMetadataLog
from klamm.controller.raft.log import epoch_end, last_epoch
from klamm.controller.raft.messages import Batch, OffsetAndEpoch
from klamm.controller.snapshot import SnapshotId, list_snapshots, write_snapshot_bytes
from klamm.protocol.batch import split_batches
from klamm.protocol.records import NewRecord, build_batch, decode_batch

LEADER_CHANGE = 2  # Kafka's ControlRecordType.LEADER_CHANGE
_CONTROL_KEY = struct.Struct(">hh")  # version, type
READ_BYTES = 1 << 20

__all__ = ["FileRaftLog", "decode_batches", "encode_batch"]


def encode_batch(batch: Batch) -> bytes:
    """The batch's bytes: as stored when it came from a log, else built (a leader's own append)."""
    if batch.raw is not None:
        return batch.raw
    if batch.control:
        records = [NewRecord(_CONTROL_KEY.pack(0, LEADER_CHANGE), value) for value in batch.records]
    else:
        records = [NewRecord(None, value) for value in batch.records]
    return build_batch(records, base_offset=batch.base_offset, control=batch.control,
                       partition_leader_epoch=batch.epoch)


def decode_batches(data: bytes) -> list[Batch]:
    """Whole v2 batches in `data` (a trailing partial batch, as a fetch may end with, is left out)."""
    batches = []
    for header in split_batches(data):
        _, records = decode_batch(data, header.position, check_crc=True)
        raw = bytes(data[header.position:header.position + header.size])
        values = tuple(r.value or b"" for r in records)
        batches.append(Batch(header.base_offset, header.partition_leader_epoch, values, header.is_control, raw))
    return batches


class FileRaftLog:
    def __init__(self, metadata: FileMetadataLog) -> None:
        self.metadata = metadata
        self.log = metadata.log

    @property
    def start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def flushed_end_offset(self) -> int:
        return self.log.recovery_point

    def last_fetched_epoch(self) -> int:
        return last_epoch(self._epochs(), self.latest_snapshot(), self.start_offset)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        return epoch_end(self._epochs(), self.end_offset, self.latest_snapshot(), self.start_offset, epoch)

    def _epochs(self) -> list[tuple[int, int]]:
        return [(e.epoch, e.start_offset) for e in self.log.leader_epoch_cache.entries]

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end_offset:
            raise ValueError(f"append at {batch.base_offset}, log ends at {self.end_offset}")
        buf = bytearray(encode_batch(batch))
        self.log.append_as_follower(buf, split_batches(buf))

    def read(self, offset: int, max_batches: int) -> list[Batch]:
        offset = max(offset, self.start_offset)
        batches: list[Batch] = []
        while offset < self.end_offset and len(batches) < max_batches:
            chunk = [b for b in decode_batches(self.log.read_bytes(offset, READ_BYTES)) if b.next_offset > offset]
            if not chunk:
                break
            batches += chunk  # a read stops at the end of a segment: go on in the next
            offset = chunk[-1].next_offset
        return batches[:max_batches]

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def flush(self) -> None:
        self.log.flush()

    def latest_snapshot(self) -> OffsetAndEpoch | None:
        ids = list_snapshots(self.metadata.directory)
        return OffsetAndEpoch(ids[-1].epoch, ids[-1].end_offset) if ids else None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        try:
            return self.metadata.snapshot_bytes(SnapshotId(snapshot_id.offset, snapshot_id.epoch))
        except OSError:
            return None

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        write_snapshot_bytes(self.metadata.directory, SnapshotId(snapshot_id.offset, snapshot_id.epoch), data)
        self.log.truncate_fully_and_start_at(snapshot_id.offset)
