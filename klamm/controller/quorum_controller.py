"""The controller of a Raft quorum (several dedicated controllers): the Controller on top of klamm.controller.raft.

Every voter runs a `Controller` whose image is the committed metadata. The
active controller — the Raft leader, once it has replayed everything committed
before its epoch — decides and appends as a single controller does, applying
its records at once (Kafka's QuorumController applies them in memory when it
appends), while the handlers that asked wait for the commit before they
answer. The others replay each batch once the high watermark passes it. A
leader that loses its epoch drops what it applied beyond the commit by loading
the committed image again, and a follower that installed a snapshot starts
from it.

`RaftMetadataLog` is the MetadataLog the Controller writes through: appends go
to the Raft leader, and replay sees only committed records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from klamm.controller.controller import Controller
from klamm.controller.metadata_log import FileMetadataLog
from klamm.controller.quorum_info import (
    NO_DIRECTORY_ID,
    Endpoint,
    QuorumInfo,
    ReplicaInfo,
)
from klamm.controller.raft.driver import RaftDriver, now_ms
from klamm.controller.raft.node import ReplicaProgress
from klamm.controller.snapshot import Snapshot, SnapshotId
from klamm.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = ["QuorumController", "RaftMetadataLog"]


class RaftMetadataLog:
    def __init__(self, files: FileMetadataLog, driver: RaftDriver) -> None:
        self.files = files
        self._driver = driver

    @property
    def end_offset(self) -> int:
        return self.files.end_offset

    def append(self, records: Sequence[bytes]) -> int:
        return self._driver.append(records)

    def replay(self, from_offset: int = 0) -> Iterator[tuple[int, bytes]]:
        return self.files.replay(from_offset, until=self.committed_end_offset)

    @property
    def committed_end_offset(self) -> int:
        return self._driver.node.high_watermark

    def epoch_of(self, offset: int) -> int:
        epoch = self.files.log.leader_epoch_cache.epoch_for_offset(offset)
        if epoch < 0:
            snapshots = self.files.snapshots()
            return snapshots[-1].epoch if snapshots else 0
        return epoch

    @property
    def log_start_offset(self) -> int:
        return self.files.log_start_offset

    def snapshots(self) -> list[SnapshotId]:
        return self.files.snapshots()

    def write_snapshot(self, snapshot_id: SnapshotId, values: Iterable[bytes], last_contained_ms: int) -> None:
        self.files.write_snapshot(snapshot_id, values, last_contained_ms)

    def read_snapshot(self, snapshot_id: SnapshotId) -> Snapshot:
        return self.files.read_snapshot(snapshot_id)

    def start_at_snapshot(self, snapshot_id: SnapshotId) -> None:
        self.files.start_at_snapshot(snapshot_id)

    def maybe_clean(self, retention_bytes: int, retention_ms: int, now_ms: int) -> bool:
        return self.files.maybe_clean(retention_bytes, retention_ms, now_ms)

    @property
    def bootstrap_directory(self) -> Path | None:
        return self.files.bootstrap_directory

    def close(self) -> None:
        self.files.close()


class QuorumController:
    def __init__(self, controller: Controller, driver: RaftDriver, files: FileMetadataLog,
                 endpoints: dict[int, list[Endpoint]]) -> None:
        self.controller = controller
        self.driver = driver
        self.node = driver.node
        self.files = files
        self.endpoints = endpoints
        self.active = False
        self._active_epoch = -1
        self._applied_end = max(controller.image.offset + 1, files.log_start_offset)
        self.on_activate: list[Callable[[], None]] = []
        controller.defer_publishing()  # brokers and clients see only what a majority holds

    # what DescribeQuorum reports
    def describe_quorum(self) -> QuorumInfo:
        if not self.node.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"node {self.node.node_id} does not lead the quorum")
        voters, observers = self.node.progress()
        now_mono, now_wall = now_ms(), int(time.time() * 1000)

        def wall(t: int) -> int:
            return -1 if t < 0 else now_wall - (now_mono - t)

        def info(replica: int, p: ReplicaProgress) -> ReplicaInfo:
            if replica == self.node.node_id:  # Kafka reports "now" for the leader
                return ReplicaInfo(replica, NO_DIRECTORY_ID, p.end_offset, now_wall, now_wall)
            return ReplicaInfo(replica, NO_DIRECTORY_ID, p.end_offset, wall(p.last_fetch_ms), wall(p.last_caught_up_ms))
        return QuorumInfo(self.node.node_id, self.node.epoch, self.node.high_watermark,
                          [info(v, p) for v, p in sorted(voters.items())],
                          [info(o, p) for o, p in sorted(observers.items())], dict(self.endpoints))

    async def wait_committed(self, timeout_s: float) -> None:
        """Until every record this controller appended so far is committed (NOT_CONTROLLER if it cannot be)."""
        if not self.active:
            raise KafkaError(ErrorCode.not_controller, f"node {self.node.node_id} is not the active controller")
        end = self.files.end_offset
        await self.driver.wait_committed(end - 1, self._active_epoch, timeout_s)

    def step(self) -> None:
        """After every Raft step: follow leadership, and replay what became committed."""
        node = self.node
        if self.active and (not node.is_leader or node.epoch != self._active_epoch):
            self.active = False
            log.info("controller %d is no longer active (epoch %d)", node.node_id, node.epoch)
            self.controller.reload()  # what it applied beyond the commit may never be committed
            self._applied_end = max(node.high_watermark, self.files.log_start_offset)
        if self.active:
            self.controller.publish_committed(node.high_watermark)
            self.controller.maybe_snapshot()
            return
        if self.files.log_start_offset > self._applied_end:  # a snapshot from the leader replaced the log
            self.controller.reload()
            self._applied_end = max(self.files.log_start_offset, self.controller.image.offset + 1)
        committed = node.high_watermark
        if committed > self._applied_end:
            self.controller.apply_committed(list(self.files.replay(self._applied_end, until=committed)))
            self._applied_end = committed
        if node.is_leader and self._applied_end >= self.files.end_offset:
            self._activate()

    def _activate(self) -> None:
        self.active = True
        self._active_epoch = self.node.epoch
        log.info("controller %d is active in epoch %d (metadata at offset %d)", self.node.node_id,
                 self.node.epoch, self._applied_end)
        self.controller.bootstrap_if_empty()
        for callback in list(self.on_activate):
            callback()
