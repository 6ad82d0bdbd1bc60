"""Several client listeners on one broker, as Kafka serves them: each with its own security protocol, each
advertising its own endpoints (Metadata, DescribeCluster and FindCoordinator answer in the terms of the
listener the request came in on), and a cluster whose brokers reach each other over a PLAINTEXT listener
while clients authenticate on a SASL one."""

from __future__ import annotations

import time
from typing import Any, Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import BrokerThread, free_port, wait_for
from tests.integration.test_sasl_listeners import PLAIN_JAAS
from tests.integration.test_tls import pki  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(180)

PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
SASL = {"sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS}
SASL_CLIENT = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
               "sasl.password": "alice-secret"}


def clients_of(pki: dict[str, Any]) -> dict[str, dict[str, str]]:  # noqa: F811
    """librdkafka's settings for each listener."""
    return {"PLAINTEXT": {}, "SSL": {"security.protocol": "SSL", "ssl.ca.location": str(pki["paths"]["ca"])},
            "SASL_PLAINTEXT": SASL_CLIENT}


def tls_keys(pki: dict[str, Any]) -> dict[str, str]:  # noqa: F811
    paths = pki["paths"]
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(paths["ca"])}


def advertised(port: int, conf: dict[str, str]) -> dict[int, tuple[str, int]]:
    """The brokers Metadata names to a client on this listener."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **conf})
    return {b.id: (b.host, b.port) for b in admin.list_topics(timeout=15).brokers.values()}


def described(port: int, conf: dict[str, str]) -> dict[int, tuple[str, int]]:
    """The brokers DescribeCluster names to a client on this listener."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **conf})
    return {n.id: (n.host, n.port) for n in admin.describe_cluster(request_timeout=15).result(20).nodes}


