"""Consumer-protocol groups (KIP-848) with confluent-kafka: `group.protocol=consumer`.

librdkafka sends ConsumerGroupHeartbeat v1 and the broker assigns (uniform by
default). Rebalance callbacks are incremental: on_assign brings partitions
added, on_revoke those taken away. The broker's session timeout
(group.consumer.session.timeout.ms, 6 s here) removes a crashed member.
Every consumer commits each record before the next poll, so a partition that
moves resumes at its committed offset: each check below is a disjoint,
covering assignment, then every record consumed exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from tests.conftest import BrokerFactory

from .helpers import admin, create_topic

pytestmark = [pytest.mark.timeout(180)]

PARTITIONS = 6
SESSION_MS = 6000
OVERRIDES = {"offsets.topic.num.partitions": 5, "group.consumer.session.timeout.ms": SESSION_MS,
             "group.consumer.min.session.timeout.ms": SESSION_MS, "group.consumer.heartbeat.interval.ms": 500,
             "group.consumer.min.heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-consumer-protocol"))
    yield factory(overrides=OVERRIDES)
    factory.close()


def produce(bootstrap: str, topic: str, count: int, partitions: int = PARTITIONS) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def expected(topic: str, count: int, partitions: int = PARTITIONS) -> list[tuple[str, int, int]]:
    return sorted((topic, i % partitions, i // partitions) for i in range(count))


def commit(consumer: Consumer, msg: Message, timeout: float = 20) -> None:
    """Commit synchronously, retrying STALE_MEMBER_EPOCH as Kafka's Java consumer does.

    A commit sent while the member's heartbeat is moving it to a new epoch (both
    pipelined on one connection) carries the old epoch: Kafka answers
    STALE_MEMBER_EPOCH, and librdkafka hands that to the application. The
    partition stays this member's until its next poll serves a revocation, so
    the same commit is sent again once the heartbeat response brought the epoch.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            consumer.commit(message=msg, asynchronous=False)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.STALE_MEMBER_EPOCH or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class Member:
    """A consumer-protocol consumer that tracks its assignment through the incremental callbacks."""

    def __init__(self, bootstrap: str, group: str, topics: list[str], **extra: object) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000}
        conf.update(extra)
        self.consumer = Consumer(conf)
        self.assigned: set[tuple[str, int]] = set()
        self.revoked = 0
        self.consumed: list[tuple[str, int, int]] = []
        self.consumer.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)

    def _on_assign(self, consumer, partitions) -> None:
        self.assigned |= {(p.topic, p.partition) for p in partitions}

    def _on_revoke(self, consumer, partitions) -> None:
        self.revoked += len(partitions)
        self.assigned -= {(p.topic, p.partition) for p in partitions}

    def poll(self, timeout: float = 0.05) -> None:
        msg = self.consumer.poll(timeout)
        if msg is not None and not msg.error():
            self.consumed.append((msg.topic(), msg.partition(), msg.offset()))
            commit(self.consumer, msg)

    def close(self) -> None:
        self.consumer.close()


def poll_until(members: list[Member], cond: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {[sorted(m.assigned) for m in members]}"
        for m in members:
            m.poll()


def covered(members: list[Member], partitions: set[tuple[str, int]]) -> bool:
    """Every member holds some partitions, none twice, all of them."""
    sets = [m.assigned for m in members]
    return all(sets) and sum(len(s) for s in sets) == len(partitions) and set().union(*sets) == partitions


def all_of(topic: str, count: int = PARTITIONS) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(count)}


def consumed(members: list[Member]) -> list[tuple[str, int, int]]:
    return sorted(pos for m in members for pos in m.consumed)


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=20)
        return {p.partition: p.offset for p in parts}
    finally:
        consumer.close()


