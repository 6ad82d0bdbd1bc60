"""Bad input on the wire: each case checks Kafka's exact answer (an error code, or a
clean disconnect of that one connection), that the broker keeps serving another
connection afterwards, and that records acknowledged before are still readable.
"""

from __future__ import annotations

import select
import struct
import time
import uuid
from typing import Any

import pytest

from klamm.protocol.records import build_batch, iter_records
from tests.integration.conftest import (
    API_VERSIONS,
    CREATE_TOPICS,
    DELETE_TOPICS,
    FETCH,
    LIST_OFFSETS,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    BrokerThread,
    RawClient,
    create_topic,
    fetch,
    fetch_body,
    metadata_request,
    produce,
    topic_names,
    wait_for,
)

pytestmark = pytest.mark.timeout(60)

# Kafka error codes
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_CONFIG = 40
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100

TOPIC = "acked"
ACKED = [(b"k0", b"acknowledged-0"), (b"k1", b"acknowledged-1")]


# ------------------------------------------------------------------ helpers ---
def values(partition_response: Any) -> list[bytes | None]:
    records = partition_response.records
    return [r.value for r in iter_records(bytes(records))] if records else []


def seed(broker: BrokerThread) -> None:
    """A topic holding acknowledged records, checked again after each bad input."""
    with broker.connect() as c:
        create_topic(c, TOPIC)
        response = produce(c, TOPIC, build_batch(ACKED))
        assert response.error_code == NONE and response.base_offset == 0


def assert_still_serving(broker: BrokerThread) -> None:
    """A new connection works, and the acknowledged records are intact."""
    with broker.connect() as c:
        versions = c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert versions.error_code == NONE
        read = fetch(c, TOPIC, 0)
        assert read.error_code == NONE
        assert values(read) == [v for _, v in ACKED]
        assert read.high_watermark >= len(ACKED)


@pytest.fixture
def seeded(broker: BrokerThread) -> BrokerThread:
    seed(broker)
    return broker


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


