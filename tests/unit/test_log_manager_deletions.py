"""LogManager.delete_log on an event loop: the deletions of one loop turn fsync and rewrite the checkpoints once
(in the writer thread: tests/unit/test_log_manager_checkpoint_writer.py)."""

from __future__ import annotations

import asyncio
import threading

from klamm.storage import log_manager as log_manager_module
from klamm.storage.checkpoint import read_offset_checkpoint
from klamm.storage.log import LogConfig
from klamm.storage.log_manager import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, LogManager


def _counting(monkeypatch):
    calls = {"checkpoints": 0, "fsyncs": 0}
    write, fsync = log_manager_module.write_offset_checkpoint, log_manager_module.fsync_dir

    def counted_write(path, offsets):
        calls["checkpoints"] += 1
        write(path, offsets)

    def counted_fsync(directory):
        calls["fsyncs"] += 1
        fsync(directory)

    monkeypatch.setattr(log_manager_module, "write_offset_checkpoint", counted_write)
    monkeypatch.setattr(log_manager_module, "fsync_dir", counted_fsync)
    return calls


def _manager(tmp_path, partitions):
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, LogConfig())
    manager.startup()
    for p in range(partitions):
        manager.create_log("gone", p)
    manager.create_log("kept", 0)
    manager.checkpoint()
    return manager, dirs


def test_one_loop_turn_of_deletions_writes_each_dirs_checkpoints_once(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 20)
    calls = _counting(monkeypatch)

    async def delete_topic():
        detached = [manager.delete_log("gone", p) for p in range(20)]
        assert calls == {"checkpoints": 0, "fsyncs": 0}  # nothing yet: after this turn of the loop
        await asyncio.sleep(0)
        return detached

    detached = asyncio.run(delete_topic())
    manager.wait_for_checkpoints()  # they were written by the writer thread
    assert calls == {"checkpoints": 4, "fsyncs": 2}  # per dir: one fsync of its renames, its two checkpoints
    for log_dir in dirs:
        for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT):
            assert not any(topic == "gone" for topic, _ in read_offset_checkpoint(log_dir / name))
    for log in detached:
        assert log.directory.name.endswith("-delete")

    # A crash now (no shutdown): the deleted logs do not come back, the other one does.
    again = LogManager(dirs, LogConfig())
    again.startup()
    assert [(log.topic, log.partition) for log in again.all_logs()] == [("kept", 0)]
    assert not any(path.name.endswith("-delete") for d in dirs for path in d.iterdir())


def test_a_log_recreated_in_the_same_turn_writes_the_deletions_first(tmp_path):
    manager, dirs = _manager(tmp_path, 2)
    manager.get_log("gone", 0).truncate_fully_and_start_at(500)
    manager.checkpoint()

    async def recreate():
        manager.delete_log("gone", 0)
        manager.delete_log("gone", 1)
        manager.create_log("gone", 0)  # the checkpoints must not still hold the old one's start offset 500
        for log_dir in dirs:  # as a crash would find them, before this turn of the loop ends
            assert ("gone", 0) not in read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)

    asyncio.run(recreate())
    again = LogManager(dirs, LogConfig())
    again.startup()  # as after a crash right after the creation
    assert again.get_log("gone", 0).log_start_offset == 0
    assert again.get_log("gone", 1) is None


def test_without_a_loop_deletion_writes_at_once(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 2)
    calls = _counting(monkeypatch)
    manager.delete_log("gone", 0)
    assert calls == {"checkpoints": 2, "fsyncs": 1}
    for log_dir in dirs:
        assert ("gone", 0) not in read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)


def test_on_a_loop_the_writer_thread_renames_the_deleted_logs(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 4)
    before = {log.directory for log in manager.all_logs() if log.topic == "gone"}
    renamed_on: list[str] = []
    rename = log_manager_module.DirRename.run

    def recorded(self):
        renamed_on.append(threading.current_thread().name)
        rename(self)

    monkeypatch.setattr(log_manager_module.DirRename, "run", recorded)

    async def delete_topic():
        detached = [manager.delete_log("gone", p) for p in range(4)]
        assert all(directory.exists() for directory in before)  # not renamed on the loop
        await asyncio.sleep(0)
        return detached

    detached = asyncio.run(delete_topic())
    manager.wait_for_checkpoints()
    assert len(renamed_on) == 4 and all(name.startswith("klamm-checkpoints") for name in renamed_on), renamed_on
    assert not any(directory.exists() for directory in before)
    for log in detached:
        assert log.directory.is_dir() and log.directory.name.endswith("-delete")
        log.delete()
        assert not log.directory.exists()
    assert {path.name for d in dirs for path in d.iterdir() if path.is_dir()} == {"kept-0"}


def test_a_deleted_log_removed_before_the_writer_renamed_it_leaves_nothing(tmp_path, monkeypatch):
    manager, dirs = _manager(tmp_path, 1)
    old = manager.get_log("gone", 0).directory
    gate = threading.Event()
    write = manager._writer._write

    def held(log_dir, checkpoints):
        gate.wait(10)
        write(log_dir, checkpoints)

    monkeypatch.setattr(manager._writer, "_write", held)

    async def delete():
        return manager.delete_log("gone", 0)

    log = asyncio.run(delete())  # the writer thread holds the dir's write (its renames first) at the gate
    assert old.is_dir() and not log.directory.exists()
    log.delete()  # as file.delete.delay.ms 0 would, on another thread: makes the rename, then removes
    assert not old.exists() and not log.directory.exists()
    gate.set()
    manager.wait_for_checkpoints()  # the writer's rename is then nothing
    assert {path.name for d in dirs for path in d.iterdir() if path.is_dir()} == {"kept-0"}


def test_a_name_recreated_after_a_pending_rename_starts_empty(tmp_path):
    manager, dirs = _manager(tmp_path, 1)
    manager.get_log("gone", 0).truncate_fully_and_start_at(500)

    async def delete_and_recreate():
        detached = manager.delete_log("gone", 0)
        return detached, manager.create_log("gone", 0)  # waits for the writer: the old name is free first

    detached, log = asyncio.run(delete_and_recreate())
    assert detached.directory.is_dir() and detached.directory != log.directory
    assert log.directory.is_dir() and log.log_start_offset == 0 and log.log_end_offset == 0
