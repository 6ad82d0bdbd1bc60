"""The cost of TLS and SASL: the same librdkafka produce and consume load against one `klamm serve` per
listener kind (PLAINTEXT, SSL, SASL_PLAINTEXT with PLAIN, SASL_SSL with SCRAM-SHA-512).

    .venv/bin/python bench/security.py [--records 200000] [--size 100] [--rounds 1]

Prints a table: records/s and the broker's CPU per record for each phase. TLS encrypts in the
process (Python's ssl module), so fetches lose sendfile under SSL and SASL_SSL, as in Kafka.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docker" / "sasl_ssl"))
import gen_certs  # noqa: E402  (the docker example's certificate generator)

KLAMM = Path(sys.executable).parent / "klamm"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-secret" '
        'user_bench="bench-secret";')
MODES = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_overrides(mode: str, port: int, data: str, certs: Path) -> list[str]:
    props = [f"listeners={mode}://127.0.0.1:{port}", f"log.dirs={data}"]
    if mode in ("SSL", "SASL_SSL"):
        props += ["ssl.keystore.type=PEM", f"ssl.keystore.location={certs / 'broker.pem'}"]
    if mode.startswith("SASL_"):
        props += ["sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
                  f"listener.name.{mode.lower()}.plain.sasl.jaas.config={JAAS}"]
    return props


def client_conf(mode: str, port: int, certs: Path, mechanism: str = "") -> dict[str, str]:
    conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": mode}
    if mode in ("SSL", "SASL_SSL"):
        conf["ssl.ca.location"] = str(certs / "ca.pem")
    if mode.startswith("SASL_"):
        mechanism = mechanism or ("SCRAM-SHA-512" if mode == "SASL_SSL" else "PLAIN")
        user = "admin" if mechanism == "PLAIN" else "bench"
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": f"{user}-secret"})
    return conf


def start(mode: str, certs: Path, data: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    command = [str(KLAMM), "serve"]
    for prop in broker_overrides(mode, port, data, certs):
        command += ["--override", prop]
    broker = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return broker, port
        except OSError:
            time.sleep(0.1)
    broker.kill()
    raise RuntimeError(f"{mode} broker did not start")


def scram_user(mode: str, port: int, certs: Path) -> None:
    """The SCRAM-SHA-512 user the SASL_SSL load authenticates as, created by the PLAIN admin."""
    admin = AdminClient(client_conf(mode, port, certs, "PLAIN"))
    upsert = UserScramCredentialUpsertion("bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                          b"bench-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(15)


def produce(conf: dict[str, str], topic: str, records: int, size: int) -> float:
    producer = Producer({**conf, "linger.ms": 5, "acks": 1, "batch.num.messages": 10000,
                         "queue.buffering.max.messages": 1000000})
    value = bytes(size)
    producer.produce(topic, value, partition=0)  # connect and create the topic before the clock starts
    producer.flush(30)
    started = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
    return time.perf_counter() - started


def consume(conf: dict[str, str], topic: str, records: int) -> float:
    consumer = Consumer({**conf, "group.id": "bench", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    consumer.assign([TopicPartition(topic, 0, 1)])
    got = 0
    started = time.perf_counter()
    deadline = started + 120
    while got < records and time.perf_counter() < deadline:
        got += sum(1 for m in consumer.consume(10000, 0.5) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    if got < records:
        raise RuntimeError(f"consumed {got} of {records}")
    return elapsed


def measure(mode: str, records: int, size: int, certs: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as data:
        broker, port = start(mode, certs, data)
        try:
            if mode == "SASL_SSL":
                scram_user(mode, port, certs)
            conf = client_conf(mode, port, certs)
            cpu = cpu_seconds(broker.pid)
            produce_s = produce(conf, "bench", records, size)
            produce_cpu = cpu_seconds(broker.pid) - cpu
            cpu = cpu_seconds(broker.pid)
            consume_s = consume(conf, "bench", records)
            consume_cpu = cpu_seconds(broker.pid) - cpu
        finally:
            broker.terminate()
            broker.wait(30)
    return {"produce_rps": records / produce_s, "produce_us": produce_cpu / records * 1e6,
            "consume_rps": records / consume_s, "consume_us": consume_cpu / records * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        gen_certs.generate(certs, ["localhost", "127.0.0.1"])
        results: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
        for _ in range(opts.rounds):
            for mode in MODES:  # alternating, so a slower stretch of the machine hits every mode
                results[mode].append(measure(mode, opts.records, opts.size, certs))
    print(f"security: {opts.records} records of {opts.size} B, librdkafka acks=1, median of {opts.rounds} "
          f"round(s), {datetime.date.today()}")
    print("| listener | produce rec/s | broker CPU µs/rec (produce) | consume rec/s | broker CPU µs/rec (consume) |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        med = {k: statistics.median(r[k] for r in results[mode]) for k in results[mode][0]}
        label = {"SASL_PLAINTEXT": "SASL_PLAINTEXT (PLAIN)", "SASL_SSL": "SASL_SSL (SCRAM-SHA-512)"}.get(mode, mode)
        print(f"| {label} | {med['produce_rps']:,.0f} | {med['produce_us']:.2f} | {med['consume_rps']:,.0f} "
              f"| {med['consume_us']:.2f} |")


if __name__ == "__main__":
    main()
