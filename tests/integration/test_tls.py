"""An SSL listener (listeners=SSL://...), configured with Kafka's ssl.* keys and PEM stores (KIP-651):
real clients connect with server verification and with mutual TLS; fetches (no sendfile under TLS) return
the same bytes; what cannot work is refused at start-up with the reason."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from klamm.broker.tls import server_context
from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from tests.integration.conftest import BrokerThread

pytestmark = pytest.mark.timeout(120)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _issue(subject: str, issuer: tuple[Any, x509.Name] | None, *, ca: bool = False) -> tuple[Any, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    signer, issuer_name = issuer if issuer is not None else (key, _name(subject))
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if not ca:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return key, builder.sign(signer, hashes.SHA256())


def _pem(key: Any = None, cert: x509.Certificate | None = None) -> str:
    out = b""
    if key is not None:
        out += key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption())
    if cert is not None:
        out += cert.public_bytes(serialization.Encoding.PEM)
    return out.decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A CA, a server and a client certificate it signed, and a stranger's CA and client certificate."""
    base = tmp_path_factory.mktemp("pki")
    ca_key, ca = _issue("klamm test CA", None, ca=True)
    server_key, server = _issue("localhost", (ca_key, ca.subject))
    client_key, client = _issue("client", (ca_key, ca.subject))
    other_key, other = _issue("other CA", None, ca=True)
    stranger_key, stranger = _issue("stranger", (other_key, other.subject))
    files = {"ca": _pem(cert=ca), "server": _pem(server_key, server), "server_key": _pem(server_key),
             "server_cert": _pem(cert=server), "client_key": _pem(client_key), "client_cert": _pem(cert=client),
             "other_ca": _pem(cert=other), "stranger_key": _pem(stranger_key), "stranger_cert": _pem(cert=stranger)}
    paths = {}
    for name, text in files.items():
        paths[name] = base / f"{name}.pem"
        paths[name].write_text(text)
    return {"paths": paths, "text": files}


def ssl_broker(broker_factory: Any, pki: dict[str, Any], **overrides: str) -> BrokerThread:
    paths = pki["paths"]
    return broker_factory(**{"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                             "ssl.keystore.location": str(paths["server"]), "ssl.truststore.type": "PEM",
                             "ssl.truststore.location": str(paths["ca"]), **overrides})


def roundtrip(port: int, conf: dict[str, str], topic: str, count: int = 200) -> list[bytes]:
    """Produce `count` records and read them back with the same client settings."""
    base = {"bootstrap.servers": f"127.0.0.1:{port}", **conf}
    producer = Producer({**base, "compression.type": "gzip", "message.timeout.ms": 10000})
    for i in range(count):
        producer.produce(topic, b"tls-%04d" % i + bytes(200), partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({**base, "group.id": "tls", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < count and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return got


def test_clients_verify_the_broker_and_fetch_the_same_bytes(broker_factory: Any, pki: dict[str, Any]) -> None:
    broker = ssl_broker(broker_factory, pki)
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki["paths"]["ca"])}
    assert roundtrip(broker.port, conf, "tls-topic") == [b"tls-%04d" % i + bytes(200) for i in range(200)]
    # a client that trusts another CA refuses the broker
    stranger = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "security.protocol": "SSL",
                         "ssl.ca.location": str(pki["paths"]["other_ca"])})
    with pytest.raises(KafkaException):
        stranger.list_topics(timeout=3)
    # a plaintext client gets nothing it can read as Kafka: the TLS listener closes it
    with socket.create_connection(("127.0.0.1", broker.port), 5) as plain:
        plain.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff")
        plain.settimeout(5)
        assert not plain.recv(4096).startswith(b"\x00\x00\x00")


def test_kafka_python_over_tls(broker_factory: Any, pki: dict[str, Any]) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KTP

    broker = ssl_broker(broker_factory, pki)
    bootstrap = f"127.0.0.1:{broker.port}"
    cafile = str(pki["paths"]["ca"])
    producer = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=cafile)
    offsets = [producer.send("kp-tls", b"v%d" % i, partition=0).get(15).offset for i in range(20)]
    producer.close()
    assert offsets == list(range(20))
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=cafile,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    consumer.assign([KTP("kp-tls", 0)])
    try:
        assert [m.value for m in consumer] == [b"v%d" % i for i in range(20)]
    finally:
        consumer.close()


def test_mutual_tls_admits_only_certificates_of_the_trusted_ca(broker_factory: Any, pki: dict[str, Any]) -> None:
    paths = pki["paths"]
    broker = ssl_broker(broker_factory, pki, **{"ssl.client.auth": "required"})
    verify = {"security.protocol": "SSL", "ssl.ca.location": str(paths["ca"])}
    client = {**verify, "ssl.certificate.location": str(paths["client_cert"]), "ssl.key.location": str(paths["client_key"])}
    assert len(roundtrip(broker.port, client, "mtls", 10)) == 10
    for without in (verify, {**verify, "ssl.certificate.location": str(paths["stranger_cert"]),
                             "ssl.key.location": str(paths["stranger_key"])}):
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", **without})
        with pytest.raises(KafkaException):
            producer.list_topics(timeout=3)