def roundtrip(port: int, conf: dict[str, str], topic: str, group: str, count: int = 50) -> list[bytes]:
    """Produce, consume in a group (FindCoordinator on this listener) and commit."""
    base = {"bootstrap.servers": f"127.0.0.1:{port}", **conf}
    producer = Producer({**base, "message.timeout.ms": 15000, "acks": "all"})
    for i in range(count):
        producer.produce(topic, b"%s-%04d" % (topic.encode(), i), partition=0)
    assert producer.flush(20) == 0
    consumer = Consumer({**base, "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    committed = consumer.commit(asynchronous=False)  # through the group's coordinator, found on this listener
    assert [(tp.offset, tp.error) for tp in committed] == [(count, None)]
    consumer.close()
    return got


def test_each_listener_serves_its_clients_and_advertises_its_own_port(broker_factory: Any,
                                                                      pki: dict[str, Any]) -> None:  # noqa: F811
    broker = broker_factory(**{
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": PROTOCOL_MAP, **tls_keys(pki), **SASL})
    ports = broker.call(lambda: dict(broker.broker.listener_ports))
    assert list(ports) == ["PLAINTEXT", "SSL", "SASL_PLAINTEXT"] and len(set(ports.values())) == 3
    assert broker.port == ports["PLAINTEXT"]  # the first listener's, as before
    for name, conf in clients_of(pki).items():
        assert advertised(ports[name], conf) == {1: ("127.0.0.1", ports[name])}, name
        assert described(ports[name], conf) == {1: ("127.0.0.1", ports[name])}, name
        topic = f"on-{name.lower()}"
        assert roundtrip(ports[name], conf, topic, f"group-{name}") == [
            b"%s-%04d" % (topic.encode(), i) for i in range(50)], name
    # each listener keeps its own security: a PLAINTEXT client gets nowhere on the SASL port
    errors: list[Any] = []
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "error_cb": errors.append})
    with pytest.raises(Exception):
        admin.list_topics(timeout=3)
    registration = broker.call(lambda: broker.broker.controller.image.brokers[1])
    assert [(e.name, e.port, e.security_protocol) for e in registration.endpoints] == [
        ("PLAINTEXT", ports["PLAINTEXT"], 0), ("SSL", ports["SSL"], 1), ("SASL_PLAINTEXT", ports["SASL_PLAINTEXT"], 2)]


def test_advertised_listeners_give_each_listener_its_host(broker_factory: Any) -> None:
    plain, sasl = free_port(), free_port()
    broker = broker_factory(**{
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "advertised.listeners": f"PLAINTEXT://localhost:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "listener.security.protocol.map": PROTOCOL_MAP, **SASL})
    assert advertised(plain, {}) == {1: ("localhost", plain)}
    assert advertised(sasl, SASL_CLIENT) == {1: ("127.0.0.1", sasl)}
    assert described(sasl, SASL_CLIENT) == {1: ("127.0.0.1", sasl)}
    # a listener left out of advertised.listeners is served, but not registered: the broker names no
    # endpoint of its own there (Kafka leaves out a broker without the client's listener)
    broker.stop()
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://localhost:{plain}"
    broker.start()
    assert advertised(plain, {}) == {1: ("localhost", plain)}
    assert broker.call(lambda: broker.broker.broker_endpoints("SASL_PLAINTEXT")) == []
    # and a partition it leads has no leader there: LISTENER_NOT_FOUND, as Kafka's metadata cache answers
    plain_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
    plain_admin.create_topics([NewTopic("unlisted", 1, 1)])["unlisted"].result(15)
    sasl_admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl}", **SASL_CLIENT})
    [partition] = sasl_admin.list_topics("unlisted", timeout=15).topics["unlisted"].partitions.values()
    assert (partition.leader, partition.error.code()) == (-1, KafkaError.LISTENER_NOT_FOUND)
    [partition] = plain_admin.list_topics("unlisted", timeout=15).topics["unlisted"].partitions.values()
    assert (partition.leader, partition.error) == (1, None)


@pytest.fixture
def sasl_cluster(formatted_cluster: Callable[..., list[BrokerThread]]) -> Callable[[], list[BrokerThread]]:
    """Node 1 broker and controller, nodes 2 and 3 broker-only; every broker with a PLAINTEXT listener (the
    inter-broker one, Kafka's default) and a SASL_PLAINTEXT listener for clients."""
    def start() -> list[BrokerThread]:
        controller_port = free_port()
        common = {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
                  "controller.listener.names": "CONTROLLER", "broker.heartbeat.interval.ms": "300",
                  "broker.session.timeout.ms": "3000", "offsets.topic.num.partitions": "1",
                  "offsets.topic.replication.factor": "3", "listener.security.protocol.map": PROTOCOL_MAP, **SASL}
        brokers = "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"
        return formatted_cluster({
            1: {**common, "node.id": "1", "process.roles": "broker,controller",
                "listeners": f"{brokers},CONTROLLER://127.0.0.1:{controller_port}"},
            2: {**common, "node.id": "2", "process.roles": "broker", "listeners": brokers},
            3: {**common, "node.id": "3", "process.roles": "broker", "listeners": brokers,
                "inter.broker.listener.name": "PLAINTEXT"},
        })
    return start


def test_a_cluster_serves_sasl_clients_and_replicates_in_plaintext(
        sasl_cluster: Callable[[], list[BrokerThread]]) -> None:
    nodes = sasl_cluster()
    sasl_ports = {n.broker.node_id: n.call(lambda n=n: n.broker.listener_ports["SASL_PLAINTEXT"]) for n in nodes}
    plain_ports = {n.broker.node_id: n.port for n in nodes}
    everyone = {node_id: ("127.0.0.1", port) for node_id, port in sasl_ports.items()}
    for port in sasl_ports.values():  # the registrations of all three, each at its SASL port
        wait_for(lambda port=port: advertised(port, SASL_CLIENT) == everyone, timeout=30)
        assert described(port, SASL_CLIENT) == everyone
    assert advertised(plain_ports[2], {}) == {i: ("127.0.0.1", p) for i, p in plain_ports.items()}
    # replica fetchers reach each other on the inter-broker (PLAINTEXT) listener
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{sasl_ports[2]}", **SASL_CLIENT})
    admin.create_topics([NewTopic("replicated", 1, replica_assignment=[[3, 1, 2]])])[
        "replicated"].result(20)

    def isr() -> list[int]:
        image = nodes[0].call(lambda: nodes[0].broker.controller.image)
        return sorted(image.topics_by_name["replicated"].partitions[0].isr) if "replicated" in \
            image.topics_by_name else []
    wait_for(lambda: isr() == [1, 2, 3], timeout=30)
    got = roundtrip(sasl_ports[1], SASL_CLIENT, "replicated", "sasl-group")
    assert got == [b"replicated-%04d" % i for i in range(50)]
    for node in nodes:  # every replica has every record
        wait_for(lambda node=node: node.call(
            lambda: node.broker.replicas.get("replicated", 0).log_end_offset) == 50,
                 timeout=20)
    for node in nodes:  # registrations: the inter-broker listener first, then the client one
        registration = nodes[0].call(lambda node=node: nodes[0].broker.controller.image.brokers[node.broker.node_id])
        assert [e.name for e in registration.endpoints] == ["PLAINTEXT", "SASL_PLAINTEXT"]
        assert (registration.host, registration.port) == ("127.0.0.1", node.port)
