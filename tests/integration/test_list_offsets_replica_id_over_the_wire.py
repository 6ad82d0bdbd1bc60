"""ListOffsets' replica_id over the wire (Kafka's ReplicaManager.fetchOffset): -1, a consumer, reads up to its
isolation level's end from the leader; -2, a debugging tool, reads up to the log end from any replica; a broker
id, a follower, reads up to the log end from the leader."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from klamm.protocol.errors import ErrorCode
from klamm.testing import EmbeddedCluster, run_cluster
from tests.integration.conftest import (
    INIT_PRODUCER_ID,
    LIST_OFFSETS,
    RawClient,
    create_topic,
    wait_for,
)
from tests.integration.test_transactions_wire import add_partition, txn_produce

CONSUMER, DEBUGGING = -1, -2


def latest(client: RawClient, topic: str, replica_id: int, isolation: int = 0, version: int = 7) -> Any:
    response = client.request(LIST_OFFSETS, version, {"replica_id": replica_id, "isolation_level": isolation,
                                                      "topics": [{"name": topic, "partitions": [
                                                          {"partition_index": 0, "timestamp": -1,
                                                           "current_leader_epoch": -1}]}]})
    answer = response.topics[0].partitions[0]
    return answer.error_code, answer.offset


def test_read_committed_applies_to_a_consumer_only(client: RawClient) -> None:
    create_topic(client, "tx")
    init = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": "tid", "transaction_timeout": 60000,
                                                "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == 0
    assert add_partition(client, "tid", "tx", init.producer_id) == 0
    assert txn_produce(client, "tid", "tx", init.producer_id, 0, b"open").error_code == 0
    assert latest(client, "tx", CONSUMER, isolation=1) == (ErrorCode.none, 0)  # the LSO: the transaction is open
    assert latest(client, "tx", CONSUMER, isolation=0) == (ErrorCode.none, 1)
    assert latest(client, "tx", DEBUGGING, isolation=1) == (ErrorCode.none, 1)  # the log end, isolation aside
    assert latest(client, "tx", 7, isolation=1) == (ErrorCode.none, 1)  # a follower's id: likewise


@pytest.fixture
def cluster():
    with run_cluster(2, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=200) as running:
        yield running


@pytest.mark.timeout(120)
def test_a_follower_answers_a_debugging_tool_only(cluster: EmbeddedCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("r", 1, 2)])["r"].result(15)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for n in range(3):
        producer.produce("r", value=b"v%d" % n)
    assert producer.flush(15) == 0
    leader = cluster.partition("r").leader
    follower = next(n for n in cluster.brokers if n != leader)
    wait_for(lambda: cluster.brokers[follower].replicas.partitions[("r", 0)].log_end_offset == 3)
    client = RawClient(cluster.brokers[follower].port)
    try:
        assert latest(client, "r", CONSUMER) == (ErrorCode.not_leader_or_follower, -1)
        assert latest(client, "r", leader) == (ErrorCode.not_leader_or_follower, -1)
        assert latest(client, "r", DEBUGGING) == (ErrorCode.none, 3)
        assert latest(client, "r", DEBUGGING, version=1) == (ErrorCode.none, 3)
    finally:
        client.close()
