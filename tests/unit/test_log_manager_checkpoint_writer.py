"""LogManager's offset checkpoints on an event loop: written by one thread off the loop, in the order their
snapshots were taken, coalesced while waiting, drained where order against the disk matters (klamm issue 14)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path

from klamm.broker.broker import Broker
from klamm.config.broker import BrokerConfig
from klamm.storage import log_manager as log_manager_module
from klamm.storage.checkpoint import read_offset_checkpoint
from klamm.storage.log import LogConfig
from klamm.storage.log_manager import (
    LOG_START_OFFSET_CHECKPOINT,
    MOVED_MARKER,
    RECOVERY_POINT_CHECKPOINT,
    LogManager,
)
from tests.unit.test_log_manager_deletions import _manager  # "gone" 0.. and "kept" 0 over two dirs, checkpointed

WRITER_THREAD = "klamm-checkpoints"


class Recorder:
    """Records every checkpoint file write and pre-write directory fsync of log_manager with its thread; in the
    writer thread it can hold the first write until `release` is set, slow every write, or fail the first."""

    def __init__(self, monkeypatch, *, hold: bool = False, delay_s: float = 0.0, fail_first: bool = False) -> None:
        self.calls: list[tuple[str, str, threading.Thread]] = []  # (kind, dir or file name, thread)
        self.holding = threading.Event()
        self.release = threading.Event()
        self.failures = 0
        self._hold, self._delay_s, self._fail_first = hold, delay_s, fail_first
        write, fsync = log_manager_module.write_offset_checkpoint, log_manager_module.fsync_dir

        def recorded_write(path, offsets):
            if threading.current_thread().name.startswith(WRITER_THREAD):
                self._in_writer()
            self.calls.append(("write", f"{path.parent.name}/{path.name}", threading.current_thread()))
            write(path, offsets)

        def recorded_fsync(directory):
            self.calls.append(("fsync", directory.name, threading.current_thread()))
            fsync(directory)

        monkeypatch.setattr(log_manager_module, "write_offset_checkpoint", recorded_write)
        monkeypatch.setattr(log_manager_module, "fsync_dir", recorded_fsync)

    def _in_writer(self) -> None:
        if self._hold and not self.holding.is_set():
            self.holding.set()
            assert self.release.wait(10)
        if self._fail_first and self.failures == 0:
            self.failures += 1
            raise OSError(5, "Input/output error")
        time.sleep(self._delay_s)

    def threads(self) -> set[threading.Thread]:
        return {thread for _, _, thread in self.calls}

    def in_writer(self) -> list[tuple[str, str]]:
        return [(kind, name) for kind, name, thread in self.calls if thread.name.startswith(WRITER_THREAD)]


def _on_disk(dirs, name: str) -> dict[tuple[str, int], int]:
    found: dict[tuple[str, int], int] = {}
    for log_dir in dirs:
        found.update(read_offset_checkpoint(log_dir / name))
    return found


async def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.001)


def test_on_a_loop_every_checkpoint_write_runs_in_the_writer_thread(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 2)
    recorder = Recorder(monkeypatch)

    async def run() -> threading.Thread:
        manager.delete_log("gone", 0)
        await asyncio.sleep(0)  # the turn's deletions submitted
        manager.checkpoint()  # the periodic job's call and the retention pass's
        manager.create_log("gone", 0)  # waits for the deletion's write, done by the writer all the same
        manager.delete_log("gone", 1)
        await asyncio.sleep(0)
        manager.wait_for_checkpoints()
        return threading.current_thread()

    loop_thread = asyncio.run(run())
    assert recorder.calls and loop_thread not in recorder.threads()
    assert {thread.name.split("_")[0] for thread in recorder.threads()} == {WRITER_THREAD}
    assert ("gone", 1) not in _on_disk(dirs, RECOVERY_POINT_CHECKPOINT)
    manager.shutdown()


def test_a_name_recreated_while_its_deletion_is_queued_never_meets_the_old_offsets(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 1)
    manager.get_log("gone", 0).truncate_fully_and_start_at(500)
    manager.checkpoint()
    assert _on_disk(dirs, LOG_START_OFFSET_CHECKPOINT)[("gone", 0)] == 500
    Recorder(monkeypatch, delay_s=0.05)  # every write in the writer thread is slow: the deletion's is queued

    async def recreate() -> None:
        manager.delete_log("gone", 0)
        await asyncio.sleep(0)  # submitted, still in the writer
        manager.create_log("gone", 0)
        # A crash now finds no start offset 500 for the new log's name.
        assert ("gone", 0) not in _on_disk(dirs, LOG_START_OFFSET_CHECKPOINT)

    asyncio.run(recreate())
    again = LogManager(dirs, LogConfig())
    again.startup()  # as after a crash right after the creation: the old offsets do not reach the new log
    assert again.get_log("gone", 0).log_start_offset == 0
    again.shutdown()
    manager.shutdown()


def test_writes_waiting_for_the_writer_are_coalesced(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 3)  # a: gone-0, gone-2; b: gone-1, kept-0
    recorder = Recorder(monkeypatch, hold=True)

    async def run() -> None:
        manager.checkpoint()  # the writer takes a's write and holds in it; b's waits
        await _until(recorder.holding.is_set)
        for p in range(3):
            manager.delete_log("gone", p)
            await asyncio.sleep(0)  # one snapshot a turn: a, b, a submitted behind the held write
        manager.get_log("kept", 0).truncate_fully_and_start_at(7)
        manager.checkpoint()
        recorder.release.set()
        manager.wait_for_checkpoints()

    asyncio.run(run())
    # The held write of a, then one of b and one of a holding the latest state, each after its dir's fsync.
    assert recorder.in_writer() == [
        ("write", f"a/{RECOVERY_POINT_CHECKPOINT}"), ("write", f"a/{LOG_START_OFFSET_CHECKPOINT}"),
        ("fsync", "b"), ("write", f"b/{RECOVERY_POINT_CHECKPOINT}"), ("write", f"b/{LOG_START_OFFSET_CHECKPOINT}"),
        ("fsync", "a"), ("write", f"a/{RECOVERY_POINT_CHECKPOINT}"), ("write", f"a/{LOG_START_OFFSET_CHECKPOINT}"),
    ]
    assert _on_disk(dirs, LOG_START_OFFSET_CHECKPOINT) == {("kept", 0): 7}
    assert _on_disk(dirs, RECOVERY_POINT_CHECKPOINT) == {("kept", 0): 7}
    manager.shutdown()


def test_shutdown_drains_the_queued_writes_then_writes_its_own_and_stops_the_thread(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 0)
    recorder = Recorder(monkeypatch, delay_s=0.05)

    async def run() -> None:
        manager.get_log("kept", 0).truncate_fully_and_start_at(5)
        manager.checkpoint()  # queued, slow
        manager.get_log("kept", 0).truncate_fully_and_start_at(9)
        manager.shutdown()  # on the loop, as Broker.stop calls it

    asyncio.run(run())
    writers = {thread for thread in recorder.threads() if thread.name.startswith(WRITER_THREAD)}
    assert writers and not any(thread.is_alive() for thread in writers)
    # Shutdown's own writes come last, so the queued older state does not land over them.
    assert [thread in writers for kind, _, thread in recorder.calls if kind == "write"] == [True] * 4 + [False] * 4
    assert _on_disk(dirs, LOG_START_OFFSET_CHECKPOINT) == {("kept", 0): 9}


def test_a_failed_write_is_logged_and_the_next_one_of_the_dir_fsyncs_and_lands(tmp_path, monkeypatch, caplog):
    manager, dirs = _manager(tmp_path, 1)  # a: gone-0; b: kept-0
    recorder = Recorder(monkeypatch, fail_first=True)

    async def run() -> None:
        manager.delete_log("gone", 0)
        await _until(lambda: recorder.failures == 1)  # the deletion's write of a failed in the writer
        await asyncio.sleep(0.01)
        manager.get_log("kept", 0).truncate_fully_and_start_at(3)
        manager.checkpoint()  # later writes are not lost, and a's is retried
        manager.wait_for_checkpoints()

    with caplog.at_level(logging.ERROR, logger="klamm.storage.checkpoint_writer"):
        asyncio.run(run())
    [error] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert str(dirs[0]) in error.getMessage() and isinstance(error.exc_info[1], OSError)
    assert recorder.in_writer() == [
        ("fsync", "a"),  # then its first write raised
        ("fsync", "a"), ("write", f"a/{RECOVERY_POINT_CHECKPOINT}"), ("write", f"a/{LOG_START_OFFSET_CHECKPOINT}"),
        ("write", f"b/{RECOVERY_POINT_CHECKPOINT}"), ("write", f"b/{LOG_START_OFFSET_CHECKPOINT}"),
    ]
    assert _on_disk(dirs, LOG_START_OFFSET_CHECKPOINT) == {("kept", 0): 3}
    manager.shutdown()


def test_a_name_recreated_after_its_deletion_write_failed_is_written_by_the_creator(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 1)
    manager.get_log("gone", 0).truncate_fully_and_start_at(500)
    manager.checkpoint()
    recorder = Recorder(monkeypatch, fail_first=True)

    async def recreate() -> threading.Thread:
        manager.delete_log("gone", 0)
        await _until(lambda: recorder.failures == 1)
        manager.create_log("gone", 0)  # the failed dir is written again here, raising if it fails again
        assert ("gone", 0) not in _on_disk(dirs, LOG_START_OFFSET_CHECKPOINT)
        return threading.current_thread()

    loop_thread = asyncio.run(recreate())
    assert [(kind, name) for kind, name, thread in recorder.calls if thread is loop_thread] == [
        ("fsync", "a"), ("write", f"a/{RECOVERY_POINT_CHECKPOINT}"), ("write", f"a/{LOG_START_OFFSET_CHECKPOINT}"),
    ]
    manager.shutdown()


def test_a_moves_promotion_makes_the_old_copys_rename_durable_before_the_new_copy_loses_its_mark(
        tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 1)  # gone-0 in a
    manager.get_log("gone", 0).truncate_fully_and_start_at(40)
    recorder = Recorder(monkeypatch, delay_s=0.05)  # the old dir's write still queued when the promotion goes on
    unlink = Path.unlink

    def recorded_unlink(path, *args, **kwargs):
        if path.name == MOVED_MARKER:
            recorder.calls.append(("unmark", path.parent.parent.name, threading.current_thread()))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", recorded_unlink)

    async def move() -> None:
        future = manager.create_future_log("gone", 0, dirs[1], LogConfig())
        future.truncate_fully_and_start_at(40)
        manager.promote_future_log(future)
        # A crash now: the partition is in b only, with its log start offset.
        assert _on_disk([dirs[0]], LOG_START_OFFSET_CHECKPOINT) == {}
        assert _on_disk([dirs[1]], LOG_START_OFFSET_CHECKPOINT) == {("gone", 0): 40, ("kept", 0): 0}

    asyncio.run(move())
    kinds = [(kind, name) for kind, name, _ in recorder.calls]
    assert kinds.index(("fsync", "a")) < kinds.index(("unmark", "b"))  # a's rename durable first
    manager.shutdown()


def test_a_broker_started_twice_writes_its_periodic_checkpoints_in_one_thread_it_stops(tmp_path):
    def running_writers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith(WRITER_THREAD)}

    before = running_writers()
    config = BrokerConfig.from_properties({"node.id": "1", "log.dirs": str(tmp_path / "data"),
                                           "listeners": "PLAINTEXT://127.0.0.1:0",
                                           "log.flush.offset.checkpoint.interval.ms": "20"})

    async def run_once() -> set[threading.Thread]:
        broker = Broker(config)
        await broker.start()
        try:
            await _until(lambda: running_writers() - before)  # the periodic checkpoint went to the writer
            return running_writers() - before
        finally:
            await broker.stop()

    for _ in range(2):
        started = asyncio.run(run_once())
        assert len(started) == 1 and not any(thread.is_alive() for thread in started)
    assert running_writers() - before == set()
