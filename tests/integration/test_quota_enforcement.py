"""Client quotas enforced: a producer over producer_byte_rate and a consumer over consumer_byte_rate are slowed
to their rates (throttle_time_ms in responses, the connection muted meanwhile), request_percentage throttles,
and clients without a quota are not touched."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.conftest import BrokerThread, create_topic
from tests.integration.test_client_quota_apis import alter

pytestmark = pytest.mark.timeout(120)

RATE = 200_000  # bytes per second
WINDOWS = {"quota.window.num": "3", "quota.window.size.seconds": "1"}  # a short rate window: a short test
VALUE = bytes(1000)


def _set_quota(broker: BrokerThread, entity: tuple[tuple[str, str | None], ...], key: str, value: float) -> None:
    with broker.connect() as client:
        assert alter(client, [(entity, {key: value})]) == [(entity, 0, None)]


def _produce_for(broker: BrokerThread, seconds: float, client_id: str) -> list[tuple[float, int]]:
    """Produce as fast as librdkafka lets us for `seconds`; (time acknowledged, bytes) of each record."""
    acked: list[tuple[float, int]] = []
    # batches far smaller than a second's quota: the rate is measured a window of requests at a time
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "client.id": client_id, "linger.ms": 5,
                         "acks": 1, "batch.size": 16384, "queue.buffering.max.kbytes": 2048})

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce("quota", VALUE, partition=0, on_delivery=delivered)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    return acked


def _rate_between(acked: list[tuple[float, int]], start: float, end: float) -> float:
    return sum(size for at, size in acked if start <= at < end) / (end - start)


def test_a_producer_over_its_byte_rate_is_slowed_to_it(broker_factory: Any) -> None:
    broker = broker_factory(**WINDOWS)
    with broker.connect() as client:
        create_topic(client, "quota")
    _set_quota(broker, (("client-id", "slow"),), "producer_byte_rate", RATE)
    acked = _produce_for(broker, 8, "slow")
    first = acked[0][0]
    steady = _rate_between(acked, first + 3, first + 8)  # past the first windows' burst
    assert abs(steady - RATE) / RATE < 0.10, f"{steady:.0f} B/s under a quota of {RATE} B/s"
    # a client id without a quota is not slowed
    free = _produce_for(broker, 3, "free")
    assert _rate_between(free, free[0][0], free[0][0] + 3) > 3 * RATE


def test_a_consumer_over_its_byte_rate_is_slowed_to_it(broker_factory: Any) -> None:
    broker = broker_factory(**WINDOWS)
    with broker.connect() as client:
        create_topic(client, "quota")
    _produce_for(broker, 2, "loader")
    _set_quota(broker, (("user", None),), "consumer_byte_rate", RATE)  # every user's default: ANONYMOUS here
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "group.id": "q",
                         "max.partition.fetch.bytes": 100_000})
    consumer.assign([TopicPartition("quota", 0, 0)])
    got: list[tuple[float, int]] = []
    end = time.monotonic() + 7
    while time.monotonic() < end:
        got += [(time.monotonic(), len(m.value())) for m in consumer.consume(1000, 0.2) if m.error() is None]
    consumer.close()
    first = got[0][0]
    steady = _rate_between(got, first + 3, first + 7)
    assert abs(steady - RATE) / RATE < 0.15, f"{steady:.0f} B/s under a quota of {RATE} B/s"


def test_responses_carry_the_throttle_time(broker_factory: Any) -> None:
    """request_percentage: a client whose requests take more than its share is told to wait (Produce v9's
    throttle_time_ms), and its next request waits too."""
    broker = broker_factory(**WINDOWS)
    with broker.connect() as client:
        create_topic(client, "quota")
    _set_quota(broker, (("client-id", None),), "request_percentage", 0.001)
    with broker.connect(client_id="busy") as client:
        throttled = [0.0]
        for _ in range(2000):  # each Metadata request costs some microseconds of the broker's time
            response = client.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
            throttled.append(response.throttle_time.total_seconds())
            if throttled[-1]:
                break
        assert throttled[-1] > 0
        started = time.monotonic()
        client.request(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
        assert time.monotonic() - started >= throttled[-1] * 0.9  # the connection was muted meanwhile
