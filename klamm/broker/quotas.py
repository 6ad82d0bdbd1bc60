"""Client quotas enforced as Kafka's ClientQuotaManager does: a rate over sampled windows, and throttling.

Each quota (producer_byte_rate, consumer_byte_rate, request_percentage) is tracked per the entity
whose quota applies (a user, a client id, both, or their defaults: the metadata image says which),
so every client sharing a user-level quota shares its rate. A request records what it costs; when
the rate over the last `quota.window.num` windows of `quota.window.size.seconds` goes above the
quota, the request is answered with throttle_time_ms, the time the rate needs to come back to the
quota, and the connection reads nothing more for that long (KIP-219: the client waits too).

The rate is Kafka's Rate: the sum of the samples over the time they cover, where fewer than
`samples - 1` whole windows count as that many (so a first burst is not measured over a
few milliseconds).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

__all__ = ["QuotaLookup", "QuotaTracker", "Rate"]

# (principal name, client id) -> (the entity whose quota applies, the quota), or None: no quota
QuotaLookup = Callable[[str, str], "tuple[Hashable, float] | None"]


@dataclass
class Rate:
    """Kafka's SampledStat Rate: `samples` windows of `window_ms`, the oldest dropped as time moves on."""

    samples: int
    window_ms: int
    _starts: list[int] = field(default_factory=list)
    _values: list[float] = field(default_factory=list)

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts or now_ms >= self._starts[-1] + self.window_ms:
            self._starts.append(now_ms)
            self._values.append(0.0)
            if len(self._starts) > self.samples:
                del self._starts[0], self._values[0]
        self._values[-1] += value
        self._purge(now_ms)

    def _purge(self, now_ms: int) -> None:
        expired = now_ms - self.samples * self.window_ms
        while self._starts and self._starts[0] + self.window_ms <= expired:
            del self._starts[0], self._values[0]

    def window_size_ms(self, now_ms: int) -> int:
        """The time the samples cover, never less than `samples - 1` whole windows."""
        self._purge(now_ms)
        elapsed = now_ms - self._starts[0] if self._starts else 0
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return max(elapsed, 1)

    def per_second(self, now_ms: int) -> float:
        window = self.window_size_ms(now_ms)  # drops expired samples first
        return sum(self._values) * 1000 / window


class QuotaTracker:
    """One kind of quota (e.g. producer_byte_rate) for every client: record, and how long to throttle."""

    def __init__(self, lookup: QuotaLookup, samples: int = 11, window_ms: int = 1000) -> None:
        self._lookup = lookup
        self._samples = samples
        self._window_ms = window_ms
        self._rates: dict[Hashable, Rate] = {}

    def record(self, principal: str, client_id: str, value: float, now_ms: int) -> int:
        """Add `value` to the rate of the client's quota entity; the throttle time in ms (0: within quota)."""
        applying = self._lookup(principal, client_id)
        if applying is None:
            return 0
        entity, quota = applying
        rate = self._rates.get(entity)
        if rate is None:
            rate = self._rates[entity] = Rate(self._samples, self._window_ms)
        rate.record(value, now_ms)
        observed = rate.per_second(now_ms)
        if observed <= quota:
            return 0
        if quota <= 0:
            return rate.window_size_ms(now_ms)
        return round((observed - quota) / quota * rate.window_size_ms(now_ms))
