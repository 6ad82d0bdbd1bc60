"""SASL listeners (SASL_PLAINTEXT, SASL_SSL) with PLAIN and SCRAM, configured with Kafka's keys: real clients
authenticate, wrong passwords and unknown users are refused, and a connection that has not authenticated gets
nothing but the handshake."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klamm.config.errors import ConfigError
from tests.integration.conftest import BrokerThread
from tests.integration.test_tls import pki  # noqa: F401  (a fixture)

pytestmark = pytest.mark.timeout(120)

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";')
MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def sasl_broker(broker_factory: Any, protocol: str = "SASL_PLAINTEXT", **overrides: str) -> BrokerThread:
    listener = protocol.lower()
    return broker_factory(**{"listeners": f"{protocol}://127.0.0.1:0", "sasl.enabled.mechanisms": MECHANISMS,
                             f"listener.name.{listener}.plain.sasl.jaas.config": PLAIN_JAAS, **overrides})


def client_conf(port: int, mechanism: str, user: str, password: str,
                protocol: str = "SASL_PLAINTEXT") -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def roundtrip(conf: dict[str, str], topic: str, count: int = 100) -> list[bytes]:
    producer = Producer({**conf, "message.timeout.ms": 10000})
    for i in range(count):
        producer.produce(topic, b"sasl-%04d" % i, partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({**conf, "group.id": "sasl", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return got


def expected(count: int = 100) -> list[bytes]:
    return [b"sasl-%04d" % i for i in range(count)]


def refused(conf: dict[str, str]) -> str:
    """The authentication error librdkafka reports (error_cb) when it cannot authenticate."""
    errors: list[Any] = []
    producer = Producer({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + 10
    while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
        producer.poll(0.2)
    failures = [e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert failures, errors
    return failures[0]


def test_plain_with_librdkafka(broker_factory: Any) -> None:
    broker = sasl_broker(broker_factory)
    assert roundtrip(client_conf(broker.port, "PLAIN", "alice", "alice-secret"), "plain-topic") == expected()
    assert "Authentication failed" in refused(client_conf(broker.port, "PLAIN", "alice", "wrong"))
    assert "Authentication failed" in refused(client_conf(broker.port, "PLAIN", "mallory", "alice-secret"))


def test_scram_users_created_by_an_admin_authenticate(broker_factory: Any) -> None:
    broker = sasl_broker(broker_factory)
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient(client_conf(broker.port, "PLAIN", "admin", "admin-secret"))
    upserts = [UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                            b"bob-secret"),
               UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                            b"bob-secret-512")]
    for upsert in upserts:  # Kafka's controller takes one change per user in a request
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(10)
    assert roundtrip(client_conf(broker.port, "SCRAM-SHA-256", "bob", "bob-secret"), "scram-256") == expected()
    assert roundtrip(client_conf(broker.port, "SCRAM-SHA-512", "bob", "bob-secret-512"), "scram-512") == expected()
    assert "Authentication failed" in refused(client_conf(broker.port, "SCRAM-SHA-256", "bob", "bob-secret-512"))
    assert "Authentication failed" in refused(client_conf(broker.port, "SCRAM-SHA-512", "nobody", "x"))
    _scram_with_kafka_python_and_aiokafka(broker)


def _scram_with_kafka_python_and_aiokafka(broker: BrokerThread) -> None:
    """bob's SCRAM credentials with kafka-python (SCRAM-SHA-512) and aiokafka (SCRAM-SHA-256); their refusals of
    wrong passwords are shown with PLAIN (test_sasl_ssl_with_kafka_python_and_aiokafka)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    conf = {"bootstrap_servers": f"127.0.0.1:{broker.port}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "bob", "sasl_plain_password": "bob-secret-512"}
    producer = KafkaProducer(**conf)
    for i in range(20):
        producer.send("kp-scram", b"sasl-%04d" % i, partition=0)
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(**conf, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTP("kp-scram", 0)])
    consumer.seek(KTP("kp-scram", 0), 0)
    assert [m.value for m in consumer] == expected(20)
    consumer.close()

    async def with_aiokafka(password: str) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=conf["bootstrap_servers"], security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="SCRAM-SHA-256", sasl_plain_username="bob",
                                    sasl_plain_password=password)
        await producer.start()
        try:
            await producer.send_and_wait("aio-scram", b"x", partition=0)
        finally:
            await producer.stop()

    asyncio.run(with_aiokafka("bob-secret"))