def test_inline_pem_stores_and_the_tls_versions_enabled(broker_factory: Any, pki: dict[str, Any]) -> None:
    text = pki["text"]
    broker = broker_factory(**{"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                               "ssl.keystore.key": text["server_key"],
                               "ssl.keystore.certificate.chain": text["server_cert"],
                               "ssl.enabled.protocols": "TLSv1.3"})
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki["paths"]["ca"])}
    assert len(roundtrip(broker.port, conf, "inline", 10)) == 10

    def handshake(version: ssl.TLSVersion) -> str:
        context = ssl.create_default_context(cafile=str(pki["paths"]["ca"]))
        context.maximum_version = version
        with socket.create_connection(("127.0.0.1", broker.port), 5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                return tls.version() or ""
    assert handshake(ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    with pytest.raises(ssl.SSLError):
        handshake(ssl.TLSVersion.TLSv1_2)  # ssl.enabled.protocols leaves TLSv1.2 out


def test_an_encrypted_private_key_opens_with_its_password(broker_factory: Any, pki: dict[str, Any],
                                                          tmp_path: Path) -> None:
    key = serialization.load_pem_private_key(pki["text"]["server_key"].encode(), None)
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"s3cret")).decode()
    store = tmp_path / "encrypted.pem"
    store.write_text(encrypted + pki["text"]["server_cert"])
    base = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(store)}
    for password in ("ssl.key.password", "ssl.keystore.password"):
        server_context(_config(pki, **base, **{password: "s3cret"}))
    with pytest.raises(ConfigError, match="could not be loaded"):
        server_context(_config(pki, **base, **{"ssl.key.password": "wrong"}))
    broker = broker_factory(**{"listeners": "SSL://127.0.0.1:0", **base, "ssl.key.password": "s3cret"})
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki["paths"]["ca"])}
    assert len(roundtrip(broker.port, conf, "encrypted", 5)) == 5


def _config(pki: dict[str, Any], **props: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"listeners": "SSL://127.0.0.1:0", **props})


def test_what_cannot_work_is_refused_with_the_reason(pki: dict[str, Any], tmp_path: Path) -> None:
    paths = pki["paths"]
    with pytest.raises(ConfigError, match="needs a key store"):
        server_context(_config(pki))
    with pytest.raises(ConfigError, match="convert a JKS store"):
        server_context(_config(pki, **{"ssl.keystore.location": str(tmp_path / "broker.jks")}))
    with pytest.raises(ConfigError, match="could not be loaded"):
        server_context(_config(pki, **{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["ca"])}))
    with pytest.raises(ConfigError, match="need a trust store"):
        server_context(_config(pki, **{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
                                       "ssl.client.auth": "required"}))
    with pytest.raises(ConfigError, match="could not be loaded"):
        server_context(_config(pki, **{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
                                       "ssl.truststore.location": str(tmp_path / "missing.p12"),
                                       "ssl.truststore.type": "PKCS12"}))
    with pytest.raises(ConfigError, match="takes no password"):
        server_context(_config(pki, **{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
                                       "ssl.truststore.type": "PEM", "ssl.truststore.location": str(paths["ca"]),
                                       "ssl.truststore.password": "x"}))
    with pytest.raises(ConfigError, match="no enabled TLS version"):
        server_context(_config(pki, **{"ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
                                       "ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLSv1.2"}))
    # a broker of a cluster: other brokers reach it on a PLAINTEXT listener (inter.broker.listener.name)
    with pytest.raises(ConfigError, match="inter.broker.listener.name must be a listener name defined in "
                                          "advertised.listeners"):
        BrokerConfig.from_properties({"listeners": "SSL://127.0.0.1:9093", "process.roles": "broker",
                                      "node.id": "2", "controller.quorum.voters": "1@127.0.0.1:9094",
                                      "controller.listener.names": "CONTROLLER"})
    assert BrokerConfig.from_properties({"listeners": "SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
                                         "process.roles": "broker", "node.id": "2",
                                         "controller.quorum.voters": "1@127.0.0.1:9094",
                                         "controller.listener.names": "CONTROLLER"}).inter_broker_listener == \
        "PLAINTEXT"


