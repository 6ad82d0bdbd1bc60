"""Online migration with cooperative classic members under load: librdkafka's cooperative-sticky, and the Java
client's CooperativeStickyAssignor (java/CoopMember.java, a process per member, its events stamped there).

Upgrade: three classic members using cooperative-sticky consume while a
producer writes; one at a time each is replaced by a `group.protocol=consumer`
member. The first replacement converts the group; the remaining classic members
then get their revocations as Kafka 4 gives them to a classic member of a
consumer group: REBALANCE_IN_PROGRESS on their heartbeat, a rejoin, a SyncGroup
assignment without the revoked partitions while they keep the others, and a
rejoin to report them gone. Downgrade: the consumer-protocol members are
replaced by cooperative classic ones (policy bidirectional); when the last one
leaves, the group is classic again and rebalances cooperatively.

Each member commits synchronously, in its revoke callback, what it consumed of
the partitions it gives up (ownership.py), so what must hold is strict: no
partition ever assigned to a member while another holds it, every partition
owned at the end of each step, and each record consumed exactly once. And the
classic members never revoke all they hold (eager-style) before closing; in the
upgrade, they revoke part of it for the new members.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import BrokerFactory

from .conftest import compile_java
from .helpers import Stable, admin, create_topic
from .ownership import (
    JavaMember,
    Ledger,
    Load,
    Member,
    all_consumed,
    committed,
    poll_until,
    shared,
    start_at_zero,
)

pytestmark = [pytest.mark.timeout(180)]

PARTITIONS = 6
OVERRIDES = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
             "group.consumer.migration.policy": "bidirectional",
             "group.consumer.session.timeout.ms": 6000, "group.consumer.min.session.timeout.ms": 6000,
             "group.consumer.heartbeat.interval.ms": 300, "group.consumer.min.heartbeat.interval.ms": 300}


@pytest.fixture(scope="module")
def migration_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-migration-cooperative"))
    yield factory(overrides=OVERRIDES)
    factory.close()


def group_type(bootstrap: str, group: str) -> str:
    client = admin(bootstrap)  # kept alive until the answer is in
    listed = client.list_consumer_groups().result(30)
    types = {g.group_id: g.type.name for g in listed.valid}
    assert group in types, (listed.valid, listed.errors)
    return types[group]


def roll(members: list[Member], step: int, make: Callable[[], Member], bootstrap: str, group: str) -> None:
    """Add a member to replace member `step`, let it take its share (the others give partitions up), then
    close member `step` (its partitions go to the others); each time wait until every member consumes."""
    old = members[step]
    members.append(make())
    settle(members, f"a {members[-1].protocol} member to join next to member {step}", bootstrap, group)
    old.close()
    members[step] = members.pop()
    settle(members, f"member {step} to leave", bootstrap, group)


def settle(members: list[Member], what: str, bootstrap: str | None = None, group: str | None = None) -> None:
    """Until every member holds a fair share and (given the group) the group is Stable, then until every member
    consumes. A fair share is not enough before a member closes: with four members, one may hold two partitions
    while it rejoins to give one up, and its closing commit then races the rejoin (refused ILLEGAL_GENERATION or
    REBALANCE_IN_PROGRESS, in Kafka too, and the partition goes over uncommitted)."""
    poll_until(members, lambda: shared(members, PARTITIONS), what=f"the partitions to be shared after {what}")
    if group is not None:
        assert bootstrap is not None
        live = sum(not m.closed for m in members)
        poll_until(members, Stable(bootstrap, group, live), what=f"the group to be Stable after {what}")
    before = [m.consumed for m in members]
    poll_until(members, lambda: shared(members, PARTITIONS) and all(m.consumed >= n + 5 for m, n in
                                                                   zip(members, before) if m.assigned),
               what=f"every member to consume after {what}")


def finish(bootstrap: str, group: str, topic: str, members: list[Member], load: Load, ledger: Ledger) -> None:
    """Stop the load, consume everything, close the members (their last commits), check it all."""
    produced = load.stop()
    poll_until(members, all_consumed(ledger, produced), what="every record to be consumed")
    # Each member's close makes the others rebalance, so a later member's close-time commit can carry a
    # generation the group has left (ILLEGAL_GENERATION, or REBALANCE_IN_PROGRESS once it rejoined), and a
    # consumer-protocol member's once reached the coordinator after its leave (UNKNOWN_MEMBER_ID), as in Kafka.
    # So the librdkafka members commit what they hold first, in the Stable group: no JoinGroup is pending that
    # a classic member's synchronous commit could queue behind (it would wait for this thread to poll the
    # others), and a refusal at close then loses nothing (Member._on_revoke).
    poll_until(members, Stable(bootstrap, group, len(members)), what="the group to be Stable before closing")
    for m in members:
        if isinstance(m, Member):
            m.commit_held()
    for m in members:
        m.close()
    assert ledger.owners()[0] == {}  # every member closed gave its partitions back
    ledger.check(produced)
    assert committed(bootstrap, group, topic, PARTITIONS) == produced
    print(f"\n{sum(produced)} records consumed once each")


def run_roll(bootstrap: str, group: str, topic: str, first: str, then: str,
             expect_types: tuple[str, ...], java: str | None = None) -> list[Member]:
    """Roll three `first` members to `then` ones under load; every member that took part. With `java` (a
    classpath), the classic members are Java clients (CooperativeStickyAssignor)."""
    create_topic(bootstrap, topic, PARTITIONS)
    start_at_zero(bootstrap, group, topic, PARTITIONS)
    # a downgrade hands a classic member that has not rejoined for the latest group epoch ILLEGAL_GENERATION
    # (the classic group's generation is the group epoch, as Kafka's): it loses its partitions, uncommitted
    ledger = Ledger(PARTITIONS, stale_generation_ok=expect_types[-1] == "CLASSIC")
    load = Load(bootstrap, topic, PARTITIONS)
    members: list[Member] = []
    everyone: list[Member] = []

    def make(protocol: str) -> Member:
        if java is not None and protocol == "classic":
            everyone.append(JavaMember(java, bootstrap, group, topic, ledger, protocol))
        else:
            everyone.append(Member(bootstrap, group, topic, ledger, protocol))
        return everyone[-1]
    try:
        members = [make(first) for _ in range(3)]
        poll_until(members, lambda: shared(members, PARTITIONS) and all(m.consumed for m in members),
                   what=f"a group of {first} members")
        assert group_type(bootstrap, group) == expect_types[0]
        for m in members:  # from here on, revocations for the migration's rebalances
            m.partial_revocations = 0
        for step in range(3):
            roll(members, step, lambda: make(then), bootstrap, group)
            assert group_type(bootstrap, group) == expect_types[step + 1], step
        finish(bootstrap, group, topic, members, load, ledger)
    finally:
        load.halt()
        for m in members:
            m.close()
    return everyone


def revocations(members: list[Member]) -> tuple[int, int]:
    """The classic members' revocations of part of what they held, and of all of it (before closing)."""
    classic = [m for m in members if m.protocol == "classic"]
    return sum(m.partial_revocations for m in classic), sum(m.full_revocations for m in classic)


