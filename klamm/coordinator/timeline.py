"""Committed offsets as of the high watermark of their __consumer_offsets partition.

The state machine replays a record as soon as it is appended, so its offsets are
the latest ones: what writes (OffsetDelete, DeleteGroups, expiry) must see. A
reader (OffsetFetch) must only see what the ISR has, which a new leader would
load too: Kafka 4's coordinator runtime reads its timeline at the partition's
last committed offset. Here only offsets get that second view: for an offset
written at a log offset at or past the partition's committed offset (its HW, as
the runtime last told), `OffsetTimeline` keeps the value readers still see and
each later value with the log offset that wrote it. `advance` takes the values
the HW has passed; a partition that is unloaded (leadership lost) forgets its
history, and what was never replicated is never seen here.

A partition whose HW was never given (`advance`) is not tracked: its writes are
visible at once (tests driving the state machine alone; nothing is replicated).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from klamm.coordinator.records import CommittedOffset

TopicPartition = tuple[str, int]


@dataclass
class _History:
    visible: CommittedOffset | None  # the value at the HW; None: no offset
    later: deque[tuple[int, CommittedOffset | None]] = field(default_factory=deque)  # (log offset, value)


class OffsetTimeline:
    def __init__(self) -> None:
        self._committed: dict[int, int] = {}  # partition -> its high watermark, as last given
        self._history: dict[str, dict[TopicPartition, _History]] = {}
        # partition -> (log offset, group, topic-partition) written at or past its HW, in log order
        self._written: dict[int, deque[tuple[int, str, TopicPartition]]] = {}

    def committed_offset(self, partition: int) -> int | None:
        return self._committed.get(partition)

    def write(self, partition: int, offset: int | None, group_id: str, tp: TopicPartition,
              before: CommittedOffset | None, after: CommittedOffset | None) -> None:
        """The latest offset of `tp` went from `before` to `after`, by the record at log `offset`."""
        committed = self._committed.get(partition)
        if offset is None or committed is None or offset < committed:
            return
        groups = self._history.setdefault(group_id, {})
        history = groups.get(tp)
        if history is None:
            history = groups[tp] = _History(before)
        history.later.append((offset, after))
        self._written.setdefault(partition, deque()).append((offset, group_id, tp))

    def advance(self, partition: int, high_watermark: int) -> None:
        """The partition's HW is now `high_watermark`: the values written below it become visible."""
        if high_watermark <= self._committed.get(partition, -1):
            return
        self._committed[partition] = high_watermark
        written = self._written.get(partition)
        while written and written[0][0] < high_watermark:
            _, group_id, tp = written.popleft()
            groups = self._history.get(group_id)
            history = groups.get(tp) if groups else None
            if history is None:
                continue  # settled by an earlier entry of the same offset
            while history.later and history.later[0][0] < high_watermark:
                history.visible = history.later.popleft()[1]
            if not history.later:
                del groups[tp]  # type: ignore[union-attr]
                if not groups:
                    del self._history[group_id]
        if written is not None and not written:
            del self._written[partition]

    def drop(self, partition: int) -> None:
        """The partition is no longer served here: forget its HW and what was written past it."""
        self._committed.pop(partition, None)
        for _, group_id, _ in self._written.pop(partition, ()):
            self._history.pop(group_id, None)

    def visible(self, group_id: str, latest: Mapping[TopicPartition, CommittedOffset]
                ) -> dict[TopicPartition, CommittedOffset]:
        """The group's offsets as readers see them, given its latest ones."""
        offsets = dict(latest)
        for tp, history in self._history.get(group_id, {}).items():
            if history.visible is None:
                offsets.pop(tp, None)
            else:
                offsets[tp] = history.visible
        return offsets

    def value(self, group_id: str, tp: TopicPartition, latest: CommittedOffset | None) -> CommittedOffset | None:
        """One offset as readers see it, given its latest value."""
        history = self._history.get(group_id, {}).get(tp)
        return latest if history is None else history.visible

    def pending(self, group_id: str) -> int:
        """How many of the group's offsets have values the HW has not passed yet."""
        return len(self._history.get(group_id, ()))