def test_aiokafka_over_tls(broker_factory: Any, pki: dict[str, Any]) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    broker = ssl_broker(broker_factory, pki)
    bootstrap = f"127.0.0.1:{broker.port}"

    async def run() -> list[bytes]:
        context = create_ssl_context(cafile=str(pki["paths"]["ca"]))
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context)
        await producer.start()
        try:
            for i in range(20):
                await producer.send_and_wait("aio-tls", b"a%d" % i, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            from aiokafka import TopicPartition as ATP
            consumer.assign([ATP("aio-tls", 0)])
            got: list[bytes] = []
            while len(got) < 20:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                got += [m.value for ms in batch.values() for m in ms]
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [b"a%d" % i for i in range(20)]


def test_pkcs12_key_and_trust_stores(broker_factory: Any, pki: dict[str, Any], tmp_path: Path) -> None:
    """ssl.keystore.type=PKCS12 and ssl.truststore.type=PKCS12, as keytool writes them, with their passwords."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    text = pki["text"]
    key = serialization.load_pem_private_key(text["server_key"].encode(), None)
    server = x509.load_pem_x509_certificate(text["server_cert"].encode())
    ca = x509.load_pem_x509_certificate(text["ca"].encode())
    keystore, truststore = tmp_path / "broker.p12", tmp_path / "trust.p12"
    keystore.write_bytes(pkcs12.serialize_key_and_certificates(b"broker", key, server, [ca],  # type: ignore[arg-type]
                                                               BestAvailableEncryption(b"store-secret")))
    truststore.write_bytes(pkcs12.serialize_key_and_certificates(b"trust", None, None, [ca],
                                                                 BestAvailableEncryption(b"trust-secret")))
    stores = {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore),
              "ssl.keystore.password": "store-secret", "ssl.truststore.type": "PKCS12",
              "ssl.truststore.location": str(truststore), "ssl.truststore.password": "trust-secret"}
    with pytest.raises(ConfigError, match="could not be opened"):
        server_context(_config(pki, **{**stores, "ssl.keystore.password": "wrong"}))
    broker = broker_factory(**{"listeners": "SSL://127.0.0.1:0", **stores, "ssl.client.auth": "required"})
    paths = pki["paths"]
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(paths["ca"]),
            "ssl.certificate.location": str(paths["client_cert"]), "ssl.key.location": str(paths["client_key"])}
    assert roundtrip(broker.port, conf, "p12-topic", 20) == [b"tls-%04d" % i + bytes(200) for i in range(20)]


def _principals(broker: BrokerThread) -> set[str]:
    return broker.call(lambda: {c.session.principal for p in broker.broker._processors  # type: ignore[union-attr]
                                for c in p.connections})


@pytest.mark.parametrize(("rules", "principal"), [
    ("DEFAULT", "User:CN=client"),
    ("RULE:^CN=(.*?)$/$1@klamm/U,DEFAULT", "User:CLIENT@KLAMM"),
    ("RULE:^OU=(.*)$/$1/,DEFAULT", "User:CN=client"),  # the first rule does not match: DEFAULT does
])
def test_ssl_principal_mapping_rules(broker_factory: Any, pki: dict[str, Any], rules: str, principal: str) -> None:
    broker = ssl_broker(broker_factory, pki, **{"ssl.client.auth": "required", "ssl.principal.mapping.rules": rules})
    paths = pki["paths"]
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(paths["ca"]),
            "ssl.certificate.location": str(paths["client_cert"]), "ssl.key.location": str(paths["client_key"])}
    assert roundtrip(broker.port, conf, "mapped", 5) == [b"tls-%04d" % i + bytes(200) for i in range(5)]
    # the principal of a connection held open (librdkafka opens and closes its own as it likes)
    context = ssl.create_default_context(cafile=str(paths["ca"]))
    context.load_cert_chain(str(paths["client_cert"]), str(paths["client_key"]))
    with socket.create_connection(("127.0.0.1", broker.port), 5) as plain:
        with context.wrap_socket(plain, server_hostname="localhost") as sock:
            sock.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04good")
            sock.settimeout(5)
            assert sock.recv(4)  # answered: the broker has set up the connection's session
            assert principal in _principals(broker)


def test_a_certificate_no_rule_maps_is_refused(broker_factory: Any, pki: dict[str, Any]) -> None:
    broker = ssl_broker(broker_factory, pki, **{"ssl.client.auth": "required",
                                                "ssl.principal.mapping.rules": "RULE:^OU=(.*)$/$1/"})
    paths = pki["paths"]
    context = ssl.create_default_context(cafile=str(paths["ca"]))
    context.load_cert_chain(str(paths["client_cert"]), str(paths["client_key"]))
    with socket.create_connection(("127.0.0.1", broker.port), 5) as plain:
        with context.wrap_socket(plain, server_hostname="localhost") as sock:
            sock.sendall(b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x01\x00\x04good")
            sock.settimeout(5)
            assert sock.recv(4096) == b""
    with pytest.raises(ConfigError, match="Invalid rule"):
        ssl_broker(broker_factory, pki, **{"ssl.principal.mapping.rules": "RULE:^CN=(.*)$/x"})
