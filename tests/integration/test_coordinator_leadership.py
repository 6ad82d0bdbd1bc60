"""The coordinators serve the internal partitions this broker leads, following the metadata image.

When the image moves the leadership of a __consumer_offsets or __transaction_state
partition to another broker, this broker stops coordinating its groups or
transactional ids (NOT_COORDINATOR, and FindCoordinator names the new leader);
when leadership comes back, the partition is loaded again from its log. The
leader is moved by committing a PartitionChangeRecord through the broker's
controller, as the cluster's controller does on a fail-over.
"""

from __future__ import annotations

from typing import Any

import pytest

from klamm.controller.records import MetadataRecord
from klamm.coordinator.partitioning import partition_for
from klamm.protocol.errors import ErrorCode
from klamm.protocol.topics import CONSUMER_OFFSETS, TRANSACTION_STATE

from tests.integration.conftest import BrokerThread, RawClient, create_topic
from tests.integration.test_coordinator_failures import (FIND_COORDINATOR, commit, committed, end_txn, eventually,
                                                        init)

OTHER_NODE, OTHER_PORT = 2, 19999
PARTITIONS = 3


@pytest.fixture
def broker(broker_factory: Any) -> BrokerThread:
    return broker_factory(**{"group.initial.rebalance.delay.ms": "0",
                             "offsets.topic.num.partitions": str(PARTITIONS),
                             "transaction.state.log.num.partitions": str(PARTITIONS)})


def move_leader(broker: BrokerThread, topic: str, index: int, leader: int) -> None:
    def change() -> None:
        controller = broker.broker.controller
        if OTHER_NODE not in controller.image.brokers:
            controller.register_broker(OTHER_NODE, "127.0.0.1", OTHER_PORT)
        topic_id = controller.image.topics_by_name[topic].topic_id
        controller._commit([MetadataRecord("PartitionChangeRecord", {
            "topic_id": topic_id, "partition_id": index, "leader": leader, "isr": [leader],
            "replicas": [broker.broker.node_id, OTHER_NODE]})])
    broker.call(change)


def find(client: RawClient, key: str, key_type: int = 0) -> Any:
    return client.request(FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})


def test_groups_follow_the_leadership_of_their_partition(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "t")
    assert find(client, "g").node_id == broker.broker.node_id
    assert commit(client, "g", "t", 5) == 0
    moved = partition_for("g", PARTITIONS)
    stays = next(g for g in (f"h{i}" for i in range(100)) if partition_for(g, PARTITIONS) != moved)
    assert commit(client, stays, "t", 9) == 0

    move_leader(broker, CONSUMER_OFFSETS, moved, OTHER_NODE)
    found = find(client, "g")
    assert (found.error_code, found.node_id, found.port) == (0, OTHER_NODE, OTHER_PORT)
    assert commit(client, "g", "t", 6) == ErrorCode.not_coordinator
    assert broker.call(lambda: "g" not in broker.broker.group_coordinator.coordinator.groups)
    assert committed(client, stays, "t") == 9  # the other partitions are still served here

    move_leader(broker, CONSUMER_OFFSETS, moved, broker.broker.node_id)
    assert find(client, "g").node_id == broker.broker.node_id
    eventually(lambda: committed(client, "g", "t") == 5)  # loaded again from the log
    assert commit(client, "g", "t", 6) == 0


def test_transactional_ids_follow_the_leadership_of_their_partition(broker: BrokerThread, client: RawClient) -> None:
    assert find(client, "tid", key_type=1).error_code == 0
    pid = init(client, "tid").producer_id
    moved = partition_for("tid", PARTITIONS)

    move_leader(broker, TRANSACTION_STATE, moved, OTHER_NODE)
    assert find(client, "tid", key_type=1).node_id == OTHER_NODE
    assert init(client, "tid").error_code == ErrorCode.not_coordinator
    assert end_txn(client, "tid", pid, False) == ErrorCode.not_coordinator

    move_leader(broker, TRANSACTION_STATE, moved, broker.broker.node_id)
    eventually(lambda: init(client, "tid").error_code == 0)
    again = init(client, "tid")
    assert again.producer_id == pid and again.producer_epoch >= 1  # the same id, its epoch bumped: state survived
