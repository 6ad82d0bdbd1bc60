"""Moving a replica between log directories (AlterReplicaLogDirs, KIP-113) while it stays in service.

Kafka's ReplicaAlterLogDirsThread, reduced: a copy of the partition's log grows in the
destination directory (a "future" log, staged aside by the LogManager), batch by batch from
the current log, as a follower copies its leader: offsets, leader epochs, producer state and
transaction markers carry over, while the partition keeps taking appends and serving reads.
A copy that the current log no longer matches (truncated by leader epoch, or cut by
retention below what was copied) is cut back the same way a follower's is. Once the copy
has caught up, the swap runs without yielding to the event loop, so no append slips between
the last copied batch and the switch. The old log is detached and deleted after
file.delete.delay.ms, so reads in flight finish on it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from klamm.broker.log_flush import LogFlusher
from klamm.broker.partition import Partition
from klamm.broker.replication import truncation_offset
from klamm.protocol.batch import split_batches
from klamm.storage.log import Log
from klamm.storage.log_manager import LogManager

log = logging.getLogger("klamm.replica_moves")

COPY_CHUNK_BYTES = 1 << 20  # per step: about a millisecond of the event loop


class ReplicaMoves:
    def __init__(self, logs: LogManager, flusher: LogFlusher, hosted: Callable[[str, int], Partition | None],
                 schedule_delete: Callable[[Callable[[], None], int], None]) -> None:
        self.logs = logs
        self.flusher = flusher
        self.hosted = hosted  # the partition hosted here now, or None (deleted, moved away)
        self.schedule_delete = schedule_delete
        self._moves: dict[tuple[str, int], tuple[Path, asyncio.Task[None]]] = {}
        self._copies: dict[tuple[str, int], tuple[Path, Log]] = {}  # (target, future log), for DescribeLogDirs

    def future_log(self, topic: str, index: int) -> tuple[Path, Log] | None:
        """(target log dir, the copy) of a move under way."""
        return self._copies.get((topic, index))

    def start(self, partition: Partition, log_dir: Path) -> None:
        """Move `partition` to `log_dir`; a move to another directory under way is given up (as Kafka does)."""
        key = (partition.topic, partition.index)
        under_way = self._moves.get(key)
        if under_way is not None:
            if under_way[0] == log_dir:
                return
            under_way[1].cancel()
            del self._moves[key]
        if self.logs.log_dir_of(*key) == log_dir:
            return
        task = asyncio.ensure_future(self._move(partition, log_dir))
        self._moves[key] = (log_dir, task)
        task.add_done_callback(lambda done: self._forget(key, done))

    def _forget(self, key: tuple[str, int], task: asyncio.Task[None]) -> None:
        if self._moves.get(key, (None, None))[1] is task:
            del self._moves[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("moving %s-%d failed", *key, exc_info=task.exception())

    async def _move(self, partition: Partition, log_dir: Path) -> None:
        key = (partition.topic, partition.index)
        copy = self.logs.create_future_log(partition.topic, partition.index, log_dir, partition.log.config)
        self._copies[key] = (log_dir, copy)
        promoted = False
        try:
            copy.truncate_fully_and_start_at(partition.log.log_start_offset)
            log.info("moving %s-%d to %s", *key, log_dir)
            while True:
                if self.hosted(*key) is not partition:
                    return  # deleted or no longer hosted here meanwhile
                source = partition.log
                _match(copy, source)
                if copy.log_end_offset < source.log_end_offset:
                    _copy_step(copy, source)
                    await asyncio.sleep(0)
                elif self.flusher.busy(source):
                    await asyncio.sleep(0.01)  # its fsync runs in a worker: swap once it is done
                else:
                    self._swap(partition, copy)
                    promoted = True
                    log.info("moved %s-%d to %s", *key, log_dir)
                    return
        finally:
            self._copies.pop(key, None)
            if not promoted:
                self.logs.discard_future_log(copy)

    def _swap(self, partition: Partition, copy: Log) -> None:
        """Caught up: the copy becomes the partition's log (no await in here)."""
        copy.maybe_increment_log_start_offset(partition.log.log_start_offset)
        new, old = self.logs.promote_future_log(copy)
        partition.replace_log(new)
        if old is not None:
            self.schedule_delete(old.delete, partition.config.file_delete_delay_ms)

    def stop(self) -> None:
        for _, task in self._moves.values():
            task.cancel()


def _match(copy: Log, source: Log) -> None:
    """Cut the copy back to what the source still holds, as a follower truncates to its leader
    (klamm.broker.replication.truncation_offset, on the source's answer for the copy's last epoch)."""
    if source.log_start_offset > copy.log_end_offset:
        copy.truncate_fully_and_start_at(source.log_start_offset)  # retention passed the copy
        return
    epoch = copy.leader_epoch_cache.latest_epoch
    if epoch < 0:  # nothing copied yet, or batches without leader epochs: only the length can tell
        if copy.log_end_offset > source.log_end_offset:
            copy.truncate_fully_and_start_at(source.log_start_offset)
        return
    source_epoch, end = source.leader_epoch_cache.end_offset_for(epoch)
    if source_epoch < 0:  # the source has no epoch that old: nothing in common to keep
        copy.truncate_fully_and_start_at(source.log_start_offset)
    elif source_epoch != epoch or end < copy.log_end_offset:
        offset = truncation_offset((source_epoch, end), copy.leader_epoch_cache.end_offset_for(source_epoch),
                                   copy.log_end_offset)
        copy.truncate_to(max(offset, copy.log_start_offset))


def _copy_step(copy: Log, source: Log) -> None:
    """Append the source's next whole batches (up to COPY_CHUNK_BYTES) to the copy, offsets as they are."""
    data = bytearray(source.read_bytes(copy.log_end_offset, COPY_CHUNK_BYTES))  # from the batch holding that offset
    if not data:
        return
    headers = split_batches(data)
    if headers[0].base_offset < copy.log_end_offset:  # a batch across the copy's end: the source was rewritten
        copy.truncate_fully_and_start_at(source.log_start_offset)
        return
    copy.append_as_follower(data, headers)
