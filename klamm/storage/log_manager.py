"""All partition logs of a broker across its log directories (Kafka's LogManager).

Layout of each log directory (Kafka's):

    <topic>-<partition>/                   one Log each (klamm.storage.log)
    <topic>-<partition>.<uuidhex>-delete/  a deleted log not yet removed
    <uuidhex>-future/<topic>-<partition>/  a replica being moved here from another log dir (AlterReplicaLogDirs);
                                           removed at startup: the move starts again when asked again
    recovery-point-offset-checkpoint       offset checkpoint: per log, offsets below are fsynced
    log-start-offset-checkpoint            offset checkpoint: per log, its log start offset
    cleaner-offset-checkpoint              offset checkpoint: per compacted log, where its dirty
                                           section starts (written by klamm.storage.cleaner)
    .kafka_cleanshutdown                   present only between a clean shutdown and the next startup

A move ends by renaming the complete copy into place, marked complete first, and only
then detaching the old one; a startup that finds a partition in two log directories keeps
the one marked complete.

Invariants: a partition lives in exactly one log directory; the clean-shutdown
marker is deleted as soon as the logs are loaded, so a crash afterwards is
detected at the next startup and the logs are recovered from their recovery points.

The two offset checkpoints of a log dir are written by one CheckpointWriter thread
(klamm.storage.checkpoint_writer) when an event loop runs here, in the order their
snapshots were taken on the loop; without a running loop (tools, tests) they are
written at once. Paths that need them on disk before going on (startup, shutdown,
a log recreated under a deleted one's name, a move's promotion) wait for the writer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

from klamm.steps import Steps, each_value, in_slices, run_steps
from klamm.storage.checkpoint import (
    CorruptCheckpoint,
    fsync_dir,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from klamm.storage.checkpoint_writer import CheckpointWriter, DirCheckpoints, DirRename, Offsets
from klamm.storage.config import LogConfig
from klamm.storage.log import Log, _wall_clock_ms, parse_log_dir_name

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
STRAY_SUFFIX = "-stray"  # Kafka's: a log set aside as no topic's, kept for the operator (never loaded nor deleted)
FUTURE_SUFFIX = "-future"
CLOSING_THREADS = 8  # logs closed at once at shutdown
TAKE_SLICE_S = 0.0005  # how long create_logs queues names, or attaches the logs made, at a time: a turn of the loop
CHECKPOINT_SLICE_S = 0.0005  # how long checkpoint_in_slices reads logs' offsets at a time, a turn of the loop
LOGS_A_STEP = 64  # the logs whose offsets it reads a step (under 1 us each)
MOVED_MARKER = "klamm-moved-replica"  # in a moved log's directory until the old copy is detached

logger = logging.getLogger(__name__)


class LogManager:
    def __init__(
        self, log_dirs: list[Path], default_config: LogConfig, *, time_ms: Callable[[], int] = _wall_clock_ms
    ) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self._time_ms = time_ms
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_dir_of: dict[tuple[str, int], Path] = {}
        # The logs of each log dir, kept by _attach/_detach beside the two maps above: choosing a new log's
        # dir and writing one dir's checkpoints then cost the logs of that dir, not a walk of every log.
        self._logs_in: dict[Path, dict[tuple[str, int], Log]] = {log_dir: {} for log_dir in self.log_dirs}
        # Log dirs where delete_log renamed a log away since their checkpoints were last snapshotted: submitted
        # once for all the deletions of one event-loop turn (see delete_log).
        self._deleted_in: set[Path] = set()
        # Their renames, made by the checkpoint writer before it fsyncs the dir (see delete_log).
        self._renames: dict[Path, list[DirRename]] = {}
        self._write_scheduled_on: asyncio.AbstractEventLoop | None = None
        self._writer = CheckpointWriter(_write_dir_checkpoints)
        # Logs deleted since the writer was last seen idle: their offsets may still be in a checkpoint on disk,
        # so create_log waits for the writer before recreating one of these names.
        self._deleted_unwritten: set[tuple[str, int]] = set()
        # Logs create_logs is making in another thread: their log dir, and the batch they are made in.
        self._creating: dict[tuple[str, int], tuple[Path, _Creation]] = {}
        # Logs found in the log dirs at startup (until deleted): those only can be a deleted topic's strays.
        self._found_at_start: set[tuple[str, int]] = set()
        # Per log dir, how often a log was detached from it or its checkpoints snapshotted: a snapshot taken in
        # steps (checkpoint_in_slices) that saw this move is taken again in one go.
        self._dir_changes: dict[Path, int] = {}

    # -- startup and shutdown ----------------------------------------------------

    def startup(self, configs: Callable[[str], LogConfig] | None = None) -> None:
        """Load every `<topic>-<partition>` directory of every log dir (config per topic from `configs`)."""
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
        self._settle_moves()
        for log_dir in self.log_dirs:
            self._load_dir(log_dir, configs or (lambda topic: self.default_config))

    def _settle_moves(self) -> None:
        """Finish what a crash cut short in promote_future_log: the copy marked complete wins."""
        found: dict[tuple[str, int], list[Path]] = {}
        for log_dir in self.log_dirs:
            for path in sorted(log_dir.iterdir()):
                if path.is_dir() and path.name.endswith(FUTURE_SUFFIX):
                    shutil.rmtree(path, ignore_errors=True)  # a copy still under way
                elif path.is_dir() and (parsed := parse_log_dir_name(path.name)) is not None:
                    found.setdefault(parsed, []).append(path)
        for paths in found.values():
            complete = [path for path in paths if (path / MOVED_MARKER).exists()]
            if complete and len(paths) > 1:
                for path in paths:
                    if path not in complete:
                        path.rename(path.with_name(f"{path.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"))
                        fsync_dir(path.parent)
            for path in complete:
                (path / MOVED_MARKER).unlink()

    def _load_dir(self, log_dir: Path, configs: Callable[[str], LogConfig]) -> None:
        marker = log_dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        recovery_points = _read_checkpoint_or_empty(log_dir / RECOVERY_POINT_CHECKPOINT)
        start_offsets = _read_checkpoint_or_empty(log_dir / LOG_START_OFFSET_CHECKPOINT)
        for path in sorted(log_dir.iterdir()):
            if not path.is_dir():
                continue
            if path.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(path, ignore_errors=True)  # a deletion interrupted by a crash
                continue
            if path.name.endswith(STRAY_SUFFIX):
                logger.warning("a stray log is kept aside in %s (set_aside): remove it once it is not wanted", path)
                continue
            parsed = parse_log_dir_name(path.name)
            if parsed is None:
                continue
            if parsed in self._logs:
                raise RuntimeError(f"{parsed[0]}-{parsed[1]} exists in both {self._log_dir_of[parsed]} and {log_dir}")
            log = Log.open(
                path,
                configs(parsed[0]),
                recovery_point=recovery_points.get(parsed, 0),
                log_start_offset=start_offsets.get(parsed, 0),
                clean_shutdown=clean,
                time_ms=self._time_ms,
            )
            self._attach(parsed, log, log_dir)
            self._found_at_start.add(parsed)
        # Checkpoint what recovery established before dropping the marker, then drop it so
        # that a crash from here on is seen as unclean.
        self._write_now(log_dir)
        marker.unlink(missing_ok=True)
        fsync_dir(log_dir)

    def shutdown(self) -> None:
        """Flush and close every log (several at once: each close is a few fsyncs, and a broker hosting
        thousands of logs would wait for them one after another), write the checkpoints after those still
        queued, stop the writer's thread, then mark each log dir clean."""
        for key in list(self._creating):  # made for a creation the broker stopped waiting for: closed too
            try:
                self._take_created(key)
            except Exception:  # noqa: BLE001  # never made: nothing to close
                pass
        logs = list(self._logs.values())
        if len(logs) > 1:
            with ThreadPoolExecutor(min(CLOSING_THREADS, len(logs)), thread_name_prefix="klamm-log-close") as pool:
                list(pool.map(Log.close, logs))  # raises the first failure, after every close has run
        elif logs:
            logs[0].close()
        try:
            for log_dir in self.log_dirs:
                self._write_now(log_dir)
        finally:
            self._writer.close()
        for log_dir in self.log_dirs:
            marker = log_dir / CLEAN_SHUTDOWN_FILE
            marker.write_text(json.dumps({"version": 0, "brokerEpoch": -1}))
            fsync_dir(log_dir)
        self._logs.clear()
        self._log_dir_of.clear()
        for logs in self._logs_in.values():
            logs.clear()

    # -- lookup, creation, deletion ------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[Log]:
        return list(self._logs.values())

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The log of (topic, partition), created in the least loaded log dir if it does not exist."""
        key = (topic, partition)
        existing = self._logs.get(key)
        if existing is not None:
            return existing
        if key in self._creating:  # being made in create_logs' thread: wait for it rather than make it twice
            return self._take_created(key)
        # A log recreated under a deleted one's name must not meet that one's offsets in a checkpoint at restart,
        # nor its directory, if the rename was not durable yet.
        if key in self._deleted_unwritten:
            self.wait_for_checkpoints()
        log_dir = self._least_loaded_dir()
        log = Log.open(
            log_dir / f"{topic}-{partition}",
            config or self.default_config,
            clean_shutdown=True,
            time_ms=self._time_ms,
        )
        self._attach(key, log, log_dir)
        return log

    async def create_logs(self, wanted: Sequence[tuple[str, int, LogConfig]], executor: Executor,
                          topic_ids: Mapping[str, uuid.UUID] | None = None) -> None:
        """Create the logs of `wanted` (topic, partition, config) that do not exist yet, their directories and
        files made by `executor` while the event loop goes on (each takes a few hundred microseconds of system
        calls: a topic of a thousand partitions held the loop for a second), each with the id `topic_ids` gives
        its topic in its partition.metadata. Until one is made, create_log of its name waits for it. A name
        deleted since the checkpoints were last written is left to create_log. Names another call is making
        are waited for too (a create_log of them then does not wait on the loop). The names are handed to the
        thread, and the logs made attached, a slice of the loop at a time."""
        pending = {log_dir: 0 for log_dir in self.log_dirs}
        loop = asyncio.get_running_loop()
        batches: list[_Creation] = []  # one a turn of the loop, each handed to the thread before the loop goes on
        batch = _Creation(topic_ids or {})
        others: set[_Creation] = set()  # other calls' batches making some of these names
        stop = time.perf_counter() + TAKE_SLICE_S
        for topic, partition, config in wanted:
            if time.perf_counter() >= stop:
                # Every name queued so far is in a batch the thread has: a create_log of one, run while this
                # call waits, then waits for that thread, never for this call.
                if batch.wanted:
                    batches.append(batch.submit(loop, executor, self._time_ms))
                    batch = _Creation(topic_ids or {})
                await asyncio.sleep(0)
                stop = time.perf_counter() + TAKE_SLICE_S
            key = (topic, partition)
            if key in self._creating:
                others.add(self._creating[key][1])
                continue
            if key in self._logs or key in self._deleted_unwritten:
                continue
            log_dir = self._least_loaded_dir(pending)
            pending[log_dir] += 1
            self._creating[key] = (log_dir, batch)
            batch.wanted.append((key, log_dir, config))
        if batch.wanted:
            batches.append(batch.submit(loop, executor, self._time_ms))
        # Shielded: a creation the caller stops waiting for still ends, and shutdown closes its logs.
        for other in others - set(batches):
            if other.future is not None:
                await asyncio.shield(other.future)
        for made in batches:
            assert made.future is not None
            await asyncio.shield(made.future)
        stop = time.perf_counter() + TAKE_SLICE_S
        for made in batches:
            for key, _, _ in made.wanted:
                if self._creating.get(key, (None, None))[1] is made:  # not taken meanwhile by create_log
                    try:
                        self._take_created(key)
                    except Exception as exc:  # noqa: BLE001  # the name stays free: create_log tries again, and raises
                        logger.warning("could not create the log of %s-%d: %s", key[0], key[1], exc)
                if time.perf_counter() >= stop:
                    await asyncio.sleep(0)
                    stop = time.perf_counter() + TAKE_SLICE_S

    def _take_created(self, key: tuple[str, int]) -> Log:
        """Attach the log create_logs made for `key` (waiting for it), or raise why it could not be made."""
        log_dir, batch = self._creating.pop(key)
        batch.done.wait()
        made = batch.made[key]
        if isinstance(made, Exception):
            raise made
        self._attach(key, made, log_dir)
        return made

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._log_dir_of.get((topic, partition))

    def create_future_log(self, topic: str, partition: int, log_dir: Path, config: LogConfig) -> Log:
        """An empty log for (topic, partition) in `log_dir`, staged aside until promote_future_log."""
        staging = log_dir / f"{uuid.uuid4().hex}{FUTURE_SUFFIX}"
        return Log.open(staging / f"{topic}-{partition}", config, clean_shutdown=True, time_ms=self._time_ms)

    def discard_future_log(self, future: Log) -> None:
        future.delete()
        shutil.rmtree(future.directory.parent, ignore_errors=True)

    def promote_future_log(self, future: Log) -> tuple[Log, Log | None]:
        """Make the complete copy `future` its partition's log: (the reopened log, the old one, detached as
        delete_log detaches, for the caller to delete later)."""
        key = (future.topic, future.partition)
        staging, config, end, start = future.directory.parent, future.config, future.log_end_offset, \
            future.log_start_offset
        log_dir = staging.parent
        future.close()
        marker = future.directory / MOVED_MARKER
        marker.write_bytes(b"")
        fsync_dir(future.directory)
        final = log_dir / future.directory.name
        future.directory.rename(final)
        fsync_dir(log_dir)
        staging.rmdir()
        old = self.delete_log(*key)
        # The old copy's rename durable before the new one loses its mark: two unmarked copies stop a restart.
        self.wait_for_checkpoints()
        log = Log.open(final, config, recovery_point=end, log_start_offset=start, clean_shutdown=True,
                       time_ms=self._time_ms)
        (final / MOVED_MARKER).unlink()
        self._attach(key, log, log_dir)
        self._write_now(log_dir)
        return log, old

    def _least_loaded_dir(self, pending: Mapping[Path, int] | None = None) -> Path:
        """The log dir holding the fewest logs, counting those `pending` there (the first of them in log.dirs
        order)."""
        if len(self.log_dirs) == 1:
            return self.log_dirs[0]
        return min(self.log_dirs, key=lambda d: len(self._logs_in.get(d, ())) + (pending or {}).get(d, 0))

    def _attach(self, key: tuple[str, int], log: Log, log_dir: Path) -> None:
        self._logs[key] = log
        self._log_dir_of[key] = log_dir
        self._logs_in.setdefault(log_dir, {})[key] = log

    def found_at_start(self, topic: str, partition: int) -> bool:
        """Whether the log of (topic, partition) was in a log dir at startup, rather than made since."""
        return (topic, partition) in self._found_at_start

    def _detach(self, key: tuple[str, int]) -> tuple[Log | None, Path | None]:
        self._found_at_start.discard(key)
        log = self._logs.pop(key, None)
        log_dir = self._log_dir_of.pop(key, None)
        if log_dir is not None:
            self._logs_in[log_dir].pop(key, None)
            self._dir_changes[log_dir] = self._dir_changes.get(log_dir, 0) + 1
        return log, log_dir

    def set_aside(self, topic: str, partition: int) -> Path | None:
        """Detach the log and rename its directory to `<name>.<uuid>-stray`, its files closed and kept: where it
        went, or None if absent. Kafka sets a stray log aside so, rather than delete it: whatever made it a
        stray, its records stay for the operator to look at or remove."""
        log = self.delete_log(topic, partition, suffix=STRAY_SUFFIX)
        if log is None:
            return None
        log.release()
        return log.directory

    def delete_log(self, topic: str, partition: int, submit: bool = True, suffix: str = DELETE_SUFFIX) -> Log | None:
        """Detach the log and rename its directory to `<name>.<uuid>-delete` (atomic); None if absent.

        The files stay open and in place under the new name: the caller removes them with
        the returned log's `delete()` after file.delete.delay.ms, off the event loop, and
        reads in flight keep their leases until then (klamm.storage.shared_file).
        A crash before that leaves a `-delete` directory, removed at the next startup.

        On an event loop, the rename itself, its durability (a directory fsync) and the log dir's offset
        checkpoints rewritten without the log are the writer thread's, from one snapshot for all the logs
        deleted in the same turn of the loop (a topic of P partitions removed by one metadata image: one
        snapshot, not P of O(logs) each), taken in a callback scheduled right away or by any checkpoint of the
        dir before it. The log's `directory` names the new place at once; its `delete()` makes the rename first
        if the writer has not yet.
        A caller deleting logs over several turns of the loop passes `submit` False, and calls submit_deletions
        after the last: one snapshot for them all.
        Without a running loop, all at once. Until written, a crash can bring the log back, as a crash just
        before the rename could; create_log waits for the write (and so the rename) before recreating the name.
        """
        log, log_dir = self._detach((topic, partition))
        if log is None or log_dir is None:
            return None
        if not self._deleted_in and not self._writer.busy and not self._writer.failed:
            self._deleted_unwritten.clear()  # all written: forget them
        source = log.directory
        # 32 random hex digits as Kafka's uuid without dashes; os.urandom alone: uuid4's object cost the loop
        # 15-30 us a partition of a deleted topic
        renamed = source.parent / f"{source.name}.{os.urandom(16).hex()}{suffix}"
        log.stop_writes()  # a flush job in flight writes nothing under the old name, which a new log may take
        log.directory = renamed  # its delete() must not remove a topic recreated under the old name
        self._deleted_in.add(log_dir)
        self._deleted_unwritten.add((topic, partition))
        loop = _running_loop()
        if loop is None:
            source.rename(renamed)
            self.submit_deletions()
        else:  # renamed by the checkpoint writer before it fsyncs the dir, or by the log's removal if that is first
            rename = DirRename(source, renamed)
            log.pending_rename = rename.run
            self._renames.setdefault(log_dir, []).append(rename)
            if submit and self._write_scheduled_on is not loop:
                self._write_scheduled_on = loop
                loop.call_soon(self.submit_deletions)
        return log

    def submit_deletions(self) -> None:
        """Checkpoint the log dirs delete_log renamed logs in (their renames fsynced first)."""
        self._write_scheduled_on = None
        for log_dir in list(self._deleted_in):
            self._write(log_dir)

    # -- checkpoints -------------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write the recovery-point and log-start-offset checkpoints of every log dir: on an event loop,
        snapshotted here and written by the writer thread; without one, at once."""
        for log_dir in self.log_dirs:
            self._write(log_dir)

    async def checkpoint_in_slices(self) -> None:
        """checkpoint() on an event loop, each log dir's offsets read CHECKPOINT_SLICE_S of the loop a turn (10,000
        logs: 4-6 ms). If a log left the dir meanwhile (deleted, replaced, moved), or another snapshot of it was
        taken, they are read again in one go: the old log's offsets must not be written with the rename its
        deletion left, nor older offsets after newer ones."""
        for log_dir in self.log_dirs:
            changes = self._dir_changes.get(log_dir, 0)
            offsets = await in_slices(self._offsets_in(log_dir), CHECKPOINT_SLICE_S)
            if self._dir_changes.get(log_dir, 0) != changes:
                offsets = run_steps(self._offsets_in(log_dir))
            self._writer.submit(log_dir, self._snapshot(log_dir, offsets))

    def _offsets_in(self, log_dir: Path) -> Steps[tuple[Offsets, Offsets]]:
        """The recovery point and log start offset of each log of `log_dir`, LOGS_A_STEP logs a step."""
        recovery_points: Offsets = {}
        start_offsets: Offsets = {}

        def take(log: Log) -> None:
            key = (log.topic, log.partition)
            recovery_points[key] = log.recovery_point
            start_offsets[key] = log.log_start_offset

        yield from each_value(self._logs_in.get(log_dir, {}), LOGS_A_STEP, take)
        return recovery_points, start_offsets

    def _write(self, log_dir: Path) -> None:
        if _running_loop() is None:
            self._write_now(log_dir)
        else:
            self._writer.submit(log_dir, self._snapshot(log_dir))

    def _write_now(self, log_dir: Path) -> None:
        """Write on this thread, after the writes still queued (blocks: startup, shutdown and rare paths)."""
        self._writer.write_now(log_dir, self._snapshot(log_dir))

    def wait_for_checkpoints(self) -> None:
        """Block until every checkpoint write so far is on disk; those that failed in the writer are written
        again here, so that their error is raised to the caller."""
        self.submit_deletions()
        for log_dir in self._writer.drain():
            self._write_now(log_dir)
        self._deleted_unwritten.clear()

    def _snapshot(self, log_dir: Path, offsets: tuple[Offsets, Offsets] | None = None) -> DirCheckpoints:
        """What the dir's checkpoints are to hold: `offsets` (read now if not given), and the renames to make
        before they are written."""
        self._dir_changes[log_dir] = self._dir_changes.get(log_dir, 0) + 1
        renamed = log_dir in self._deleted_in  # renamed logs not in the checkpoints must be gone at restart too
        self._deleted_in.discard(log_dir)
        recovery_points, start_offsets = offsets if offsets is not None else run_steps(self._offsets_in(log_dir))
        return DirCheckpoints(recovery_points, start_offsets, renamed, tuple(self._renames.pop(log_dir, ())))


