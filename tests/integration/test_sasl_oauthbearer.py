"""SASL/OAUTHBEARER listeners with real clients: librdkafka's unsecured development tokens
(enable.sasl.oauthbearer.unsecure.jwt) against Kafka's default validator, and tokens the test signs with its own
RSA key (librdkafka's oauth_cb, kafka-python's and aiokafka's token providers) against
OAuthBearerValidatorCallbackHandler reading the key from a JWKS file. Bad tokens are refused with Kafka's JSON
error; a session ends when its token expires, and librdkafka re-authenticates with a fresh token before then."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from klamm.config.errors import ConfigError
from tests.integration.conftest import BrokerThread
from tests.integration.test_sasl_listeners import _answer, _closed, _frame, expected, handshakes, refused, roundtrip
from tests.unit.test_oauthbearer import client_first, jwk, jwks, private_key, signed_token, unsecured_token

pytestmark = pytest.mark.timeout(120)

LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
PREFIX = "listener.name.sasl_plaintext.oauthbearer."
AUDIENCE, ISSUER = "klamm-test", "https://idp.klamm.test"


def oauth_broker(broker_factory: Any, jaas_options: str = "", **overrides: str) -> BrokerThread:
    return broker_factory(**{"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "OAUTHBEARER",
                             PREFIX + "sasl.jaas.config": f"{LOGIN_MODULE} required {jaas_options};",
                             **overrides})


@pytest.fixture(scope="module")
def idp_key() -> Any:
    return private_key("RS256")


@pytest.fixture
def secured_broker(broker_factory: Any, idp_key: Any, tmp_path: Path) -> BrokerThread:
    path = tmp_path / "jwks.json"
    path.write_text(jwks(jwk(idp_key, "idp-1")))
    return oauth_broker(broker_factory, **{PREFIX + "sasl.server.callback.handler.class": VALIDATOR,
                                           "sasl.oauthbearer.jwks.endpoint.url": path.as_uri(),
                                           "sasl.oauthbearer.expected.audience": AUDIENCE,
                                           "sasl.oauthbearer.expected.issuer": ISSUER})


def token_for(key: Any, sub: str = "alice", lifetime_s: float = 300, **more: Any) -> tuple[str, float]:
    """A signed access token as an identity provider issues it, and its expiry (seconds since the epoch)."""
    now = time.time()
    body = {"sub": sub, "iat": int(now), "exp": int(now + lifetime_s), "aud": AUDIENCE, "iss": ISSUER, **more}
    return signed_token(key, "RS256", body, kid="idp-1"), body["exp"]


def unsecured_conf(port: int, config: str = "principal=alice") -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": config}


def oauth_cb_conf(port: int, make: Any) -> dict[str, Any]:
    """librdkafka with oauth_cb: `make()` returns (token, expiry in epoch seconds)."""
    def oauth_cb(_config: str) -> tuple[str, float, str, dict[str, str]]:
        token, expiry = make()
        return token, expiry, "alice", {}

    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}


def principals(broker: BrokerThread) -> set[str]:
    """The principals of the broker's authenticated connections now."""
    processors = broker.broker._processors  # type: ignore[union-attr]
    return broker.call(lambda: {c.session.principal for p in processors for c in p.connections
                                if c.session.authenticated})


def test_unsecured_tokens_with_librdkafka(broker_factory: Any) -> None:
    broker = oauth_broker(broker_factory)
    conf = unsecured_conf(broker.port)
    producer = Producer(conf)
    producer.produce("oauth-unsecured", b"first", partition=0)
    assert producer.flush(10) == 0
    assert principals(broker) == {"User:alice"}  # the token's sub claim
    assert roundtrip(conf, "oauth-unsecured-rt") == expected()


def test_unsecured_required_scope(broker_factory: Any) -> None:
    broker = oauth_broker(broker_factory, 'unsecuredValidatorRequiredScope="kafka-produce"')
    good = unsecured_conf(broker.port, "principal=alice scope=kafka-produce,other")
    assert roundtrip(good, "oauth-scope", 10) == expected(10)
    message = refused(unsecured_conf(broker.port, "principal=alice scope=other"))
    assert '{"status":"insufficient_scope", "scope":"[kafka-produce]"}' in message


