"""The follower's side of an incremental fetch session (klamm.broker.replica_fetcher.FollowerSession).

Driven against the leader's own session code (klamm.broker.handlers.fetch._session and FetchSessionCache):
after every exchange the leader's session must hold exactly what the follower fetches, each partition at
the position the follower last asked for, whatever was sent in full, incrementally, forgotten or lost.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klamm.broker.fetch_session import FetchSessionCache
from klamm.broker.handlers.fetch import _session
from klamm.broker.replica_fetcher import FollowerSession
from klamm.protocol.errors import ErrorCode

KEYS = [("t", 0), ("t", 1), ("u", 0), ("__consumer_offsets", 7)]


def entry(key: tuple[str, int], offset: int) -> dict[str, Any]:
    return {"partition": key[1], "current_leader_epoch": 3, "fetch_offset": offset, "last_fetched_epoch": 2,
            "log_start_offset": 0, "partition_max_bytes": 1 << 20}


def exchange(cache: FetchSessionCache, follower: FollowerSession, wanted: dict) -> tuple[Any, bool, ErrorCode]:
    """One Fetch as the leader's handler takes it: the follower's request, the leader's session, the answer."""
    sent, forgotten = follower.request(wanted)
    by_topic: dict[str, list[int]] = {}
    for topic, index in forgotten:
        by_topic.setdefault(topic, []).append(index)
    body = SimpleNamespace(session_id=follower.session_id, session_epoch=follower.epoch,
                           forgotten_topics_data=[SimpleNamespace(topic=t, partitions=p) for t, p in by_topic.items()])
    requested = [(key[0], SimpleNamespace(**e)) for key, e in sent.items()]
    session, incremental, error = _session(cache, body, requested, False)
    follower.answered(error, session.session_id if session is not None else 0)
    return session, incremental, error


def held_by_leader(session: Any) -> dict[tuple[str, int], int]:
    return {key: cached.fetch_offset for key, cached in session.partitions.items()}


def test_a_full_fetch_opens_the_session_and_then_only_what_moved_is_sent() -> None:
    cache, follower = FetchSessionCache(10), FollowerSession()
    wanted = {key: entry(key, 5) for key in KEYS}
    session, incremental, _ = exchange(cache, follower, wanted)
    assert not incremental and follower.session_id == session.session_id and follower.epoch == 1
    wanted[("t", 1)] = entry(("t", 1), 9)
    sent, forgotten = follower.request(wanted)
    assert list(sent) == [("t", 1)] and forgotten == []
    follower.answered(ErrorCode.none, session.session_id)
    del wanted[("u", 0)]
    assert follower.request(wanted) == ({}, [("u", 0)])


def test_a_lost_session_starts_again_with_a_full_fetch() -> None:
    cache, follower = FetchSessionCache(10), FollowerSession()
    wanted = {key: entry(key, 5) for key in KEYS}
    exchange(cache, follower, wanted)
    cache.remove(follower.session_id)  # evicted, or the leader restarted
    session, _, error = exchange(cache, follower, wanted)
    assert session is None and error == ErrorCode.fetch_session_id_not_found
    assert follower.epoch == 0 and follower.request(wanted) == (wanted, [])


def test_a_new_session_closes_the_one_it_replaces() -> None:
    cache, follower = FetchSessionCache(1), FollowerSession()  # room for one session only
    wanted = {key: entry(key, 5) for key in KEYS}
    first, _, _ = exchange(cache, follower, wanted)
    follower.reset()  # a connection lost with a request in flight: the first session is still in the cache
    second, incremental, error = exchange(cache, follower, wanted)
    assert second is not None and second.session_id != first.session_id and not incremental
    assert len(cache) == 1 and follower.session_id == second.session_id


def test_no_room_for_a_session_keeps_the_follower_fetching_in_full() -> None:
    cache, follower = FetchSessionCache(0), FollowerSession()
    wanted = {key: entry(key, 5) for key in KEYS}
    for _ in range(3):
        session, incremental, error = exchange(cache, follower, wanted)
        assert session is None and not incremental and error == ErrorCode.none
        assert follower.request(wanted)[0] == wanted


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 40))
def test_the_leader_s_session_always_holds_what_the_follower_fetches(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    cache, follower = FetchSessionCache(4), FollowerSession()
    offsets = {key: 0 for key in KEYS}
    for _ in range(steps):
        for key in KEYS:
            if rng.random() < 0.3:
                offsets[key] += rng.randint(1, 5)
        wanted = {key: entry(key, offsets[key]) for key in KEYS if rng.random() < 0.85}
        if rng.random() < 0.1:
            cache.remove(follower.session_id)
        if rng.random() < 0.05:
            follower.reset()  # the connection dropped with a request in flight
        session, incremental, error = exchange(cache, follower, wanted)
        if error != ErrorCode.none:
            session, incremental, error = exchange(cache, follower, wanted)  # the fetcher asks again at once
        assert error == ErrorCode.none and session is not None
        assert held_by_leader(session) == {key: e["fetch_offset"] for key, e in wanted.items()}
        if incremental:
            cached = session.partitions[next(iter(session.partitions))] if session.partitions else None
            assert cached is None or cached.last_fetched_epoch == 2  # what the leader checks divergence by


@pytest.mark.parametrize("error", [ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch,
                                   ErrorCode.unknown_server_error])
def test_an_error_answer_resets_the_session(error: ErrorCode) -> None:
    follower = FollowerSession(session_id=77, epoch=4, held={KEYS[0]: entry(KEYS[0], 1)})
    follower.request({KEYS[0]: entry(KEYS[0], 2)})
    follower.answered(error, 0)
    assert (follower.session_id, follower.epoch, follower.held) == (77, 0, {})  # closed by the next, full, fetch