def _write_dir_checkpoints(log_dir: Path, checkpoints: DirCheckpoints) -> None:
    """Write one log dir's offset checkpoints (in the writer thread, or on the caller's when it must wait)."""
    for rename in checkpoints.renames:
        rename.run()
    if checkpoints.renamed or checkpoints.renames:
        fsync_dir(log_dir)
    write_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT, checkpoints.recovery_points)
    write_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT, checkpoints.start_offsets)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _read_checkpoint_or_empty(path: Path) -> dict[tuple[str, int], int]:
    """A corrupt checkpoint is not fatal: recovering from offset 0 is slow but safe."""
    try:
        return read_offset_checkpoint(path)
    except CorruptCheckpoint:
        logger.warning("ignoring corrupt checkpoint %s", path)
        return {}


class _Creation:
    """New logs create_logs has made in another thread: each name's log, or why it could not be made."""

    __slots__ = ("wanted", "made", "done", "topic_ids", "future")

    def __init__(self, topic_ids: Mapping[str, uuid.UUID]) -> None:
        self.topic_ids = topic_ids
        self.future: asyncio.Future[None] | None = None  # the thread's work, once submitted
        self.wanted: list[tuple[tuple[str, int], Path, LogConfig]] = []  # (name, its log dir, config)
        self.made: dict[tuple[str, int], Log | Exception] = {}
        self.done = threading.Event()

    def submit(self, loop: asyncio.AbstractEventLoop, executor: Executor, time_ms: Callable[[], int]) -> _Creation:
        self.future = loop.run_in_executor(executor, self.make, time_ms)
        return self

    def make(self, time_ms: Callable[[], int]) -> None:
        try:
            for key, log_dir, config in self.wanted:
                try:  # the path made here: a pathlib join costs the loop a few microseconds a log
                    made = self.made[key] = Log.open(log_dir / f"{key[0]}-{key[1]}", config, clean_shutdown=True,
                                                     time_ms=time_ms)
                    topic_id = self.topic_ids.get(key[0])
                    if topic_id is not None:
                        made.record_topic_id(topic_id)
                except Exception as exc:  # noqa: BLE001  # raised to whoever takes the log
                    self.made[key] = exc
        finally:
            self.done.set()
