"""Background log compaction: `log.cleaner.threads` workers over the compacted partitions.

Each worker loops: on the event loop it picks the dirtiest compacted log nobody
else is cleaning (Kafka's grabFilthiestCompactedLog, a slice of the partitions a
turn of the loop) and snapshots it; the cleaning itself runs in the worker's
cleaner process (klamm.storage.cleaner.Cleaner: out of the broker's interpreter
lock), waited for by a thread of the cleaner executor; back on the loop the
cleaned segments are swapped in, the replaced ones are deleted after
file.delete.delay.ms (fetches may still be sending from them), and the
cleaner-offset-checkpoint is updated. With nothing to clean a worker sleeps
log.cleaner.backoff.ms, as after a failed cleaning (the process crashed, a segment went
meanwhile): the log is tried again then. The workers share one
log.cleaner.io.max.bytes.per.second budget. `__cluster_metadata` is never cleaned.

Uncleanable partitions (Kafka's LogCleanerManager.uncleanablePartitions, per log dir): a
cleaning that fails with an error of its own (not a stop, not a segment gone meanwhile)
would fail again on the same bytes, so the partition is no longer picked, as Kafka marks
it uncleanable at once. A cleaner process that dies is tried once more first (it may have
been killed from outside, the OOM killer's favourite being the process with the offset
map); a second death in a row on the same partition marks it. The mark holds until the
partition is deleted (and follows it to another log dir), as in Kafka, where a restart
also clears it. Metrics: Kafka's uncleanable-partitions-count and uncleanable-bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from klamm.config.topic import TopicConfig
from klamm.protocol.topics import METADATA_TOPIC
from klamm.steps import each_value, in_slices
from klamm.storage.checkpoint import fsync_dir
from klamm.storage.cleaner import (
    PROCESS_CONTEXT,
    Cleaner,
    CleanerCheckpoints,
    CleanerCrashed,
    CleaningAborted,
    CleanResult,
    CompactionConfig,
    LogToClean,
    SegmentChanged,
    commit_clean_steps,
    log_to_clean,
    needs_cleaning,
    prepare_clean,
)
from klamm.storage.throttler import Throttler

log = logging.getLogger("klamm.cleaner")

# Deaths of the cleaner process in a row while cleaning one partition before it is marked uncleanable.
CRASHES_BEFORE_UNCLEANABLE = 2
# The most a worker's look for the dirtiest log runs before letting other callbacks run, and the partitions it
# looks at a step (several microseconds each if compacted, under one if not).
PICK_SLICE_S = 0.0005
SWAP_SLICE_S = 0.0005  # of the loop a turn, swapping a cleaning in a group at a time
PICK_PARTITIONS_A_STEP = 16


class LogCleaningFailed(Exception):
    """Kafka's LogCleaningException: cleaning `log` failed in a way that would recur."""

    def __init__(self, log_: Any, cause: BaseException) -> None:
        super().__init__(f"log cleaning of {log_.topic}-{log_.partition} failed: {cause!r}")
        self.log = log_
        self.cause = cause


def _settings(config: Any) -> tuple[Any, ...]:
    return tuple(config.value_of(name) for name in RECONFIGURABLE)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def compaction_config(config: TopicConfig) -> CompactionConfig:
    return CompactionConfig(
        min_cleanable_ratio=config.value_of("min.cleanable.dirty.ratio"),
        min_compaction_lag_ms=config.value_of("min.compaction.lag.ms"),
        max_compaction_lag_ms=config.value_of("max.compaction.lag.ms"),
        delete_retention_ms=config.value_of("delete.retention.ms"),
    )


# Kafka's LogCleaner.ReconfigurableConfigs: dynamic broker configs; a change restarts the cleaners with them.
RECONFIGURABLE = ("log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
                  "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second",
                  "log.cleaner.backoff.ms")


def check_cleaner_threads(current: int, new: int) -> None:
    """Kafka's LogCleaner.validateReconfiguration: at least one thread, at most double, at least half as many."""
    if new < 1:
        raise ValueError("Log cleaner threads should be at least 1")
    if new < current // 2:
        raise ValueError(f"Log cleaner threads cannot be reduced to less than half the current value {current}")
    if new > current * 2:
        raise ValueError(f"Log cleaner threads cannot be increased to more than double the current value {current}")


