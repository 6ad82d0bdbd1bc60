"""Deadlines on an injected clock, keyed so a later schedule replaces an earlier one.

The coordinator schedules (session expiry of a member, a rebalance's deadline,
the retention check) and the owner polls: unit tests advance a fake clock and
call `pop_expired`; the broker's runtime sleeps until `next_deadline` and is
woken by `on_change` when an earlier deadline appears.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from typing import Any


class Timer:
    def __init__(self, clock: Callable[[], int], on_change: Callable[[], None] | None = None) -> None:
        self.clock = clock
        self.on_change = on_change
        self._heap: list[tuple[int, int, Hashable]] = []
        self._entries: dict[Hashable, tuple[int, int, Callable[[], Any]]] = {}
        self._seq = itertools.count()

    def schedule(self, key: Hashable, delay_ms: int, callback: Callable[[], Any]) -> None:
        deadline = self.clock() + max(0, delay_ms)
        seq = next(self._seq)
        self._entries[key] = (deadline, seq, callback)
        heapq.heappush(self._heap, (deadline, seq, key))
        if self.on_change is not None:
            self.on_change()

    def cancel(self, key: Hashable) -> None:
        self._entries.pop(key, None)  # its heap entry is skipped when popped

    def cancel_where(self, matches: Callable[[Hashable], bool]) -> None:
        """Cancel every deadline whose key matches (a coordinator giving up a partition's groups)."""
        for key in [key for key in self._entries if matches(key)]:
            del self._entries[key]

    def is_scheduled(self, key: Hashable) -> bool:
        return key in self._entries

    def next_deadline(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_expired(self) -> list[Callable[[], Any]]:
        """Callbacks whose deadline has passed, earliest first; they are unscheduled."""
        now = self.clock()
        due = []
        while True:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now:
                return due
            _, _, key = heapq.heappop(self._heap)
            due.append(self._entries.pop(key)[2])

    def _drop_stale(self) -> None:
        while self._heap:
            deadline, seq, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry[1] == seq:
                return
            heapq.heappop(self._heap)
