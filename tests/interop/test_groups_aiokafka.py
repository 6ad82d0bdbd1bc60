"""Consumer groups with aiokafka: three members on one event loop, a leave, and resuming from commits."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.conftest import BrokerFactory

from .helpers import create_topic

pytestmark = [pytest.mark.timeout(120)]

PARTITIONS = 6
RECORDS = 120


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-aiokafka"))
    yield factory(overrides={"group.initial.rebalance.delay.ms": 0})
    factory.close()


async def _covered(members: list[AIOKafkaConsumer], consumed: list, timeout: float = 40) -> None:
    async def settle() -> None:
        while True:
            sets = [{tp.partition for tp in m.assignment()} for m in members]
            if all(sets) and sorted(p for s in sets for p in s) == list(range(PARTITIONS)):
                return
            await _poll_all(members, consumed)

    await asyncio.wait_for(settle(), timeout)


async def _poll_all(members: list[AIOKafkaConsumer], consumed: list) -> None:
    for m in members:
        batches = await m.getmany(timeout_ms=50, max_records=10)
        for records in batches.values():
            consumed += [(r.partition, r.offset) for r in records]
        if batches:
            await m.commit()


async def _scenario(bs: str, topic: str) -> tuple[list, list]:
    producer = AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    for i in range(RECORDS):
        await producer.send(topic, value=str(i).encode(), partition=i % PARTITIONS)
    await producer.flush()
    await producer.stop()

    def consumer() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=bs, group_id="aio-group", auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500)

    members = [consumer() for _ in range(3)]
    consumed: list = []
    for m in members:
        await m.start()
    try:
        await _covered(members, consumed)
        await members[0].stop()  # LeaveGroup
        rest = members[1:]
        await _covered(rest, consumed)
        while len(consumed) < RECORDS // 2:
            await _poll_all(rest, consumed)
    finally:
        for m in members[1:]:
            await m.stop()
    first = list(consumed)
    # a new member resumes where the group's commits left off
    resumed = consumer()
    await resumed.start()
    second: list = []
    try:
        async def rest_of_it() -> None:
            while len(first) + len(second) < RECORDS:
                await _poll_all([resumed], second)

        await asyncio.wait_for(rest_of_it(), 40)
    finally:
        await resumed.stop()
    return first, second


def test_group_leave_and_resume(group_broker, topic):
    create_topic(group_broker.bootstrap, topic, PARTITIONS)
    first, second = asyncio.run(_scenario(group_broker.bootstrap, topic))
    # commits after every batch: nothing is consumed twice across the restart of the consumers
    assert sorted(first + second) == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS))
