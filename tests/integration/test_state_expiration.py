"""State that expires: idle transactional ids go with a tombstone in __transaction_state (so a restart
does not bring them back), after transactional.id.expiration.ms, checked every
transaction.remove.expired.transaction.cleanup.interval.ms; idle producer ids leave each partition's
producer state after producer.id.expiration.ms, checked every producer.id.expiration.check.interval.ms."""

from __future__ import annotations

import time
from typing import Any

from klamm.protocol.records import NewRecord, build_batch

from tests.integration.conftest import BrokerThread, RawClient, create_topic, produce
from tests.integration.test_coordinator_failures import (add_partition, eventually, find, init, open_transaction,
                                                        time_passes, txn_state)


def test_transactional_ids_expire_and_stay_gone_after_restart(broker_factory: Any) -> None:
    broker: BrokerThread = broker_factory(**{"transactional.id.expiration.ms": "60000",
                                             "transaction.remove.expired.transaction.cleanup.interval.ms": "50",
                                             "transaction.state.log.num.partitions": "2"})
    with broker.connect() as client:
        find(client, "idle", 1)
        idle = init(client, "idle")
        assert idle.error_code == 0
        open_transaction(client, "busy", "tx", timeout_ms=600000)  # Ongoing: it stays
        time_passes(broker, 61000)
        eventually(lambda: "idle" not in txn_state(broker))
        assert txn_state(broker)["busy"].state.display == "Ongoing"
    broker.restart()
    assert "idle" not in txn_state(broker) and "busy" in txn_state(broker)
    with broker.connect() as client:
        again = init(client, "idle")
        assert again.error_code == 0 and again.producer_id != idle.producer_id and again.producer_epoch == 0
        assert add_partition(client, "idle", "tx", again.producer_id) == 0


DESCRIBE_PRODUCERS = 61


def producers(client: RawClient, topic: str) -> dict[int, Any]:
    response = client.request(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    return {p.producer_id: p for p in response.topics[0].partitions[0].active_producers}


def idempotent(pid: int, sequence: int, timestamp: int) -> bytes:
    return build_batch([NewRecord(None, b"v", timestamp=timestamp)], producer_id=pid, producer_epoch=0,
                       base_sequence=sequence)


def test_idle_producer_ids_expire(broker_factory: Any) -> None:
    broker: BrokerThread = broker_factory(**{"producer.id.expiration.ms": "600000",
                                             "producer.id.expiration.check.interval.ms": "50"})
    now = int(time.time() * 1000)
    with broker.connect() as client:
        create_topic(client, "p")
        assert produce(client, "p", idempotent(1, 0, now - 3_600_000)).error_code == 0  # its last write: an hour ago
        assert produce(client, "p", idempotent(2, 0, now)).error_code == 0
        eventually(lambda: set(producers(client, "p")) == {2})
        # producer 2 is still known: a gap in its sequence is refused
        assert produce(client, "p", idempotent(2, 5, now)).error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
        # producer 1 was forgotten: like an unknown producer (Kafka since KIP-360) it may go on at any sequence
        assert produce(client, "p", idempotent(1, 5, now)).error_code == 0
        assert set(producers(client, "p")) == {1, 2}
