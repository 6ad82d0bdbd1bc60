"""One thread that writes a LogManager's offset checkpoints, off the event loop, in submission order.

Each write of a log dir's offset checkpoints is a `DirCheckpoints`: the offsets the dir's two files should
hold, snapshotted on the submitting thread, so every write is one consistent state and writes land in the
order the state changed. Consecutive writes of one dir still waiting are coalesced: only the latest
snapshot is written, but if any of them followed a rename in the dir (a deleted log), the dir is fsynced
first, so that the rename is durable before a checkpoint without the log is. The renames of deleted logs
made on an event loop are made here too, first (`DirRename`): each is a journaled metadata change that
took a fifth of a millisecond or more, and a topic of a thousand partitions held the loop that long a
thousand times.

Invariants: writes of one dir land in submission order (one worker thread, FIFO); after `drain()` every
write submitted before it has been attempted. A write that fails is logged and the dir is remembered as
failed: its next write (any later snapshot of it is complete) fsyncs the dir first too, and `drain()`
names it, so a caller that needs it on disk can write it again on its own thread and see the error.
Kafka marks the log dir offline on such an IOException; klamm does not (yet): it keeps serving from it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

Offsets = dict[tuple[str, int], int]


class DirRename:
    """A deleted log's directory, renamed away by the writer before the dir's fsync (LogManager.delete_log), or
    by the log's removal if that comes first (Log.delete): made once, by whichever runs it first."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self._lock = threading.Lock()
        self._made = False

    def run(self) -> None:
        with self._lock:
            if self._made:
                return
            if self.source.exists():  # not if the log dir itself is gone
                self.source.rename(self.target)
            self._made = True  # not if the rename raised: the dir's next write tries it again


@dataclass(frozen=True)
class DirCheckpoints:
    """What one log dir's offset checkpoints are to hold."""

    recovery_points: Offsets
    start_offsets: Offsets
    renamed: bool = False  # logs were renamed away in the dir since its last write: fsync it first
    renames: tuple[DirRename, ...] = ()  # renames to make first (then the dir is fsynced too)

    def then(self, later: DirCheckpoints) -> DirCheckpoints:
        """This write coalesced with a later one of the same dir: the later offsets, every rename and fsync."""
        return DirCheckpoints(later.recovery_points, later.start_offsets, self.renamed or later.renamed,
                              self.renames + later.renames)


class CheckpointWriter:
    """Writes submitted DirCheckpoints with `write` in one worker thread, started on the first submit.

    Its methods are called from one thread (the event loop's, or a tool's): only the writes run in the worker.
    """

    def __init__(self, write: Callable[[Path, DirCheckpoints], None]) -> None:
        self._write = write
        self._lock = threading.Lock()
        self._waiting: dict[Path, DirCheckpoints] = {}  # submitted, not yet taken by the worker
        self._failed: dict[Path, DirCheckpoints] = {}  # dirs whose last write failed, with what it held
        self._executor: ThreadPoolExecutor | None = None
        self._last: Future[None] | None = None  # the last job queued: FIFO, so all before it are done with it

    def submit(self, log_dir: Path, checkpoints: DirCheckpoints) -> None:
        """Queue a write of `log_dir`'s checkpoints; returns at once."""
        with self._lock:
            waiting = self._waiting.get(log_dir)
            if waiting is not None:
                self._waiting[log_dir] = waiting.then(checkpoints)
                return
            self._waiting[log_dir] = checkpoints
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="klamm-checkpoints")
        self._last = self._executor.submit(self._run, log_dir)

    def write_now(self, log_dir: Path, checkpoints: DirCheckpoints) -> None:
        """Write on the calling thread, after everything submitted before (blocks); an error is raised here."""
        self.drain()
        with self._lock:
            failed = self._failed.get(log_dir)
        if failed is not None:
            checkpoints = failed.then(checkpoints)
        try:
            self._write(log_dir, checkpoints)
        except Exception:
            with self._lock:
                self._failed[log_dir] = checkpoints
            raise
        with self._lock:
            self._failed.pop(log_dir, None)

    def drain(self) -> list[Path]:
        """Block until every write submitted so far has been attempted; the dirs whose last write failed."""
        last = self._last
        if last is not None:
            last.result()
        with self._lock:
            return list(self._failed)

    @property
    def busy(self) -> bool:
        """A submitted write has not been attempted yet."""
        return self._last is not None and not self._last.done()

    @property
    def failed(self) -> bool:
        """The last write of some dir failed (and no write of it has succeeded since)."""
        with self._lock:
            return bool(self._failed)

    def close(self) -> None:
        """Drain, then stop the worker thread (a later submit starts another)."""
        self.drain()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._last = None

    def _run(self, log_dir: Path) -> None:
        with self._lock:
            checkpoints = self._waiting.pop(log_dir)
            failed = self._failed.pop(log_dir, None)
        if failed is not None:
            checkpoints = failed.then(checkpoints)
        try:
            self._write(log_dir, checkpoints)
        except Exception:  # noqa: BLE001  # the next write of the dir tries again; later ones must not be lost
            logger.exception("writing the offset checkpoints of %s failed; the next write of it tries again", log_dir)
            with self._lock:
                self._failed[log_dir] = checkpoints
