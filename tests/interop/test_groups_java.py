"""Consumer groups with the Java client (classic protocol): every assignor, and the AdminClient's group API.

tests/interop/java/GroupClient.java runs the consumers (one thread each) and the
admin commands; it is compiled here once, next to KlammClient's build.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import BrokerFactory

from .conftest import compile_java
from .helpers import create_topic

pytestmark = [pytest.mark.timeout(180), pytest.mark.java]

PARTITIONS = 6
RECORDS = 120


@pytest.fixture(scope="module")
def group_java():
    classpath = compile_java("GroupClient")

    def run(*args: object, stdin: str | None = None, timeout: float = 150) -> tuple[int, list[dict], str]:
        cmd = ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m", "-cp", classpath, "GroupClient",
               *(str(a) for a in args)]
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
        return p.returncode, lines, p.stderr

    return run


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-java"))
    yield factory(overrides={"group.initial.rebalance.delay.ms": 0})
    factory.close()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return {p.partition: p.offset for p in
                consumer.committed([TopicPartition(topic, i) for i in range(PARTITIONS)], timeout=20)}
    finally:
        consumer.close()


def assert_partitioned(assignments: list[list[int]], members: int) -> None:
    assert len(assignments) == members and all(assignments)
    flat = [p for a in assignments for p in a]
    assert sorted(flat) == list(range(PARTITIONS))  # disjoint and complete


@pytest.mark.parametrize("assignor,static", [("range", False), ("roundrobin", False), ("sticky", False),
                                             ("cooperative-sticky", False), ("range", True)])
def test_group_with_assignor(group_java, group_broker, make_topic, assignor, static):
    bs = group_broker.bootstrap
    topic = make_topic(assignor)
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, RECORDS)
    group = f"java-{assignor}-{'static' if static else 'dynamic'}-{topic[-8:]}"
    rc, lines, stderr = group_java("group", bs, topic, group, assignor, 3, RECORDS, *(["static"] if static else []))
    assert rc == 0, f"{lines[-3:]}\n{stderr[-4000:]}"
    phases = {line["phase"]: line for line in lines if "phase" in line}
    assert_partitioned(phases["joined"]["assignments"], 3)
    assert_partitioned(phases["after-leave"]["assignments"], 2)
    if assignor in ("sticky", "cooperative-sticky"):  # survivors keep what they had
        for before, after in zip(phases["joined"]["assignments"][1:], phases["after-leave"]["assignments"]):
            assert set(before) <= set(after)
    assert phases["done"]["distinct"] == RECORDS
    assert committed(bs, group, topic) == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}


def test_consumer_group_admin(group_java, group_broker, make_topic):
    bs = group_broker.bootstrap
    topic = make_topic("admin")
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 60)
    group = f"java-admin-{topic[-8:]}"
    consumer = Consumer({"bootstrap.servers": bs, "group.id": group, "auto.offset.reset": "earliest",
                         "session.timeout.ms": 6000, "enable.auto.commit": False, "client.id": "live-one"})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 60 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            seen += 1
    consumer.commit(asynchronous=False)

    def batch(*commands: str) -> list[tuple[int, list[dict]]]:
        rc, lines, stderr = group_java("batch", stdin="\n".join(commands) + "\n")
        results: list[tuple[int, list[dict]]] = []
        for line in lines:
            if "batch" in line:
                results.append((-1, []))
            elif "batch_end" in line:
                results[-1] = (line["rc"], results[-1][1])
            else:
                results[-1][1].append(line)
        assert len(results) == len(commands), stderr[-4000:]
        return results

    try:
        (rc1, listed), (rc2, described), (rc3, offsets), (rc4, refused) = batch(
            f"admin-list-groups {bs}", f"admin-describe-group {bs} {group}", f"admin-list-offsets {bs} {group}",
            f"admin-delete-group {bs} {group}")
        assert (rc1, rc2, rc3) == (0, 0, 0)
        assert {"groupId": group, "state": "Stable", "simple": False} in listed[0]["groups"]
        (d,) = described
        assert d["state"] == "Stable" and d["assignor"] == "range" and not d["simple"]
        (member,) = d["members"]
        assert member["clientId"] == "live-one"
        assert member["assignment"] == sorted(f"{topic}-{p}" for p in range(PARTITIONS))
        assert offsets[0]["offsets"] == {f"{topic}-{p}": 10 for p in range(PARTITIONS)}
        assert rc4 == 3 and refused[0]["error"] == "GroupNotEmptyException"
    finally:
        consumer.close()

    results = batch(
        f"admin-describe-group {bs} {group}",
        f"admin-alter-offsets {bs} {group} {topic} 0=3 1=4",
        f"admin-delete-offsets {bs} {group} {topic} 5",
        f"admin-list-offsets {bs} {group}",
        f"admin-delete-group {bs} {group}",
        f"admin-list-groups {bs}",
        f"admin-delete-group {bs} {group}",
    )
    (rc, described), altered, deleted, (_, offsets), removed, (_, listed), (rc_again, again) = results
    assert described[0]["state"] == "Empty" and described[0]["members"] == []
    assert altered[0] == 0 and deleted[0] == 0 and removed[0] == 0
    want = {f"{topic}-{p}": 10 for p in range(5)}
    want.update({f"{topic}-0": 3, f"{topic}-1": 4})
    assert offsets[0]["offsets"] == want
    assert group not in [g["groupId"] for g in listed[0]["groups"]]
    assert rc_again == 3 and again[0]["error"] == "GroupIdNotFoundException"
    assert committed(bs, group, topic) == {p: -1001 for p in range(PARTITIONS)}  # OFFSET_INVALID
