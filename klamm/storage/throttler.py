"""An I/O rate limiter: Kafka's Throttler, as its log cleaner uses it (log.cleaner.io.max.bytes.per.second).

Callers report the bytes they read or wrote; once per check interval, if the rate
observed over that interval is above the desired rate, the caller sleeps long
enough for the interval's bytes to fit the rate. Shared by every cleaner thread
(one budget for the broker), hence the lock. Clock and sleep are injectable.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

__all__ = ["Throttler"]

_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000


class Throttler:
    def __init__(self, rate_per_sec: float, *, check_interval_ms: int = 300,
                 clock_ns: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate_per_sec = rate_per_sec
        self._check_interval_ns = check_interval_ms * _NS_PER_MS
        self._clock_ns = clock_ns
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start_ns = clock_ns()
        self._observed = 0.0
        self.slept_ms = 0  # total, for metrics and tests

    @property
    def unlimited(self) -> bool:
        return not math.isfinite(self.rate_per_sec) or self.rate_per_sec >= 1.7e308

    def maybe_throttle(self, observed: float) -> None:
        """Account `observed` bytes; sleep if the rate over the last interval is above the limit."""
        if self.unlimited or observed <= 0:
            return
        with self._lock:
            self._observed += observed
            elapsed_ns = self._clock_ns() - self._period_start_ns
            if elapsed_ns <= self._check_interval_ns:
                return
            rate = self._observed * _NS_PER_S / elapsed_ns
            if rate > self.rate_per_sec:
                # the time these bytes should have taken at the desired rate, minus the time they took
                sleep_ms = round(self._observed / (self.rate_per_sec / 1000) - elapsed_ns // _NS_PER_MS)
                if sleep_ms > 0:
                    self._sleep(sleep_ms / 1000)
                    self.slept_ms += sleep_ms
            self._period_start_ns = self._clock_ns()
            self._observed = 0.0
