"""A live segment costs the cyclic garbage collector few objects: a full collection walks every one of them on
the event loop, and segments made after start-up are not frozen (BENCHMARKS.md, latency-delete). File paths are
kept as strings (klamm.storage.stored_path), not as Path objects of two tracked objects each."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path

from test_cleaner import append, k

from klamm.storage.config import LogConfig
from klamm.storage.log_manager import LogManager
from klamm.storage.stored_path import StoredPath
from tests.cyclic_garbage import cyclic_garbage

SEGMENTS = 200


def tracked() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__name__ for o in gc.get_objects())


def test_a_rolled_segment_costs_the_collector_at_most_a_dozen_tracked_objects(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig(), time_ms=lambda: 1_700_000_000_000)
    logs.startup()
    log = logs.create_log("t", 0)
    before = tracked()
    for n in range(SEGMENTS):
        append(log, [(k(n), b"v" * 100)])
        log.roll()
    grown = tracked() - before
    # 6 for as long as the segment lives (the segment, its 3 indexes, its SharedFile and that file's lock) and
    # 3 until a flush job writes its producer snapshot (the PendingSnapshot, its Path, a list; the locks are the
    # log's); 19 before paths were strings, 11 before the snapshots shared their log's locks.
    assert sum(grown.values()) / SEGMENTS <= 10, grown.most_common(8)
    assert grown["PosixPath"] <= SEGMENTS * 1.1
    logs.shutdown()


class _Holder:
    path = StoredPath()


def test_a_stored_path_reads_back_as_a_path_and_holds_a_string(tmp_path: Path) -> None:
    holder = _Holder()
    holder.path = tmp_path / "a.log"
    assert holder.path == tmp_path / "a.log" and isinstance(holder.path, Path)
    assert holder._path == str(tmp_path / "a.log")  # type: ignore[attr-defined]
    holder.path = str(tmp_path / "b.log")
    assert holder.path.name == "b.log"
    assert isinstance(_Holder.path, StoredPath)


def test_a_deleted_log_is_freed_when_dropped_not_left_to_a_full_collection(tmp_path: Path) -> None:
    logs = LogManager([tmp_path], LogConfig(), time_ms=lambda: 1_700_000_000_000)
    logs.startup()
    log = logs.create_log("t", 0)
    for n in range(20):
        append(log, [(k(n), b"v" * 100)])
        log.roll()
    with cyclic_garbage() as left:
        deleted = logs.delete_log("t", 0)
        assert deleted is log
        deleted.delete()
        del deleted, log
    assert not {"Log", "ProducerStateManager", "LeaderEpochCache", "PendingSnapshot"} & set(left), left
    logs.shutdown()