def test_sasl_ssl_with_kafka_python_and_aiokafka(broker_factory: Any, pki: dict[str, Any]) -> None:  # noqa: F811
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    paths = pki["paths"]
    broker = sasl_broker(broker_factory, "SASL_SSL", **{"ssl.keystore.type": "PEM",
                                                        "ssl.keystore.location": str(paths["server"])})
    conf = {"bootstrap_servers": f"127.0.0.1:{broker.port}", "security_protocol": "SASL_SSL",
            "ssl_cafile": str(paths["ca"]), "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
            "sasl_plain_password": "alice-secret"}
    producer = KafkaProducer(**conf)
    for i in range(50):
        producer.send("kp-sasl", b"sasl-%04d" % i, partition=0)
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(**conf, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTP("kp-sasl", 0)])
    consumer.seek(KTP("kp-sasl", 0), 0)
    assert [m.value for m in consumer] == expected(50)
    consumer.close()
    # (kafka-python reports a refused password only as a bootstrap timeout after 30 s: librdkafka, Java and
    # kafkajs show the refusal itself)

    async def with_aiokafka() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.helpers import create_ssl_context

        aio = {"bootstrap_servers": conf["bootstrap_servers"], "security_protocol": "SASL_SSL",
               "ssl_context": create_ssl_context(cafile=str(paths["ca"])), "sasl_mechanism": "PLAIN",
               "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"}
        producer = AIOKafkaProducer(**aio)
        await producer.start()
        for i in range(50):
            await producer.send("aio-sasl", b"sasl-%04d" % i, partition=0)
        await producer.stop()
        consumer = AIOKafkaConsumer(**aio, enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        from aiokafka.structs import TopicPartition as ATP
        consumer.assign([ATP("aio-sasl", 0)])
        got = [m.value for m in (await consumer.getmany(timeout_ms=5000)).get(ATP("aio-sasl", 0), [])]
        await consumer.stop()
        return got

    assert asyncio.run(with_aiokafka()) == expected(50)


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, -1)
    return struct.pack(">i", len(header) + body.__len__()) + header + body


def _answer(sock: socket.socket) -> bytes:
    """One response frame, whole: correlation id first."""
    sock.settimeout(5)
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = sock.recv(65536)
        assert chunk, "closed before the answer"
        data += chunk
    return data[4:]


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


def test_an_unauthenticated_connection_gets_only_the_handshake(broker_factory: Any) -> None:
    broker = sasl_broker(broker_factory, **{"sasl.server.max.receive.size": "1000"})
    # Metadata v1 (no topics) before authenticating: the connection is closed, nothing is answered
    with socket.create_connection(("127.0.0.1", broker.port), 5) as sock:
        sock.sendall(_frame(3, 1, 7, struct.pack(">i", -1)))
        assert _closed(sock)
    # ApiVersions is answered; a frame over sasl.server.max.receive.size then closes the connection
    with socket.create_connection(("127.0.0.1", broker.port), 5) as sock:
        sock.sendall(_frame(18, 0, 1, b""))
        assert struct.unpack(">i", _answer(sock)[:4])[0] == 1
        sock.sendall(struct.pack(">i", 5000) + bytes(5000))
        assert _closed(sock)
    # a mechanism the listener does not offer: UNSUPPORTED_SASL_MECHANISM, with the offered list, then closed
    with socket.create_connection(("127.0.0.1", broker.port), 5) as sock:
        sock.sendall(_frame(17, 1, 2, struct.pack(">h", 6) + b"GSSAPI"))
        answer = _answer(sock)
        assert struct.unpack(">h", answer[4:6])[0] == 33  # UNSUPPORTED_SASL_MECHANISM
        assert b"SCRAM-SHA-512" in answer
        assert _closed(sock)


def test_plaintext_listener_answers_sasl_requests_illegal_state(broker: BrokerThread) -> None:
    with socket.create_connection(("127.0.0.1", broker.port), 5) as sock:
        sock.sendall(_frame(17, 1, 2, struct.pack(">h", 5) + b"PLAIN"))
        assert struct.unpack(">h", _answer(sock)[4:6])[0] == 34  # ILLEGAL_SASL_STATE


