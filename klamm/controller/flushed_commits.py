"""A single voter's writes whose fsync runs beside the event loop.

A single controller's commit appended its batch to `__cluster_metadata` and fsynced the log before it
published the new image, on the event loop. That fsync is the disk's: while a topic of many partitions
is created, the filesystem's journal holds every new directory and file, and the metadata log's fsync
waited for all of them (120 ms measured on this project's machine), with every client's requests
stopped behind it.

The writes a client asks for (LocalControllerClient: CreateTopics, DeleteTopics, configs, ACLs...) now
append without the fsync (Controller.commits_flushed_later). The log's flush job runs in a worker thread,
and the image is published only when it is done: as in Kafka, where a single voter's high watermark is
the end of what it flushed and brokers see only what is committed. The client is answered then.
Writes made synchronously meanwhile (a broker's heartbeat, an internal topic's creation) fsync the whole
log on the loop as before and publish everything, these too: nothing is published before it is durable.
A quorum's controller commits through Raft, whose driver flushes: there `write` only calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TypeVar

from klamm.controller.controller import Controller
from klamm.controller.metadata_log import FileMetadataLog

T = TypeVar("T")

__all__ = ["FlushedCommits"]


class FlushedCommits:
    def __init__(self, controller: Controller, executor: Executor) -> None:
        self._controller = controller
        self._executor = executor
        # One flush job at a time: each covers every append before it (writes that came during the last one's
        # fsync share the next), and the committed end moves only over finished jobs.
        self._flushing = asyncio.Lock()

    async def write(self, call: Callable[[], T]) -> T:
        """`call` (a controller write), answered once what it committed is fsynced and published."""
        log = self._controller.log
        if not isinstance(log, FileMetadataLog):  # a quorum's (Raft's driver flushes) or a test's in-memory log
            return call()
        end = log.end_offset
        try:
            with self._controller.commits_flushed_later():
                return call()
        finally:
            if log.end_offset > end:
                # Shielded: a request given up still has its records made durable and published.
                await asyncio.shield(self._make_durable(log, log.end_offset))

    async def _make_durable(self, log: FileMetadataLog, end: int) -> None:
        """Until the log is fsynced below `end`; then publish what is."""
        async with self._flushing:
            if log.committed_end_offset >= end:  # a job or an inline flush covered it meanwhile
                self._controller.publish_committed(log.committed_end_offset)
                return
            job = log.begin_flush()
            if job is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(self._executor, job.run)
                except BaseException:
                    log.fail_flush(job)
                    raise
                log.complete_flush(job)
            self._controller.publish_committed(log.committed_end_offset)
            self._controller.maybe_snapshot()
