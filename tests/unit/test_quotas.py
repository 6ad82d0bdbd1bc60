"""Kafka's quota arithmetic (klamm.broker.quotas): the sampled rate, and throttle times that bring a client
back to its quota."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from klamm.broker.quotas import QuotaTracker, Rate


def test_the_rate_counts_at_least_samples_minus_one_windows() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(10_000, 0)
    assert rate.window_size_ms(0) == 10_000  # a first burst is measured over 10 windows, not 0 ms
    assert rate.per_second(0) == 1000
    rate.record(10_000, 15_000)  # the first sample has expired
    assert rate.per_second(15_000) == 1000


def test_no_quota_no_throttle_and_shared_entities() -> None:
    quotas = {"alice": 1000.0}
    tracker = QuotaTracker(lambda user, client: (("user", user), quotas[user]) if user in quotas else None)
    assert tracker.record("bob", "c", 10**9, 0) == 0
    assert tracker.record("alice", "c1", 5000, 0) == 0  # 5000 B over 10 s: 500 B/s
    # another client id of the same user shares the rate: 15000 B over 10 s is 1500 B/s, half again too much
    assert tracker.record("alice", "c2", 10_000, 0) == 5000


@settings(max_examples=200, deadline=None)
@given(st.integers(100, 10**6), st.lists(st.integers(1, 10**5), min_size=1, max_size=50), st.integers(1, 500))
def test_waiting_out_the_throttle_brings_the_rate_back_to_the_quota(quota: int, sizes: list[int], gap_ms: int) -> None:
    """A client that sends, then waits each throttle time, sends on average no more than its quota allows
    over the time it took (the first windows, which the rate counts as ten seconds, included), give or
    take its last request."""
    tracker = QuotaTracker(lambda u, c: ("e", float(quota)))
    now = 0
    for size in sizes:
        throttle = tracker.record("u", "c", size, now)
        assert throttle >= 0
        now += gap_ms + throttle
    assert sum(sizes) <= quota * max(now, 10_000) / 1000 * 1.001 + max(sizes)
