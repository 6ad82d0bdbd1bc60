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
                                                        init, last_stable_offset, open_transaction)

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


# ------------------------------------------------------------ WriteTxnMarkers ---
WRITE_TXN_MARKERS = 27


def write_marker(client: RawClient, pid: int, topic: str, index: int, commit_: bool, coordinator_epoch: int,
                 epoch: int = 0, version: int = 1) -> int:
    response = client.request(WRITE_TXN_MARKERS, version, {"markers": [{
        "producer_id": pid, "producer_epoch": epoch, "transaction_result": commit_, "coordinator_epoch": coordinator_epoch,
        "topics": [{"name": topic, "partition_indexes": [index]}]}]})
    [marker] = response.markers
    assert marker.producer_id == pid
    return marker.topics[0].partitions[0].error_code


def test_write_txn_markers_ends_a_transaction_on_a_partition_led_here(broker: BrokerThread, client: RawClient) -> None:
    pid = open_transaction(client, "tid", "t")
    assert last_stable_offset(client, "t") == 0  # the open transaction holds the LSO
    # as another broker's coordinator would: the marker ends the transaction here
    assert write_marker(client, pid, "t", 0, True, coordinator_epoch=5) == 0
    assert last_stable_offset(client, "t") == 2  # the record and the marker
    # a marker from an older coordinator is fenced, and one of an older producer epoch refused
    assert write_marker(client, pid, "t", 0, False, coordinator_epoch=4) == ErrorCode.transaction_coordinator_fenced
    assert write_marker(client, pid, "t", 0, True, coordinator_epoch=5) == 0  # a retried marker is harmless
    assert write_marker(client, pid, "missing", 0, True, coordinator_epoch=5) == ErrorCode.unknown_topic_or_partition

    move_leader(broker, "t", 0, OTHER_NODE)
    assert write_marker(client, pid, "t", 0, True, coordinator_epoch=5) == ErrorCode.not_leader_or_follower


def test_write_txn_markers_v0_as_a_kafka_3_coordinator_sends_it(broker: BrokerThread, client: RawClient) -> None:
    pid = open_transaction(client, "tid0", "t0")
    assert last_stable_offset(client, "t0") == 0
    assert write_marker(client, pid, "t0", 0, False, coordinator_epoch=0, version=0) == 0
    assert last_stable_offset(client, "t0") == 2
    assert write_marker(client, pid, "missing", 0, True, coordinator_epoch=0, version=0) == \
        ErrorCode.unknown_topic_or_partition
