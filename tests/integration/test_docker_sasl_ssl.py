"""docker/sasl_ssl, checked without a Docker engine: its certificate generator, its server.properties
(SASL_SSL, PLAIN, the StandardAuthorizer) and the TLS healthcheck work as the compose file uses them."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from klamm.config.properties import load_properties

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sasl_ssl_example_serves_clients(broker_factory: Any, tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    _module(DOCKER / "sasl_ssl" / "gen_certs.py").generate(certs, ["localhost", "127.0.0.1"])
    assert (certs / "broker.pem").stat().st_mode & 0o077 == 0  # the private key is the owner's only
    props = load_properties(DOCKER / "sasl_ssl" / "server.properties")
    props.update({"listeners": "SASL_SSL://127.0.0.1:0", "advertised.listeners": "SASL_SSL://127.0.0.1:0",
                  "ssl.keystore.location": str(certs / "broker.pem")})
    props.pop("log.dirs")
    broker = broker_factory(**props)
    health = _module(DOCKER / "healthcheck.py")
    assert health.check("127.0.0.1", broker.port, cafile=str(certs / "ca.pem")).startswith("ok")
    assert health.main(["healthcheck.py", "127.0.0.1", str(broker.port)]) == 1  # plaintext gets no answer
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.port}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs / "ca.pem"), "sasl.mechanism": "PLAIN", "sasl.username": "admin",
            "sasl.password": "admin-secret"}
    producer = Producer(conf)
    for i in range(10):
        producer.produce("example", b"%d" % i, partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer({**conf, "group.id": "example"})
    consumer.assign([TopicPartition("example", 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    while len(got) < 10 and time.monotonic() < deadline:
        got += [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]
    consumer.close()
    assert got == [b"%d" % i for i in range(10)]
