"""Incremental fetch sessions (KIP-227): the broker remembers what a consumer fetches.

A client opens a session with a full fetch at epoch 0 and then sends only what
changed (new partitions, moved fetch offsets, forgotten partitions) with epoch
1, 2, ...; the broker answers only partitions that have records, an error, or a
changed high watermark, last stable offset or log start offset. Epoch -1 is a
sessionless full fetch (and closes the session named in it).

The cache holds `max.incremental.fetch.session.cache.slots` sessions. When it is
full a new session may evict the least recently used one only if that one has
been idle for `EVICTION_IDLE_S`; otherwise the client gets session id 0 and keeps
sending full fetches — Kafka's answer too.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EVICTION_IDLE_S = 120.0  # Kafka's min.incremental.fetch.session.eviction.ms

PartitionKey = tuple[Any, int]  # (topic name, or topic id from Fetch v13, partition)


@dataclass(slots=True)
class CachedPartition:
    """What the session knows of one partition: the client's position and what it was last told.

    Carries the same attribute names as a request's partition entry (a follower's last fetched epoch and
    log start offset too), so the fetch path reads either alike.
    """

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's own
    told_high_watermark: int = -1
    told_last_stable_offset: int = -1
    told_log_start_offset: int = -1

    def update_from(self, requested: Any) -> None:
        self.fetch_offset = requested.fetch_offset
        self.partition_max_bytes = requested.partition_max_bytes
        self.current_leader_epoch = getattr(requested, "current_leader_epoch", -1)
        self.last_fetched_epoch = getattr(requested, "last_fetched_epoch", -1)
        self.log_start_offset = getattr(requested, "log_start_offset", -1)

    def changed(self, response: dict[str, Any]) -> bool:
        """Whether an incremental response must carry this partition; remembers what it carries."""
        news = (response["high_watermark"], response["last_stable_offset"], response["log_start_offset"])
        # a preferred read replica or a diverging epoch is news however little else changed (Kafka's
        # CachedPartition.maybeUpdateResponseData)
        must_send = bool(response["records"]) or response["error_code"] != 0 or news != (
            self.told_high_watermark, self.told_last_stable_offset, self.told_log_start_offset) or \
            response["preferred_read_replica"] >= 0 or "diverging_epoch" in response
        if must_send:
            self.told_high_watermark, self.told_last_stable_offset, self.told_log_start_offset = news
        return must_send


@dataclass
class FetchSession:
    session_id: int
    epoch: int  # the epoch the next request must carry
    partitions: OrderedDict[PartitionKey, CachedPartition] = field(default_factory=OrderedDict)
    last_used: float = 0.0

    def update(self, requested: Iterable[tuple[Any, Any]], forgotten: Iterable[PartitionKey]) -> None:
        for key, partition in requested:
            cached = self.partitions.get((key, partition.partition))
            if cached is None:
                cached = CachedPartition(partition.partition, partition.fetch_offset, partition.partition_max_bytes)
                self.partitions[(key, partition.partition)] = cached
            cached.update_from(partition)
        for key in forgotten:
            self.partitions.pop(key, None)


class FetchSessionCache:
    def __init__(self, max_slots: int, clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self._clock = clock
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self) -> FetchSession | None:
        """A new session at epoch 1, or None when the cache has no room."""
        now = self._clock()
        if len(self._sessions) >= self.max_slots and not self._evict_idle(now):
            return None
        session_id = self._new_id()
        session = FetchSession(session_id, INITIAL_EPOCH + 1, last_used=now)
        self._sessions[session_id] = session
        return session

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used = self._clock()
            self._sessions.move_to_end(session_id)
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def _evict_idle(self, now: float) -> bool:
        if not self._sessions:
            return False
        oldest_id, oldest = next(iter(self._sessions.items()))
        if now - oldest.last_used < EVICTION_IDLE_S:
            return False
        del self._sessions[oldest_id]
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                return session_id