def check_cli(bootstrap: str, group: str, members: list[Member]) -> None:
    """`klamm consumer-groups --describe` shows the member and target assignment epochs of a consumer group."""
    def tool(*args: str) -> list[str]:
        for _ in range(10):  # the tool's subprocess runs while the members keep heartbeating
            for m in members:
                m.poll()
        p = subprocess.run([sys.executable, "-m", "klamm", "consumer-groups", "--bootstrap-server", bootstrap,
                            "--describe", "--group", group, *args], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return [line.split() for line in p.stdout.strip().splitlines()]  # type: ignore[misc]

    state = tool("--state")
    assert state[0][-4:] == ["STATE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"], state
    group_epoch, target_epoch = int(state[1][-3]), int(state[1][-2])
    assert state[1][-4] == "Stable" and state[1][-1] == "2" and target_epoch == group_epoch >= 4
    rows = tool("--members", "--verbose")
    assert rows[0][-4:] == ["CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT"], rows
    assert len(rows) == 3
    for row in rows[1:]:  # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS epoch current target-epoch target
        assert row[-4] == str(target_epoch) and row[-2] == str(target_epoch) and row[-3] == row[-1]
        assert row[-3].startswith(topic_of(members)) and row[-5] == "3"


def topic_of(members: list[Member]) -> str:
    return next(iter(members[0].assigned))[0]


def test_three_members_join_and_one_leaves(group_broker, topic):
    bs = group_broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 120)
    members = [Member(bs, "kip848-three", [topic])]
    try:
        poll_until(members, lambda: covered(members, all_of(topic)), what="the first member to take all")
        poll_until(members, lambda: len(consumed(members)) >= 30, what="some records")
        members += [Member(bs, "kip848-three", [topic]) for _ in range(2)]
        poll_until(members, lambda: covered(members, all_of(topic)) and all(len(m.assigned) == 2 for m in members),
                   what="three members to share the partitions")
        produce(bs, topic, 60)
        poll_until(members, lambda: len(consumed(members)) >= 180, what="all records")
        client = admin(bs)
        described = client.describe_consumer_groups(["kip848-three"])["kip848-three"].result(20)
        assert described.type.name == "CONSUMER" and described.state.name == "STABLE"  # ConsumerGroupDescribe
        assert described.partition_assignor == "uniform" and len(described.members) == 3
        assert {tp.partition for m in described.members for tp in m.assignment.topic_partitions} == \
            set(range(PARTITIONS))
        assert all(m.target_assignment is not None for m in described.members)
        members[0].close()
        rest = members[1:]
        poll_until(rest, lambda: covered(rest, all_of(topic)), what="two members to take over")
        produce(bs, topic, 60)
        poll_until(rest, lambda: len(consumed(members)) >= 240, what="the records after the leave")
        check_cli(bs, "kip848-three", rest)
    finally:
        for m in members[1:]:
            m.close()
    assert consumed(members) == expected(topic, 240)  # each record once, none lost
    assert committed(bs, "kip848-three", topic) == {p: 40 for p in range(PARTITIONS)}


CRASHER = textwrap.dedent("""
    import sys
    import time
    from confluent_kafka import Consumer, KafkaError, KafkaException
    c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "group.protocol": "consumer",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([sys.argv[3]], on_assign=lambda c, ps: print("assigned", len(ps), flush=True))
    while True:
        m = c.poll(0.1)
        if m is not None and not m.error():
            while True:  # STALE_MEMBER_EPOCH: again once the heartbeat brought the new epoch (see commit)
                try:
                    c.commit(message=m, asynchronous=False)
                    break
                except KafkaException as e:
                    if e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                        raise
                    time.sleep(0.05)
""")


