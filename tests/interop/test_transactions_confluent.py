"""Transactions with confluent-kafka (librdkafka): commit/abort with a read_committed consumer,
the transaction timeout aborting a stale transaction, and a broker restart mid-transaction."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import BROKER_KIND, BrokerFactory

from .helpers import create_topic

pytestmark = [pytest.mark.timeout(120)]

SMALL = {"transaction.state.log.num.partitions": 5, "offsets.topic.num.partitions": 5}


def txn_producer(bootstrap: str, txn_id: str, timeout_ms: int = 60000) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": timeout_ms, "message.timeout.ms": timeout_ms})
    producer.init_transactions(30)
    return producer


def consume(bootstrap: str, topic: str, isolation: str, partitions: int = 1, quiet_s: float = 3.0,
            first_s: float | None = None) -> list[str]:
    """Every value until `quiet_s` pass without one; the first may take `first_s` (default `quiet_s`)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-{isolation}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[str] = []
    quiet_until = time.monotonic() + (quiet_s if first_s is None else first_s)
    try:
        while time.monotonic() < quiet_until:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value().decode())
                quiet_until = time.monotonic() + quiet_s
    finally:
        consumer.close()
    return values


def plain_produce(bootstrap: str, topic: str, value: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    producer.produce(topic, value=value.encode(), partition=0)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("txn-confluent"))
    yield factory(overrides=SMALL)
    factory.close()


def test_commit_and_abort(txn_broker, topic):
    create_topic(txn_broker.bootstrap, topic, partitions=2)
    producer = txn_producer(txn_broker.bootstrap, f"{topic}-txn")
    for outcome, values in (("commit", "c1 c2"), ("abort", "a1 a2"), ("commit", "c3 c4")):
        producer.begin_transaction()
        for i, value in enumerate(values.split()):
            producer.produce(topic, value=value.encode(), partition=i % 2)
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    assert sorted(consume(txn_broker.bootstrap, topic, "read_committed", 2)) == ["c1", "c2", "c3", "c4"]
    assert sorted(consume(txn_broker.bootstrap, topic, "read_uncommitted", 2)) == ["a1", "a2", "c1", "c2", "c3",
                                                                                   "c4"]


def test_transaction_timeout_aborts(txn_broker, topic):
    create_topic(txn_broker.bootstrap, topic)
    producer = txn_producer(txn_broker.bootstrap, f"{topic}-txn", timeout_ms=3000)
    producer.begin_transaction()
    producer.produce(topic, value=b"stale", partition=0)
    producer.flush(30)
    plain_produce(txn_broker.bootstrap, topic, "after")
    assert consume(txn_broker.bootstrap, topic, "read_committed", quiet_s=1.0) == []  # the LSO holds at "stale"
    time.sleep(4)  # past the timeout: the coordinator aborts it
    assert consume(txn_broker.bootstrap, topic, "read_committed") == ["after"]


@pytest.mark.persistence
def test_restart_mid_transaction(tmp_path, topic):
    factory = BrokerFactory(tmp_path)
    broker = factory(overrides=SMALL)
    try:
        create_topic(broker.bootstrap, topic)
        # A cluster of processes restarts slower than one (14 s on a loaded CI machine): the transaction must
        # outlive the restart and the first reads after it (on a loaded machine, a one-node broker's first answer
        # after a restart took seconds); the wait for its abort below is counted from its start.
        timeout_s = 15 if BROKER_KIND == "klamm" else 30
        producer = txn_producer(broker.bootstrap, f"{topic}-txn", timeout_ms=timeout_s * 1000)
        began = time.monotonic()
        producer.begin_transaction()
        producer.produce(topic, value=b"open", partition=0)
        producer.flush(30)
        plain_produce(broker.bootstrap, topic, "after")
        broker.stop()
        broker.start()
        # both records are there after the restart (the first one may take a while on a loaded machine: a
        # second of quiet from the start once came before a freshly restarted broker's first answer) ...
        assert consume(broker.bootstrap, topic, "read_uncommitted", quiet_s=1.0, first_s=20) == ["open", "after"]
        # ... and the open transaction still holds the LSO, asked of a broker that has answered already
        assert consume(broker.bootstrap, topic, "read_committed", quiet_s=1.0) == []
        time.sleep(max(0.0, began + timeout_s + 1 - time.monotonic()))  # the reloaded coordinator aborts it then
        assert consume(broker.bootstrap, topic, "read_committed") == ["after"]
        del producer
    finally:
        factory.close()
