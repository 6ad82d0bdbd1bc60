"""State that expires: idle transactional ids go with a tombstone in __transaction_state (so a restart
does not bring them back), after transactional.id.expiration.ms, checked every
transaction.remove.expired.transaction.cleanup.interval.ms."""

from __future__ import annotations

from typing import Any

from tests.integration.conftest import BrokerThread
from tests.integration.test_coordinator_failures import (add_partition, eventually, find, init, open_transaction,
                                                        txn_state)


def test_transactional_ids_expire_and_stay_gone_after_restart(broker_factory: Any) -> None:
    broker: BrokerThread = broker_factory(**{"transactional.id.expiration.ms": "300",
                                             "transaction.remove.expired.transaction.cleanup.interval.ms": "50",
                                             "transaction.state.log.num.partitions": "2"})
    with broker.connect() as client:
        find(client, "idle", 1)
        idle = init(client, "idle")
        assert idle.error_code == 0
        open_transaction(client, "busy", "tx", timeout_ms=60000)  # Ongoing: it stays
        eventually(lambda: "idle" not in txn_state(broker))
        assert txn_state(broker)["busy"].state.display == "Ongoing"
    broker.restart()
    assert "idle" not in txn_state(broker) and "busy" in txn_state(broker)
    with broker.connect() as client:
        again = init(client, "idle")
        assert again.error_code == 0 and again.producer_id != idle.producer_id and again.producer_epoch == 0
        assert add_partition(client, "idle", "tx", again.producer_id) == 0
