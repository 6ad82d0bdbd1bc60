"""Background log compaction: `log.cleaner.threads` workers over the compacted partitions.

Each worker loops: on the event loop it picks the dirtiest compacted log nobody
else is cleaning (klamm.storage.cleaner.grab_filthiest) and snapshots it; the
cleaning itself runs in the worker's cleaner process (klamm.storage.cleaner.Cleaner:
out of the broker's interpreter lock), waited for by a thread of the cleaner
executor; back on the loop the
cleaned segments are swapped in, the replaced ones are deleted after
file.delete.delay.ms (fetches may still be sending from them), and the
cleaner-offset-checkpoint is updated. With nothing to clean a worker sleeps
log.cleaner.backoff.ms, as after a failed cleaning (the process crashed, a segment went
meanwhile): the log is tried again then. The workers share one
log.cleaner.io.max.bytes.per.second budget. `__cluster_metadata` is never cleaned.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from klamm.config.topic import TopicConfig
from klamm.protocol.topics import METADATA_TOPIC
from klamm.storage.cleaner import (
    PROCESS_CONTEXT,
    Cleaner,
    CleanerCheckpoints,
    CleanerCrashed,
    CleaningAborted,
    CompactionConfig,
    LogToClean,
    SegmentChanged,
    commit_clean,
    grab_filthiest,
    log_to_clean,
    prepare_clean,
)
from klamm.storage.throttler import Throttler

log = logging.getLogger("klamm.cleaner")



def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def compaction_config(config: TopicConfig) -> CompactionConfig:
    return CompactionConfig(
        min_cleanable_ratio=config.value_of("min.cleanable.dirty.ratio"),
        min_compaction_lag_ms=config.value_of("min.compaction.lag.ms"),
        max_compaction_lag_ms=config.value_of("max.compaction.lag.ms"),
        delete_retention_ms=config.value_of("delete.retention.ms"),
    )


class LogCleanerService:
    """Owned by one Broker; start() launches the workers, stop() ends them."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        config = broker.config
        self.enabled = config.log_cleaner_enable and config.log_cleaner_threads > 0
        threads = max(config.log_cleaner_threads, 1)
        per_thread = config.log_cleaner_dedupe_buffer_size // threads
        # one I/O budget shared by every cleaner thread, as Kafka's LogCleaner has
        self.throttler = Throttler(config.log_cleaner_io_max_bytes_per_second, context=PROCESS_CONTEXT)
        self.cleaners = [Cleaner(per_thread, config.log_cleaner_io_buffer_load_factor, self.throttler)
                         for _ in range(config.log_cleaner_threads)]
        self.checkpoints: CleanerCheckpoints | None = None
        self._in_progress: set[tuple[str, int]] = set()
        self._executor: ThreadPoolExecutor | None = None
        self._tasks: list[asyncio.Task[None]] = []

    # metrics: totals over the workers
    @property
    def runs(self) -> int:
        return sum(cleaner.runs for cleaner in self.cleaners)

    @property
    def bytes_cleaned(self) -> int:
        return sum(cleaner.bytes_read for cleaner in self.cleaners)

    def start(self) -> None:
        self.checkpoints = CleanerCheckpoints(self.broker.log_dirs)
        if not self.enabled:
            return
        self._executor = ThreadPoolExecutor(len(self.cleaners), thread_name_prefix="klamm-cleaner")
        self._tasks = [asyncio.ensure_future(self._run(cleaner)) for cleaner in self.cleaners]

    async def _run(self, cleaner: Cleaner) -> None:
        backoff = self.broker.config.log_cleaner_backoff_ms / 1000
        while True:
            try:
                cleaned = await self.clean_once(cleaner)
            except CleaningAborted:
                return
            except SegmentChanged as e:
                log.info("log cleaning skipped, tried again later: %s", e)
                cleaned = False
            except CleanerCrashed as e:
                log.error("log cleaning failed, tried again later: %s", e)
                cleaned = False
            except Exception:  # one bad log must not stop compaction of the others
                log.exception("log cleaning failed")
                cleaned = False
            if not cleaned:
                await asyncio.sleep(backoff)

    async def clean_once(self, cleaner: Cleaner, now_ms: int | None = None) -> bool:
        """Clean the dirtiest log, if any is due; True if one was cleaned."""
        now = _now_ms() if now_ms is None else now_ms
        ltc = self._grab_filthiest(now)
        if ltc is None:
            return False
        target = ltc.log
        key = (target.topic, target.partition)
        self._in_progress.add(key)
        try:
            plan = prepare_clean(ltc, now)
            read_before, written_before = cleaner.bytes_read, cleaner.bytes_written
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._executor, cleaner.clean, plan)
            if self.broker.logs.get_log(*key) is not target:
                result.discard()  # deleted (or recreated) while we cleaned
                return True
            complete, replaced = commit_clean(target, result)
            partition = self.broker.replicas.partitions.get(key)
            delay_ms = partition.config.file_delete_delay_ms if partition is not None else 60_000
            self.broker.delayed_deletes.segments(replaced, delay_ms)
            if complete:
                self._checkpoint(target, result.end_offset)
            log.info("cleaned %s-%d up to offset %d: %d segment(s) replaced, %d bytes read, %d written",
                     target.topic, target.partition, result.end_offset, len(replaced),
                     cleaner.bytes_read - read_before, cleaner.bytes_written - written_before)
        finally:
            self._in_progress.discard(key)
        return True

    def _grab_filthiest(self, now: int) -> LogToClean | None:
        assert self.checkpoints is not None
        candidates = []
        for (topic, index), partition in list(self.broker.replicas.partitions.items()):
            if topic == METADATA_TOPIC or not partition.config.compact or (topic, index) in self._in_progress:
                continue
            ltc = log_to_clean(partition.log, compaction_config(partition.config),
                               self.checkpoints.get(partition.log), now, partition.last_stable_offset)
            if ltc.reset_checkpoint:
                self._checkpoint(partition.log, ltc.first_dirty_offset)
            candidates.append(ltc)
        return grab_filthiest(candidates)

    def _checkpoint(self, target: Any, offset: int) -> None:
        assert self.checkpoints is not None
        live = {(log_.topic, log_.partition) for log_ in self.broker.logs.all_logs()}
        self.checkpoints.update(target, offset, live)

    async def stop(self) -> None:
        """Stop the workers (a cleaning in progress aborts and removes its files)."""
        for cleaner in self.cleaners:
            cleaner.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        # Each process ends at once if idle, aborts at its next batch if cleaning, is killed if stuck.
        await asyncio.gather(*(loop.run_in_executor(None, cleaner.close) for cleaner in self.cleaners))
        if self._executor is not None:
            await loop.run_in_executor(None, self._executor.shutdown)