@pytest.fixture(scope="module")
def java_member() -> str:
    """The classpath of java/CoopMember.java, compiled."""
    return compile_java("CoopMember")


@pytest.fixture(params=["librdkafka", pytest.param("java", marks=pytest.mark.java)])
def classic_client(request) -> str | None:
    """Which client the classic members use: None for librdkafka, else the Java member's classpath."""
    return request.getfixturevalue("java_member") if request.param == "java" else None


def test_rolling_upgrade_of_cooperative_classic_members(migration_broker, topic, classic_client):
    everyone = run_roll(migration_broker.bootstrap, f"upgrade-{topic}", topic, "classic", "consumer",
                        ("CLASSIC", "CONSUMER", "CONSUMER", "CONSUMER"), classic_client)
    # in the consumer group, the classic members gave partitions up to the new members and kept the others
    partial, full = revocations(everyone)
    assert partial >= 1 and full == 0, (partial, full)


def test_rolling_downgrade_to_cooperative_classic_members(migration_broker, topic, classic_client):
    everyone = run_roll(migration_broker.bootstrap, f"downgrade-{topic}", topic, "consumer", "classic",
                        ("CONSUMER", "CONSUMER", "CONSUMER", "CLASSIC"), classic_client)
    partial, full = revocations(everyone)
    assert full == 0, (partial, full)


def pending_revocations(bootstrap: str, group: str, members: list[Member]) -> list[int]:
    """The members (indexes) the coordinator told to give up partitions they still hold."""
    client = admin(bootstrap)  # kept alive until the answer is in
    described = client.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    told = {d.client_id: {tp.partition for tp in d.assignment.topic_partitions} for d in described.members}
    return [m.index for m in members if told.get(f"member-{m.index}", m.assigned) < m.assigned]


def test_downgrade_while_classic_members_hold_revoked_partitions(migration_broker, topic):
    """The last consumer-protocol member leaves while classic members have revocations pending (not polled, their
    revoke callbacks wait) and a new classic member waits for those partitions. The classic group made of the
    members' target assignments rebalances at once: nobody may get a partition another still holds.

    A member mid-revocation still has its old member epoch as generation, and the classic group has the group
    epoch (Kafka's fromConsumerGroup): its commit in the revoke callback is refused with ILLEGAL_GENERATION, as
    Kafka's is; a member that had not rejoined for the new epoch yet gets ILLEGAL_GENERATION on its heartbeat and
    loses its partitions. So their records since their last commit may be consumed again; nothing else may."""
    bs, group = migration_broker.bootstrap, f"pending-{topic}"
    create_topic(bs, topic, PARTITIONS)
    start_at_zero(bs, group, topic, PARTITIONS)
    ledger = Ledger(PARTITIONS, stale_generation_ok=True)
    load = Load(bs, topic, PARTITIONS)
    members = [Member(bs, group, topic, ledger, "consumer")]
    try:
        poll_until(members, lambda: members[0].consumed >= 5, what="a consumer-protocol member")
        members += [Member(bs, group, topic, ledger, "classic") for _ in range(2)]
        settle(members, "two classic members joining")
        assert group_type(bs, group) == "CONSUMER"
        pending: list[int] = []
        for _ in range(2):  # a new member: one member with most partitions gives one up (a classic one, at last)
            held = list(members)
            members.append(Member(bs, group, topic, ledger, "classic"))

            def told(held: list[Member] = held) -> bool:
                pending[:] = pending_revocations(bs, group, held)
                return bool(pending)
            poll_until(members[len(held):], told, what="a member to be told to give partitions up")
            if pending != [members[0].index]:
                break
            settle(members, "the consumer-protocol member giving a partition up")
        assert pending and members[0].index not in pending, pending
        print(f"\npending revocations at members {pending}")  # in the report of a failure
        members[0].close()  # the last consumer-protocol member leaves: back to classic, with a rebalance
        del members[0]
        settle(members, "the downgrade")
        assert group_type(bs, group) == "CLASSIC"
        finish(bs, group, topic, members, load, ledger)
        print(f"handed over uncommitted (ILLEGAL_GENERATION), partition: position {ledger.uncommitted}")
    finally:
        load.halt()
        for m in members:
            m.close()
