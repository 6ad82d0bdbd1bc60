"""Fail-over under load with real clients: librdkafka and the Java client against three replicating brokers.

An idempotent acks=all producer streams into a topic with replication.factor=3
and min.insync.replicas=2 while the partition's leader is stopped again and
again (and fenced by the controller, as its session timeout would); each stopped
broker comes back while the next one goes. Afterwards: every acknowledged
record is in the log exactly once, at its acknowledged offset, in order, and
every replica holds the same log. The brokers run in this process
(klamm.testing.run_cluster); the clients are the real ones.
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klamm.testing import EmbeddedCluster, run_cluster

from .conftest import JavaClient, _json_lines
from .helpers import SequenceStream, confluent_consume, confluent_consumer, confluent_recs, wait_for
from .records import expected

pytestmark = [pytest.mark.timeout(300)]

FAILOVERS = 3


@pytest.fixture
def cluster():
    with run_cluster(3, replica_lag_time_max_ms=2000, replica_fetch_backoff_ms=50,
                     replica_fetch_wait_max_ms=100) as running:
        yield running


def create(c: EmbeddedCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(15)


def fail_over_repeatedly(c: EmbeddedCluster, topic: str, keep_going: Any) -> list[int]:
    """Stop the leader FAILOVERS times (each time the previous victim comes back); the leaders stopped."""
    stopped: list[int] = []
    for _ in range(FAILOVERS):
        time.sleep(0.7)
        if not keep_going():
            break
        leader = c.partition(topic).leader
        c.call(c.kill_broker(leader))
        if stopped:
            c.call(c.start_broker(stopped[-1]))
        stopped.append(leader)
        wait_for(lambda: c.partition(topic).leader >= 0, timeout=20, what="a new leader")
    if stopped and stopped[-1] not in c.brokers:
        c.call(c.start_broker(stopped[-1]))
    wait_for(lambda: set(c.partition(topic).isr) == {1, 2, 3}, timeout=30, what="the ISR back to all brokers")
    return stopped


def check_log(c: EmbeddedCluster, topic: str, acked: dict[int, int], value_of: Any) -> None:
    consumer = confluent_consumer(c.bootstrap_servers)
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()
    assert low == 0
    messages = confluent_consume(c.bootstrap_servers, topic, 0, 0, high, timeout=60)
    log = [value_of(m.value()) for m in messages]
    assert len(set(log)) == len(log), "a record is in the log twice"
    assert log == sorted(log), "the log is out of order"
    lost = [seq for seq, offset in acked.items() if offset >= len(log) or log[offset] != seq]
    assert not lost, f"{len(lost)} acknowledged records lost or moved, first {sorted(lost)[:5]}"
    ends = {n: c.call(_log_end(c, n, topic)) for n in c.brokers}
    assert set(ends.values()) == {high}, ends


def _log_end(c: EmbeddedCluster, node: int, topic: str) -> Any:
    async def end() -> int:
        return c.brokers[node].replicas.partitions[(topic, 0)].log_end_offset
    return end()


def test_librdkafka_idempotent_producer_through_leader_failovers(cluster: EmbeddedCluster) -> None:
    create(cluster, "stream")
    with SequenceStream(cluster.bootstrap_servers, "stream") as stream:
        stopped = fail_over_repeatedly(cluster, "stream", lambda: not stream.failed)
    acked, failed = stream.acked, stream.failed
    assert not failed, failed[:3]
    assert len(stopped) == FAILOVERS and len(acked) > 100  # records flowed through the fail-overs
    check_log(cluster, "stream", acked, int)


def test_java_idempotent_producer_through_leader_failovers(cluster: EmbeddedCluster, java_client: JavaClient) -> None:
    create(cluster, "jstream")
    command = ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m", "-cp", java_client.classpath,
               "KlammClient", "produce", cluster.bootstrap_servers, "jstream", "3000", "none", "0", "acks=all",
               "idempotence=true", "delivery=120000", "rate=800", "partition=0", "prefix=j"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stopped = fail_over_repeatedly(cluster, "jstream", lambda: process.poll() is None)
        stdout, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    lines = _json_lines(stdout)
    assert not [line for line in lines if "error" in line]
    acked = {line["i"]: line["offset"] for line in lines}
    assert len(stopped) >= 2
    # every record acknowledged once, record i at offset i: the stream in order, no gap, no duplicate
    assert acked == {i: i for i in range(3000)}
    assert confluent_recs(confluent_consume(cluster.bootstrap_servers, "jstream", 0, 0, 3000)) == expected("j", 3000)
    wait_for(lambda: {cluster.call(_log_end(cluster, n, "jstream")) for n in cluster.brokers} == {3000}, timeout=30,
             what="every replica at the end of the stream")