def test_reauthentication_keeps_the_connection(broker_factory: Any) -> None:
    """connections.max.reauth.ms: librdkafka re-authenticates before the session ends and carries on."""
    broker = sasl_broker(broker_factory, **{"connections.max.reauth.ms": "2000"})
    conf = client_conf(broker.port, "PLAIN", "alice", "alice-secret")
    producer = Producer({**conf, "message.timeout.ms": 10000})
    for i in range(6):
        producer.produce("reauth", b"sasl-%04d" % i, partition=0)
        assert producer.flush(10) == 0
        time.sleep(1)
    accepted = broker.call(lambda: sum(p.connections_accepted for p in broker.broker._processors))  # type: ignore
    assert handshakes(broker) > accepted  # some connection authenticated again
    consumer = Consumer({**conf, "group.id": "reauth", "enable.auto.commit": False})
    consumer.assign([TopicPartition("reauth", 0, 0)])
    got = [m.value() for m in consumer.consume(6, 10)]
    consumer.close()
    assert got == expected(6)


def handshakes(broker: BrokerThread) -> float:
    registry = broker.broker.metrics.registry  # type: ignore[union-attr]
    return broker.call(lambda: registry.get_sample_value("klamm_requests_total",
                                                         {"api": "SaslHandshake", "version": "1"}) or 0)


@pytest.mark.parametrize(("overrides", "words"), [
    ({"sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": ""}, "jaas"),
    ({"listener.name.sasl_plaintext.plain.sasl.jaas.config":
      'org.apache.kafka.common.security.scram.ScramLoginModule required;'}, "PlainLoginModule"),
])
def test_what_cannot_work_is_refused_at_start(broker_factory: Any, overrides: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        sasl_broker(broker_factory, **overrides)


def test_sasl_handshake_v0_takes_bare_token_frames(broker_factory: Any) -> None:
    """SaslHandshake v0 (clients before Kafka 1.0, kafka-python up to 2.0, Sarama up to 1.40): the tokens that
    follow are frames without a request header (before KIP-152), answered the same way; a failure closes the
    connection. Then requests are served as usual."""
    from klamm.protocol.sasl_client import ScramClient
    from tests.integration.conftest import RawClient, metadata_request

    broker = sasl_broker(broker_factory)
    admin = AdminClient(client_conf(broker.port, "PLAIN", "admin", "admin-secret"))
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"carol-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(10)

    def bare(client: RawClient, token: bytes) -> bytes:
        client.send_raw(struct.pack(">i", len(token)) + token)
        return client.read_frame()

    with RawClient(broker.port) as client:  # PLAIN: one token, answered with an empty one
        answer = client.request(17, 0, {"mechanism": "PLAIN"})
        assert (answer.error_code, "PLAIN" in answer.mechanisms) == (0, True)
        assert bare(client, b"\0alice\0alice-secret") == b""
        assert client.request(3, 12, metadata_request()).cluster_id  # a request as usual afterwards
    with RawClient(broker.port) as client:  # SCRAM: two tokens each way, the server's signature checked
        assert client.request(17, 0, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
        scram = ScramClient("SCRAM-SHA-256", "carol", "carol-secret")
        final = scram.evaluate(bare(client, scram.initial()))
        assert final is not None and scram.evaluate(bare(client, final)) is None
        assert client.request(3, 12, metadata_request()).cluster_id
    with RawClient(broker.port) as client:  # a wrong password: no answer, the connection closes
        assert client.request(17, 0, {"mechanism": "PLAIN"}).error_code == 0
        client.send_raw(struct.pack(">i", 19) + b"\0alice\0wrong-secret")
        client.expect_disconnect()


def test_kafka_python_pinned_to_0_10_authenticates_with_handshake_v0(broker_factory: Any) -> None:
    """kafka-python with api_version=(0, 10, 1) speaks SaslHandshake v0 and bare tokens, as its 2.0 releases
    always did."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    broker = sasl_broker(broker_factory)
    conf = {"bootstrap_servers": f"127.0.0.1:{broker.port}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret",
            "api_version": (0, 10, 1)}
    admin = AdminClient(client_conf(broker.port, "PLAIN", "admin", "admin-secret"))
    admin.create_topics([NewTopic("kp-v0", 1, 1)])["kp-v0"].result(10)
    handshakes = handshakes_v0(broker)
    producer = KafkaProducer(**conf)
    for i in range(20):
        producer.send("kp-v0", b"sasl-%04d" % i, partition=0)
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(**conf, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTP("kp-v0", 0)])
    consumer.seek(KTP("kp-v0", 0), 0)
    assert [m.value for m in consumer] == expected(20)
    consumer.close()
    assert handshakes_v0(broker) > handshakes


def handshakes_v0(broker: BrokerThread) -> float:
    """SaslHandshake v0 requests served, from the broker's Prometheus counter."""
    text = broker.call(lambda: broker.broker.metrics.exposition()).decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("klamm_requests_total{") and 'api="SaslHandshake"' in line
               and 'version="0"' in line)
