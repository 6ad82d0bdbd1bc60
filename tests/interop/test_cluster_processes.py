"""Three `klamm serve` processes with Kafka's KRaft property names: node 1 broker,controller, nodes 2 and 3 brokers.

The storage is formatted with `klamm storage format` and one cluster id; nodes
2 and 3 register with node 1's controller listener, heartbeat, and follow its
metadata log. A topic with replication.factor=3 and min.insync.replicas=2 is led
by node 2; an idempotent acks=all producer streams while node 2 is killed with
SIGKILL: the controller fences it after broker.session.timeout.ms, node 3 leads,
the producer carries on, and node 2 restarted catches up and rejoins the ISR.
Nothing acknowledged is lost, duplicated or reordered.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import BrokerProcess, ClusterProcess
from tests.integration.conftest import RawClient

from .conftest import _json_lines
from .helpers import SequenceStream, confluent_consume, confluent_consumer, wait_for
from .test_kafkajs import node_bin, run_js  # noqa: F401  (node_bin is a fixture)

pytestmark = [pytest.mark.timeout(240)]

FAST = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300",
        "replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "200",
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"}


@pytest.fixture
def nodes(tmp_path: Path):
    cluster = ClusterProcess(tmp_path, FAST)
    try:
        cluster.start()
        yield cluster.nodes
    finally:
        cluster.kill()


def brokers_seen(bootstrap: str) -> set[int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return {n.id for n in admin.describe_cluster(request_timeout=10).result(15).nodes}


def describe(bootstrap: str, topic: str) -> Any:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_topics(TopicCollection([topic]))[topic].result(15)


def test_three_processes_replicate_and_fail_over(nodes: list[BrokerProcess]) -> None:
    bootstrap = ",".join(n.bootstrap for n in nodes)
    for node in nodes:  # every node knows the whole cluster from the controller's metadata
        wait_for(lambda node=node: brokers_seen(node.bootstrap) == {1, 2, 3}, timeout=30, what="three brokers")
    created = RawClient(nodes[0].port).request(19, 7, {"timeout": 30_000, "topics": [{
        "name": "orders", "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": [2, 3, 1]}],  # node 2 leads
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}]})
    assert created.topics[0].error_code == 0, created.topics[0]
    wait_for(lambda: len(describe(nodes[2].bootstrap, "orders").partitions[0].isr) == 3, timeout=30,
             what="the ISR of three")

    with SequenceStream(bootstrap, "orders") as stream:
        acked = stream.acked
        wait_for(lambda: len(acked) > 300, timeout=30, what="records acknowledged before the kill")
        nodes[1].kill()  # node 2, the leader: kill -9
        wait_for(lambda: describe(nodes[2].bootstrap, "orders").partitions[0].leader.id == 3, timeout=30,
                 what="node 3 leading after the controller fenced node 2")
        count = len(acked)
        wait_for(lambda: len(acked) > count + 300, timeout=60, what="records acknowledged by the new leader")
        nodes[1].start()
        wait_for(lambda: len(describe(nodes[0].bootstrap, "orders").partitions[0].isr) == 3, timeout=60,
                 what="node 2 back in the ISR")
    errors = stream.failed
    assert not errors, errors[:3]

    consumer = confluent_consumer(bootstrap)
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition("orders", 0), timeout=10, cached=False)
    finally:
        consumer.close()
    log = [int(m.value()) for m in confluent_consume(bootstrap, "orders", 0, 0, high, timeout=60)]
    assert log == list(range(len(log))), "the log is the stream in order, without gap or duplicate"
    assert all(log[offset] == seq for seq, offset in acked.items())
    assert len(acked) == len(log)
    # SIGTERM: a controlled shutdown hands node 3's leadership over before the process exits
    assert nodes[2].stop() == 0
    assert describe(nodes[0].bootstrap, "orders").partitions[0].leader.id in (1, 2)


def test_the_java_client_through_a_kill_of_the_leader(nodes: list[BrokerProcess], java_client: Any) -> None:
    bootstrap = ",".join(n.bootstrap for n in nodes)
    wait_for(lambda: brokers_seen(nodes[0].bootstrap) == {1, 2, 3}, timeout=30, what="three brokers")
    created = RawClient(nodes[0].port).request(19, 7, {"timeout": 30_000, "topics": [{
        "name": "jorders", "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": [2, 3, 1]}],
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}]})
    assert created.topics[0].error_code == 0
    wait_for(lambda: len(describe(nodes[2].bootstrap, "jorders").partitions[0].isr) == 3, timeout=30,
             what="the ISR of three")
    command = ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m", "-cp", java_client.classpath,
               "KlammClient", "produce", bootstrap, "jorders", "3000", "none", "0", "acks=all", "idempotence=true",
               "delivery=120000", "rate=400", "partition=0", "prefix=j"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)  # the JVM starts, node 2 acknowledges a part of the 7.5 s stream
        nodes[1].kill()
        stdout, stderr = process.communicate(timeout=180)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-3000:]
    acked = {line["i"]: line["offset"] for line in _json_lines(stdout) if "offset" in line}
    assert acked == {i: i for i in range(3000)}  # every record once, in order, none lost
    assert describe(nodes[0].bootstrap, "jorders").partitions[0].leader.id == 3


def test_brokers_carry_on_across_a_restart_of_the_controller(nodes: list[BrokerProcess]) -> None:
    bootstrap = ",".join(n.bootstrap for n in nodes)
    wait_for(lambda: brokers_seen(nodes[1].bootstrap) == {1, 2, 3}, timeout=30, what="three brokers")
    nodes[0].kill()  # the controller (and broker 1): kill -9, then back on the same data
    nodes[0].start()
    created = RawClient(nodes[0].port).request(19, 7, {"timeout": 30_000, "topics": [{
        "name": "later", "num_partitions": 1, "replication_factor": 3, "configs": [], "assignments": []}]})
    assert created.topics[0].error_code == 0, created.topics[0]
    # the brokers follow the restarted controller: they see the new topic and replicate it
    wait_for(lambda: len(describe(nodes[1].bootstrap, "later").partitions[0].isr) == 3, timeout=30,
             what="the new topic replicated by all three")
    with SequenceStream(bootstrap, "later") as stream:
        wait_for(lambda: len(stream.acked) >= 100, timeout=30, what="records acknowledged")
    assert not stream.failed and brokers_seen(nodes[2].bootstrap) == {1, 2, 3}


def test_a_broker_behind_the_cleaned_metadata_log_catches_up_from_the_snapshot(tmp_path: Path) -> None:
    """The controller snapshots its metadata and deletes the log behind the snapshot (metadata.max.retention.*):
    a broker restarted afterwards cannot replay the log from offset 0. The controller answers its fetch with
    the snapshot's id, the broker takes the snapshot by FetchSnapshot and fetches the log from its end."""
    cluster = ClusterProcess(tmp_path, {**FAST, "metadata.log.max.record.bytes.between.snapshots": "1",
                                        "metadata.max.retention.bytes": "0", "metadata.log.segment.bytes": "600"})
    try:
        cluster.start()
        node1, node2, node3 = cluster.nodes
        wait_for(lambda: brokers_seen(node1.bootstrap) == {1, 2, 3}, timeout=30, what="three brokers")
        assert node3.stop() == 0
        admin = AdminClient({"bootstrap.servers": node1.bootstrap})
        names = [f"while-node-3-was-down-{i}" for i in range(8)]
        for name in names:  # one commit at a time: segments roll, snapshots follow, the log is cleaned
            admin.create_topics([NewTopic(name, 1, 2)], request_timeout=15)[name].result(30)
        metadata_dir = node1.log_dir / "__cluster_metadata-0"
        wait_for(lambda: not (metadata_dir / f"{0:020d}.log").exists(), timeout=30,
                 what="the metadata log cleaned behind a snapshot")

        node3.start()  # ready only once registered, caught up with the metadata and unfenced
        assert set(names) <= set(AdminClient({"bootstrap.servers": node3.bootstrap}).list_topics(timeout=10).topics)
        assert "loaded metadata snapshot" in node3.log_text()
        admin.create_topics([NewTopic("after", 1, 3)], request_timeout=15)["after"].result(30)
        wait_for(lambda: len(describe(node3.bootstrap, "after").partitions[0].isr) == 3, timeout=30,
                 what="node 3 replicating a topic created after its return")
    finally:
        cluster.kill()


