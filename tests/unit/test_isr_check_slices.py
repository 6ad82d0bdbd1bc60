"""The periodic ISR check walks the partitions a broker hosts SLICE_S a turn of the loop.

Every led partition is asked whether its followers lag (Kafka's isr-expiration task, every
replica.lag.time.max.ms / 2). In one callback that was about 2 us a partition, 3.8 ms at 2,000 partitions: a
stall of the event loop every 15 s. These tests pin down that the pass hands the loop back between slices,
still checks every partition, and leaves out one removed while it ran.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from klamm.broker import replica_manager as replica_manager_module
from klamm.broker.partition import Partition
from tests.unit.test_adopt_new_topics import single_node_image
from tests.unit.test_prepare_logs import create_records
from tests.unit.test_replica_manager_delta import manager, replay

PARTITIONS = 6


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The partitions whose check_isr ran, in order; one partition a slice."""
    calls: list[tuple[str, int]] = []
    monkeypatch.setattr(replica_manager_module, "SLICE_S", 0.0)
    monkeypatch.setattr(replica_manager_module, "PARTITIONS_A_STEP", 1)
    monkeypatch.setattr(Partition, "check_isr", lambda self: calls.append((self.topic, self.index)))
    return calls


def hosting(path: Path, partitions: int):
    replicas, _ = manager(path)
    image = single_node_image()
    replicas.apply_image(replay(image, create_records(image, "led", partitions)))
    assert len(replicas.partitions) == partitions
    return replicas


def test_the_isr_check_hands_the_loop_back_between_slices(tmp_path: Path, checked) -> None:
    replicas = hosting(tmp_path, PARTITIONS)
    seen_each_turn: list[int] = []

    async def watch() -> None:
        while True:
            seen_each_turn.append(len(checked))
            await asyncio.sleep(0)

    async def run() -> None:
        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0)
        await replicas.check_isr()
        watcher.cancel()

    asyncio.run(run())
    assert sorted(checked) == sorted(replicas.partitions)
    # the watcher ran between the partitions' checks, not only before and after them all
    assert len([n for n in seen_each_turn if 0 < n < PARTITIONS]) >= PARTITIONS - 2


def test_a_partition_removed_during_the_pass_is_not_checked(tmp_path: Path, checked) -> None:
    replicas = hosting(tmp_path, PARTITIONS)
    order = list(replicas.partitions)
    gone = order[-1]

    async def run() -> None:
        check = asyncio.create_task(replicas.check_isr())
        while not checked:
            await asyncio.sleep(0)
        del replicas.partitions[gone]
        await check

    asyncio.run(run())
    assert checked == order[:-1]
