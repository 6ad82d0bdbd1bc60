"""The log flusher: fsyncs partition logs in a worker thread, never on the event loop.

Three things ask for a flush (klamm.storage.log decides, this module runs it):
  * an append that reaches `flush.messages` unflushed offsets; its acknowledgement
    waits for the fsync covering it (`wait_durable`);
  * a segment roll (the finished segment, its indexes and the producer snapshot);
  * `flush.ms`: checked after each append and, as Kafka's LogManager.flushDirtyLogs
    does, every `log.flush.scheduler.interval.ms` over every hosted log.

Group commit: at most one flush job runs per log. Appends that arrive while it
runs are covered by the next job, started when it finishes, so N producers
appending concurrently share one fsync instead of queueing N. A job that fails
(an I/O error) fails the acknowledgements waiting on it with KAFKA_STORAGE_ERROR;
the next append or scheduled pass tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from functools import partial

from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.storage.log import FlushJob, Log

log = logging.getLogger("klamm.log_flush")

# Kafka's default scheduler interval is Long.MAX_VALUE: no periodic pass at all.
_NEVER_MS = 2**62


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class LogFlusher:
    """Owned by the ReplicaManager; start() schedules the periodic pass, stop() waits for running jobs."""

    def __init__(self, logs: Callable[[], Iterable[Log]], executor: Executor | None = None,
                 time_ms: Callable[[], int] = _now_ms) -> None:
        self._logs = logs  # the hosted logs, for the periodic pass
        self._executor = executor  # None: the loop's default executor
        self._time_ms = time_ms
        self._running: dict[Log, asyncio.Future[None]] = {}
        self._again: set[Log] = set()
        self._waiters: dict[Log, list[tuple[int, asyncio.Future[None]]]] = {}
        self._watchers: dict[Log, Callable[[], None]] = {}
        self._task: asyncio.Task[None] | None = None
        self.jobs_started = 0  # for tests and metrics: fsync rounds, not fsync calls

    def start(self, interval_ms: int) -> None:
        if 0 < interval_ms < _NEVER_MS:
            self._task = asyncio.ensure_future(self._run(interval_ms / 1000))

    async def _run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                self.run_once()
            except Exception:  # one bad log must not stop flushing the others
                log.exception("flush pass failed")

    def run_once(self, now_ms: int | None = None) -> int:
        """Start a flush of every log whose policy asks for one; the number started or queued."""
        now = self._time_ms() if now_ms is None else now_ms
        count = 0
        for log_ in list(self._logs()):
            if log_.flush_wanted(now):
                self.request(log_)
                count += 1
        return count

    def watch(self, log_: Log, on_flushed: Callable[[], None]) -> None:
        """Call `on_flushed` each time a job advances `log_`'s recovery point (before acks are released)."""
        self._watchers[log_] = on_flushed

    def forget(self, log_: Log) -> None:
        self._watchers.pop(log_, None)

    def busy(self, log_: Log) -> bool:
        """A flush job of `log_` runs in a worker now."""
        return log_ in self._running

    def _notify(self, log_: Log) -> None:
        watcher = self._watchers.get(log_)
        if watcher is not None:
            watcher()

    def request(self, log_: Log) -> None:
        """Flush `log_` up to its current end: now, or right after the job already running."""
        if log_ in self._running:
            self._again.add(log_)
        else:
            self._start(log_)

    def _start(self, log_: Log) -> None:
        job = log_.begin_flush()
        if job is None:
            self._settle(log_)
            return
        self.jobs_started += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (tools, synchronous tests): flush here and now
            try:
                job.run()
            except BaseException:
                log_.fail_flush(job)
                raise
            log_.complete_flush(job)
            self._notify(log_)
            return
        future = loop.run_in_executor(self._executor, job.run)
        self._running[log_] = future
        future.add_done_callback(partial(self._finished, log_, job))

    def _finished(self, log_: Log, job: FlushJob, future: asyncio.Future[None]) -> None:
        del self._running[log_]
        error = None if future.cancelled() else future.exception()
        if future.cancelled() or error is not None:
            log_.fail_flush(job)
            self._again.discard(log_)
            log.error("fsync of %r failed: %r", log_, error)
            self._settle(log_, failed=True)
            return
        log_.complete_flush(job)
        self._notify(log_)
        self._settle(log_)
        if log_ in self._again:
            self._again.discard(log_)
            self._start(log_)

    async def wait_durable(self, log_: Log, end_offset: int) -> None:
        """Return once every offset below `end_offset` is fsynced; KafkaError(KAFKA_STORAGE_ERROR)
        if the fsync fails."""
        if log_.recovery_point >= end_offset:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(log_, []).append((end_offset, future))
        if log_ not in self._running:
            self.request(log_)
        await future

    def _settle(self, log_: Log, *, failed: bool = False) -> None:
        """Answer the waiters the recovery point now covers (and, after a failure, all others)."""
        waiters = self._waiters.pop(log_, [])
        pending = []
        for end_offset, future in waiters:
            if future.done():
                continue
            if log_.recovery_point >= end_offset:
                future.set_result(None)
            elif failed:
                future.set_exception(KafkaError(ErrorCode.kafka_storage_error, f"fsync of {log_!r} failed"))
            else:
                pending.append((end_offset, future))
        if pending:
            self._waiters[log_] = pending

    async def stop(self) -> None:
        """Cancel the periodic pass and wait for running jobs (their logs are closed next)."""
        if self._task is not None:
            self._task.cancel()
        self._again.clear()
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)
