"""An I/O rate limiter: Kafka's Throttler, as its log cleaner uses it (log.cleaner.io.max.bytes.per.second).

Callers report the bytes they read or wrote; once per check interval, if the rate
observed over that interval is above the desired rate, the caller sleeps long
enough for the interval's bytes to fit the rate. Shared by every cleaner (one
budget for the broker), hence the lock; given a multiprocessing context, the lock
and the state live in shared memory, so the cleaner processes it is handed to
(when they start) share the one budget. Clock and sleep are injectable.

The lock and the state are made on first use (a throttled read, or share() before
the throttler is handed to a process): a multiprocessing lock of the spawn context
starts Python's resource tracker, a process of its own, which a broker that never
compacts does not need.
"""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

__all__ = ["Throttler"]

_NS_PER_S = 1_000_000_000
_NS_PER_MS = 1_000_000
# A process killed while holding the shared lock must not stop the others forever: past
# this wait they go on unthrottled for that interval.
_LOCK_TIMEOUT_S = 60.0


class Throttler:
    def __init__(self, rate_per_sec: float, *, check_interval_ms: int = 300,
                 clock_ns: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep, context: BaseContext | None = None) -> None:
        self.rate_per_sec = rate_per_sec
        self._check_interval_ns = check_interval_ms * _NS_PER_MS
        self._clock_ns = clock_ns
        self._sleep = sleep
        self._budget = _Budget(context, clock_ns)  # shared by copies (with_sleep) and, pickled, by processes
        self.slept_ms = 0  # total of this object (not of the other processes), for tests

    def share(self) -> None:
        """Make the budget now, to hand this throttler to a process (pickling it needs it made before)."""
        self._budget.get()

    def with_sleep(self, sleep: Callable[[float], None]) -> Throttler:
        """The same budget (lock and state shared) sleeping with `sleep`, e.g. an Event's wait, to stop early."""
        other = copy.copy(self)
        other._sleep = sleep
        other.slept_ms = 0
        return other

    @property
    def unlimited(self) -> bool:
        return not math.isfinite(self.rate_per_sec) or self.rate_per_sec >= 1.7e308

    def maybe_throttle(self, observed: float) -> None:
        """Account `observed` bytes; sleep if the rate over the last interval is above the limit."""
        if self.unlimited or observed <= 0:
            return
        lock, state = self._budget.get()
        if not lock.acquire(timeout=_LOCK_TIMEOUT_S):
            return
        sleep_ms = 0
        try:
            state[1] += int(observed)
            now = self._clock_ns()
            elapsed_ns = now - state[0]
            if elapsed_ns <= self._check_interval_ns:
                return
            rate = state[1] * _NS_PER_S / elapsed_ns
            if rate > self.rate_per_sec:
                # the time these bytes should have taken at the desired rate, minus the time they took
                sleep_ms = max(round(state[1] / (self.rate_per_sec / 1000) - elapsed_ns // _NS_PER_MS), 0)
            # The next period starts when this sleep ends; the lock is not held while sleeping (a
            # process killed in its sleep would leave it held), others' bytes meanwhile count in it.
            state[0] = now + sleep_ms * _NS_PER_MS
            state[1] = 0
        finally:
            lock.release()
        if sleep_ms > 0:
            self._sleep(sleep_ms / 1000)
            self.slept_ms += sleep_ms


class _Budget:
    """The lock and the state ([start of the current period (ns), bytes observed in it]) of one budget, made
    on the first get(): in shared memory given a multiprocessing context, else plain."""

    def __init__(self, context: BaseContext | None, clock_ns: Callable[[], int]) -> None:
        self._context = context
        self._clock_ns = clock_ns
        self._made: tuple[Any, Any] | None = None
        self._making = threading.Lock()  # two threads' first uses must make one budget

    def get(self) -> tuple[Any, Any]:
        made = self._made
        if made is None:
            with self._making:
                if self._made is None:
                    self._made = self._make()
                made = self._made
        return made

    def _make(self) -> tuple[Any, Any]:
        if self._context is None:
            return threading.Lock(), [self._clock_ns(), 0]
        return self._context.Lock(), self._context.RawArray("q", [self._clock_ns(), 0])

    def __getstate__(self) -> dict[str, Any]:
        # Made here, its shared array's type would reach copyreg after the pickler copied its table.
        if self._made is None:
            raise RuntimeError("Throttler.share() must make the budget before it is sent to a process")
        return {"made": self._made}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._context, self._clock_ns = None, time.monotonic_ns
        self._made = state["made"]
        self._making = threading.Lock()
