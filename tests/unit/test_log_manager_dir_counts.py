"""LogManager's logs-per-dir bookkeeping: the dir chosen for a new log is the one the walk over every log chose."""

from __future__ import annotations

import random

from klamm.storage.log import LogConfig
from klamm.storage.log_manager import LogManager


def _walk_choice(manager: LogManager):
    """The choice as it was made before the per-dir counts: count by walking every log, first minimum wins."""
    counts = {log_dir: 0 for log_dir in manager.log_dirs}
    for key in [(log.topic, log.partition) for log in manager.all_logs()]:
        counts[manager.log_dir_of(*key)] += 1
    return min(manager.log_dirs, key=lambda d: counts[d])


def _check_bookkeeping(manager: LogManager) -> None:
    by_walk: dict = {log_dir: set() for log_dir in manager.log_dirs}
    for log in manager.all_logs():
        by_walk[manager.log_dir_of(log.topic, log.partition)].add((log.topic, log.partition))
    assert {d: set(logs) for d, logs in manager._logs_in.items()} == by_walk


def test_least_loaded_dir_matches_the_walk_under_random_create_delete_move(tmp_path):
    rng = random.Random(14)
    dirs = [tmp_path / f"d{i}" for i in range(3)]
    manager = LogManager(dirs, LogConfig())
    manager.startup()
    keys = [(f"t{t}", p) for t in range(6) for p in range(4)]
    for step in range(400):
        op = rng.random()
        key = rng.choice(keys)
        if op < 0.5:
            expected = _walk_choice(manager) if manager.get_log(*key) is None else manager.log_dir_of(*key)
            manager.create_log(*key)
            assert manager.log_dir_of(*key) == expected
        elif op < 0.8:
            detached = manager.delete_log(*key)
            if detached is not None:
                detached.delete()
        elif manager.get_log(*key) is not None:  # AlterReplicaLogDirs: a copy promoted in another dir
            target = rng.choice([d for d in dirs if d != manager.log_dir_of(*key)])
            future = manager.create_future_log(*key, target, LogConfig())
            _, old = manager.promote_future_log(future)
            assert manager.log_dir_of(*key) == target
            if old is not None:
                old.delete()
        _check_bookkeeping(manager)
        assert manager._least_loaded_dir() == _walk_choice(manager)
    manager.shutdown()

    # A restart rebuilds the counts from what it loads.
    again = LogManager(dirs, LogConfig())
    again.startup()
    _check_bookkeeping(again)
    assert again._least_loaded_dir() == _walk_choice(again)
    again.shutdown()