def test_a_dedicated_controller(tmp_path: Path) -> None:
    """process.roles=controller: node 1 only controls (no client listener); brokers 2, 3 and 4 serve clients,
    name one of themselves as the controller in Metadata and forward admin writes to node 1."""
    cluster = ClusterProcess(tmp_path, FAST, dedicated_controller=True)
    try:
        cluster.start()
        bootstrap = cluster.bootstrap
        wait_for(lambda: brokers_seen(bootstrap) == {2, 3, 4}, timeout=30, what="three brokers, not the controller")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert admin.describe_cluster(request_timeout=10).result(15).controller.id in (2, 3, 4)
        admin.create_topics([NewTopic("orders", 1, 3, config={"min.insync.replicas": "2"})],
                            request_timeout=15)["orders"].result(30)
        wait_for(lambda: len(describe(bootstrap, "orders").partitions[0].isr) == 3, timeout=30,
                 what="the topic replicated by the three brokers")
        with SequenceStream(bootstrap, "orders") as stream:
            wait_for(lambda: len(stream.acked) > 200, timeout=30, what="records acknowledged")
            leader = describe(bootstrap, "orders").partitions[0].leader.id
            cluster.nodes[leader - 1].kill()
            wait_for(lambda: describe(bootstrap, "orders").partitions[0].leader.id not in (leader, -1), timeout=30,
                     what="a new leader elected by the dedicated controller")
            count = len(stream.acked)
            wait_for(lambda: len(stream.acked) > count + 200, timeout=60, what="records acknowledged by it")
        assert not stream.failed, stream.failed[:3]
        log = [int(m.value()) for m in confluent_consume(bootstrap, "orders", 0, 0, len(stream.acked), timeout=60)]
        assert log == list(range(len(log))) and all(log[offset] == seq for seq, offset in stream.acked.items())
        # A consumer group: its coordinator's __consumer_offsets is created through the controller too.
        consumer = confluent_consumer(bootstrap, {"group.id": "readers", "auto.offset.reset": "earliest",
                                                  "enable.auto.offset.store": True})
        try:
            consumer.subscribe(["orders"])
            seen = 0
            deadline = time.monotonic() + 60
            while seen < 100 and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                seen += message is not None and not message.error()
            consumer.commit(asynchronous=False)
            [committed] = consumer.committed([TopicPartition("orders", 0)], timeout=15)
        finally:
            consumer.close()
        assert seen >= 100 and committed.offset >= 100
        assert cluster.nodes[0].stop() == 0  # SIGTERM: the controller alone stops cleanly
    finally:
        cluster.kill()


