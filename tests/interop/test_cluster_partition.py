"""A network partition of the leader, on three `klamm serve` processes with TCP proxies between them.

Node 2 leads a topic with replication.factor=3 and min.insync.replicas=2. Its
peers reach it only through a proxy (its `advertised.listeners`), and it reaches
the controller only through another (its `controller.quorum.voters`). Cutting
both isolates node 2 while a client can still talk to it on its real port:

- acks=all produce sent to the isolated leader fails, and what it appended is
  never visible: its high watermark cannot move without followers, and it
  cannot shrink the ISR without the controller;
- the controller fences node 2 and elects node 3; a producer streaming through
  the partition carries on there;
- after healing, node 2 learns the new leader epoch, truncates its divergent
  tail, catches up and rejoins the ISR. Elected leader again, it serves the log
  the cluster acknowledged: no record lost, none duplicated, nothing of the
  isolated append.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klamm.protocol.batch import split_batches
from klamm.protocol.records import build_batch, decode_batch
from tests.conftest import BrokerProcess, free_port, klamm_storage
from tests.integration.conftest import FETCH, LIST_OFFSETS, PRODUCE, RawClient, fetch_body

from .helpers import SequenceStream, confluent_consume, wait_for
from .tcp_proxy import TcpProxy
from .test_cluster_processes import FAST, describe

pytestmark = [pytest.mark.timeout(300)]

TOPIC = "ledger"
ELECT_LEADERS = 43


@pytest.fixture
def proxied_nodes(tmp_path: Path):
    """Nodes 1 (broker,controller), 2 and 3 (brokers); node 2 behind proxies. Yields (nodes, proxies)."""
    controller_port = free_port()
    to_controller = TcpProxy(controller_port)
    ports = {node_id: free_port() for node_id in (1, 2, 3)}
    to_node2 = TcpProxy(ports[2])
    cluster_id = klamm_storage("random-uuid")
    made: list[BrokerProcess] = []
    for node_id, port in ports.items():
        voter = f"1@127.0.0.1:{to_controller.port if node_id == 2 else controller_port}"
        config = {"node.id": str(node_id), "controller.quorum.voters": voter,
                  "controller.listener.names": "CONTROLLER", **FAST}
        if node_id == 1:
            config.update({"process.roles": "broker,controller",
                           "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"})
        else:
            config["process.roles"] = "broker"
        if node_id == 2:
            config["advertised.listeners"] = f"PLAINTEXT://{to_node2.address}"
        node = BrokerProcess(port, tmp_path / f"node{node_id}", tmp_path / f"node{node_id}.log", config)
        properties = tmp_path / f"node{node_id}.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in
                                      {**config, "log.dirs": str(node.log_dir)}.items() if k != "listeners"))
        klamm_storage("format", "--cluster-id", cluster_id, "--config", str(properties))
        made.append(node)
    proxies = [to_controller, to_node2]
    try:
        for node in made:
            node.start()
        yield made, proxies
    finally:
        for node in reversed(made):
            node.kill()
        for proxy in proxies:
            proxy.close()


def high_watermark(port: int) -> int:
    with RawClient(port) as client:
        response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{
            "name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    answer = response.topics[0].partitions[0]
    assert answer.error_code == 0, answer
    return answer.offset


def values_from(port: int, offset: int) -> list[bytes]:
    """The values a consumer reads from this node's replica at and after `offset`, up to its high watermark."""
    values: list[bytes] = []
    with RawClient(port) as client:
        while True:
            response = client.request(FETCH, 12, fetch_body(TOPIC, offset, max_bytes=8 << 20))
            answer = response.responses[0].partitions[0]
            assert answer.error_code == 0, answer
            records = bytearray(answer.records or b"")
            batches = list(split_batches(records))
            if not batches:
                return values
            for header in batches:
                for record in decode_batch(records, header.position)[1]:
                    values.append(bytes(record.value))
                    offset = record.offset + 1