# ----------------------------------------------------------------- framing ---
def test_garbage_frame_disconnects(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        # A valid ApiVersions v3 header followed by a body that is not one.
        good = c.encode(API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"}, 7)
        header_only = good[4:4 + 8 + 2 + len("klamm-tests") + 1]  # key, version, corr, client id, tags
        c.send_raw(frame(header_only + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"))
        c.expect_disconnect()
    assert_still_serving(seeded)


def test_random_bytes_disconnect(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        c.send_raw(frame(b"\x13\x37" * 40))  # api key 4919
        c.expect_disconnect()
    assert_still_serving(seeded)


def test_frame_over_max_request_size_disconnects(broker_factory: Any) -> None:
    broker = broker_factory(**{"socket.request.max.bytes": "1024"})
    seed(broker)
    with broker.connect() as c:
        # Only the size prefix is needed: the broker refuses before reading the body.
        c.send_raw(struct.pack(">i", 1025) + b"\x00" * 16)
        c.expect_disconnect()
    with broker.connect() as c:
        big = c.encode(PRODUCE, 9, {"acks": -1, "timeout": 1000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": build_batch([(None, b"x" * 2000)])}]}]}, 1)
        assert len(big) - 4 > 1024
        c.send_raw(big)
        c.expect_disconnect()
    assert_still_serving(broker)


def test_frame_at_max_request_size_is_served(broker_factory: Any) -> None:
    broker = broker_factory(**{"socket.request.max.bytes": "1024"})
    seed(broker)
    with broker.connect() as c:
        body = {"client_software_name": "", "client_software_version": "1"}
        # Pad the software name so the frame is exactly 1024 bytes (its length prefix is a varint).
        while len(c.encode(API_VERSIONS, 3, body, 1)) - 4 < 1024:
            body["client_software_name"] += "n"
        data = c.encode(API_VERSIONS, 3, body, 1)
        assert len(data) - 4 == 1024
        c.send_raw(data)
        c._sent[1] = (API_VERSIONS, 3)
        _, response = c.receive()
        assert response.error_code == NONE
    assert_still_serving(broker)


@pytest.mark.parametrize("size", [-1, -(1 << 31), 0, 3])
def test_negative_or_tiny_size_disconnects(seeded: BrokerThread, size: int) -> None:
    with seeded.connect() as c:
        c.send_raw(struct.pack(">i", size) + b"\x00" * 8)
        c.expect_disconnect()
    assert_still_serving(seeded)


def test_unknown_api_key_disconnects(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        c.send_raw(frame(struct.pack(">hhih", 999, 0, 5, -1)))
        c.expect_disconnect()
    assert_still_serving(seeded)


def test_unsupported_version_of_known_api_disconnects(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        c.send_raw(frame(struct.pack(">hhih", PRODUCE, 99, 5, -1)))
        c.expect_disconnect()
    assert_still_serving(seeded)


def test_unknown_api_versions_version_gets_v0_unsupported_version(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        # A future client: ApiVersions v99, with a body we cannot know.
        c.send_raw(frame(struct.pack(">hhih", API_VERSIONS, 99, 42, 3) + b"abc" + b"\x00\x01\x02"))
        _, response = c.receive(API_VERSIONS, 0)
        assert response.error_code == UNSUPPORTED_VERSION
        keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert keys[API_VERSIONS] == (0, 4)
        assert PRODUCE in keys and FETCH in keys and METADATA in keys
        # The connection stays usable: the client retries with a version we both know.
        again = c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert again.error_code == NONE
    assert_still_serving(seeded)


# ----------------------------------------------------------------- produce ---
def test_produce_bad_crc_is_corrupt_message(seeded: BrokerThread) -> None:
    batch = bytearray(build_batch([(b"k", b"v" * 50)]))
    batch[-3] ^= 0xFF  # inside the record, after the CRC
    with seeded.connect() as c:
        response = produce(c, TOPIC, bytes(batch))
        assert response.error_code == CORRUPT_MESSAGE
        assert response.base_offset == -1
    assert_still_serving(seeded)


def test_produce_batch_over_max_message_bytes(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        create_topic(c, "small", configs={"max.message.bytes": "2000"})
        response = produce(c, "small", build_batch([(None, b"x" * 3000)]))
        assert response.error_code == MESSAGE_TOO_LARGE
        ok = produce(c, "small", build_batch([(None, b"x" * 1000)]))
        assert ok.error_code == NONE and ok.base_offset == 0
        assert values(fetch(c, "small", 0)) == [b"x" * 1000]
    assert_still_serving(seeded)


@pytest.mark.parametrize("name", ["no-such-topic", "bad name!"])
def test_produce_to_unknown_or_invalid_topic(seeded: BrokerThread, name: str) -> None:
    # Kafka (KafkaApis.handleProduceRequest): a topic not in the metadata cache gets
    # UNKNOWN_TOPIC_OR_PARTITION, whether or not its name is legal; produce never auto-creates.
    with seeded.connect() as c:
        response = produce(c, name, build_batch([(None, b"v")]))
        assert response.error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert name not in topic_names(c)
    assert_still_serving(seeded)


def test_produce_to_unknown_partition(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        response = produce(c, TOPIC, build_batch([(None, b"v")]), partition=7)
        assert response.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert_still_serving(seeded)


def test_produce_to_consumer_offsets_is_invalid_topic(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        # As Kafka: a topic that does not exist yet is unknown before it is internal.
        response = produce(c, "__consumer_offsets", build_batch([(None, b"v")]))
        assert response.error_code == UNKNOWN_TOPIC_OR_PARTITION
        found = c.request(10, 4, {"key_type": 0, "coordinator_keys": ["g"]})  # FindCoordinator creates it
        assert [k.error_code for k in found.coordinators] == [0]
        response = produce(c, "__consumer_offsets", build_batch([(None, b"v")]))
        assert response.error_code == INVALID_TOPIC_EXCEPTION
    assert_still_serving(seeded)


def test_produce_invalid_acks(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        response = produce(c, TOPIC, build_batch([(None, b"not-written")]), acks=5)
        assert response.error_code == INVALID_REQUIRED_ACKS
        assert fetch(c, TOPIC, 0).high_watermark == len(ACKED)
    assert_still_serving(seeded)


def test_produce_truncated_batch_is_invalid_record(seeded: BrokerThread) -> None:
    batch = build_batch([(b"k", b"v" * 100)])
    with seeded.connect() as c:
        response = produce(c, TOPIC, batch[: len(batch) - 10])
        assert response.error_code == INVALID_RECORD
    assert_still_serving(seeded)


def test_produce_truncated_batch_is_refused(seeded: BrokerThread) -> None:
    """Whatever the code, a truncated batch appends nothing (klamm: CORRUPT_MESSAGE)."""
    batch = build_batch([(b"k", b"v" * 100)])
    with seeded.connect() as c:
        for cut in (10, len(batch) - 20, len(batch) - 61):
            response = produce(c, TOPIC, batch[: len(batch) - cut])
            assert response.error_code in (CORRUPT_MESSAGE, INVALID_RECORD), cut
            assert response.base_offset == -1
        # A batch whose size field is below the minimum is corrupt in Kafka too.
        bad_size = bytearray(batch)
        struct.pack_into(">i", bad_size, 8, 5)
        response = produce(c, TOPIC, bytes(bad_size))
        assert response.error_code == CORRUPT_MESSAGE
        assert fetch(c, TOPIC, 0).high_watermark == len(ACKED)
    assert_still_serving(seeded)


def test_produce_null_records(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        response = produce(c, TOPIC, None)
        assert response.error_code == INVALID_RECORD
    assert_still_serving(seeded)


def test_produce_acks_zero_failure_closes_connection(seeded: BrokerThread) -> None:
    # Kafka closes the connection when an acks=0 produce fails, so the producer notices.
    with seeded.connect() as c:
        c.send(PRODUCE, 9, {"acks": 0, "timeout": 1000, "topic_data": [
            {"name": "no-such-topic", "partition_data": [{"index": 0, "records": build_batch([(None, b"v")])}]}]})
        c.expect_disconnect()
    assert_still_serving(seeded)


# ---------------------------------------------------------------- metadata ---
def test_metadata_invalid_topic_name(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        response = c.request(METADATA, 12, {
            "topics": [{"name": "bad name!", "topic_id": uuid.UUID(int=0)}, {"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": True, "include_topic_authorized_operations": False})
        by_name = {t.name: t for t in response.topics}
        assert by_name["bad name!"].error_code == INVALID_TOPIC_EXCEPTION
        assert by_name[TOPIC].error_code == NONE
        assert len(by_name[TOPIC].partitions) == 1
    assert_still_serving(seeded)


# ------------------------------------------------------------------- fetch ---
def test_fetch_past_log_end_is_offset_out_of_range(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        response = fetch(c, TOPIC, len(ACKED) + 10)
        assert response.error_code == OFFSET_OUT_OF_RANGE
        assert response.high_watermark == len(ACKED)
        assert not response.records
    assert_still_serving(seeded)


def test_fetch_unknown_topic_id(seeded: BrokerThread) -> None:
    unknown = uuid.uuid4()
    with seeded.connect() as c:
        response = c.request(FETCH, 13, fetch_body(unknown, 0))
        assert response.error_code == NONE
        [topic] = response.responses
        assert topic.topic_id == unknown
        [partition] = topic.partitions
        assert partition.error_code == UNKNOWN_TOPIC_ID
    assert_still_serving(seeded)


def test_fetch_by_topic_id(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        meta = c.request(METADATA, 12, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
                                        "allow_auto_topic_creation": False,
                                        "include_topic_authorized_operations": False})
        topic_id = meta.topics[0].topic_id
        response = fetch(c, topic_id, 0, version=13)
        assert response.error_code == NONE
        assert values(response) == [v for _, v in ACKED]


def test_fetch_long_poll_times_out_empty(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        create_topic(c, "empty")
        started = time.monotonic()
        response = fetch(c, "empty", 0, max_wait_ms=500, min_bytes=1)
        elapsed = time.monotonic() - started
        assert response.error_code == NONE
        assert not response.records
        assert 0.45 <= elapsed < 5.0, elapsed
    assert_still_serving(seeded)


def _waiters(broker: BrokerThread, topic: str, partition: int = 0) -> int:
    return broker.call(lambda: len(broker.broker.replicas.get(topic, partition)._waiters))


def test_fetch_long_poll_woken_by_produce(seeded: BrokerThread) -> None:
    with seeded.connect() as consumer, seeded.connect() as producer:
        create_topic(producer, "wake")
        started = time.monotonic()
        correlation = consumer.send(FETCH, 11, fetch_body("wake", 0, max_wait_ms=20_000, min_bytes=1))
        wait_for(lambda: _waiters(seeded, "wake"))  # the fetch is parked
        assert produce(producer, "wake", build_batch([(b"k", b"wake-up")])).error_code == NONE
        got, response = consumer.receive()
        assert got == correlation
        elapsed = time.monotonic() - started
        [partition] = response.responses[0].partitions
        assert partition.error_code == NONE
        assert values(partition) == [b"wake-up"]
        assert elapsed < 10.0, elapsed
    assert_still_serving(seeded)


# ----------------------------------------------------------- create/delete ---
def _create(c: RawClient, name: str, partitions: int = 1, configs: dict[str, str] | None = None,
            validate_only: bool = False) -> Any:
    response = c.request(CREATE_TOPICS, 7, {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
        "timeout": 10_000, "validate_only": validate_only})
    [result] = response.topics
    assert result.name == name
    return result


def test_create_topic_twice(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        assert _create(c, TOPIC).error_code == TOPIC_ALREADY_EXISTS
    assert_still_serving(seeded)


def test_create_topic_validate_only_creates_nothing(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        result = _create(c, "dry-run", partitions=3, validate_only=True)
        assert result.error_code == NONE
        assert result.num_partitions == 3
        assert "dry-run" not in topic_names(c)
        # The name is still free.
        assert _create(c, "dry-run").error_code == NONE
    assert_still_serving(seeded)


@pytest.mark.parametrize("configs", [{"max.message.bytes": "lots"}, {"cleanup.policy": "shred"},
                                     {"retention.ms": "-7"}])
def test_create_topic_invalid_config(seeded: BrokerThread, configs: dict[str, str]) -> None:
    with seeded.connect() as c:
        assert _create(c, "bad-config", configs=configs).error_code == INVALID_CONFIG
        assert "bad-config" not in topic_names(c)
    assert_still_serving(seeded)


@pytest.mark.parametrize("count", [0, -5])
def test_create_topic_invalid_partitions(seeded: BrokerThread, count: int) -> None:
    with seeded.connect() as c:
        assert _create(c, "no-partitions", partitions=count).error_code == INVALID_PARTITIONS
        assert "no-partitions" not in topic_names(c)
    assert_still_serving(seeded)


def test_create_topic_invalid_name(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        assert _create(c, "bad name!").error_code == INVALID_TOPIC_EXCEPTION
    assert_still_serving(seeded)


def test_delete_topic_by_unknown_id(seeded: BrokerThread) -> None:
    unknown = uuid.uuid4()
    with seeded.connect() as c:
        response = c.request(DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": unknown}], "timeout": 10_000})
        [result] = response.responses
        assert result.error_code == UNKNOWN_TOPIC_ID
        assert result.topic_id == unknown
        assert TOPIC in topic_names(c)
    assert_still_serving(seeded)


def test_delete_topic_by_unknown_name(seeded: BrokerThread) -> None:
    with seeded.connect() as c:
        response = c.request(DELETE_TOPICS, 5, {"topic_names": ["never-was"], "timeout": 10_000})
        [result] = response.responses
        assert result.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert_still_serving(seeded)


# -------------------------------------------------------------- idempotence ---
def _init_producer_id(c: RawClient) -> tuple[int, int]:
    response = c.request(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": -1,
                                               "producer_id": -1, "producer_epoch": -1})
    assert response.error_code == NONE
    assert response.producer_id >= 0
    return response.producer_id, response.producer_epoch


def _idempotent(pid: int, epoch: int, seq: int, value: bytes) -> bytes:
    return build_batch([(None, value)], producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_producer_on_the_wire(broker_factory: Any, tmp_path: Any) -> None:
    broker = broker_factory(log_dir=tmp_path / "idem")
    seed(broker)
    with broker.connect() as c:
        create_topic(c, "idem")
        pid, epoch = _init_producer_id(c)
        assert epoch == 0
        first = _idempotent(pid, epoch, 0, b"once")
        r0 = produce(c, "idem", first)
        assert (r0.error_code, r0.base_offset) == (NONE, 0)
        dup = produce(c, "idem", first)
        assert (dup.error_code, dup.base_offset) == (NONE, 0)
        gap = produce(c, "idem", _idempotent(pid, epoch, 5, b"gap"))
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        r1 = produce(c, "idem", _idempotent(pid, epoch, 1, b"next"))
        assert (r1.error_code, r1.base_offset) == (NONE, 1)
        # The producer bumps its epoch (KIP-360: seq restarts at 0) ...
        bumped = produce(c, "idem", _idempotent(pid, epoch + 1, 0, b"bumped"))
        assert (bumped.error_code, bumped.base_offset) == (NONE, 2)
        # ... after which the old epoch is fenced. Kafka 2.7+ (ProducerAppendInfo.checkProducerEpoch)
        # answers a client append with an older epoch INVALID_PRODUCER_EPOCH, not PRODUCER_FENCED.
        stale = produce(c, "idem", _idempotent(pid, epoch, 2, b"stale"))
        assert stale.error_code == INVALID_PRODUCER_EPOCH
        assert values(fetch(c, "idem", 0)) == [b"once", b"next", b"bumped"]
        a_new_pid, _ = _init_producer_id(c)
        assert a_new_pid != pid

    broker.restart()

    with broker.connect() as c:
        # Producer state survived the restart: the last batch is still a recognised duplicate.
        again = produce(c, "idem", _idempotent(pid, epoch + 1, 0, b"bumped"))
        assert (again.error_code, again.base_offset) == (NONE, 2)
        gap = produce(c, "idem", _idempotent(pid, epoch + 1, 3, b"gap"))
        assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
        stale = produce(c, "idem", _idempotent(pid, epoch, 2, b"stale"))
        assert stale.error_code == INVALID_PRODUCER_EPOCH
        nxt = produce(c, "idem", _idempotent(pid, epoch + 1, 1, b"after-restart"))
        assert (nxt.error_code, nxt.base_offset) == (NONE, 3)
        assert values(fetch(c, "idem", 0)) == [b"once", b"next", b"bumped", b"after-restart"]
        # A fresh producer id is not reused after the restart.
        assert _init_producer_id(c)[0] not in (pid, a_new_pid)
    assert_still_serving(broker)


# -------------------------------------------------------------- pipelining ---
def _readable(c: RawClient, timeout: float = 0.0) -> bool:
    # poll, not select: a long test session may hold descriptors past select's limit of 1024
    poller = select.poll()
    poller.register(c.sock, select.POLLIN)
    return bool(poller.poll(timeout * 1000))


def test_pipelined_requests_answered_in_order(seeded: BrokerThread) -> None:
    with seeded.connect() as c, seeded.connect() as producer:
        create_topic(producer, "pipe")
        frames = []
        expected: list[tuple[int, int, int]] = []
        slow_at = 25
        for i in range(1, 51):
            if i == slow_at:
                body: dict[str, Any] = fetch_body("pipe", 0, max_wait_ms=30_000, min_bytes=1)
                key, version = FETCH, 11
            elif i % 3 == 0:
                body, key, version = metadata_request(), METADATA, 12
            elif i % 3 == 1:
                body, key, version = {"client_software_name": "p", "client_software_version": "1"}, API_VERSIONS, 3
            else:
                body, key, version = fetch_body(TOPIC, 0), FETCH, 11
            frames.append(c.encode(key, version, body, i))
            c._sent[i] = (key, version)
            expected.append((i, key, version))
        c.send_raw(b"".join(frames))

        # Everything before the long poll is answered while it waits ...
        for i in range(1, slow_at):
            got, response = c.receive()
            assert got == i
        wait_for(lambda: _waiters(seeded, "pipe"))
        # ... and nothing behind it overtakes it.
        assert not _readable(c, 0.2)
        assert produce(producer, "pipe", build_batch([(None, b"release")])).error_code == NONE
        got, response = c.receive()
        assert got == slow_at
        assert values(response.responses[0].partitions[0]) == [b"release"]
        for i in range(slow_at + 1, 51):
            got, response = c.receive()
            assert got == i
            if expected[i - 1][1] == FETCH:
                assert values(response.responses[0].partitions[0]) == [v for _, v in ACKED]
    assert_still_serving(seeded)


# ------------------------------------------- a request that kills the broker ---
_SERVE_IN_CHILD = r"""
import asyncio, sys
from klamm.broker.broker import Broker
from klamm.config.broker import BrokerConfig

async def main():
    broker = Broker(BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": sys.argv[1]}))
    await broker.start()
    print(broker.port, flush=True)
    await broker.wait_stopped()

asyncio.run(main())
"""


def test_huge_compact_array_length_does_not_kill_the_broker(tmp_path: Any) -> None:
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", _SERVE_IN_CHILD, str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(child.stdout.readline())  # type: ignore[union-attr]
        with RawClient(port) as c:
            header = struct.pack(">hhih", METADATA, 12, 1, 1) + b"c" + b"\x00"
            c.send_raw(frame(header + bytes.fromhex("ffffffff0f") + b"\x00\x00\x00"))
            c.expect_disconnect()
        with RawClient(port) as c:
            versions = c.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
            assert versions.error_code == NONE
    finally:
        child.kill()
        child.wait(10)


def test_a_null_where_the_schema_forbids_one_is_malformed(seeded: BrokerThread, caplog: Any) -> None:
    """ListOffsets v9 with its (non-nullable) topics array null: a clean disconnect, not a handler TypeError."""
    import logging

    caplog.set_level(logging.ERROR, logger="klamm")
    with seeded.connect() as c:
        data = bytearray(c.encode(LIST_OFFSETS, 9, {"replica_id": -1, "isolation_level": 0, "topics": []}, 1))
        assert data[-2:] == b"\x01\x00"  # the empty compact array (length + 1), then the body's tagged fields
        data[-2] = 0  # length + 1 == 0: null
        c.send_raw(bytes(data))
        c.expect_disconnect()
    assert not [r for r in caplog.records if "handler failed" in r.getMessage()]  # refused before any handler
    assert_still_serving(seeded)
