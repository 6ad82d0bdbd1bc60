"""AlterReplicaLogDirs (34, KIP-113): a replica moves between the broker's log.dirs while producers keep
writing to it, and nothing is lost, duplicated or reordered; transactions, idempotence and the move
survive a restart. DescribeLogDirs shows the copy (is_future_key) while it is made."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from klamm.storage.log_manager import MOVED_MARKER, LogManager
from klamm.storage.config import LogConfig
from tests.integration.conftest import BrokerThread, RawClient, create_topic

pytestmark = pytest.mark.timeout(120)

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
UNKNOWN_TOPIC, LOG_DIR_NOT_FOUND = 3, 57
FIRST, TOTAL = 30_000, 40_000  # records before the move (~4 MB: several copy steps), and in all


def value(i: int) -> bytes:
    return b"%06d" % i + bytes(100)


def alter(client: RawClient, path: str, topic: str, partitions: list[int], version: int = 2) -> list[tuple[int, int]]:
    response = client.request(ALTER_REPLICA_LOG_DIRS, version, {
        "dirs": [{"path": path, "topics": [{"name": topic, "partitions": partitions}]}]})
    return [(p.partition_index, p.error_code) for t in response.results for p in t.partitions]


def placement(client: RawClient, topic: str) -> dict[tuple[str, bool], int]:
    """(log dir, is future) -> partition size, for partition 0 of `topic`."""
    response = client.request(DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": [0]}]})
    return {(r.log_dir, p.is_future_key): p.partition_size
            for r in response.results for t in r.topics for p in t.partitions}


def consume(port: int, topic: str, count: int, isolation: str = "read_committed") -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "x", "enable.auto.commit": False,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(out) < count and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            out.append(message.value())
    consumer.close()
    return out


def test_a_replica_moves_between_log_dirs_while_producers_write(broker_factory: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    broker: BrokerThread = broker_factory(**{"log.dirs": f"{a},{b}"})
    bootstrap = f"127.0.0.1:{broker.port}"
    with broker.connect() as client:
        create_topic(client, "moving", configs={"internal.segment.bytes": "262144", "file.delete.delay.ms": "0"})
        transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "mover"})
        transactional.init_transactions(15)
        transactional.begin_transaction()
        transactional.produce("moving", b"aborted", partition=0)
        assert transactional.flush(15) == 0
        transactional.abort_transaction(15)
        failures: list[Any] = []
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1,
                             "batch.size": 65536,  # below the segment size
                             "on_delivery": lambda error, _: failures.append(error) if error else None})
        for i in range(FIRST):
            producer.produce("moving", value(i), partition=0)
        assert producer.flush(15) == 0 and not failures
        source = a if (a / "moving-0").exists() else b
        target = b if source == a else a

        def keep_writing() -> None:
            for i in range(FIRST, TOTAL):
                producer.produce("moving", value(i), partition=0)
                if i % 200 == 0:
                    producer.poll(0)
                    time.sleep(0.01)
            assert producer.flush(15) == 0
        writer = threading.Thread(target=keep_writing)
        writer.start()
        assert alter(client, str(target), "moving", [0]) == [(0, 0)]
        assert alter(client, str(target), "moving", [0]) == [(0, 0)]  # the same move again: nothing new
        deadline = time.monotonic() + 30
        while not (target / "moving-0").exists() or (source / "moving-0").exists():
            assert time.monotonic() < deadline, placement(client, "moving")
            time.sleep(0.02)
        writer.join()
        assert not failures
        assert set(placement(client, "moving")) == {(str(target.resolve()), False)}
        want = [value(i) for i in range(TOTAL)]
        assert consume(broker.port, "moving", TOTAL) == want  # the aborted record is filtered out too
        assert len(consume(broker.port, "moving", TOTAL + 1, "read_uncommitted")) == TOTAL + 1  # it is there

    broker.restart()
    with broker.connect() as client:
        assert set(placement(client, "moving")) == {(str(target.resolve()), False)}
    assert consume(broker.port, "moving", TOTAL) == want
    again = Producer({"bootstrap.servers": f"127.0.0.1:{broker.port}", "transactional.id": "mover"})
    again.init_transactions(15)  # the transactional state and the log's producer state carried over


def test_the_copy_shows_in_describe_log_dirs_and_bad_requests_are_refused(broker_factory: Any, tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    broker: BrokerThread = broker_factory(**{"log.dirs": f"{a},{b}"})
    with broker.connect() as client:
        create_topic(client, "t")
        assert alter(client, str(tmp_path / "elsewhere"), "t", [0]) == [(0, LOG_DIR_NOT_FOUND)]
        assert alter(client, "a", "t", [0]) == [(0, LOG_DIR_NOT_FOUND)]  # not absolute
        assert alter(client, str(a), "missing", [0]) == [(0, UNKNOWN_TOPIC)]
        assert alter(client, str(a), "t", [5]) == [(5, UNKNOWN_TOPIC)]
        source = a if (a / "t-0").exists() else b
        assert alter(client, str(source), "t", [0], version=0) == [(0, 0)]  # already there: nothing to do
        assert set(placement(client, "t")) == {(str(source.resolve()), False)}

        def hold() -> None:  # the copy is shown while a move is under way
            moves = broker.broker.replicas.moves
            partition = broker.broker.replicas.partitions[("t", 0)]
            target = b if source == a else a
            moves._copies[("t", 0)] = (target, broker.broker.logs.create_future_log("t", 0, target,
                                                                                    partition.log.config))
        broker.call(hold)
        shown = placement(client, "t")
        assert (str(source.resolve()), False) in shown and (str((b if source == a else a).resolve()), True) in shown


def test_a_move_cut_short_after_the_copy_took_its_place_keeps_the_copy(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for directory, name in ((a, "old"), (b, "new")):
        (directory / "t-0").mkdir(parents=True)
        (directory / "t-0" / name).write_text("")
    (b / "t-0" / MOVED_MARKER).write_text("")
    (a / "0123abcd-future" / "u-0").mkdir(parents=True)  # a copy under way
    manager = LogManager([a, b], LogConfig())
    manager.startup()
    assert manager.log_dir_of("t", 0) == b and (b / "t-0" / "new").exists()
    assert not (b / "t-0" / MOVED_MARKER).exists() and not (a / "t-0").exists()
    assert manager.get_log("u", 0) is None and not (a / "0123abcd-future").exists()
    manager.shutdown()


def test_kafka_pythons_admin_moves_a_replica(broker_factory: Any, tmp_path: Path) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NoError
    from kafka.structs import TopicPartitionReplica

    a, b = tmp_path / "a", tmp_path / "b"
    broker: BrokerThread = broker_factory(**{"log.dirs": f"{a},{b}"})
    with broker.connect() as client:
        create_topic(client, "kp", configs={"file.delete.delay.ms": "0"})
    source = a if (a / "kp-0").exists() else b
    target = b if source == a else a
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.port}")
    try:
        assert admin.alter_replica_log_dirs({TopicPartitionReplica("kp", 0, 1): str(target)}) == \
            {TopicPartitionReplica("kp", 0, 1): NoError}
        deadline = time.monotonic() + 10
        while (source / "kp-0").exists() or not (target / "kp-0").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        admin.close()
