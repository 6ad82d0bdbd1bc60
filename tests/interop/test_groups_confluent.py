"""Consumer groups with confluent-kafka (librdkafka): membership, rebalances, commits, restarts.

Brokers run with group.initial.rebalance.delay.ms=0; consumers use the broker's
minimum session timeout (6 s), so a crashed member is gone within ~6 s.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.conftest import BrokerFactory

from .helpers import admin, create_topic

pytestmark = [pytest.mark.timeout(120)]

PARTITIONS = 6
OVERRIDES = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-confluent"))
    yield factory(overrides=OVERRIDES)
    factory.close()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


class Member:
    """A subscribed consumer that tracks its assignment through the rebalance callbacks."""

    def __init__(self, bootstrap: str, topic: str, group: str, **extra: object) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "enable.auto.commit": False}
        conf.update(extra)
        self.consumer_auto_commits = bool(conf["enable.auto.commit"])
        self.consumer = Consumer(conf)
        self.assigned: set[int] = set()
        self.revocations = 0
        self.consumed: list[tuple[int, int]] = []
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, partitions):
        self.assigned = {p.partition for p in partitions}

    def _on_revoke(self, consumer, partitions):
        self.revocations += 1
        self.assigned = set()

    commit_async = False  # per-message commits: sync unless set

    def poll(self, timeout: float = 0.05) -> None:
        msg = self.consumer.poll(timeout)
        if msg is not None and not msg.error():
            self.consumed.append((msg.partition(), msg.offset()))
            if not self.consumer_auto_commits:
                self.consumer.commit(message=msg, asynchronous=self.commit_async)

    def close(self) -> None:
        self.consumer.close()


def poll_until(members: list[Member], cond, timeout: float = 40, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {[m.assigned for m in members]}"
        for m in members:
            m.poll()


def covered(members: list[Member]) -> bool:
    """Every member holds some partitions, none twice, all of them."""
    sets = [m.assigned for m in members]
    return all(sets) and sum(len(s) for s in sets) == PARTITIONS and set().union(*sets) == set(range(PARTITIONS))


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
        return {p.partition: p.offset for p in parts}
    finally:
        consumer.close()


def test_three_members_leave_and_rejoin(group_broker, topic):
    bs = group_broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 120)
    members = [Member(bs, topic, "g3") for _ in range(3)]
    try:
        poll_until(members, lambda: covered(members), what="three members to share the partitions")
        poll_until(members, lambda: sum(len(m.consumed) for m in members) >= 120, what="all records")
        members[0].close()
        rest = members[1:]
        poll_until(rest, lambda: covered(rest), what="two members to take over")
        client = admin(bs)  # keep the handle alive until the result arrives
        described = client.describe_consumer_groups(["g3"])["g3"].result(20)
        assert described.state.name == "STABLE" and len(described.members) == 2
        assert described.partition_assignor == "range"
        assert {tp.partition for m in described.members for tp in m.assignment.topic_partitions} == \
               set(range(PARTITIONS))
    finally:
        for m in members[1:]:
            m.close()
    consumed = sorted(pos for m in members for pos in m.consumed)
    assert consumed == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(120))  # each record once
    assert committed(bs, "g3", topic) == {p: 20 for p in range(PARTITIONS)}


CRASHER = textwrap.dedent("""
    import sys, time
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 6000,
                  "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"})
    c.subscribe([sys.argv[3]], on_assign=lambda c, ps: print("assigned", len(ps), flush=True))
    while True:
        c.poll(0.1)
