"""Brokers and controllers authenticate to each other, as Kafka's do: a cluster whose inter-broker listener is
SASL_SSL (SCRAM-SHA-512, TLS with the host name checked) and whose controller listener is SASL_PLAINTEXT (PLAIN),
behind an authorizer that lets only its super users (the brokers' principal, and the clients' user) do anything.
Replication, registration and the metadata log work only if every node authenticates as User:broker: an
anonymous peer has no CLUSTER_ACTION."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.broker.peer_security import PeerSecurity, controller_security, inter_broker_security
from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from tests.integration.conftest import BrokerThread, free_port, wait_for
from tests.integration.test_tls import pki  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(240)

SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="{}";'
PLAIN_CONTROLLER_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
                         'password="{}" user_broker="broker-secret" user_carol="carol-secret";')
PLAIN_CLIENT_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
                     'user_alice="alice-secret";')
CLIENT = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
          "sasl.password": "alice-secret"}
BROKER_SCRAM = "SCRAM-SHA-512=[name=broker,password=broker-secret]"


def secured_configs(pki: dict[str, Any], controller_port: int,  # noqa: F811
                    passwords: dict[int, str] | None = None) -> dict[int, dict[str, str]]:
    """Node 1 broker and controller, nodes 2 and 3 brokers; `passwords` gives a node a wrong inter-broker one."""
    paths = pki["paths"]
    common = {
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "INTERNAL:SASL_SSL,EXTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512", "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.internal.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.external.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": PLAIN_CONTROLLER_JAAS.format("broker-secret"),
        "listener.name.external.plain.sasl.jaas.config": PLAIN_CLIENT_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(paths["ca"]),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:alice",
        "broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000",
        "replica.lag.time.max.ms": "3000", "offsets.topic.num.partitions": "1",
        "offsets.topic.replication.factor": "3"}
    brokers = "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0"
    configs = {1: {"process.roles": "broker,controller",
                   "listeners": f"{brokers},CONTROLLER://127.0.0.1:{controller_port}"},
               2: {"process.roles": "broker", "listeners": brokers},
               3: {"process.roles": "broker", "listeners": brokers}}
    return {node_id: {**common, **config, "node.id": str(node_id),
                      "listener.name.internal.scram-sha-512.sasl.jaas.config":
                          SCRAM_JAAS.format((passwords or {}).get(node_id, "broker-secret"))}
            for node_id, config in configs.items()}


def external_port(node: BrokerThread) -> int:
    return node.call(lambda: node.broker.listener_ports["EXTERNAL"])


def isr(controller: BrokerThread, topic: str) -> list[int]:
    image = controller.call(lambda: controller.broker.controller.image)
    return sorted(image.topics_by_name[topic].partitions[0].isr) if topic in image.topics_by_name else []


def produce_and_consume(port: int, topic: str, count: int = 100) -> list[bytes]:
    base = {"bootstrap.servers": f"127.0.0.1:{port}", **CLIENT}
    producer = Producer({**base, "acks": "all", "message.timeout.ms": 20000})
    for i in range(count):
        producer.produce(topic, b"%04d" % i, partition=0)
    assert producer.flush(25) == 0
    consumer = Consumer({**base, "group.id": f"{topic}-readers", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    for _ in range(60):
        got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
        if len(got) >= count:
            break
    consumer.close()
    return got


def test_brokers_replicate_over_sasl_ssl_and_register_over_sasl(
        formatted_cluster: Callable[..., list[BrokerThread]], pki: dict[str, Any]) -> None:  # noqa: F811
    nodes = formatted_cluster(secured_configs(pki, free_port()), BROKER_SCRAM)
    controller = nodes[0]
    # registered (over the SASL controller listener), each with its INTERNAL endpoint first
    wait_for(lambda: sorted(controller.call(lambda: controller.broker.controller.image.brokers)) == [1, 2, 3],
             timeout=30)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{external_port(nodes[1])}", **CLIENT})
    admin.create_topics([NewTopic("secured", 1, replica_assignment=[[2, 3, 1]])])["secured"].result(20)
    wait_for(lambda: isr(controller, "secured") == [1, 2, 3], timeout=30)
    assert produce_and_consume(external_port(nodes[1]), "secured") == [b"%04d" % i for i in range(100)]
    for node in nodes:  # the followers fetched every record over SASL_SSL
        wait_for(lambda node=node: node.call(lambda: node.broker.replicas.get("secured", 0).log_end_offset) == 100,
                 timeout=20)
    # the replica fetchers' connections to the leader authenticated as User:broker
    leader = nodes[1]
    principals = leader.call(lambda: sorted({c.session.principal for p in leader.broker._processors
                                             for c in p.connections if c._security.listener == "INTERNAL"}))
    assert principals == ["User:broker"]


def test_a_broker_with_a_wrong_inter_broker_password_is_left_out_of_the_isr(
        formatted_cluster: Callable[..., list[BrokerThread]], pki: dict[str, Any],  # noqa: F811
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "klamm.broker.client")
    nodes = formatted_cluster(secured_configs(pki, free_port(), passwords={3: "wrong"}), BROKER_SCRAM)
    controller = nodes[0]
    wait_for(lambda: sorted(controller.call(lambda: controller.broker.controller.image.brokers)) == [1, 2, 3],
             timeout=30)
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{external_port(nodes[0])}", **CLIENT})
    admin.create_topics([NewTopic("guarded", 1, replica_assignment=[[1, 2, 3]])])["guarded"].result(20)
    wait_for(lambda: isr(controller, "guarded") == [1, 2], timeout=30)  # node 3 never fetched
    assert produce_and_consume(external_port(nodes[0]), "guarded", 20) == [b"%04d" % i for i in range(20)]
    assert nodes[2].call(lambda: nodes[2].broker.replicas.get("guarded", 0).log_end_offset) == 0
    assert any("authentication to 127.0.0.1" in r.getMessage() and "SCRAM-SHA-512 failed" in r.getMessage()
               for r in caplog.records)


def test_the_controller_listener_admits_only_authenticated_peers_with_cluster_action(
        formatted_cluster: Callable[..., list[BrokerThread]], pki: dict[str, Any]) -> None:  # noqa: F811
    controller_port = free_port()
    configs = secured_configs(pki, controller_port)
    [node] = formatted_cluster({1: configs[1]}, BROKER_SCRAM)

    def describe_cluster(security: PeerSecurity) -> Any:
        connection = BrokerConnection("127.0.0.1", controller_port, "test", 10, security)
        try:
            return node.run(connection.request(60, 1, {"include_cluster_authorized_operations": False,
                                                       "endpoint_type": 2}))
        finally:
            connection.close()

    def plain(user: str, password: str) -> PeerSecurity:
        return PeerSecurity("SASL_PLAINTEXT", None, "PLAIN", user, password)

    assert describe_cluster(plain("broker", "broker-secret")).cluster_id == "MkU3OEVBNTcwNTJENDM2Qg"
    with pytest.raises(BrokerUnavailable, match="Invalid username or password"):
        describe_cluster(plain("broker", "wrong"))
    with pytest.raises(BrokerUnavailable):  # authenticated, but no CLUSTER_ACTION: disconnected
        describe_cluster(plain("carol", "carol-secret"))
    with pytest.raises(BrokerUnavailable):  # no SASL at all: the connection is closed at the first request
        describe_cluster(PeerSecurity())


def test_what_a_node_cannot_authenticate_with_is_refused_at_start(pki: dict[str, Any]) -> None:  # noqa: F811
    config = secured_configs(pki, 9999)[2]
    assert inter_broker_security(BrokerConfig.from_properties(config)).mechanism == "SCRAM-SHA-512"
    assert controller_security(BrokerConfig.from_properties(config)).username == "broker"
    with pytest.raises(ConfigError, match="klamm authenticates to it with PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; "
                                          "set sasl.mechanism.inter.broker.protocol"):
        inter_broker_security(BrokerConfig.from_properties(
            {**config, "sasl.mechanism.inter.broker.protocol": "GSSAPI"}))
    without = {k: v for k, v in config.items() if "internal.scram-sha-512.sasl.jaas.config" not in k}
    with pytest.raises(ConfigError, match="listener.name.internal.scram-sha-512.sasl.jaas.config"):
        inter_broker_security(BrokerConfig.from_properties(without))
    with pytest.raises(ConfigError, match="username and password options"):
        controller_security(BrokerConfig.from_properties(
            {**config, "listener.name.controller.plain.sasl.jaas.config": PLAIN_CLIENT_JAAS}))
    quorum = {**secured_configs(pki, 9999)[1], "controller.quorum.voters": "1@127.0.0.1:9999,2@127.0.0.1:9998",
              "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
              "listener.name.controller.scram-sha-512.sasl.jaas.config": SCRAM_JAAS.format("x")}
    with pytest.raises(ConfigError, match="controllers of a quorum must authenticate to each other before"):
        controller_security(BrokerConfig.from_properties(quorum))
    with pytest.raises(ConfigError, match="https, or not at all"):
        inter_broker_security(BrokerConfig.from_properties({**config, "ssl.endpoint.identification.algorithm": "x"}))


def test_a_host_name_the_certificate_does_not_name_is_refused(
        broker_factory: Callable[..., BrokerThread], pki: dict[str, Any]) -> None:  # noqa: F811
    """ssl.endpoint.identification.algorithm=https (the default): the peer's certificate must name the host
    connected to; empty: any certificate the trust store's CAs signed."""
    paths = pki["paths"]
    tls = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
           "ssl.truststore.type": "PEM", "ssl.truststore.location": str(paths["ca"])}
    broker = broker_factory(**{"listeners": "SSL://:0", **tls})  # every address: 127.0.0.2 reaches it too
    base = {"listeners": "SSL://127.0.0.1:9092", "inter.broker.listener.name": "SSL", **tls}

    def api_versions(host: str, algorithm: str) -> Any:
        security = inter_broker_security(BrokerConfig.from_properties(
            {**base, "ssl.endpoint.identification.algorithm": algorithm}))
        connection = BrokerConnection(host, broker.port, "test", 10, security)
        try:
            return broker.run(connection.request(18, 3, {"client_software_name": "t",
                                                         "client_software_version": "1"}))
        finally:
            connection.close()

    assert api_versions("localhost", "https").error_code == 0  # the certificate names localhost and 127.0.0.1
    with pytest.raises(BrokerUnavailable, match="certificate verify failed"):
        api_versions("127.0.0.2", "https")  # the certificate does not name 127.0.0.2
    assert api_versions("127.0.0.2", "").error_code == 0
