"""Online migration under load: a rolling upgrade of a classic group to the consumer protocol, and back.

Three confluent-kafka consumers share a topic in a classic group (eager "range")
while a producer keeps writing. They are restarted one at a time with
`group.protocol=consumer`: the first restart converts the group (the broker's
group.consumer.migration.policy is Kafka's default, bidirectional) and the
classic members keep going with JoinGroup/SyncGroup against the consumer
group. Then a rolling downgrade back: when the last consumer-protocol member
leaves, the group is classic again.

Every consumer commits each record synchronously before its next poll. What
must hold, per partition, over the consumption events in order:
- no gap: a consumer never starts beyond the next offset after what was consumed;
- redelivery only of what was not committed: a consumer that takes a partition
  over starts at or after the last offset whose commit succeeded;
- in the end every record is consumed and the committed offsets are at the end.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from tests.conftest import BrokerFactory

from .helpers import Stable, admin, create_topic
from .ownership import Load

pytestmark = [pytest.mark.timeout(420)]

PARTITIONS = 6
GROUP = "migration-rolling"
OVERRIDES = {"offsets.topic.num.partitions": 5, "group.initial.rebalance.delay.ms": 300,
             "group.consumer.session.timeout.ms": 6000, "group.consumer.min.session.timeout.ms": 6000,
             "group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 500}


@pytest.fixture(scope="module")
def migration_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-protocol-migration"))
    yield factory(overrides=OVERRIDES)
    factory.close()


@dataclass(frozen=True)
class Event:
    consumer: int  # which consumer instance
    partition: int
    offset: int
    committed_before: int  # the partition's last successfully committed position when this was consumed


class Member:
    """One consumer instance; its consumption and commits go to the shared journal."""

    ids = itertools.count()

    def __init__(self, bootstrap: str, topic: str, protocol: str, journal: Journal) -> None:
        self.index = next(Member.ids)
        self.protocol = protocol
        self.journal = journal
        conf = {"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": "range"})
        self.consumer = Consumer(conf)
        self.assigned: set[int] = set()
        self.consumed = 0
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_revoke)

    def _on_assign(self, consumer, partitions) -> None:
        self.assigned |= {p.partition for p in partitions}

    def _on_revoke(self, consumer, partitions) -> None:
        self.assigned -= {p.partition for p in partitions}

    def poll(self) -> None:
        msg = self.consumer.poll(0.05)
        if msg is None or msg.error():
            return
        self.consumed += 1
        self.journal.consumed(self.index, msg.partition(), msg.offset())
        try:
            self.consumer.commit(message=msg, asynchronous=False)
        except KafkaException:
            return  # e.g. a rebalance in progress: the record may be delivered again, that is allowed
        self.journal.committed(msg.partition(), msg.offset() + 1)

    def close(self) -> None:
        self.consumer.close()


class Journal:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.commits = [0] * PARTITIONS

    def consumed(self, consumer: int, partition: int, offset: int) -> None:
        self.events.append(Event(consumer, partition, offset, self.commits[partition]))

    def committed(self, partition: int, position: int) -> None:
        self.commits[partition] = max(self.commits[partition], position)


def poll_until(members: list[Member], cond: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, \
            f"timed out waiting for {what}: {[(m.protocol, sorted(m.assigned)) for m in members]}"
        for m in members:
            m.poll()


def shared(members: list[Member]) -> bool:
    """Each member holds two partitions, none twice, all of them."""
    sets = [m.assigned for m in members]
    return all(len(s) == 2 for s in sets) and set().union(*sets) == set(range(PARTITIONS))


def group_type(bootstrap: str) -> str:
    client = admin(bootstrap)  # kept alive until the answer is in
    listed = client.list_consumer_groups().result(30)
    types = {g.group_id: g.type.name for g in listed.valid}
    assert GROUP in types, (listed.valid, listed.errors)
    return types[GROUP]


def roll(members: list[Member], make: Callable[[], Member], step: int, bootstrap: str) -> None:
    """Replace member `step` by a new instance and wait until the group has settled and it consumes."""
    members[step].close()
    members[step] = make()
    poll_until(members, lambda: shared(members) and members[step].consumed > 0,
               what=f"member {step} to be replaced by a {members[step].protocol} consumer")
    # every member catches up with the group (classic members of a consumer group rejoin: Stable), then
    # keeps consuming, whatever its protocol
    poll_until(members, Stable(bootstrap, GROUP, 3), what=f"the group to be Stable after replacing member {step}")
    before = [m.consumed for m in members]
    poll_until(members, lambda: shared(members) and all(m.consumed >= n + 10 for m, n in zip(members, before)),
               what=f"all members to consume after replacing member {step}")


def check_journal(journal: Journal, produced: list[int]) -> None:
    for partition in range(PARTITIONS):
        events = [e for e in journal.events if e.partition == partition]
        assert events and events[0].offset == 0, (partition, events[:3])
        high = -1
        for event in events:
            assert event.offset <= high + 1, f"partition {partition}: gap before {event}"
            assert event.offset >= event.committed_before, \
                f"partition {partition}: committed offset {event.committed_before} consumed again by {event}"
            high = max(high, event.offset)
        assert high + 1 == produced[partition], (partition, high, produced[partition])


def test_rolling_upgrade_and_downgrade_under_load(migration_broker, topic):
    bs = migration_broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    journal = Journal()
    load = Load(bs, topic, PARTITIONS)
    members: list[Member] = []
    try:
        members = [Member(bs, topic, "classic", journal) for _ in range(3)]
        poll_until(members, lambda: shared(members) and all(m.consumed for m in members), what="a classic group")
        assert group_type(bs) == "CLASSIC"
        for step in range(3):  # rolling upgrade
            roll(members, lambda: Member(bs, topic, "consumer", journal), step, bs)
            assert group_type(bs) == "CONSUMER"
        client = admin(bs)
        described = client.describe_consumer_groups([GROUP])[GROUP].result(30)
        assert described.type.name == "CONSUMER" and len(described.members) == 3
        for step in range(3):  # rolling downgrade
            roll(members, lambda: Member(bs, topic, "classic", journal), step, bs)
            assert group_type(bs) == ("CLASSIC" if step == 2 else "CONSUMER")
        produced = load.stop()
        poll_until(members, lambda: all(journal.commits[p] == produced[p] for p in range(PARTITIONS)),
                   what="every record to be consumed and committed")
    finally:
        load.stop()
        for m in members:
            m.close()
    check_journal(journal, produced)
    consumer = Consumer({"bootstrap.servers": bs, "group.id": GROUP})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == produced
    redelivered = len(journal.events) - sum(produced)
    print(f"\n{sum(produced)} records, {redelivered} delivered again after rebalances")