def test_crashed_member_is_fenced_after_the_session_timeout(group_broker, topic):
    bs = group_broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 60)
    crasher = subprocess.Popen([sys.executable, "-c", CRASHER, bs, "kip848-crash", topic],
                               stdout=subprocess.PIPE, text=True)
    members: list[Member] = []
    try:
        assert crasher.stdout is not None and crasher.stdout.readline().startswith("assigned")
        members = [Member(bs, "kip848-crash", [topic]) for _ in range(2)]
        poll_until(members, lambda: all(m.assigned for m in members) and
                   sum(len(m.assigned) for m in members) == PARTITIONS - 2, what="a three-way split")
        os.kill(crasher.pid, signal.SIGKILL)  # no leave heartbeat: only the session timeout tells
        crasher.wait(10)
        started = time.monotonic()
        crashed = all_of(topic) - set().union(*(m.assigned for m in members))
        # A commit the crasher had in flight may still land: read after it did, well within the session
        # timeout (before it the survivors cannot take, nor commit, the crasher's partitions). A partition
        # without a commit (OFFSET_INVALID, negative) resumes at the start (auto.offset.reset=earliest).
        time.sleep(1)
        at_kill = {p: max(offset, 0) for p, offset in committed(bs, "kip848-crash", topic).items()}
        produce(bs, topic, 60)
        poll_until(members, lambda: covered(members, all_of(topic)), what="survivors to take over", timeout=60)
        assert time.monotonic() - started > SESSION_MS / 1000 / 2  # it took the session timeout
        poll_until(members, lambda: len({(p, o) for _, p, o in consumed(members) if o >= 10}) >= 60,
                   what="the records produced after the crash")
    finally:
        if crasher.poll() is None:
            crasher.kill()
        for m in members:
            m.close()
    mine = consumed(members)
    assert len(set(mine)) == len(mine)  # nothing twice
    for _, partition in crashed:  # the crashed member's partitions resume at its last commit
        offsets = [o for _, p, o in mine if p == partition]
        assert offsets == list(range(at_kill[partition], 20)), (partition, at_kill[partition], offsets)
    assert committed(bs, "kip848-crash", topic) == {p: 20 for p in range(PARTITIONS)}


def test_regex_subscription_picks_up_a_new_topic(group_broker, topic):
    bs = group_broker.bootstrap
    first, second = f"{topic}-rx-a", f"{topic}-rx-b"
    create_topic(bs, first, 2)
    produce(bs, first, 20, 2)
    members = [Member(bs, "kip848-regex", [f"^{topic}-rx-.*"]) for _ in range(2)]
    try:
        poll_until(members, lambda: covered(members, all_of(first, 2)), what="the regex's first topic")
        create_topic(bs, second, 4)
        produce(bs, second, 40, 4)
        poll_until(members, lambda: covered(members, all_of(first, 2) | all_of(second, 4)),
                   what="the new topic to be assigned")
        poll_until(members, lambda: len(consumed(members)) >= 60, what="the records of both topics")
        client = admin(bs)
        described = client.describe_consumer_groups(["kip848-regex"])["kip848-regex"].result(20)
        assert {tp.topic for m in described.members for tp in m.assignment.topic_partitions} == {first, second}
    finally:
        for m in members:
            m.close()
    assert consumed(members) == sorted(expected(first, 20, 2) + expected(second, 40, 4))


def test_group_survives_a_broker_restart_without_a_rebalance(broker_factory, topic):
    """Epochs and assignments are in __consumer_offsets: after a restart the members carry on as they were."""
    broker = broker_factory(overrides=OVERRIDES)
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produce(bs, topic, 60)
    members = [Member(bs, "kip848-restart", [topic]) for _ in range(2)]
    try:
        poll_until(members, lambda: covered(members, all_of(topic)) and all(len(m.assigned) == 3 for m in members)
                   and len(consumed(members)) >= 60, what="two members consuming")
        assignments = [set(m.assigned) for m in members]
        revoked = [m.revoked for m in members]
        broker.stop()
        broker.start()
        produce(bs, topic, 60)
        poll_until(members, lambda: len(consumed(members)) >= 120, what="the records after the restart")
        for _ in range(40):  # heartbeats go on against the restarted coordinator
            for m in members:
                m.poll()
        assert [m.assigned for m in members] == assignments
        assert [m.revoked for m in members] == revoked  # no partition was taken away: no rebalance
        client = admin(bs)
        described = client.describe_consumer_groups(["kip848-restart"])["kip848-restart"].result(20)
        assert described.state.name == "STABLE" and len(described.members) == 2
    finally:
        for m in members:
            m.close()
    assert consumed(members) == expected(topic, 120)
    assert committed(bs, "kip848-restart", topic) == {p: 20 for p in range(PARTITIONS)}
