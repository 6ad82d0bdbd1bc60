"""The periodic offset checkpoints read the logs' offsets a slice of the loop at a time
(LogManager.checkpoint_in_slices): a dir of 10,000 logs took 4-6 ms in one callback, once a minute.

A log that leaves the dir while its offsets are read (deleted, replaced, moved), or another snapshot of the dir
taken meanwhile, makes the offsets be read again in one go: the old log's offsets must never be written with
the rename its deletion left, nor older offsets after newer ones.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_steps import counting_turns

from klamm.storage import log_manager as log_manager_module
from klamm.storage.checkpoint import read_offset_checkpoint
from klamm.storage.log import LogConfig
from klamm.storage.log_manager import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, LogManager

LOGS = 40


@pytest.fixture
def one_log_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_manager_module, "CHECKPOINT_SLICE_S", 0.0)
    monkeypatch.setattr(log_manager_module, "LOGS_A_STEP", 1)


def manager_of(tmp_path: Path) -> LogManager:
    manager = LogManager([tmp_path], LogConfig())
    manager.startup()
    for n in range(LOGS):
        log = manager.create_log("t", n)
        log.recovery_point, log.log_start_offset = 100 + n, n  # as if records were flushed and deleted
    return manager


def written(tmp_path: Path) -> tuple[dict, dict]:
    return (read_offset_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT),
            read_offset_checkpoint(tmp_path / LOG_START_OFFSET_CHECKPOINT))


def test_the_offsets_are_read_in_slices_and_written_as_in_one_go(tmp_path: Path, one_log_a_slice) -> None:
    manager = manager_of(tmp_path)
    try:
        _, turns = asyncio.run(counting_turns(manager.checkpoint_in_slices()))
        manager.wait_for_checkpoints()
        assert turns >= LOGS - 1
        assert written(tmp_path) == ({("t", n): 100 + n for n in range(LOGS)}, {("t", n): n for n in range(LOGS)})
    finally:
        manager.shutdown()


@pytest.mark.parametrize("meanwhile", ["deleted", "recreated", "checkpointed"])
def test_a_change_of_the_dir_meanwhile_reads_the_offsets_again(tmp_path: Path, one_log_a_slice,
                                                                meanwhile: str) -> None:
    manager = manager_of(tmp_path)

    async def run() -> None:
        checkpointing = asyncio.create_task(manager.checkpoint_in_slices())
        for _ in range(LOGS // 2):
            await asyncio.sleep(0)
        assert not checkpointing.done()
        if meanwhile == "checkpointed":  # a newer snapshot (as a retention pass takes), then newer offsets
            manager.checkpoint()
        else:
            manager.delete_log("t", 0)  # read before the deletion: its offsets must not be written
            if meanwhile == "recreated":  # create_log waits for the deletion's write first
                manager.create_log("t", 0).recovery_point = 7
        manager.get_log("t", 1).recovery_point = 1000
        await checkpointing

    try:
        asyncio.run(run())
        manager.wait_for_checkpoints()
        recovery_points, _ = written(tmp_path)
        assert recovery_points[("t", 1)] == 1000  # read again after the change
        assert recovery_points.get(("t", 0)) == {"deleted": None, "recreated": 7, "checkpointed": 100}[meanwhile]
    finally:
        manager.shutdown()
