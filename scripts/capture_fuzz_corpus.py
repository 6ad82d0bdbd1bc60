"""Capture the frames real clients send to klamm, as the fuzz corpus (tests/fuzz/corpus).

    .venv/bin/python scripts/capture_fuzz_corpus.py [--out tests/fuzz/corpus] [--per-version 3]

Starts an in-process broker with a PLAINTEXT and a SASL_PLAINTEXT listener (PLAIN and SCRAM users as
tests/fuzz/harness.py knows them), taps every byte each connection receives (ServerConnection.buffer_updated,
wrapped for the run) and cuts it into length-prefixed frames. Then it drives real clients through what they
really send: librdkafka (producers with every codec, idempotent and transactional producers, group consumers
with commits, the AdminClient, SASL PLAIN and SCRAM), kafka-python (current protocol, and pinned to 0.10.1:
message sets and SaslHandshake v0 with bare tokens) and aiokafka.

Each frame is kept with its 4-byte size, as one file: `<api_key>-v<version>-<n>.bin` for a request,
`sasl-token-<n>.bin` for a bare SASL token. At most --per-version distinct frames per (api_key, version)
are kept (correlation ids do not count as a difference), and only frames the harness decodes. Records are
small, so the corpus stays well under 2 MB. Files of other names (regression inputs) are left alone.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, ConfigResource, NewPartitions,
    NewTopic, OffsetSpec, ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
    UserScramCredentialDeletion, UserScramCredentialUpsertion)

from klamm.protocol.connection import Request, ServerConnection  # noqa: E402
from tests.fuzz.harness import PLAIN_USERS, SCRAM_PASSWORD, SCRAM_USER, decode_stream  # noqa: E402
from tests.integration.conftest import BrokerThread  # noqa: E402

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
MAX_CANDIDATES = 200  # distinct frames looked at per (api_key, version)
MAX_PRODUCE_KINDS = 8  # Produce frames kept per version, each with another kind of record batch
PRODUCE = 0
MAX_FRAME = 64 * 1024  # a bigger frame would only be a big produce batch: nothing new for a decoder
_SIZE = struct.Struct(">i")
_KEY_VERSION = struct.Struct(">hh")
_OWN_FILE = re.compile(r"^(\d+-v\d+-\d+|sasl-token-\d+)\.bin$")


class Tap:
    """Every byte each ServerConnection receives, cut into frames; kept per (api_key, version)."""

    def __init__(self, per_version: int) -> None:
        self.per_version = per_version
        self.requests: dict[tuple[int, int], dict[bytes, bytes]] = {}  # (key, version) -> {masked: frame}
        self.tokens: dict[bytes, None] = {}
        self.skipped = 0
        self._buffers: dict[ServerConnection, bytearray] = {}
        self._lock = threading.Lock()  # brokers' loops and the clients' threads
        self._original: Callable[[ServerConnection, int], None] | None = None

    def install(self) -> None:
        # The socket reads into ServerConnection.get_buffer(), which starts at its _end; buffer_updated says how
        # many bytes came (receive_data goes through both as well).
        original = self._original = ServerConnection.buffer_updated
        tap = self

        def buffer_updated(connection: ServerConnection, nbytes: int) -> None:
            tap.received(connection, bytes(memoryview(connection._buffer)[connection._end:connection._end + nbytes]))
            original(connection, nbytes)

        ServerConnection.buffer_updated = buffer_updated  # type: ignore[method-assign]

    def uninstall(self) -> None:
        if self._original is not None:
            ServerConnection.buffer_updated = self._original  # type: ignore[method-assign]

    def received(self, connection: ServerConnection, data: bytes) -> None:
        with self._lock:
            buffer = self._buffers.setdefault(connection, bytearray())
            buffer += data
            while len(buffer) >= 4:
                (size,) = _SIZE.unpack_from(buffer, 0)
                if size < 0:  # not a Kafka client: nothing of it to keep
                    buffer.clear()
                    return
                if len(buffer) < 4 + size:
                    return
                frame = bytes(buffer[:4 + size])
                del buffer[:4 + size]
                # A frame that completes while the connection reads bare tokens is one (after SaslHandshake v0
                # the client waits for each answer, so no request can share a read with a token).
                self._keep(frame, connection.raw_tokens)

    def _keep(self, frame: bytes, raw: bool) -> None:
        if len(frame) > MAX_FRAME:
            self.skipped += 1
            return
        if raw:
            self.tokens.setdefault(frame, None)
            return
        if len(frame) < 12:
            self.skipped += 1
            return
        key = _KEY_VERSION.unpack_from(frame, 4)
        kept = self.requests.setdefault(key, {})
        if len(kept) < MAX_CANDIDATES:
            kept.setdefault(_masked(frame), frame)

    def select(self) -> None:
        """Keep, per (api_key, version), at most --per-version frames that the harness decodes as the request
        they claim to be (not a newer ApiVersions, say); for Produce one per kind of record batch (codec,
        magic, transactional, idempotent), as those take different roads through validation. Run once the tap
        is out: decoding goes through ServerConnection.receive_data too."""
        for key, kept in self.requests.items():
            chosen: dict[Any, bytes] = {}
            for frame in kept.values():
                decoded = decode_stream(frame, len(frame))
                if len(decoded) != 1 or not isinstance(decoded[0], Request) or decoded[0].types is None \
                        or (decoded[0].api_key, decoded[0].api_version) != key:
                    self.skipped += 1
                    continue
                kind = _produce_kind(decoded[0]) if key[0] == PRODUCE else len(chosen)
                if kind not in chosen and len(chosen) < (MAX_PRODUCE_KINDS if key[0] == PRODUCE else self.per_version):
                    chosen[kind] = frame
            self.requests[key] = {frame: frame for frame in chosen.values()}

    def write(self, out: Path) -> tuple[int, int]:
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            if _OWN_FILE.match(old.name):
                old.unlink()
        count = total = 0
        for (key, version), kept in sorted(self.requests.items()):
            if not kept:
                continue
            for n, frame in enumerate(kept.values()):
                (out / f"{key}-v{version}-{n}.bin").write_bytes(frame)
                count, total = count + 1, total + len(frame)
        for n, frame in enumerate(self.tokens):
            (out / f"sasl-token-{n}.bin").write_bytes(frame)
            count, total = count + 1, total + len(frame)
        return count, total


# ------------------------------------------------------------------------------------------- the clients
def _masked(frame: bytes) -> bytes:
    """The frame without its correlation id and client id: two frames that differ only there are the same."""
    (client_id_length,) = struct.unpack_from(">h", frame, 12)
    return frame[4:8] + frame[14 + max(client_id_length, 0):]


def _produce_kind(request: Request) -> tuple[Any, ...]:
    """What sets a Produce request's records apart for the decoders: per partition, the magic and attribute
    bits (codec, timestamp type, transactional) of the first batch or message, and whether a producer id is set."""
    kinds = []
    for topic in request.body.topic_data:
        for data in topic.partition_data:
            records = bytes(data.records or b"")
            if len(records) > 22 and records[16] == 2:
                kinds.append((2, records[22] & 0x1F, struct.unpack_from(">q", records, 43)[0] >= 0))
            elif len(records) > 17:
                kinds.append((records[16], records[17] & 0x0F))
    return tuple(kinds)


def _sasl(port: int, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}


def _produce(conf: dict[str, Any], topic: str, count: int = 5, **extra: Any) -> None:
    producer = Producer({**conf, "linger.ms": 5, "message.timeout.ms": 15000, **extra})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, key=b"key-%d" % (i % 3), headers=[("h", b"v%d" % i)])
    producer.produce(topic, None, key=b"tombstone")
    if producer.flush(20):
        raise RuntimeError(f"{topic}: messages left unsent")


def librdkafka_admin(conf: dict[str, Any]) -> None:
    admin = AdminClient(conf)
    topics = ["fuzz-" + codec for codec in CODECS] + ["fuzz-idempotent", "fuzz-txn", "fuzz-kp", "fuzz-aio",
                                                       "fuzz-kp-old", "fuzz-doomed"]
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in topics]
                                  + [NewTopic("fuzz-compact", 2, 1, config={"cleanup.policy": "compact"})])
    for future in futures.values():
        future.result(20)
    admin.create_partitions([NewPartitions("fuzz-doomed", 2)])["fuzz-doomed"].result(10)
    topic, broker = ConfigResource(ResourceType.TOPIC, "fuzz-compact"), ConfigResource(ResourceType.BROKER, "1")
    for future in admin.describe_configs([topic, broker]).values():
        future.result(10)
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    change = ConfigResource(ResourceType.TOPIC, "fuzz-compact", incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([change]).values():
        future.result(10)
    acl = AclBinding(ResourceType.TOPIC, "fuzz-", ResourcePatternType.PREFIXED, "User:alice", "*",
                     AclOperation.READ, AclPermissionType.ALLOW)
    for future in admin.create_acls([acl]).values():
        future.result(10)
    admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                         AclOperation.ANY, AclPermissionType.ANY)).result(10)
    for future in admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, "fuzz-", ResourcePatternType.PREFIXED,
                                                       "User:alice", None, AclOperation.ANY,
                                                       AclPermissionType.ANY)]).values():
        future.result(10)
    for mechanism, iterations in ((ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)):
        upsert = UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(mechanism, iterations),
                                              SCRAM_PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():  # one change per user a request
            future.result(10)
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"c")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(10)
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(10)
    admin.describe_user_scram_credentials().result(10)
    admin.describe_cluster().result(10)
    from confluent_kafka import TopicCollection
    for future in admin.describe_topics(TopicCollection(["fuzz-compact"])).values():
        future.result(10)
    admin.list_topics(timeout=10)


def librdkafka_admin_groups(conf: dict[str, Any]) -> None:
    admin = AdminClient(conf)
    admin.list_consumer_groups().result(10)
    for future in admin.describe_consumer_groups(["fuzz-group", "fuzz-group-848"]).values():
        future.result(10)
    from confluent_kafka import ConsumerGroupTopicPartitions
    for future in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("fuzz-group")]).values():
        future.result(10)
    for future in admin.list_offsets({TopicPartition("fuzz-none", 0): OffsetSpec.latest(),
                                      TopicPartition("fuzz-gzip", 0): OffsetSpec.earliest()}).values():
        future.result(10)
    for future in admin.delete_records([TopicPartition("fuzz-lz4", 0, 1)]).values():
        future.result(10)
    for future in admin.delete_consumer_groups(["fuzz-group-empty"]).values():
        try:
            future.result(10)
        except Exception:
            pass  # GROUP_ID_NOT_FOUND: the request is what counts
    for future in admin.delete_topics(["fuzz-doomed"]).values():
        future.result(10)


def librdkafka_producers(conf: dict[str, Any]) -> None:
    for codec in CODECS:
        _produce(conf, f"fuzz-{codec}", **{"compression.type": codec})
    _produce(conf, "fuzz-compact", **{"compression.type": "zstd"})
    _produce(conf, "fuzz-idempotent", **{"enable.idempotence": True, "compression.type": "lz4"})
    producer = Producer({**conf, "transactional.id": "fuzz-txn-id", "linger.ms": 5})
    producer.init_transactions(15)
    consumer = Consumer({**conf, "group.id": "fuzz-txn-group", "enable.auto.commit": False})
    for commit in (True, False):
        producer.begin_transaction()
        for i in range(3):
            producer.produce("fuzz-txn", b"txn-%d" % i, key=b"k")
        producer.send_offsets_to_transaction([TopicPartition("fuzz-none", 0, 2)], consumer.consumer_group_metadata(),
                                             15)
        if commit:
            producer.commit_transaction(15)
        else:
            producer.abort_transaction(15)
    consumer.close()


def librdkafka_consumers(conf: dict[str, Any]) -> None:
    for group, protocol in (("fuzz-group", {}), ("fuzz-group-848", {"group.protocol": "consumer"})):
        consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False, "isolation.level": "read_committed", **protocol})
        consumer.subscribe(["fuzz-none", "fuzz-gzip", "fuzz-txn"])
        got = 0
        deadline = time.monotonic() + 20
        while got < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got += 1
                consumer.commit(message, asynchronous=False)
        consumer.committed([TopicPartition("fuzz-none", 0)], 10)
        consumer.close()


def librdkafka_sasl(port: int) -> None:
    user, password = next(iter(PLAIN_USERS.items()))
    for mechanism, conf in (("PLAIN", _sasl(port, "PLAIN", user, password)),
                            ("SCRAM-SHA-256", _sasl(port, "SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD)),
                            ("SCRAM-SHA-512", _sasl(port, "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD))):
        _produce(conf, "fuzz-none", count=2)
        errors: list[Any] = []
        wrong = Producer({**conf, "sasl.password": "wrong", "error_cb": errors.append})
        deadline = time.monotonic() + 5
        while not errors and time.monotonic() < deadline:  # a failed authentication sends its tokens too
            wrong.poll(0.2)
        del wrong
        print(f"  SASL {mechanism}: refused wrong password: {bool(errors)}")


def kafka_python(port: int, sasl_port: int) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic

    plain = {"bootstrap_servers": f"127.0.0.1:{port}"}
    admin = KafkaAdminClient(**plain)
    from kafka.admin import ConfigResource as KConfigResource, ConfigResourceType
    from kafka.protocol.admin.topics import ElectionType
    from kafka.structs import TopicPartition as KTopicPartition
    tp = KTopicPartition("fuzz-none", 0)
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("create_topics", lambda: admin.create_topics([KNewTopic("fuzz-kp-admin", 1, 1)])),
        ("describe_groups", lambda: admin.describe_groups(["fuzz-group"])),
        ("list_groups", lambda: admin.list_groups()),
        ("list_group_offsets", lambda: admin.list_group_offsets({"fuzz-group": None})),
        ("describe_log_dirs", lambda: admin.describe_log_dirs()),
        ("describe_metadata_quorum", lambda: admin.describe_metadata_quorum()),
        ("describe_producers", lambda: admin.describe_producers([KTopicPartition("fuzz-idempotent", 0)])),
        ("describe_transactions", lambda: admin.describe_transactions(["fuzz-txn-id"])),
        ("list_transactions", lambda: admin.list_transactions()),
        ("describe_topic_partitions", lambda: admin.describe_topic_partitions(["fuzz-none"])),
        ("list_config_resources", lambda: admin.list_config_resources()),
        ("elect_leaders", lambda: admin.elect_leaders(ElectionType.PREFERRED, [tp], raise_errors=False)),
        ("list_partition_reassignments", lambda: admin.list_partition_reassignments()),
        ("delete_group_offsets", lambda: admin.delete_group_offsets("fuzz-kp-group", [KTopicPartition("fuzz-kp", 0)])),
        ("describe_configs", lambda: admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, "fuzz-kp")])),
        ("alter_configs", lambda: admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, "fuzz-kp",
                                                                        {"retention.ms": "3600000"})])),
        ("list_partition_offsets", lambda: admin.list_partition_offsets({tp: -1})),
        ("describe_cluster", lambda: admin.describe_cluster()),
    ]
    for name, call in calls:
        try:
            call()
        except Exception as exc:  # an error answer still came from a request we captured
            print(f"  kafka-python admin {name}: {exc!r}")
    admin.close()
    for codec in (None, "gzip", "snappy", "lz4", "zstd"):
        producer = KafkaProducer(**plain, compression_type=codec)
        for i in range(3):
            producer.send("fuzz-kp", b"kp-%d" % i, key=b"k", headers=[("h", b"1")])
        producer.flush(15)
        producer.close()
    consumer = KafkaConsumer("fuzz-kp", **plain, group_id="fuzz-kp-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    for _ in consumer:
        consumer.commit()
        break
    consumer.close()
    # Pinned to old brokers: Produce v2 / v1 with message sets of magic 1 / 0 (compressed too).
    for api_version, codec in (((0, 10, 1), "gzip"), ((0, 10, 1), "snappy"), ((0, 10, 1), "lz4"),
                               ((0, 10, 1), None), ((0, 9), "gzip"), ((0, 9), None)):
        producer = KafkaProducer(**plain, api_version=api_version, compression_type=codec)
        for i in range(3):
            producer.send("fuzz-kp-old", b"old-%d" % i, key=b"k" if i else None)
        producer.flush(15)
        producer.close()
    old = KafkaConsumer("fuzz-kp-old", **plain, api_version=(0, 10, 1), group_id="fuzz-kp-old-group",
                        auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=5000)
    for _ in old:
        old.commit()
        break
    old.close()
    # SASL: SaslHandshake v0 and bare tokens with api_version=(0, 10, 1); v1 and SaslAuthenticate otherwise.
    for mechanism, user, password, api_version in (
            ("PLAIN", "alice", PLAIN_USERS["alice"], (0, 10, 1)),
            ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD, (0, 10, 1)),
            ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD, None)):
        conf = {"bootstrap_servers": f"127.0.0.1:{sasl_port}", "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
        if api_version is not None:
            conf["api_version"] = api_version
        producer = KafkaProducer(**conf)
        producer.send("fuzz-kp", b"sasl", partition=0)
        producer.flush(15)
        producer.close()


def aiokafka_clients(port: int, sasl_port: int) -> None:
    async def run() -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        bootstrap = f"127.0.0.1:{port}"
        for codec in (None, "gzip", "lz4", "zstd"):
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
            await producer.start()
            try:
                for i in range(3):
                    await producer.send_and_wait("fuzz-aio", b"aio-%d" % i, key=b"k", headers=[("h", b"v")])
            finally:
                await producer.stop()
        transactional = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="fuzz-aio-txn")
        await transactional.start()
        try:
            async with transactional.transaction():
                await transactional.send_and_wait("fuzz-aio", b"aio-txn")
        finally:
            await transactional.stop()
        consumer = AIOKafkaConsumer("fuzz-aio", bootstrap_servers=bootstrap, group_id="fuzz-aio-group",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        try:
            await asyncio.wait_for(consumer.getone(), 15)
            await consumer.commit()
        finally:
            await consumer.stop()
        sasl = AIOKafkaProducer(bootstrap_servers=f"127.0.0.1:{sasl_port}", security_protocol="SASL_PLAINTEXT",
                                sasl_mechanism="SCRAM-SHA-256", sasl_plain_username=SCRAM_USER,
                                sasl_plain_password=SCRAM_PASSWORD)
        await sasl.start()
        try:
            await sasl.send_and_wait("fuzz-aio", b"aio-sasl")
        finally:
            await sasl.stop()

    asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "fuzz" / "corpus")
    parser.add_argument("--per-version", type=int, default=3, help="distinct frames kept per (api_key, version)")
    args = parser.parse_args(argv)
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join(f'user_{user}="{password}"' for user, password in PLAIN_USERS.items()) + ";")
    tap = Tap(args.per_version)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="klamm-capture-") as data_dir:
        broker = BrokerThread(Path(data_dir), {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": ";".join(f"User:{u}" for u in ("ANONYMOUS", *PLAIN_USERS, SCRAM_USER)),
            "offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "1",
            "transaction.state.log.num.partitions": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0"})
        tap.install()
        try:
            broker.start()
            ports = broker.call(lambda: dict(broker.broker.listener_ports))  # type: ignore[union-attr]
            port, sasl_port = ports["PLAINTEXT"], ports["SASL_PLAINTEXT"]
            plain = {"bootstrap.servers": f"127.0.0.1:{port}"}
            steps: list[tuple[str, Callable[[], None]]] = [
                ("librdkafka admin", lambda: librdkafka_admin(plain)),
                ("librdkafka producers", lambda: librdkafka_producers(plain)),
                ("librdkafka consumers", lambda: librdkafka_consumers(plain)),
                ("librdkafka admin (groups)", lambda: librdkafka_admin_groups(plain)),
                ("librdkafka SASL", lambda: librdkafka_sasl(sasl_port)),
                ("kafka-python", lambda: kafka_python(port, sasl_port)),
                ("aiokafka", lambda: aiokafka_clients(port, sasl_port)),
            ]
            for name, step in steps:
                started = time.monotonic()
                print(f"{name} ...", flush=True)
                try:
                    step()
                except Exception:  # a step that fails still sent frames; say so and go on
                    failures += 1
                    traceback.print_exc()
                print(f"{name}: {time.monotonic() - started:.1f}s", flush=True)
        finally:
            tap.uninstall()
            broker.close()
    tap.select()
    count, total = tap.write(args.out)
    print(f"{count} frames ({total} bytes) for {len(tap.requests)} (api_key, version) pairs and "
          f"{len(tap.tokens)} bare SASL tokens in {args.out}; {tap.skipped} frames skipped; {failures} steps failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
