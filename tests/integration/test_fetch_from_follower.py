"""A consumer reads from a replica in its rack (KIP-392): with replica.selector.class set, a partition's leader
names a follower in the consumer's rack (client.rack) as its preferred read replica, and the client fetches there.

Three in-process brokers in racks r1, r2, r3 (klamm.testing.run_cluster).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from klamm.protocol.errors import ErrorCode
from klamm.testing import EmbeddedCluster, run_cluster

from tests.integration.conftest import FETCH, RawClient, fetch, fetch_body
from tests.integration.test_replication import _on_loop, create, eventually, produce, replica

pytestmark = [pytest.mark.timeout(120)]

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


@pytest.fixture(scope="module")
def cluster():
    with run_cluster(3, {"replica.selector.class": RACK_AWARE},
                     {n: {"broker.rack": f"r{n}"} for n in (1, 2, 3)},
                     replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=200) as running:
        yield running


def rack_fetch(client: RawClient, topic: str, offset: int, rack: str, version: int = 11, **kwargs: Any) -> Any:
    response = client.request(FETCH, version, {**fetch_body(topic, offset, **kwargs), "rack_id": rack})
    assert response.error_code == 0
    return response.responses[0].partitions[0]


def settled(cluster: EmbeddedCluster, topic: str, count: int) -> tuple[int, list[int]]:
    """The leader and the followers of `topic`, once every replica has `count` records and fetched since."""
    leader = cluster.partition(topic).leader
    followers = [n for n in cluster.brokers if n != leader]
    eventually(lambda: all(replica(cluster, n, topic).high_watermark == count for n in cluster.brokers))
    def readable() -> list[int]:
        return sorted(f for f, _, _ in cluster.call(_on_loop(
            lambda: replica(cluster, leader, topic).readable_followers(count))))
    eventually(lambda: readable() == followers)
    return leader, followers


def test_the_leader_names_a_follower_in_the_consumers_rack(cluster: EmbeddedCluster) -> None:
    create(cluster, "near")
    assert len(produce(cluster, "near", 5)) == 5
    leader, followers = settled(cluster, "near", 5)
    client = RawClient(cluster.brokers[leader].port)
    assert rack_fetch(client, "near", 0, f"r{followers[0]}").preferred_read_replica == followers[0]

    started = time.monotonic()
    answer = rack_fetch(client, "near", 5, f"r{followers[1]}", max_wait_ms=30_000)
    assert time.monotonic() - started < 10  # answered at once, not parked for max_wait
    assert (answer.error_code, answer.preferred_read_replica, answer.high_watermark) == (
        ErrorCode.none, followers[1], 5)
    assert not answer.records

    assert rack_fetch(client, "near", 0, f"r{followers[0]}", version=12).preferred_read_replica == followers[0]

    # the leader's own rack, a rack no replica is in, or no rack: the leader serves the fetch
    for rack in (f"r{leader}", "elsewhere", ""):
        answer = rack_fetch(client, "near", 0, rack)
        assert (answer.error_code, answer.preferred_read_replica) == (ErrorCode.none, -1)
        assert answer.records
    assert fetch(client, "near", 0, version=10).records  # no rack_id before v11

    # the follower named serves the read, whatever the client's rack
    at_follower = rack_fetch(RawClient(cluster.brokers[followers[0]].port), "near", 0, f"r{followers[0]}")
    assert (at_follower.error_code, at_follower.preferred_read_replica) == (ErrorCode.none, -1)
    assert at_follower.records


def test_a_follower_without_the_offset_is_not_named(cluster: EmbeddedCluster) -> None:
    create(cluster, "ahead")
    assert len(produce(cluster, "ahead", 3)) == 3
    leader, followers = settled(cluster, "ahead", 3)
    client = RawClient(cluster.brokers[leader].port)
    # an offset past every follower's log end (here: past the log end): only the leader could answer it
    answer = rack_fetch(client, "ahead", 4, f"r{followers[0]}")
    assert (answer.error_code, answer.preferred_read_replica) == (ErrorCode.offset_out_of_range, -1)


def test_a_consumer_with_client_rack_reads_from_the_follower_in_its_rack(cluster: EmbeddedCluster) -> None:
    create(cluster, "racked")
    values = sorted(produce(cluster, "racked", 200))
    leader, followers = settled(cluster, "racked", 200)
    stats: list[dict] = []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "racked",
                         "client.rack": f"r{followers[1]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "statistics.interval.ms": 100,
                         "stats_cb": lambda s: stats.append(json.loads(s))})
    try:
        consumer.assign([TopicPartition("racked", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append(message.value())
        assert sorted(got) == values

        def fetching_from() -> Any:
            consumer.poll(0.1)
            partition = stats[-1]["topics"]["racked"]["partitions"]["0"] if stats else {}
            return partition.get("broker"), partition.get("leader")
        eventually(lambda: fetching_from() == (followers[1], leader), 10)
    finally:
        consumer.close()
