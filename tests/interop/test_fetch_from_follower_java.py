"""Java's consumer with client.rack reads from the replica in its rack (KIP-392) and gets every record, through its
fetch sessions: three in-process brokers in racks r1, r2, r3 with replica.selector.class set."""

from __future__ import annotations

from typing import Any

import pytest

from klamm.testing import run_cluster

from tests.integration.test_fetch_from_follower import RACK_AWARE, settled
from tests.integration.test_replication import create

from .records import expected, from_java

pytestmark = [pytest.mark.timeout(240), pytest.mark.java, pytest.mark.single_node]


def bytes_out(cluster: Any, node: int, topic: str) -> float:
    async def read() -> float:
        registry = cluster.brokers[node].metrics.registry
        return registry.get_sample_value("klamm_topic_bytes_out_total", {"topic": topic}) or 0.0
    return cluster.call(read())


def test_java_consumer_reads_from_the_follower_in_its_rack(java_client, tmp_path, monkeypatch) -> None:
    with run_cluster(3, {"replica.selector.class": RACK_AWARE}, {n: {"broker.rack": f"r{n}"} for n in (1, 2, 3)},
                     replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=200) as cluster:
        create(cluster, "java-racked")
        bs = cluster.bootstrap_servers
        java_client.run("produce", bs, "java-racked", 300, "lz4", "size=100", "prefix=rack").ok()
        leader, followers = settled(cluster, "java-racked", 300)
        near = followers[0]
        properties = tmp_path / "consumer.properties"
        properties.write_text(f"client.rack=r{near}\n")
        monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", str(properties))
        consumed = java_client.run("consume", bs, "java-racked", 0, 0, 300).ok()
        assert [from_java(o) for o in consumed.lines] == expected("rack", 300, size=100)
        # the records went out of the follower in the consumer's rack, not the leader nor the other follower
        assert bytes_out(cluster, near, "java-racked") > 0
        assert bytes_out(cluster, leader, "java-racked") == 0
        assert bytes_out(cluster, followers[1], "java-racked") == 0
