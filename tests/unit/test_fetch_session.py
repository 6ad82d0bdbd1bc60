"""The fetch session cache: ids, epochs, partition bookkeeping and eviction."""

from __future__ import annotations

import random
from types import SimpleNamespace

from klamm.broker.fetch_session import EVICTION_IDLE_S, CachedPartition, FetchSessionCache


def _position(partition: int, offset: int) -> SimpleNamespace:
    return SimpleNamespace(partition=partition, fetch_offset=offset, partition_max_bytes=100, current_leader_epoch=-1)


def test_sessions_get_distinct_ids_and_start_at_epoch_one() -> None:
    cache = FetchSessionCache(10, rng=random.Random(1))
    first, second = cache.create(), cache.create()
    assert first and second and first.session_id != second.session_id
    assert first.epoch == 1 and cache.get(first.session_id) is first


def test_update_adds_moves_and_forgets() -> None:
    session = FetchSessionCache(10).create()
    assert session is not None
    session.update([("t", _position(0, 5)), ("t", _position(1, 7))], ())
    session.update([("t", _position(0, 9))], [("t", 1)])
    assert list(session.partitions) == [("t", 0)]
    assert session.partitions[("t", 0)].fetch_offset == 9


def test_changed_reports_news_once() -> None:
    cached = CachedPartition(0, 0, 100)
    entry = {"records": b"", "error_code": 0, "high_watermark": 3, "last_stable_offset": 3, "log_start_offset": 0,
             "preferred_read_replica": -1}
    assert cached.changed(entry)
    assert not cached.changed(entry)
    assert cached.changed({**entry, "records": b"x"})
    assert cached.changed({**entry, "error_code": 1})
    # a preferred read replica and a diverging epoch always go out (Kafka's maybeUpdateResponseData)
    assert cached.changed({**entry, "preferred_read_replica": 2})
    assert cached.changed({**entry, "diverging_epoch": {"epoch": 1, "end_offset": 2}})
    assert not cached.changed(entry)


def test_full_cache_evicts_only_idle_sessions() -> None:
    now = [0.0]
    cache = FetchSessionCache(1, clock=lambda: now[0])
    first = cache.create()
    assert first is not None
    assert cache.create() is None  # full, and the only session is fresh
    now[0] += EVICTION_IDLE_S + 1
    second = cache.create()
    assert second is not None and cache.get(first.session_id) is None and len(cache) == 1