def test_kafka_python_aiokafka_and_kafkajs_on_the_cluster(nodes: list[BrokerProcess],
                                                          node_bin: str) -> None:  # noqa: F811
    """Bootstrapped from a broker-only node: admin requests reach the controller Metadata names."""
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic as KafkaPythonTopic

    bootstrap = ",".join(n.bootstrap for n in nodes)
    wait_for(lambda: brokers_seen(nodes[1].bootstrap) == {1, 2, 3}, timeout=30, what="three brokers")
    admin = KafkaAdminClient(bootstrap_servers=nodes[1].bootstrap)
    admin.create_topics([KafkaPythonTopic("kp", 3, 3)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(100):
        producer.send("kp", b"v%d" % i)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="kpg", auto_offset_reset="earliest",
                             consumer_timeout_ms=15_000)
    assert sorted(m.value for m in consumer) == sorted(b"v%d" % i for i in range(100))
    consumer.close()

    async def transaction_then_read_committed() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-aio")
        await producer.start()
        async with producer.transaction():
            for i in range(9):
                await producer.send("kp", b"t%d" % i, partition=i % 3)
        await producer.stop()
        consumer = AIOKafkaConsumer("kp", bootstrap_servers=bootstrap, group_id="aiog",
                                    auto_offset_reset="earliest", isolation_level="read_committed")
        await consumer.start()
        got = 0
        for _ in range(30):
            got += sum(len(v) for v in (await consumer.getmany(timeout_ms=500)).values())
            if got >= 109:
                break
        await consumer.stop()
        return got
    assert asyncio.run(transaction_then_read_committed()) == 109

    result = run_js(node_bin, "produce_consume.js", {
        "bootstrap": nodes[2].bootstrap, "topic": "kjs", "partitions": 2, "create": True, "group": "kjsg",
        "records": [{"k": "a", "v": "1", "p": 0}, {"k": "b", "v": "2", "p": 1}, {"k": "c", "v": "3", "p": 0}],
        "sends": [{"acks": -1, "compression": "none", "from": 0, "to": 3}], "consumeTimeoutMs": 20_000}).ok()
    assert result.one("consumed") == 3
