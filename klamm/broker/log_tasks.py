"""Background log maintenance: retention every log.retention.check.interval.ms.

Each pass decides on the event loop (cheap: segment metadata only) and detaches
the deletable segments, whose files are renamed to `.deleted` at once; the files
are closed and removed after the topic's file.delete.delay.ms in an executor,
so fetches already sending from them finish (Kafka's asynchronous delete). The
log start offsets that moved are checkpointed right after the pass.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from klamm.protocol.topics import METADATA_TOPIC
from klamm.storage.retention import RetentionPolicy, delete_segments, enforce_retention
from klamm.storage.segment import LogSegment

log = logging.getLogger("klamm.log_tasks")



def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogRetention:
    """Owned by one Broker; start() schedules the periodic pass, stop() cancels it."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[asyncio.TimerHandle, list[LogSegment]] = {}
        self._deleting: set[asyncio.Future[None]] = set()

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        interval = self.broker.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.run_once()
            except Exception:  # one bad log must not stop retention for all of them
                log.exception("retention pass failed")

    def run_once(self, now_ms: int | None = None) -> int:
        """One retention pass over every hosted partition; returns the number of segments deleted."""
        now = _now_ms() if now_ms is None else now_ms
        deleted = 0
        for partition in list(self.broker.replicas.partitions.values()):
            if partition.topic == METADATA_TOPIC:
                continue
            config = partition.config
            policy = RetentionPolicy(config.retention_ms, config.retention_bytes, config.delete)
            removed = enforce_retention(partition.log, policy, now_ms=now, high_watermark=partition.high_watermark)
            if removed:
                log.info("retention deleted %d segment(s) of %s-%d; log start offset now %d", len(removed),
                         partition.topic, partition.index, partition.log.log_start_offset)
                self._schedule_delete(removed, config.file_delete_delay_ms)
                deleted += len(removed)
        if deleted:
            self.broker.logs.checkpoint()
        return deleted

    def _schedule_delete(self, segments: list[LogSegment], delay_ms: int) -> None:
        loop = asyncio.get_running_loop()

        def fire() -> None:
            self._pending.pop(handle, None)
            future = loop.run_in_executor(None, delete_segments, segments)
            self._deleting.add(future)
            future.add_done_callback(self._deleting.discard)

        handle = loop.call_later(delay_ms / 1000, fire)
        self._pending[handle] = segments

    async def stop(self) -> None:
        """Cancel the pass; segments still waiting for their delay are deleted now."""
        if self._task is not None:
            self._task.cancel()
        for handle, segments in list(self._pending.items()):
            handle.cancel()
            delete_segments(segments)
        self._pending.clear()
        if self._deleting:
            await asyncio.gather(*self._deleting, return_exceptions=True)