def elect_preferred(controller_port: int) -> Any:
    with RawClient(controller_port) as client:
        response = client.request(ELECT_LEADERS, 2, {"election_type": 0, "timeout_ms": 10_000, "topic_partitions": [
            {"topic": TOPIC, "partitions": [0]}]})
    return response.replica_election_results[0].partition_result[0]


def test_an_isolated_leader_cannot_commit_and_keeps_nothing_divergent_after_healing(proxied_nodes: Any) -> None:
    nodes, (to_controller, to_node2) = proxied_nodes
    node1, node2, node3 = nodes
    created = RawClient(node1.port).request(19, 7, {"timeout": 30_000, "topics": [{
        "name": TOPIC, "num_partitions": -1, "replication_factor": -1,
        "assignments": [{"partition_index": 0, "broker_ids": [2, 3, 1]}],
        "configs": [{"name": "min.insync.replicas", "value": "2"}]}]})
    assert created.topics[0].error_code == 0, created.topics[0]
    wait_for(lambda: len(describe(node1.bootstrap, TOPIC).partitions[0].isr) == 3, timeout=30,
             what="the ISR of three")

    bootstrap = f"{node1.bootstrap},{node3.bootstrap}"
    # short request timeouts: requests swallowed by the partition time out and are retried at the new leader
    with SequenceStream(bootstrap, TOPIC, {"request.timeout.ms": 4000, "socket.timeout.ms": 5000}) as stream:
        acked = stream.acked
        wait_for(lambda: len(acked) > 300, timeout=30, what="records acknowledged before the partition")
        to_controller.cut()
        to_node2.cut()

        # the isolated leader takes the append but cannot commit it
        with RawClient(node2.port, timeout=30) as client:
            response = client.request(PRODUCE, 9, {"acks": -1, "timeout": 5000, "transactional_id": None,
                                                   "topic_data": [{"name": TOPIC, "partition_data": [
                                                       {"index": 0, "records": build_batch([(None, b"isolated")])}]}]})
        answer = response.responses[0].partition_responses[0]
        assert answer.error_code != 0, "an isolated leader acknowledged an acks=all produce"
        isolated_hw = high_watermark(node2.port)
        assert b"isolated" not in values_from(node2.port, max(0, isolated_hw - 5000))

        wait_for(lambda: describe(node1.bootstrap, TOPIC).partitions[0].leader.id == 3, timeout=30,
                 what="node 3 leading after the controller fenced node 2")
        count = len(acked)
        wait_for(lambda: len(acked) > count + 300, timeout=60, what="records acknowledged by the new leader")
        assert high_watermark(node2.port) == isolated_hw, "the isolated leader's high watermark moved"

        to_controller.heal()
        to_node2.heal()
        wait_for(lambda: len(describe(node1.bootstrap, TOPIC).partitions[0].isr) == 3, timeout=60,
                 what="node 2 back in the ISR")
    assert not stream.failed, stream.failed[:3]

    # node 2 leads again: what it serves is the acknowledged log, without its divergent append
    result = elect_preferred(node1.port)
    assert result.error_code == 0, result
    wait_for(lambda: describe(node1.bootstrap, TOPIC).partitions[0].leader.id == 2, timeout=30,
             what="node 2 elected preferred leader")
    # a new leader's high watermark catches up once its followers fetch: wait until it covers every ack
    high = max(acked.values()) + 1
    wait_for(lambda: high_watermark(node2.port) >= high, timeout=30, what="node 2's high watermark covering the acks")
    log = confluent_consume(bootstrap, TOPIC, 0, 0, high_watermark(node2.port), timeout=60)
    values = [m.value() for m in log]
    assert b"isolated" not in values
    sequence = [int(v) for v in values]
    assert sequence == list(range(len(sequence))), "the log is the stream in order, without gap or duplicate"
    assert all(sequence[offset] == seq for seq, offset in acked.items())
    assert len(acked) == len(sequence)
    for node in nodes:  # an unreachable controller is an answer to wait out, not a crash
        assert "Traceback" not in node.out_path.read_text(errors="replace"), node.out_path