def test_signed_tokens_with_librdkafka(secured_broker: BrokerThread, idp_key: Any) -> None:
    conf = oauth_cb_conf(secured_broker.port, lambda: token_for(idp_key, sub="svc-1"))
    producer = Producer(conf)
    producer.produce("oauth-signed-first", b"first", partition=0)
    assert producer.flush(10) == 0
    assert principals(secured_broker) == {"User:svc-1"}  # the token's sub claim, not oauth_cb's principal
    assert roundtrip(conf, "oauth-signed") == expected()


@pytest.mark.parametrize("make", [
    lambda key: token_for(key, aud="someone-else"),  # wrong audience
    lambda key: token_for(key, iss="https://evil.example"),  # wrong issuer
    lambda key: (token_for(key, lifetime_s=-120)[0], time.time() + 60),  # expired (beyond the 30 s clock skew)
    lambda key: token_for(private_key("RS256")),  # signed by another key with the same kid
    lambda key: (signed_token(key, "RS256", {"sub": "alice", "iat": int(time.time()), "exp": int(time.time()) + 60,
                                             "aud": AUDIENCE, "iss": ISSUER}, kid="unknown"), time.time() + 60),
])
def test_bad_tokens_are_refused_with_kafkas_json(secured_broker: BrokerThread, idp_key: Any, make: Any) -> None:
    token = make(idp_key)
    message = refused(oauth_cb_conf(secured_broker.port, lambda: token))
    assert '{"status":"invalid_token"}' in message


def _kafka_python_provider(make: Any) -> Any:
    try:
        from kafka.sasl.oauth import AbstractTokenProvider  # kafka-python 2.x
    except ImportError:
        from kafka.net.sasl.oauth import AbstractTokenProvider  # kafka-python 3.x

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return make()[0]

    return Provider()


