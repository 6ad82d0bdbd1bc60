"""Client-side helpers for the interop tests (confluent-kafka, kafka-python, aiokafka)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any, Callable, Iterable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.conftest import RawClient

from .records import Rec, norm_headers

OP_TIMEOUT = 30.0


def wait_for(cond: Callable[[], object], timeout: float = OP_TIMEOUT, what: str = "condition",
             interval: float = 0.05):
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # retry until the deadline
            last_exc = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}"
                                 + (f" (last error: {last_exc!r})" if last_exc else ""))
        time.sleep(interval)


# ---------------------------------------------------------- confluent-kafka ---
def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def topic_ready(bootstrap: str, name: str, partitions: int, a: AdminClient | None = None) -> bool:
    """The topic has leaders, as every broker of `bootstrap` tells (in a cluster each learns it on its own), and in
    a cluster each leader serves its partition: a leader named in the metadata may not have made the log yet, and
    an acks=0 produce it refuses then is lost."""
    addresses = bootstrap.split(",")
    if len(addresses) > 1:  # each node asked itself: a client sends its metadata requests to any broker it knows
        answers = [_metadata(address, name) for address in addresses]
        return all(_has_leaders(answer, partitions) for answer in answers) and _leaders_serve(answers[0], name)
    t = (a or admin(bootstrap)).list_topics(topic=name, timeout=10).topics.get(name)
    if t is None or t.error is not None or len(t.partitions) != partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in t.partitions.values())


def _metadata(address: str, name: str) -> Any:
    client = RawClient(int(address.rsplit(":", 1)[1]))
    try:
        return client.request(3, 12, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                      "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
    finally:
        client.close()


def _has_leaders(metadata: Any, partitions: int) -> bool:
    (t,) = metadata.topics
    return t.error_code == 0 and len(t.partitions) == partitions \
        and all(p.error_code == 0 and p.leader_id >= 0 for p in t.partitions)


def _leaders_serve(metadata: Any, name: str) -> bool:
    """Each partition's leader (as `metadata` names it) answers a ListOffsets for it without an error."""
    ports = {b.node_id: b.port for b in metadata.brokers}
    for p in metadata.topics[0].partitions:
        client = RawClient(ports[p.leader_id])
        try:
            answer = client.request(2, 7, {"replica_id": -1, "isolation_level": 0, "topics": [{
                "name": name, "partitions": [{"partition_index": p.partition_index, "current_leader_epoch": -1,
                                              "timestamp": -1}]}]})
        finally:
            client.close()
        if answer.topics[0].partitions[0].error_code != 0:
            return False
    return True


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> str:
    a = admin(bootstrap)
    # The broker's default.replication.factor: 1 on one node, 3 on a test cluster (KLAMM_TEST_BROKER=cluster).
    fs = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=-1,
                                   config=config or {})], request_timeout=15)
    fs[name].result(OP_TIMEOUT)
    wait_for(lambda: topic_ready(bootstrap, name, partitions, a), what=f"topic {name} to have leaders")
    return name


def confluent_produce(bootstrap: str, topic: str, recs: Iterable[Rec], *, partition: int = 0,
                      codec: str = "none", acks: str = "all", timestamps: list[int] | None = None,
                      extra: dict | None = None) -> list[tuple[int, int, KafkaError | None]]:
    """Produce and flush; returns [(index, offset, error)] in index order."""
    conf = {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "compression.type": codec,
        "linger.ms": 5,
        "message.timeout.ms": 30000,
        "socket.timeout.ms": 10000,
    }
    conf.update(extra or {})
    p = Producer(conf)
    results: dict[int, tuple[int, int, KafkaError | None]] = {}

    def cb(i):
        def _cb(err, msg):
            results[i] = (i, msg.offset() if err is None else -1, err)
        return _cb

    n = 0
    for i, r in enumerate(recs):
        kw = {}
        if timestamps is not None:
            kw["timestamp"] = timestamps[i]
        if r.headers:
            kw["headers"] = list(r.headers)
        while True:
            try:
                p.produce(topic, value=r.value, key=r.key, partition=partition, on_delivery=cb(i), **kw)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
        n += 1
    left = p.flush(OP_TIMEOUT)
    assert left == 0, f"{left} messages still undelivered after {OP_TIMEOUT}s"
    return [results[i] for i in range(n)]


def confluent_consumer(bootstrap: str, extra: dict | None = None) -> Consumer:
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": "interop-assign-only",  # required by the client; never joined/committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "socket.timeout.ms": 10000,
    }
    conf.update(extra or {})
    return Consumer(conf)


def confluent_consume(bootstrap: str, topic: str, partition: int, start: int, count: int,
                      timeout: float = OP_TIMEOUT, extra: dict | None = None) -> list:
    """assign + seek at `start`; returns exactly `count` messages (or fails)."""
    c = confluent_consumer(bootstrap, extra)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in c.consume(num_messages=min(500, count - len(out)), timeout=0.5):
                if m.error():
                    raise AssertionError(f"consume error: {m.error()}")
                out.append(m)
        assert len(out) >= count, f"got {len(out)} of {count} records from {topic}/{partition} in {timeout}s"
        return out[:count]
    finally:
        c.close()


def confluent_recs(msgs) -> list[Rec]:
    return [Rec(m.key(), m.value(), norm_headers(m.headers())) for m in msgs]


# ------------------------------------------------------------- kafka-python ---
def _kp_codec(codec: str):
    return None if codec == "none" else codec


