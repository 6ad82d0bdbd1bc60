"""A fetch response queued behind a long poll sends the bytes it read, whatever happens to their segment.

Two Fetch v7 requests are pipelined on one connection: the first long-polls an
empty topic, the second reads a topic with file.delete.delay.ms=0 and waits,
answered, behind it. The second topic's segment is then deleted (topic
deletion, retention, a cleaner swap), new topics are created and written (their
files take the freed descriptor numbers), and the long poll is woken. Kafka
keeps the file open for the response, so the second response must carry the
original records, never the new topics'.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from klamm.protocol.records import build_batch, iter_records
from tests.integration.conftest import (
    DELETE_TOPICS,
    FETCH,
    BrokerThread,
    RawClient,
    create_topic,
    fetch_body,
    produce,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

ORIGINAL = [(b"k%d" % n, b"original-%03d" % n) for n in range(20)]
INTRUDER = [(b"k%d" % n, b"intruder-%03d" % n) for n in range(20)]  # same sizes: a reused fd reads as valid


def _parked(broker: BrokerThread, topic: str) -> bool:
    return broker.call(lambda: bool(broker.broker.replicas.get(topic, 0)._waiters))


def _answered_behind(broker: BrokerThread) -> bool:
    """Some connection holds a finished response queued behind an unfinished one."""
    def check() -> bool:
        for processor in broker.broker._processors:
            for connection in processor.connections:
                pending = list(connection._pending)
                if len(pending) == 2 and not pending[0].done() and pending[1].done():
                    return True
        return False
    return broker.call(check)


def _no_deletes_pending(broker: BrokerThread) -> bool:
    return broker.call(lambda: broker.broker.delayed_deletes.pending == 0)


def _queued_fetch_survives(broker: BrokerThread, victim: str, remove: Callable[[RawClient], None]) -> None:
    with broker.connect() as admin, broker.connect() as consumer:
        create_topic(admin, "idle")
        consumer.send(FETCH, 7, fetch_body("idle", 0, max_wait_ms=30_000, min_bytes=1))
        wait_for(lambda: _parked(broker, "idle"))
        queued = consumer.send(FETCH, 7, fetch_body(victim, 0))
        wait_for(lambda: _answered_behind(broker))

        remove(admin)
        wait_for(lambda: _no_deletes_pending(broker))  # file.delete.delay.ms=0: the removal has run
        for n in range(3):
            create_topic(admin, f"newcomer-{n}")
            assert produce(admin, f"newcomer-{n}", build_batch(INTRUDER)).error_code == 0

        assert produce(admin, "idle", build_batch([(b"k", b"wake")])).error_code == 0
        consumer.receive()  # the long poll
        got, response = consumer.receive()
    assert got == queued
    [topic] = response.responses
    assert topic.topic == victim
    [partition] = topic.partitions
    assert partition.error_code == 0
    records = list(iter_records(bytes(partition.records)))
    assert [(r.key, r.value) for r in records] == ORIGINAL


def _delete_topic(admin: RawClient, name: str) -> None:
    response = admin.request(DELETE_TOPICS, 5, {"topic_names": [name], "timeout": 10_000})
    assert response.responses[0].error_code == 0


def _victim(broker: BrokerThread, configs: dict[str, str] | None = None) -> str:
    with broker.connect() as c:
        create_topic(c, "victim", configs={"file.delete.delay.ms": "0", **(configs or {})})
        assert produce(c, "victim", build_batch(ORIGINAL)).error_code == 0
    return "victim"


def test_topic_deletion(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory()
    victim = _victim(broker)

    _queued_fetch_survives(broker, victim, lambda admin: _delete_topic(admin, victim))
    assert not list(broker.log_dir.glob("*-delete"))  # removed, off the event loop


def test_retention(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory()
    victim = _victim(broker, {"retention.ms": "1000"})

    def retain(_admin: RawClient) -> None:
        later = int(time.time() * 1000) + 60_000
        assert broker.call(lambda: broker.broker.retention.run_once(now_ms=later)) == 1

    _queued_fetch_survives(broker, victim, retain)


def test_cleaner_swap(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"log.cleaner.backoff.ms": "600000"})
    victim = _victim(broker, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    log: Any = broker.call(lambda: broker.broker.replicas.get(victim, 0).log)
    with broker.connect() as c:  # a newer value of every key, in a later segment: the first is all dirty
        broker.call(log.roll)
        assert produce(c, victim, build_batch(INTRUDER)).error_code == 0
        broker.call(log.roll)
    first = broker.call(lambda: log.segments[0])

    def clean(_admin: RawClient) -> None:
        service = broker.broker.log_cleaner
        assert broker.run(service.clean_once(service.cleaners[0]))
        assert broker.call(lambda: log.segments[0]) is not first  # swapped out

    _queued_fetch_survives(broker, victim, clean)


def test_dropped_response_releases_its_file(broker_factory: Callable[..., BrokerThread]) -> None:
    """A queued response whose connection closes lets go of its lease: the deleted file is closed."""
    broker = broker_factory()
    victim = _victim(broker)
    file = broker.call(lambda: broker.broker.replicas.get(victim, 0).log.segments[0].file)
    with broker.connect() as admin:
        create_topic(admin, "idle")
        consumer = broker.connect()
        consumer.send(FETCH, 7, fetch_body("idle", 0, max_wait_ms=30_000, min_bytes=1))
        wait_for(lambda: _parked(broker, "idle"))
        consumer.send(FETCH, 7, fetch_body(victim, 0))
        wait_for(lambda: _answered_behind(broker))
        _delete_topic(admin, victim)
        wait_for(lambda: _no_deletes_pending(broker))
        assert not file.closed  # the queued response still holds it
        consumer.close()
        wait_for(lambda: broker.call(lambda: file.closed))


def test_long_poll_sees_its_topic_deleted(broker_factory: Callable[..., BrokerThread]) -> None:
    """Kafka completes a delayed fetch whose partition went away, with UNKNOWN_TOPIC_OR_PARTITION;
    the partition is looked up again after the wake-up, not read through the one it had."""
    broker = broker_factory()
    with broker.connect() as admin, broker.connect() as consumer:
        create_topic(admin, "doomed")
        consumer.send(FETCH, 7, fetch_body("doomed", 0, max_wait_ms=30_000, min_bytes=1))
        wait_for(lambda: _parked(broker, "doomed"))
        _delete_topic(admin, "doomed")
        _, response = consumer.receive()  # within the socket timeout, not after max_wait
    [partition] = response.responses[0].partitions
    assert partition.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert not partition.records
