"""Quota arithmetic (klamm.broker.quotas): the token bucket, and throttle times that keep a client to its quota."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from klamm.broker.quotas import ClientQuotas, QuotaTracker


def test_the_bucket_starts_full_and_fills_at_the_quota() -> None:
    tracker = QuotaTracker(lambda user, client: ("e", 1000.0), samples=11, window_ms=1000)
    assert tracker.record("u", "c", 11_000, 0) == 0  # the first 11 seconds' worth goes at once
    assert tracker.record("u", "c", 500, 0) == 500  # half a second over
    assert tracker.record("u", "c", 500, 1000) == 0  # a second later the debt is paid and 500 more fit


def test_no_quota_no_throttle_and_shared_entities() -> None:
    quotas = {"alice": 1000.0}
    tracker = QuotaTracker(lambda user, client: (("user", user), quotas[user]) if user in quotas else None)
    assert tracker.record("bob", "c", 10**9, 0) == 0
    assert tracker.record("alice", "c1", 5000, 0) == 0  # within the first burst (11 s of 1000 B/s)
    # another client id of the same user shares the bucket: 4000 B too many is 4 s of the quota
    assert tracker.record("alice", "c2", 10_000, 0) == 4000


@settings(max_examples=200, deadline=None)
@given(st.integers(1000, 10**6), st.lists(st.floats(0.001, 5), min_size=1, max_size=200), st.integers(1, 500))
def test_waiting_out_the_throttle_brings_the_rate_back_to_the_quota(quota: int, shares: list[float],
                                                                   gap_ms: int) -> None:
    """A client that sends, then waits each throttle time, sends no more than its quota allows over the time
    it took, plus the first burst, give or take its last request."""
    tracker = QuotaTracker(lambda u, c: ("e", float(quota)))
    sizes = [max(1, int(share * quota)) for share in shares]
    now = 0
    for size in sizes:
        throttle = tracker.record("u", "c", size, now)
        assert throttle >= 0
        now += gap_ms + throttle
    assert sum(sizes) <= quota * (now / 1000 + 11) * 1.0001 + max(sizes)


def test_request_percentage_throttles_for_one_window_at_most() -> None:
    """Kafka's ClientRequestQuotaManager bounds the throttle time at quota.window.size.seconds: a request that
    took far more than a tiny percentage allows waits one window, not (time / percentage)."""
    image = SimpleNamespace(quotas_by_entity={"x": 1}, applicable_client_quota=lambda user, client, key: (
        SimpleNamespace(metric_tags=("client-id", client), value=0.001) if key == "request_percentage" else None))
    quotas = ClientQuotas(lambda: image, samples=3, window_ms=1000)
    request = SimpleNamespace(session=SimpleNamespace(internal=False, principal="User:ANONYMOUS"), client_id="busy",
                              api_key=3, body=None, size=100)
    assert quotas.throttle_ms(request, None, 0.001, 0) == 1000  # 1 ms against 0.001 %: 97 s unbounded
    bytes_rate = QuotaTracker(lambda user, client: ("e", 1.0), samples=3, window_ms=1000)
    assert bytes_rate.record("u", "c", 1000, 0) == 997_000  # the byte rates are not bounded (as Kafka's)