def kp_produce(bootstrap: str, topic: str, recs: Iterable[Rec], *, partition: int = 0,
               codec: str = "none", acks="all") -> list[int]:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=_kp_codec(codec), acks=acks,
                      linger_ms=5, request_timeout_ms=15000, max_block_ms=30000)
    try:
        futs = [p.send(topic, value=r.value, key=r.key, partition=partition,
                       headers=list(r.headers)) for r in recs]
        p.flush(timeout=OP_TIMEOUT)
        return [f.get(timeout=OP_TIMEOUT).offset for f in futs]
    finally:
        p.close(timeout=10)


def kp_consume(bootstrap: str, topic: str, partition: int, start: int, count: int,
               timeout: float = OP_TIMEOUT) -> list:
    from kafka import KafkaConsumer
    from kafka.structs import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      request_timeout_ms=15000, fetch_max_wait_ms=200)
    try:
        tp = KTP(topic, partition)
        c.assign([tp])
        c.seek(tp, start)
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                out.extend(recs)
        assert len(out) >= count, f"kafka-python got {len(out)} of {count} records in {timeout}s"
        return out[:count]
    finally:
        c.close()


def kp_recs(msgs) -> list[Rec]:
    return [Rec(m.key, m.value, norm_headers(m.headers)) for m in msgs]


# ------------------------------------------------------------------ aiokafka ---
def aio_produce(bootstrap: str, topic: str, recs: Iterable[Rec], *, partition: int = 0,
                codec: str = "none", acks="all") -> list[int]:
    from aiokafka import AIOKafkaProducer

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=_kp_codec(codec),
                             acks=acks, linger_ms=5, request_timeout_ms=15000)
        await asyncio.wait_for(p.start(), OP_TIMEOUT)
        try:
            futs = [await p.send(topic, value=r.value, key=r.key, partition=partition,
                                 headers=list(r.headers)) for r in recs]
            mds = await asyncio.wait_for(asyncio.gather(*futs), OP_TIMEOUT)
            return [md.offset for md in mds]
        finally:
            await asyncio.wait_for(p.stop(), OP_TIMEOUT)

    return asyncio.run(run())


def aio_consume(bootstrap: str, topic: str, partition: int, start: int, count: int,
                timeout: float = OP_TIMEOUT) -> list:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=15000, fetch_max_wait_ms=200)
        await asyncio.wait_for(c.start(), OP_TIMEOUT)
        try:
            tp = ATP(topic, partition)
            c.assign([tp])
            c.seek(tp, start)
            out = []
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while len(out) < count and loop.time() < deadline:
                got = await c.getmany(tp, timeout_ms=500)
                out.extend(got.get(tp, []))
            assert len(out) >= count, f"aiokafka got {len(out)} of {count} records in {timeout}s"
            return out[:count]
        finally:
            await asyncio.wait_for(c.stop(), OP_TIMEOUT)

    return asyncio.run(run())


aio_recs = kp_recs


# --------------------------------------------------------------------- kcat ---
def kcat_json_lines(stdout: bytes) -> list[dict]:
    """Parse `kcat -J` output.  kcat writes binary keys/values/headers unescaped, so
    decode with surrogateescape; use kcat_bytes() to get the original bytes back."""
    text = stdout.decode("utf-8", "surrogateescape")
    return [json.loads(line, strict=False) for line in text.splitlines() if line.strip()]


def kcat_bytes(s: str | None) -> bytes | None:
    return None if s is None else s.encode("utf-8", "surrogateescape")


def kcat_recs(msgs: list[dict]) -> list[Rec]:
    def hdrs(m):
        h = m.get("headers") or []
        return tuple((h[k], kcat_bytes(h[k + 1])) for k in range(0, len(h), 2))
    return [Rec(kcat_bytes(m["key"]), kcat_bytes(m["payload"]), hdrs(m)) for m in msgs]


class SequenceStream:
    """An idempotent acks=all librdkafka producer writing 0, 1, 2, ... to partition 0 in a thread until stopped.

    With `partition` None each number is also the record's key, so the records spread over every
    partition. `acked` maps each acknowledged sequence number to its offset; `failed` holds delivery errors.
    """

    def __init__(self, bootstrap: str, topic: str, config: dict[str, Any] | None = None,
                 partition: int | None = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 50,
                                  "retry.backoff.max.ms": 500, "reconnect.backoff.ms": 50,
                                  "reconnect.backoff.max.ms": 500, "topic.metadata.refresh.interval.ms": 1000,
                                  **(config or {})})
        self.acked: dict[int, int] = {}
        self.failed: list[str] = []
        self._sending = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SequenceStream:
        self._sending.set()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sending.clear()
        self._thread.join(150)

    def _delivered(self, err: object, msg: object) -> None:
        if err is None:
            self.acked[int(msg.value())] = msg.offset()  # type: ignore[attr-defined]
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        seq = 0
        while self._sending.is_set():
            try:
                if self.partition is None:
                    self.producer.produce(self.topic, key=b"%d" % seq, value=b"%d" % seq, on_delivery=self._delivered)
                else:
                    self.producer.produce(self.topic, value=b"%d" % seq, partition=self.partition,
                                          on_delivery=self._delivered)
                seq += 1
            except BufferError:
                pass
            self.producer.poll(0.003)
        self.producer.flush(120)


class Stable:
    """Whether `group` is Stable with `count` members (a consumer group: every member reconciled to the target
    epoch), asked at most twice a second: the test keeps polling its members in between."""

    def __init__(self, bootstrap: str, group: str, count: int) -> None:
        self.client, self.group, self.count = admin(bootstrap), group, count
        self.next = 0.0

    def __call__(self) -> bool:
        if time.monotonic() < self.next:
            return False
        self.next = time.monotonic() + 0.5
        described = self.client.describe_consumer_groups([self.group])[self.group].result(30)
        return described.state.name == "STABLE" and len(described.members) == self.count