""")


def test_crashed_member_is_removed_after_session_timeout(group_broker, topic):
    bs = group_broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    crasher = subprocess.Popen([sys.executable, "-c", CRASHER, bs, "gcrash", topic], stdout=subprocess.PIPE, text=True)
    members: list[Member] = []
    try:
        assert crasher.stdout.readline().startswith("assigned")
        members = [Member(bs, topic, "gcrash") for _ in range(2)]
        poll_until(members, lambda: all(m.assigned for m in members) and
                   sum(len(m.assigned) for m in members) < PARTITIONS, what="three-way split")
        os.kill(crasher.pid, signal.SIGKILL)  # no LeaveGroup: only the session timeout tells
        crasher.wait(10)
        started = time.monotonic()
        poll_until(members, lambda: covered(members), what="survivors to take over", timeout=30)
        assert time.monotonic() - started > 3  # it took the session timeout, not a LeaveGroup
    finally:
        if crasher.poll() is None:
            crasher.kill()
        for m in members:
            m.close()


def test_static_member_rejoins_without_rebalance(group_broker, topic):
    bs = group_broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    a = Member(bs, topic, "gstatic", **{"group.instance.id": "a"})
    b = Member(bs, topic, "gstatic", **{"group.instance.id": "b"})
    members = [a, b]
    try:
        poll_until(members, lambda: covered(members), what="two static members")
        before = dict(b.assigned and {"b": set(b.assigned)})
        revocations = a.revocations
        b.close()  # a static member leaves no LeaveGroup behind
        b = Member(bs, topic, "gstatic", **{"group.instance.id": "b"})
        members = [a, b]
        poll_until(members, lambda: covered(members), what="b to come back")
        assert b.assigned == before["b"]
        for _ in range(20):
            a.poll()
        assert a.revocations == revocations  # a never noticed
        client = admin(bs)
        described = client.describe_consumer_groups(["gstatic"])["gstatic"].result(20)
        assert sorted(m.group_instance_id for m in described.members) == ["a", "b"]
    finally:
        for m in members:
            m.close()


def test_commits_survive_broker_restart(broker_factory, topic):
    broker = broker_factory(overrides=OVERRIDES)
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 300)
    # first run: commits per message, sync, then async for one member; stop part-way
    members = [Member(bs, topic, "grestart") for _ in range(3)]
    try:
        poll_until(members, lambda: covered(members), what="three members")
        poll_until(members, lambda: sum(len(m.consumed) for m in members) >= 150, what="half the records")
        members[2].commit_async = True
        poll_until(members, lambda: sum(len(m.consumed) for m in members) >= 200, what="more records")
        for m in members:
            try:
                m.consumer.commit(asynchronous=False)  # flushes the async member's last position
            except KafkaException as exc:
                assert exc.args[0].code() == KafkaError._NO_OFFSET  # nothing left to commit
    finally:
        for m in members:
            m.close()
    first = [pos for m in members for pos in m.consumed]
    before = committed(bs, "grestart", topic)
    assert sum(before.values()) == len(first)

    broker.stop()
    broker.start()
    assert committed(bs, "grestart", topic) == before
    produce(bs, topic, 60)
    resumed = [Member(bs, topic, "grestart", **{"enable.auto.commit": True, "auto.commit.interval.ms": 200})
               for _ in range(2)]
    try:
        poll_until(resumed, lambda: len(first) + sum(len(m.consumed) for m in resumed) >= 360,
                   what="the rest of the records")
        # The auto-commit timer, not close(), commits the last positions: when the first member's leave starts a
        # rebalance, librdkafka 2.16 can send the second's final commit after its LeaveGroup, with the member id
        # already reset, which Kafka refuses as UNKNOWN_MEMBER_ID (CI lost one so; a pause between the closes shows
        # that late commit in each of 4 runs).
        poll_until(resumed, lambda: committed(bs, "grestart", topic) == {p: 60 for p in range(PARTITIONS)},
                   what="the auto-commits of the last positions")
    finally:
        for m in resumed:
            m.close()
    second = [pos for m in resumed for pos in m.consumed]
    assert sorted(first + second) == sorted((i % PARTITIONS, i // PARTITIONS) for i in range(360))
    assert committed(bs, "grestart", topic) == {p: 60 for p in range(PARTITIONS)}


def test_restart_during_rebalance_keeps_commits(broker_factory, topic):
    broker = broker_factory(overrides=OVERRIDES)
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 60)
    members = [Member(bs, topic, "gmid") for _ in range(2)]
    try:
        poll_until(members, lambda: covered(members) and sum(len(m.consumed) for m in members) >= 60,
                   what="two members consuming")
        before = committed(bs, "gmid", topic)
        assert before == {p: 10 for p in range(PARTITIONS)}
        members.append(Member(bs, topic, "gmid"))  # starts a rebalance...
        for _ in range(5):
            members[-1].poll()
        broker.kill()  # ...which the broker does not survive
        broker.start()
        assert committed(bs, "gmid", topic) == before
        poll_until(members, lambda: covered(members), what="the group to settle after the restart", timeout=60)
    finally:
        for m in members:
            m.close()
    assert committed(bs, "gmid", topic) == before