def test_kafka_python_and_aiokafka_token_providers(secured_broker: BrokerThread, idp_key: Any) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import KafkaError as KafkaPythonError
    from kafka.structs import TopicPartition as KTP

    conf = {"bootstrap_servers": f"127.0.0.1:{secured_broker.port}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": _kafka_python_provider(
                lambda: token_for(idp_key))}
    producer = KafkaProducer(**conf)
    for i in range(50):
        producer.send("kp-oauth", b"sasl-%04d" % i, partition=0)
    producer.flush(15)
    producer.close()
    consumer = KafkaConsumer(**conf, enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([KTP("kp-oauth", 0)])
    consumer.seek(KTP("kp-oauth", 0), 0)
    assert [m.value for m in consumer] == expected(50)
    consumer.close()
    # kafka-python keeps bootstrapping after a failed authentication until its bootstrap timeout (3.x: 30 s)
    quick = {"bootstrap_timeout_ms": 3000} if "bootstrap_timeout_ms" in KafkaProducer.DEFAULT_CONFIG else {}
    with pytest.raises(KafkaPythonError):
        KafkaProducer(**{**conf, **quick, "sasl_oauth_token_provider": _kafka_python_provider(
            lambda: token_for(idp_key, aud="nobody"))})

    async def with_aiokafka() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.abc import AbstractTokenProvider
        from aiokafka.structs import TopicPartition as ATP

        class Provider(AbstractTokenProvider):
            async def token(self) -> str:
                return token_for(idp_key)[0]

        aio = {"bootstrap_servers": conf["bootstrap_servers"], "security_protocol": "SASL_PLAINTEXT",
               "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Provider()}
        producer = AIOKafkaProducer(**aio)
        await producer.start()
        for i in range(50):
            await producer.send("aio-oauth", b"sasl-%04d" % i, partition=0)
        await producer.stop()
        consumer = AIOKafkaConsumer(**aio, enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        consumer.assign([ATP("aio-oauth", 0)])
        got = [m.value for m in (await consumer.getmany(timeout_ms=5000)).get(ATP("aio-oauth", 0), [])]
        await consumer.stop()
        return got

    assert asyncio.run(with_aiokafka()) == expected(50)


def _sasl_authenticate(sock: socket.socket, token: str) -> tuple[int, int]:
    """SaslHandshake v1 then SaslAuthenticate v1 with `token`: (error code, session lifetime ms)."""
    sock.sendall(_frame(17, 1, 1, struct.pack(">h", 11) + b"OAUTHBEARER"))
    assert struct.unpack(">h", _answer(sock)[4:6])[0] == 0
    message = client_first(token)
    sock.sendall(_frame(36, 1, 2, struct.pack(">i", len(message)) + message))
    answer = _answer(sock)[4:]
    error = struct.unpack(">h", answer[:2])[0]
    length = struct.unpack(">h", answer[2:4])[0]
    position = 4 + max(length, 0)
    auth_length = struct.unpack(">i", answer[position:position + 4])[0]
    position += 4 + max(auth_length, 0)
    return error, struct.unpack(">q", answer[position:position + 8])[0]


def test_a_session_ends_when_its_token_expires(broker_factory: Any) -> None:
    """Kafka's rule: the session lifetime is the time left on the token (connections.max.reauth.ms is 0 here), sent
    to the client in SaslAuthenticate; a request after it, other than a new SaslHandshake, closes the connection."""
    broker = oauth_broker(broker_factory)
    now = time.time()
    token = unsecured_token({"sub": "alice", "iat": now, "exp": now + 2})
    with socket.create_connection(("127.0.0.1", broker.port), 5) as sock:
        error, lifetime_ms = _sasl_authenticate(sock, token)
        assert error == 0 and 1000 < lifetime_ms <= 2000
        sock.sendall(_frame(3, 1, 3, struct.pack(">i", -1)))  # Metadata: served while the token lasts
        assert struct.unpack(">i", _answer(sock)[:4])[0] == 3
        time.sleep(max(0.0, now + 2.3 - time.time()))
        sock.sendall(_frame(3, 1, 4, struct.pack(">i", -1)))
        assert _closed(sock)


def test_librdkafka_reauthenticates_before_its_token_expires(broker_factory: Any, idp_key: Any,
                                                             tmp_path: Path) -> None:
    """Tokens live 4 s and connections.max.reauth.ms is a minute: the session ends with the token, so librdkafka
    fetches a new one (oauth_cb) and authenticates again on the same connection, and produces throughout."""
    path = tmp_path / "jwks.json"
    path.write_text(jwks(jwk(idp_key, "idp-1")))
    broker = oauth_broker(broker_factory, **{PREFIX + "sasl.server.callback.handler.class": VALIDATOR,
                                             "sasl.oauthbearer.jwks.endpoint.url": path.as_uri(),
                                             "sasl.oauthbearer.expected.audience": AUDIENCE,
                                             "connections.max.reauth.ms": "60000"})
    issued: list[float] = []

    def make() -> tuple[str, float]:
        issued.append(time.time())
        return token_for(idp_key, lifetime_s=4)

    conf = oauth_cb_conf(broker.port, make)
    producer = Producer({**conf, "message.timeout.ms": 10000})
    for i in range(10):
        producer.produce("oauth-reauth", b"sasl-%04d" % i, partition=0)
        assert producer.flush(10) == 0
        time.sleep(1)
    accepted = broker.call(lambda: sum(p.connections_accepted for p in broker.broker._processors))  # type: ignore
    assert handshakes(broker) > accepted  # some connection authenticated again
    assert len(issued) >= 2  # with a fresh token
    consumer = Consumer({**oauth_cb_conf(broker.port, lambda: token_for(idp_key)), "group.id": "reauth",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("oauth-reauth", 0, 0)])
    got = [m.value() for m in consumer.consume(10, 10)]
    consumer.close()
    assert got == expected(10)


@pytest.mark.parametrize(("overrides", "words"), [
    ({PREFIX + "sasl.server.callback.handler.class": "com.example.CustomValidator"}, "com.example.CustomValidator"),
    ({PREFIX + "sasl.server.callback.handler.class": VALIDATOR}, "sasl.oauthbearer.jwks.endpoint.url"),
    ({PREFIX + "sasl.server.callback.handler.class": VALIDATOR,
      "sasl.oauthbearer.jwks.endpoint.url": "file:///nonexistent/jwks.json"}, "doesn't exist"),
    ({PREFIX + "sasl.jaas.config": ""}, "OAuthBearerLoginModule"),
])
def test_what_cannot_work_is_refused_at_start(broker_factory: Any, overrides: dict[str, str], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        oauth_broker(broker_factory, **overrides)
