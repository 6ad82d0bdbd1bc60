"""A CreateTopics or CreatePartitions decision of many partitions in steps, spread over turns of the loop.

The dry-run decision a single node makes before its commit (LocalControllerClient) took about 1-2 us a
partition in one callback; it now runs PARTITIONS_A_STEP partitions a step and yields the loop between
slices. The steps decide exactly what the plain function decides.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest

from klamm.controller import topics as topics_module
from klamm.controller.image import empty_image
from klamm.controller.topics import (CreatePartitionsSpec, CreateTopicSpec, decide_create_partitions,
                                     decide_create_partitions_steps, decide_create_topics,
                                     decide_create_topics_steps, in_slices, run_steps)
from klamm.protocol.errors import ErrorCode
from tests.unit.test_replica_manager_delta import broker_records, replay

SPECS = [CreateTopicSpec("wide", 1000, 3), CreateTopicSpec("bad", 10, 7), CreateTopicSpec("narrow", 3, 2)]


def ids():
    counter = itertools.count(1)
    return lambda: uuid.UUID(int=next(counter))


def three_brokers():
    return replay(empty_image("c", 0), broker_records())


def test_the_steps_decide_what_the_function_does() -> None:
    image = three_brokers()
    arguments = {"default_partitions": 1, "default_replication_factor": 1}
    steps = decide_create_topics_steps(image, SPECS, new_topic_id=ids(), **arguments)
    count = 0
    while True:
        try:
            next(steps)
            count += 1
        except StopIteration as done:
            results, records = done.value
            break
    assert count == 1000 // topics_module.PARTITIONS_A_STEP
    assert (results, records) == decide_create_topics(image, SPECS, new_topic_id=ids(), **arguments)
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.invalid_replication_factor, ErrorCode.none]
    assert sum(r.type == "PartitionRecord" for r in records) == 1003


def test_adding_partitions_in_steps_decides_what_the_function_does() -> None:
    image = replay(three_brokers(), decide_create_topics(three_brokers(), [CreateTopicSpec("t", 2, 2)],
                                                         default_partitions=1, default_replication_factor=1)[1])
    specs = [CreatePartitionsSpec("t", 700), CreatePartitionsSpec("missing", 3)]
    assert run_steps(decide_create_partitions_steps(image, specs)) == decide_create_partitions(image, specs)
    results, records = decide_create_partitions(image, specs)
    assert len(records) == 698 and results[1].error == ErrorCode.unknown_topic_or_partition


def test_in_slices_lets_other_work_run_between_its_steps() -> None:
    image = three_brokers()
    turns: list[int] = []

    async def decide() -> tuple:
        async def count() -> None:
            while True:
                turns.append(1)
                await asyncio.sleep(0)
        counting = asyncio.create_task(count())
        await asyncio.sleep(0)
        decided = await in_slices(decide_create_topics_steps(image, SPECS, new_topic_id=ids(), default_partitions=1,
                                                             default_replication_factor=1), 0.0)
        counting.cancel()
        return decided
    decided = asyncio.run(decide())
    assert decided == decide_create_topics(image, SPECS, new_topic_id=ids(), default_partitions=1,
                                           default_replication_factor=1)
    assert len(turns) >= 1000 // topics_module.PARTITIONS_A_STEP


@pytest.mark.parametrize("partitions", [1, 63, 64, 65, 128])
def test_every_partition_is_decided_whatever_the_count(partitions: int) -> None:
    image = three_brokers()
    _, records = run_steps(decide_create_topics_steps(image, [CreateTopicSpec("t", partitions, 1)],
                                                      default_partitions=1, default_replication_factor=1))
    assert [r.data["partition_id"] for r in records if r.type == "PartitionRecord"] == list(range(partitions))