class LogCleanerService:
    """Owned by one Broker; start() launches the workers, stop() ends them, reconfigure() restarts them."""

    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._settings = _settings(broker.config)
        self._make_workers(broker.config)
        self.checkpoints: CleanerCheckpoints | None = None
        self._in_progress: set[tuple[str, int]] = set()
        # log dir -> partitions not cleaned any more (Kafka's uncleanablePartitions)
        self._uncleanable: dict[Path, set[tuple[str, int]]] = {}
        self._crashes: dict[tuple[str, int], int] = {}  # process deaths in a row per partition
        self._restarting: asyncio.Task[None] | None = None
        self._commits: set[asyncio.Task[int]] = set()  # swaps begun whose fsync and checkpoint are still to come

    def _make_workers(self, config: Any, retired: Sequence[Cleaner] = ()) -> None:
        self.enabled = config.log_cleaner_enable and config.log_cleaner_threads > 0
        threads = max(config.log_cleaner_threads, 1)
        per_thread = config.log_cleaner_dedupe_buffer_size // threads
        # one I/O budget shared by every cleaner thread, as Kafka's LogCleaner has
        self.throttler = Throttler(config.log_cleaner_io_max_bytes_per_second, context=PROCESS_CONTEXT)
        self.cleaners = [Cleaner(per_thread, config.log_cleaner_io_buffer_load_factor, self.throttler)
                         for _ in range(config.log_cleaner_threads)]
        if retired and self.cleaners:  # the metrics are counters: what the old workers did still counts
            first = self.cleaners[0]
            first.runs, first.bytes_read, first.bytes_written = (sum(c.runs for c in retired),
                                                                 sum(c.bytes_read for c in retired),
                                                                 sum(c.bytes_written for c in retired))
        self._executor: ThreadPoolExecutor | None = None
        # A cleaning's directory fsync and checkpoint write: one thread, so checkpoints land in order.
        self._commit_executor = ThreadPoolExecutor(1, thread_name_prefix="klamm-cleaner-commit")
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
        self._start_workers()

    def _start_workers(self) -> None:
        if not self.enabled:
            return
        self._executor = ThreadPoolExecutor(len(self.cleaners), thread_name_prefix="klamm-cleaner")
        self._tasks = [asyncio.ensure_future(self._run(cleaner)) for cleaner in self.cleaners]

    def reconfigure(self, config: Any) -> None:
        """Kafka's LogCleaner.reconfigure: new cleaner settings (RECONFIGURABLE) stop the workers, a cleaning in
        progress aborting, and start new ones with them."""
        settings = _settings(config)
        if settings == self._settings:
            return
        self._settings = settings
        if self.checkpoints is None:  # not started yet: start() starts workers with the new settings
            self._make_workers(config)
            return
        self._restarting = asyncio.ensure_future(self._restart(self._restarting))

    async def _restart(self, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.gather(previous, return_exceptions=True)
        await self._stop_workers()
        self._make_workers(self.broker.config, retired=self.cleaners)
        self._start_workers()
        log.info("log cleaner restarted: %d threads, backoff %d ms", len(self.cleaners),
                 self.broker.config.log_cleaner_backoff_ms)

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
                log.warning("log cleaning failed, tried again later: %s", e)
                cleaned = False
            except LogCleaningFailed as e:
                self._mark_uncleanable(e)
                cleaned = False
            except Exception:  # one bad log must not stop compaction of the others
                log.exception("log cleaning failed")
                cleaned = False
            self._maintain_uncleanable()
            if not cleaned:
                await asyncio.sleep(backoff)

    async def clean_once(self, cleaner: Cleaner, now_ms: int | None = None) -> bool:
        """Clean the dirtiest log, if any is due; True if one was cleaned."""
        now = _now_ms() if now_ms is None else now_ms
        ltc = await self._grab_filthiest(now)
        if ltc is None:
            return False
        target = ltc.log
        key = (target.topic, target.partition)
        self._in_progress.add(key)
        try:
            read_before, written_before = cleaner.bytes_read, cleaner.bytes_written
            result = await self._clean(cleaner, ltc, now)
            if self.broker.logs.get_log(*key) is not target:
                result.discard()  # deleted (or recreated) while we cleaned
                return True
            # The swap, then its fsync and checkpoint, go on if the broker stops meanwhile (stop waits for them),
            # or a clean shutdown would leave a compacted log without its clean point.
            commit = asyncio.ensure_future(self._swap_in(target, result))
            self._commits.add(commit)
            commit.add_done_callback(self._commits.discard)
            replaced = await asyncio.shield(commit)
            log.info("cleaned %s-%d up to offset %d: %d segment(s) replaced, %d bytes read, %d written",
                     target.topic, target.partition, result.end_offset, replaced,
                     cleaner.bytes_read - read_before, cleaner.bytes_written - written_before)
        finally:
            self._in_progress.discard(key)
        return True

    async def _swap_in(self, target: Any, result: Any) -> int:
        """Swap the cleaning in, a group per slice of the loop (nine renames a group: a cleaning of tens of segments
        swapped in at once held the loop 23 ms), then commit it; how many segments it replaced."""
        key = (target.topic, target.partition)
        try:
            complete, replaced = await in_slices(
                commit_clean_steps(target, result, lambda: self.broker.logs.get_log(*key) is target), SWAP_SLICE_S)
        except Exception as e:
            raise LogCleaningFailed(target, e) from e
        partition = self.broker.replicas.partitions.get(key)
        delay_ms = partition.config.file_delete_delay_ms if partition is not None else 60_000
        await self._commit(target, complete, replaced, delay_ms, result.end_offset)
        return len(replaced)

    async def _commit(self, target: Any, complete: bool, replaced: list[Any], delay_ms: int,
                      end_offset: int) -> None:
        loop = asyncio.get_running_loop()
        try:  # the swap's directory fsync waits on the journal: never on the loop
            await loop.run_in_executor(self._commit_executor, partial(fsync_dir, target.directory, missing_ok=True))
        finally:  # unlinked only once the renames that detached them are durable
            self.broker.delayed_deletes.segments(replaced, delay_ms)
        if complete and self.broker.logs.get_log(target.topic, target.partition) is target:
            await loop.run_in_executor(self._commit_executor, self._record_checkpoint(target, end_offset))

    async def _clean(self, cleaner: Cleaner, ltc: LogToClean, now: int) -> CleanResult:
        """Run one cleaning in `cleaner`'s process; its own failures become LogCleaningFailed."""
        key = (ltc.log.topic, ltc.log.partition)
        try:
            plan = prepare_clean(ltc, now)
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._executor, cleaner.clean, plan)
        except (CleaningAborted, SegmentChanged):
            raise
        except CleanerCrashed as e:
            crashes = self._crashes.get(key, 0) + 1
            if crashes >= CRASHES_BEFORE_UNCLEANABLE:
                self._crashes.pop(key, None)
                raise LogCleaningFailed(ltc.log, e) from e
            self._crashes[key] = crashes
            raise
        except Exception as e:
            raise LogCleaningFailed(ltc.log, e) from e
        self._crashes.pop(key, None)
        return result

    async def _grab_filthiest(self, now: int) -> LogToClean | None:
        """Kafka's grabFilthiestCompactedLog, PICK_SLICE_S a turn of the loop: a compacted log costs several
        microseconds to look at, a broker may host thousands. The logs may change between the slices, so the
        one chosen is looked at again at the end, in the callback where the caller marks it in progress
        (another worker may have taken it meanwhile)."""
        due: list[LogToClean] = []
        settings: dict[int, CompactionConfig] = {}  # one per topic config object: the partitions share them

        def look_at(partition: Any) -> None:
            if not self._may_clean(partition.topic, partition.index, partition):
                return
            config = settings.get(id(partition.config))
            if config is None:
                config = settings[id(partition.config)] = compaction_config(partition.config)
            ltc = self._log_to_clean(partition, now, config)
            if ltc.reset_checkpoint:
                self._checkpoint(partition.log, ltc.first_dirty_offset)
            if needs_cleaning(ltc):
                due.append(ltc)

        await in_slices(each_value(self.broker.replicas.partitions, PICK_PARTITIONS_A_STEP, look_at), PICK_SLICE_S)
        for ltc in sorted(due, key=lambda ltc: ltc.cleanable_ratio, reverse=True):
            partition = self.broker.replicas.partitions.get((ltc.log.topic, ltc.log.partition))
            if partition is None or partition.log is not ltc.log or not self._may_clean(ltc.log.topic,
                                                                                      ltc.log.partition, partition):
                continue
            now_ltc = self._log_to_clean(partition, now)
            if needs_cleaning(now_ltc):
                return now_ltc
        return None

    def _may_clean(self, topic: str, index: int, partition: Any) -> bool:
        return (topic != METADATA_TOPIC and partition.config.compact and (topic, index) not in self._in_progress
                and not self.is_uncleanable(partition.log))

    def _log_to_clean(self, partition: Any, now: int, config: CompactionConfig | None = None) -> LogToClean:
        assert self.checkpoints is not None
        try:
            return log_to_clean(partition.log, config or compaction_config(partition.config),
                                self.checkpoints.get(partition.log), now, partition.last_stable_offset)
        except Exception as e:
            raise LogCleaningFailed(partition.log, e) from e

    # -- uncleanable partitions (Kafka's LogCleanerManager) --

    def is_uncleanable(self, log_: Any) -> bool:
        if not self._uncleanable:  # the usual case, and a log dir's path costs microseconds to hash
            return False
        return (log_.topic, log_.partition) in self._uncleanable.get(log_.directory.parent, ())

    def _mark_uncleanable(self, failure: LogCleaningFailed) -> None:
        target = failure.log
        if self.broker.logs.get_log(target.topic, target.partition) is not target:
            # Deleted (or moved) while it was cleaned: its files went from under the cleaning, nothing to
            # mark, as Kafka aborts the cleaning of a partition it deletes.
            log.info("log cleaning of %s-%d stopped: the log went meanwhile (%r)", target.topic, target.partition,
                     failure.cause)
            return
        log_dir = target.directory.parent
        self._uncleanable.setdefault(log_dir, set()).add((target.topic, target.partition))
        log.error("log cleaning of %s-%d in %s failed; the partition is marked uncleanable and not cleaned again "
                  "until it is deleted (uncleanable partitions in that log dir: %d)", target.topic,
                  target.partition, log_dir, len(self._uncleanable[log_dir]), exc_info=failure.cause)

    def _maintain_uncleanable(self) -> None:
        """Kafka's maintainUncleanablePartitions: a deleted partition's mark goes; a moved one's follows it."""
        for log_dir, keys in list(self._uncleanable.items()):
            for key in list(keys):
                current = self.broker.logs.get_log(*key)
                if current is None or current.directory.parent != log_dir:
                    keys.discard(key)
                if current is not None and current.directory.parent != log_dir:
                    self._uncleanable.setdefault(current.directory.parent, set()).add(key)
        self._uncleanable = {log_dir: keys for log_dir, keys in self._uncleanable.items() if keys}
        self._crashes = {key: n for key, n in self._crashes.items() if self.broker.logs.get_log(*key) is not None}

    def uncleanable(self, now_ms: int | None = None) -> list[tuple[Path, int, int]]:
        """Per log dir: (dir, uncleanable partitions, their cleanable bytes): Kafka's uncleanable-partitions-count
        and uncleanable-bytes gauges."""
        now = _now_ms() if now_ms is None else now_ms
        report = []
        for log_dir in self.broker.log_dirs:
            keys = self._uncleanable.get(Path(log_dir), set())
            report.append((Path(log_dir), len(keys), sum(self._uncleanable_bytes(key, now) for key in keys)))
        return report

    def _uncleanable_bytes(self, key: tuple[str, int], now: int) -> int:
        partition = self.broker.replicas.partitions.get(key)
        if partition is None or self.checkpoints is None:
            return 0
        try:
            return self._log_to_clean(partition, now).cleanable_bytes
        except Exception:  # noqa: BLE001 (the very log whose reading failed: a scrape must not fail with it)
            return 0

    def _record_checkpoint(self, target: Any, offset: int) -> Callable[[], None]:
        """Record `offset` as `target`'s clean point; the write of its dir's file, for the commit thread
        (one thread: the files are written in the order their contents were recorded)."""
        assert self.checkpoints is not None
        live = {(log_.topic, log_.partition) for log_ in self.broker.logs.all_logs()}
        return self.checkpoints.record(target, offset, live)

    async def stop(self) -> None:
        """Stop the workers (a cleaning in progress aborts and removes its files)."""
        if self._restarting is not None:
            self._restarting.cancel()
            await asyncio.gather(self._restarting, return_exceptions=True)
        await self._stop_workers()

    async def _stop_workers(self) -> None:
        for cleaner in self.cleaners:
            cleaner.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*self._commits, return_exceptions=True)
        loop = asyncio.get_running_loop()
        # Each process ends at once if idle, aborts at its next batch if cleaning, is killed if stuck.
        await asyncio.gather(*(loop.run_in_executor(None, cleaner.close) for cleaner in self.cleaners))
        if self._executor is not None:
            await loop.run_in_executor(None, self._executor.shutdown)
        await loop.run_in_executor(None, self._commit_executor.shutdown)
