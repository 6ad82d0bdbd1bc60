"""aiokafka's consume-transform-produce loop: send_offsets_to_transaction (TxnOffsetCommit v0, no member id)
into a group whose consumer is an active member, then commit; the group's offset moves with the transaction."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.conftest import BrokerFactory

from .helpers import create_topic

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("txn-offsets-aiokafka"))
    yield factory(overrides={"group.initial.rebalance.delay.ms": 0})
    factory.close()


async def _consume_transform_produce(bs: str, source: str, sink: str) -> tuple[int | None, list[bytes]]:
    producer = AIOKafkaProducer(bootstrap_servers=bs)
    await producer.start()
    for i in range(10):
        await producer.send(source, value=b"in-%d" % i, partition=0)
    await producer.stop()

    consumer = AIOKafkaConsumer(source, bootstrap_servers=bs, group_id="txn-group", auto_offset_reset="earliest",
                                enable_auto_commit=False, isolation_level="read_committed")
    txn = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-txn")
    await consumer.start()
    await txn.start()
    tp = TopicPartition(source, 0)
    try:
        seen = 0
        while seen < 10:  # the consumer is a member of the group throughout
            batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
            for records in batches.values():
                async with txn.transaction():
                    for record in records:
                        await txn.send(sink, value=record.value.replace(b"in", b"out"), partition=0)
                    await txn.send_offsets_to_transaction({tp: records[-1].offset + 1}, "txn-group")
                seen += len(records)
        # The group's offset moves when the commit markers are written and replicated, after EndTxn answers
        # (as in Kafka: OffsetFetch reads at the high watermark; without require_stable it does not wait).
        position = await consumer.committed(tp)
        for _ in range(100):
            if position == 10:
                break
            await asyncio.sleep(0.05)
            position = await consumer.committed(tp)
    finally:
        await txn.stop()
        await consumer.stop()

    reader = AIOKafkaConsumer(sink, bootstrap_servers=bs, auto_offset_reset="earliest",
                              isolation_level="read_committed")
    await reader.start()
    values: list[bytes] = []
    try:
        while len(values) < 10:
            batches = await asyncio.wait_for(reader.getmany(timeout_ms=500), 30)
            values += [r.value for records in batches.values() for r in records]
    finally:
        await reader.stop()
    return position, values


def test_send_offsets_to_transaction_with_an_active_member(txn_broker, topic):
    source, sink = create_topic(txn_broker.bootstrap, topic + "-in"), create_topic(txn_broker.bootstrap, topic + "-out")
    position, values = asyncio.run(_consume_transform_produce(txn_broker.bootstrap, source, sink))
    assert position == 10
    assert values == [b"out-%d" % i for i in range(10)]
