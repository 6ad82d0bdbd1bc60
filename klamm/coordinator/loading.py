"""Loading a coordinator's internal partitions: which ones (those led here), and reading them batch by batch.

Both coordinators rebuild their state by replaying a partition when this broker
becomes its leader. Reading advances by whole batches, so a batch that
compaction emptied of records still moves the position on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from typing import Any

from klamm.protocol.batch import BatchHeader, split_batches

log = logging.getLogger("klamm.coordinator")

READ_CHUNK_BYTES = 1024 * 1024


def read_batches(partition: Any) -> Iterator[tuple[bytes, BatchHeader, int]]:
    """(buffer, batch header, first offset to replay) for every batch of the partition's log.

    Records of a batch below the third value are before the log start offset and
    are not part of the state.
    """
    offset, end = partition.log_start_offset, partition.log_end_offset
    while offset < end:
        buf = partition.log.read_bytes(offset, READ_CHUNK_BYTES, max_offset=end)
        if not buf:
            return
        for header in split_batches(buf):
            if header.next_offset <= offset:
                continue
            yield buf, header, offset
            offset = header.next_offset


class PartitionLoads:
    """Which partitions of a coordinator's internal topic it serves: those this broker leads.

    `follow(image)` compares the image's leaders with the partitions served: a
    partition newly led is begun (`begin`, so requests meanwhile get
    COORDINATOR_LOAD_IN_PROGRESS) and loaded in its own task, after the image
    change that led to it; one no longer led is unloaded (`unload`), its load
    cancelled if it had not run. `load_now` finishes pending loads at once (a new,
    empty topic; start-up).
    """

    def __init__(self, topic: str, node_id: int, begin: Callable[[int], None], load: Callable[[int], None],
                 unload: Callable[[int], None]) -> None:
        self.topic = topic
        self.node_id = node_id
        self._begin, self._load, self._unload = begin, load, unload
        self._pending: dict[int, asyncio.Task[None]] = {}

    def follow(self, image: Any, served: frozenset[int]) -> None:
        topic = image.topics_by_name.get(self.topic)
        if topic is None:
            return
        led = {index for index, partition in topic.partitions.items() if partition.leader == self.node_id}
        resigned = sorted(served - led)
        for index in resigned:
            pending = self._pending.pop(index, None)
            if pending is not None:
                pending.cancel()
            self._unload(index)
        if resigned:
            log.info("no longer coordinating %s partitions %s", self.topic, ",".join(map(str, resigned)))
        for index in sorted(led - served):
            self._begin(index)
            self._pending[index] = asyncio.ensure_future(self._load_soon(index))

    async def _load_soon(self, index: int) -> None:
        await asyncio.sleep(0)
        del self._pending[index]
        self._load(index)

    def pending(self) -> bool:
        return bool(self._pending)

    async def settled(self) -> None:
        """Until the loads begun so far have run (or were cancelled)."""
        if self._pending:
            await asyncio.wait(list(self._pending.values()))

    def load_now(self) -> None:
        pending, self._pending = self._pending, {}
        for index, task in sorted(pending.items()):
            task.cancel()
            self._load(index)

    def stop(self) -> None:
        for task in self._pending.values():
            task.cancel()
        self._pending.clear()
