"""Spark's kafka.* options name Java client properties: what confluent-kafka gets for them."""

from __future__ import annotations

import pytest

from klamm.spark.client_properties import UnsupportedProperty, librdkafka_properties

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def test_shared_names_pass_and_java_names_are_renamed():
    assert librdkafka_properties({"bootstrap.servers": "b:9092", "session.timeout.ms": "10000",
                                  "fetch.max.wait.ms": "100", "max.request.size": "2000000",
                                  "receive.buffer.bytes": "65536", "send.buffer.bytes": "131072",
                                  "buffer.memory": "33554432"}) == {
        "bootstrap.servers": "b:9092", "session.timeout.ms": "10000", "fetch.wait.max.ms": "100",
        "message.max.bytes": "2000000", "socket.receive.buffer.bytes": "65536",
        "socket.send.buffer.bytes": "131072", "queue.buffering.max.kbytes": "32768"}


def test_java_client_tuning_is_dropped():
    assert librdkafka_properties({"max.poll.records": "5", "default.api.timeout.ms": "1", "metric.reporters": "x",
                                  "client.dns.lookup": "use_all_dns_ips"}) == {}


def test_jaas_login_becomes_sasl_username_and_password():
    for module in (PLAIN, SCRAM):
        config = f'{module} required username="alice" password="s\\"ecret";'
        assert librdkafka_properties({"sasl.jaas.config": config, "sasl.mechanism": "PLAIN"}) == {
            "sasl.username": "alice", "sasl.password": 's"ecret', "sasl.mechanism": "PLAIN"}
    with pytest.raises(UnsupportedProperty, match="login module"):
        librdkafka_properties({"sasl.jaas.config": 'com.example.Custom required token="t";'})
    with pytest.raises(UnsupportedProperty, match="username and password"):
        librdkafka_properties({"sasl.jaas.config": f'{PLAIN} required username="u";'})


def test_stores_translate_when_librdkafka_can_read_them():
    assert librdkafka_properties({"ssl.truststore.type": "PEM", "ssl.truststore.location": "/ca.pem",
                                  "ssl.truststore.password": "x"}) == {"ssl.ca.location": "/ca.pem"}
    assert librdkafka_properties({"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/k.p12",
                                  "ssl.keystore.password": "p"}) == {"ssl.keystore.location": "/k.p12",
                                                                     "ssl.keystore.password": "p"}
    assert librdkafka_properties({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k.pem"}) == {
        "ssl.certificate.location": "/k.pem", "ssl.key.location": "/k.pem"}
    with pytest.raises(UnsupportedProperty, match="JKS truststore"):
        librdkafka_properties({"ssl.truststore.location": "/t.jks"})
    with pytest.raises(UnsupportedProperty, match="JKS keystore"):
        librdkafka_properties({"ssl.keystore.location": "/k.jks"})


def test_assignor_classes_and_the_empty_endpoint_check():
    assert librdkafka_properties({
        "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor, "
                                         "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
        "ssl.endpoint.identification.algorithm": ""}) == {
        "partition.assignment.strategy": "range,cooperative-sticky", "ssl.endpoint.identification.algorithm": "none"}
