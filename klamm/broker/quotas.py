"""Client quotas enforced as Kafka enforces them: throttle_time_ms in the response, and the connection muted.

Each quota (producer_byte_rate, consumer_byte_rate, request_percentage) is tracked per the entity
whose quota applies (the metadata image's lookup gives Kafka's metric tags: a user-level quota is
shared by all that user's client ids, a default quota is each user's or client's own). A request
records what it costs; once the client is over its quota, the request is answered with
throttle_time_ms, the time until it is back within it, and the connection reads nothing more for
that long (KIP-219: the client waits too).

The rate is measured with a token bucket (Kafka's TokenBucket, which its controller mutation quota
uses): it fills at the quota up to `quota.window.num` x `quota.window.size.seconds` worth of it, a
request takes its cost out, and a negative balance is the throttle time. A client that waits its
throttle times keeps to its quota over any stretch of time, give or take that one burst; Kafka's
windowed Rate, used for the client quotas, drifts from it by tens of percent when requests are
large next to the quota or arrive in bursts.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

__all__ = ["ClientQuotas", "QuotaLookup", "QuotaTracker", "TokenBucket", "fetched_bytes"]

# (principal name, client id) -> (the entity whose quota applies, the quota), or None: no quota
QuotaLookup = Callable[[str, str], "tuple[Hashable, float] | None"]


@dataclass
class TokenBucket:
    """Tokens fill at `rate` per second up to `burst`; recording takes tokens, and may go below zero."""

    tokens: float = 0.0
    updated_ms: int = -(2**62)  # a new bucket starts full

    def record(self, value: float, rate: float, burst: float, now_ms: int) -> int:
        """Take `value`; the ms until the balance is back to zero (0 when it is not negative)."""
        self.tokens = min(burst, self.tokens + rate * max(0, now_ms - self.updated_ms) / 1000)
        self.updated_ms = now_ms
        self.tokens = min(burst, self.tokens - value)
        if self.tokens >= 0:
            return 0
        return round(-self.tokens / rate * 1000) if rate > 0 else 2**31 - 1


class QuotaTracker:
    """One kind of quota (e.g. producer_byte_rate) for every client: record, and how long to throttle."""

    def __init__(self, lookup: QuotaLookup, samples: int = 11, window_ms: int = 1000,
                 max_throttle_ms: int | None = None) -> None:
        self._lookup = lookup
        self._burst_seconds = samples * window_ms / 1000
        self._max_throttle_ms = max_throttle_ms
        self._buckets: dict[Hashable, TokenBucket] = {}

    def record(self, principal: str, client_id: str, value: float, now_ms: int) -> int:
        """Add `value` to the client's quota entity; the throttle time in ms (0: within quota)."""
        applying = self._lookup(principal, client_id)
        if applying is None:
            return 0
        entity, quota = applying
        bucket = self._buckets.get(entity)
        if bucket is None:
            bucket = self._buckets[entity] = TokenBucket()
        throttle = bucket.record(value, quota, quota * self._burst_seconds, now_ms)
        return throttle if self._max_throttle_ms is None else min(throttle, self._max_throttle_ms)


PRODUCE, FETCH = 0, 1


class ClientQuotas:
    """The three client quotas of a broker, looked up in the metadata image of the moment."""

    def __init__(self, image: Callable[[], Any], samples: int, window_ms: int) -> None:
        self._image = image
        self.produce = QuotaTracker(self._lookup("producer_byte_rate"), samples, window_ms)
        self.fetch = QuotaTracker(self._lookup("consumer_byte_rate"), samples, window_ms)
        # A request's time can be far more than a tiny percentage's burst: Kafka's ClientRequestQuotaManager
        # throttles for at most one window (the byte rates are not bounded)
        self.requests = QuotaTracker(self._lookup("request_percentage"), samples, window_ms, max_throttle_ms=window_ms)

    def _lookup(self, key: str) -> QuotaLookup:
        def lookup(user: str, client_id: str) -> tuple[Hashable, float] | None:
            applied = self._image().applicable_client_quota(user, client_id, key)
            return None if applied is None else (applied.metric_tags, applied.value)
        return lookup

    @property
    def any(self) -> bool:
        """Whether any quota is set at all (else nothing is recorded: Kafka's quotasEnabled)."""
        return bool(self._image().quotas_by_entity)

    def throttle_ms(self, request: Any, response: Any, handler_seconds: float, now_ms: int) -> int:
        """Record the request against its client's quotas; the longest throttle time any of them asks."""
        session = request.session
        if session is None or session.internal:  # klamm's own requests between its nodes
            return 0
        user = session.principal.partition(":")[2]
        client_id = request.client_id or ""
        throttle = self.requests.record(user, client_id, handler_seconds * 100, now_ms)  # percent of a thread
        if request.api_key == PRODUCE:
            throttle = max(throttle, self.produce.record(user, client_id, request.size, now_ms))
        elif request.api_key == FETCH and getattr(request.body, "replica_id", -1) < 0:
            throttle = max(throttle, self.fetch.record(user, client_id, fetched_bytes(response), now_ms))
        return throttle


def fetched_bytes(response: Any) -> int:
    """The record bytes of a Fetch response (what Kafka counts against consumer_byte_rate)."""
    if not isinstance(response, dict):
        return 0
    total = 0
    for topic in response.get("responses", ()):
        for partition in topic["partitions"]:
            records = partition.get("records") or b""
            total += sum(len(part) for part in records) if isinstance(records, list) else len(records)
    return total
