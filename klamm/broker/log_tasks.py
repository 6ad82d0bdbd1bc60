"""Background log maintenance: delayed deletes, and retention every log.retention.check.interval.ms.

Deleting is Kafka's asynchronous delete, one mechanism for retention, topic
deletion and the cleaner's swaps: storage renames the files at once (segments to
`*.deleted`, a deleted partition's directory to `*-delete`), so a restart finds
them stale; `DelayedDeletes` then removes them after the topic's
file.delete.delay.ms, in an executor (a topic of 10k segments is much unlinking).
Their descriptors close when the last response leasing them is sent
(klamm.storage.shared_file), so no fetch ever sends from a reused descriptor.

Each retention pass decides on the event loop (cheap: segment metadata only) and
detaches the deletable segments, giving the loop back every millisecond; the log
start offsets that moved are
checkpointed right after the pass (their snapshot read a slice of the loop at a
time, written by the LogManager's checkpoint thread).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from klamm.broker.background import background_executor
from klamm.protocol.topics import METADATA_TOPIC
from klamm.storage.retention import RetentionPolicy, delete_segments, enforce_retention
from klamm.storage.segment import LogSegment

log = logging.getLogger("klamm.log_tasks")

RETENTION_SLICE_S = 0.001  # the most a retention pass works before letting other callbacks run


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class DelayedDeletes:
    """Owned by one Broker: runs removals after their delay, in an executor; stop() runs the rest now.

    Removals scheduled with the same delay in one turn of the loop share one timer and one executor job (a
    deleted topic's partitions: a timer and a job each cost the loop 20-30 ms when a topic of 1,000
    partitions was deleted, and as much again when they fell due)."""

    def __init__(self) -> None:
        self._due: dict[int, tuple[asyncio.TimerHandle, list[Callable[[], None]]]] = {}  # batch number -> removals
        self._this_turn: dict[int, list[Callable[[], None]]] = {}  # delay ms -> the batch this turn fills
        self._batches = itertools.count()
        self._running: dict[asyncio.Future[None], int] = {}  # executor jobs -> how many removals each runs
        self._executor: ThreadPoolExecutor | None = None

    def schedule(self, remove: Callable[[], None], delay_ms: int) -> None:
        loop = asyncio.get_running_loop()
        delay_ms = max(delay_ms, 0)
        batch = self._this_turn.get(delay_ms)
        if batch is None:
            if not self._this_turn:
                loop.call_soon(self._this_turn.clear)  # a removal scheduled after this turn starts a new batch
            batch = self._this_turn[delay_ms] = []
            number = next(self._batches)
            self._due[number] = (loop.call_later(delay_ms / 1000, self._fire, loop, number), batch)
        batch.append(remove)

    def _fire(self, loop: asyncio.AbstractEventLoop, number: int) -> None:
        _, removals = self._due.pop(number)
        self._run(loop, removals)

    def segments(self, segments: list[LogSegment], delay_ms: int) -> None:
        """Remove detached segments (already renamed `*.deleted`) after `delay_ms`."""
        if segments:
            self.schedule(lambda: delete_segments(segments), delay_ms)

    def _run(self, loop: asyncio.AbstractEventLoop, removals: list[Callable[[], None]]) -> None:
        if self._executor is None:
            # at a low CPU priority: unlinking a deleted topic's 40,000 files kept the loop's thread waiting on
            # a run queue (BENCHMARKS.md, "Deleting a topic of 10,000 segments")
            self._executor = background_executor("klamm-removals")
        future = loop.run_in_executor(self._executor, _remove_all, removals)
        self._running[future] = len(removals)
        future.add_done_callback(self._done)

    def _done(self, future: asyncio.Future[None]) -> None:
        del self._running[future]
        if not future.cancelled() and future.exception() is not None:
            log.error("delayed delete failed: %s", future.exception())

    @property
    def pending(self) -> int:
        """Removals waiting for their delay or running (metrics, tests)."""
        return sum(len(removals) for _, removals in self._due.values()) + sum(self._running.values())

    async def stop(self) -> None:
        """Removals still waiting for their delay run now; returns when all are done."""
        loop = asyncio.get_running_loop()
        for handle, removals in self._due.values():
            handle.cancel()
            self._run(loop, removals)
        self._due.clear()
        self._this_turn.clear()
        if self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)
        if self._executor is not None:
            self._executor.shutdown(wait=False)  # its work is done: the thread ends at once
            self._executor = None


def _remove_all(removals: list[Callable[[], None]]) -> None:
    """One removal failing (logged) does not keep the others from running."""
    for remove in removals:
        try:
            remove()
        except Exception as exc:  # noqa: BLE001
            log.error("delayed delete failed: %s", exc)


class LogRetention:
    """Owned by one Broker; start() schedules the periodic pass, stop() cancels it."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        interval = self.broker.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_pass()
            except Exception:  # one bad log must not stop retention for all of them
                log.exception("retention pass failed")

    def run_once(self, now_ms: int | None = None) -> int:
        """One retention pass over every hosted partition at once; returns the number of segments deleted."""
        now = _now_ms() if now_ms is None else now_ms
        deleted = sum(self._retain(partition, now) for partition in list(self.broker.replicas.partitions.values()))
        if deleted:
            self.broker.logs.checkpoint()
        return deleted

    async def run_pass(self, now_ms: int | None = None) -> int:
        """run_once, handing the loop back after every RETENTION_SLICE_S of work: each deletion renames a
        segment's files, tens of microseconds, and a pass over thousands of logs would hold the loop for as
        many milliseconds. A partition no longer hosted when its turn comes is skipped."""
        now = _now_ms() if now_ms is None else now_ms
        deleted = 0
        partitions = self.broker.replicas.partitions
        slice_started = time.monotonic()
        for partition in list(partitions.values()):
            if time.monotonic() - slice_started >= RETENTION_SLICE_S:
                await asyncio.sleep(0)
                slice_started = time.monotonic()
                if partitions.get((partition.topic, partition.index)) is not partition:
                    continue
            deleted += self._retain(partition, now)
        if deleted:  # the log start offsets it moved, read a slice of the loop at a time as the periodic ones
            await self.broker.logs.checkpoint_in_slices()
        return deleted

    def _retain(self, partition: Any, now: int) -> int:
        if partition.topic == METADATA_TOPIC:
            return 0
        config = partition.config
        policy = RetentionPolicy(config.retention_ms, config.retention_bytes, config.delete)
        removed = enforce_retention(partition.log, policy, now_ms=now, high_watermark=partition.high_watermark)
        if removed:
            log.info("retention deleted %d segment(s) of %s-%d; log start offset now %d", len(removed),
                     partition.topic, partition.index, partition.log.log_start_offset)
            self.broker.delayed_deletes.segments(removed, config.file_delete_delay_ms)
        return len(removed)

    async def stop(self) -> None:
        """Cancel the pass (segments it detached are the broker's DelayedDeletes' to remove)."""
        if self._task is not None:
            self._task.cancel()
