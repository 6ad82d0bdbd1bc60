"""How `klamm serve` keeps the cyclic garbage collector's full passes short.

A full collection walks every tracked object that is not frozen, holding the interpreter lock, so it stalls the
event loop for as long as it walks. Start-up freezes what it built (main.py), but partitions created later are
not frozen: a broker that created 10,000 partitions holds about 400,000 more tracked objects (about 40 a
partition: its log, segment, indexes, epoch cache, replication state), and each full collection then took
120-350 ms, again and again for as long as the process lived (BENCHMARKS.md, "Garbage collector pauses").

So a full collection that takes longer than a threshold freezes what it kept, as start-up does: the objects
are alive (the collection just ran, so no garbage is frozen with them), and later full passes walk only what
came after. What a frozen object costs if it later dies in a reference cycle is the same as for start-up's
objects: it is not collected (klamm's long-lived objects are freed by reference counting: tests check that
requests, closed connections and deleted logs leave no cycles).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

# A full collection that walks longer than this freezes its survivors (the latency goal is p99.9 <= 15 ms; an
# idle broker's full collection takes about 2 ms after start-up's freeze).
SLOW_FULL_COLLECTION_S = 0.01


class SlowCollectionFreezer:
    """A gc.callbacks entry: after a full collection slower than `threshold_s`, gc.freeze().

    The callback runs in whatever thread the collection ran in, with the collection done and the generations
    consistent; it only reads a clock and merges lists (no allocation-heavy work, no locks, no logging)."""

    def __init__(self, threshold_s: float = SLOW_FULL_COLLECTION_S,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.threshold_s = threshold_s
        self._clock = clock
        self._started = 0.0
        self.freezes = 0  # how many slow full collections froze their survivors

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = self._clock()
        elif self._clock() - self._started > self.threshold_s:
            gc.freeze()
            self.freezes += 1

    def install(self) -> None:
        gc.callbacks.append(self)

    def uninstall(self) -> None:
        if self in gc.callbacks:
            gc.callbacks.remove(self)
