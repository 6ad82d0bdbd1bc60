"""The group coordinator killed under load: its __consumer_offsets partition moves, the group goes on.

Three `klamm serve` processes, all broker and controller (a Raft quorum, so
any of them can die), __consumer_offsets and the topic replicated three times.
Three confluent-kafka consumers (KIP-848 `group.protocol=consumer`; classic
cooperative-sticky ones for comparison; and a consumer group with classic
members, as in a migration) consume while a producer writes, each
committing every 200 ms (asynchronously) and in its revoke callback (synchronously)
(ownership.py). Then the broker leading the group's __consumer_offsets
partition is killed with SIGKILL (or stopped: a controlled shutdown). What must hold:
- the consumers find the new coordinator: each has a commit acknowledged there;
- the group was reloaded as it was: no assignment or revocation on any member,
  and (consumer protocol) the same group epoch, member epochs and assignments;
- every commit acknowledged before the kill is there after it;
- a member replaced afterwards hands its partitions over through the new
  coordinator; in the end each record was consumed exactly once, no partition
  was ever held by two members, and the committed offsets are at the end.
And the coordinator killed mid-rebalance, with revocations pending: the reloaded
group (members still to revoke, one waiting for those partitions) finishes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType

from tests.conftest import (
    CLUSTER_DEFAULTS,
    QUORUM_DEFAULTS,
    BrokerProcess,
    ClusterProcess,
)
from tests.integration.conftest import RawClient

from .helpers import admin, create_topic
from .ownership import Ledger, Load, Member, all_consumed, committed, poll_until, shared, start_at_zero

pytestmark = [pytest.mark.timeout(180)]

PARTITIONS = 6
GROUP = "coordinator-failover"
FIND_COORDINATOR = 10
CONSUMER_GROUP_DESCRIBE = 69
# While librdkafka resolves the topics of a member's first assignment, a heartbeat due meanwhile goes out in full
# with the new epoch and what it has applied (nothing) as owned; if the group epoch moved on, the coordinator (as
# Kafka's) takes the partitions it revokes from that member as given up and hands them over, and librdkafka then
# assigns them anyway before revoking them: double ownership at start-up. At 500 ms a loaded machine hit it (3
# members started together); a longer interval leaves that window a heartbeat less often.
HEARTBEAT_MS = 2000
# The new coordinator expires a member that has not reached it within its session timeout of the group's load.
# With 6 s, a loaded machine expired a classic member of the mixed group mid-rebalance (partitions lost): the
# session is no subject here (no member dies), so both protocols get a margin (Kafka's default is 45 s).
SESSION_MS = 20000
# after every member's first commit to the new coordinator: a heartbeat of each there, and a second for its answer
OBSERVE_S = HEARTBEAT_MS / 1000 + 1
CONFIG = {**CLUSTER_DEFAULTS, **QUORUM_DEFAULTS,
          "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "300",
          "replica.lag.time.max.ms": "2000", "replica.fetch.backoff.ms": "100", "replica.fetch.wait.max.ms": "200",
          "offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0",
          "group.consumer.session.timeout.ms": str(SESSION_MS), "group.consumer.min.session.timeout.ms": "6000",
          "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
          "group.consumer.min.heartbeat.interval.ms": "500"}


@pytest.fixture
def cluster(tmp_path: Path):
    running = ClusterProcess(tmp_path, CONFIG, quorum=True)
    try:
        yield running.start()
    finally:
        running.kill()


def coordinator(node: BrokerProcess) -> int | None:
    """The node id of the group's coordinator as `node` knows it (FindCoordinator), None while there is none."""
    client = RawClient(node.port)
    try:
        found = client.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [GROUP]}).coordinators[0]
    finally:
        client.close()
    return found.node_id if found.error_code == 0 else None


def consumer_group(node: BrokerProcess) -> tuple[int, dict[str, tuple[int, list[int]]]]:
    """ConsumerGroupDescribe at `node`: the group epoch, and each member's epoch and assigned partitions."""
    client = RawClient(node.port)
    try:
        group = client.request(CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": [GROUP],
                                                            "include_authorized_operations": False}).groups[0]
    finally:
        client.close()
    assert group.error_code == 0, (group.error_code, group.error_message)
    members = {m.member_id: (m.member_epoch, sorted(p for t in m.assignment.topic_partitions for p in t.partitions))
               for m in group.members}
    return group.group_epoch, members


def settled(node: BrokerProcess) -> bool:
    """Every member reconciled to the group epoch."""
    epoch, members = consumer_group(node)
    return len(members) == 3 and all(e == epoch for e, _ in members.values())


class Scene:
    """A topic under load, a ledger, and the group's members (ownership.py)."""

    def __init__(self, cluster: ClusterProcess, topic: str, protocol: str) -> None:
        self.cluster, self.topic, self.protocol = cluster, topic, protocol
        create_topic(cluster.bootstrap, topic, PARTITIONS)
        start_at_zero(cluster.bootstrap, GROUP, topic, PARTITIONS)
        self.ledger = Ledger(PARTITIONS)
        self.load = Load(cluster.bootstrap, topic, PARTITIONS)
        self.members: list[Member] = []

    def member(self, index: int = 0) -> Member:
        """A member using the scene's protocol ("mixed": the first uses the consumer protocol, others classic)."""
        protocol = self.protocol if self.protocol != "mixed" else "consumer" if index == 0 else "classic"
        extra = {"session.timeout.ms": SESSION_MS} if protocol == "classic" else None
        return Member(self.cluster.bootstrap, GROUP, self.topic, self.ledger, protocol, extra, commit_interval=0.2)

    def start(self, count: int) -> None:
        """`count` members started together (in a mixed group as in a rolling upgrade: the consumer-protocol
        member's first heartbeat may find the classic members' joins still pending), sharing the partitions and
        consuming."""
        self.members.extend(self.member(i) for i in range(count))
        members = self.members
        poll_until(members, lambda: shared(members, PARTITIONS)
                   and all(m.consumed >= 20 and m.last_commit for m in members),
                   what=f"{count} consuming members, each with a commit acknowledged")

    def coordinator(self) -> BrokerProcess:
        node_id = coordinator(self.cluster.nodes[0])
        assert node_id is not None
        return self.cluster.nodes[node_id - 1]

    def fail_over(self, victim: BrokerProcess, how: str) -> BrokerProcess:
        """Kill (or stop) `victim`; poll until another node coordinates the group and every member has had a
        commit acknowledged there, then OBSERVE_S more. The new coordinator."""
        started = time.monotonic()
        victim.kill() if how == "kill" else victim.stop()
        survivor = next(n for n in self.cluster.nodes if n is not victim)
        moved: dict = {}  # to: the new coordinator, at: when found, committed: when all members committed there

        def failed_over() -> bool:
            now = time.monotonic()
            if not moved:
                node_id = coordinator(survivor)
                if node_id is None or self.cluster.nodes[node_id - 1] is victim:
                    return False
                moved.update(to=self.cluster.nodes[node_id - 1], at=now)
            if "committed" not in moved and all(m.last_commit > moved["at"] for m in self.members if m.assigned):
                moved["committed"] = now
            return now > moved.get("committed", now) + OBSERVE_S
        poll_until(self.members, failed_over, what="a new coordinator, and a commit of every member there")
        print(f"\ncoordinator {victim.overrides['node.id']} ({how}), node {moved['to'].overrides['node.id']} took "
              f"over after {moved['at'] - started:.1f}s")
        return moved["to"]

    def finish(self) -> None:
        """Stop the load, consume it all, close the members: each record consumed once, every offset committed."""
        produced = self.load.stop()
        poll_until(self.members, all_consumed(self.ledger, produced), what="every record to be consumed")
        poll_until(self.members, self._all_committed(), what="every position committed")
        # classic members first: the consumer-protocol member leaving first would downgrade a mixed group while
        # classic members still hold partitions (at-least-once for one behind the group epoch, as in Kafka: the
        # migration tests cover it)
        for m in sorted(self.members, key=lambda m: m.protocol != "classic"):
            m.close()
        self.ledger.check(produced)
        assert committed(self.cluster.bootstrap, GROUP, self.topic, PARTITIONS) == produced
        print(f"{sum(produced)} records consumed once each")

    def _all_committed(self) -> Callable[[], bool]:
        """Every member's positions committed (asynchronously, again every 0.5 s while one is refused): a member
        closing later may be a generation behind when another one has left, and its last commit refused."""
        due = [0.0]

        def done() -> bool:
            waiting = [m for m in self.members if not m.closed and not m.committed_already()]
            if waiting and time.monotonic() >= due[0]:
                due[0] = time.monotonic() + 0.5
                for m in waiting:
                    m.commit_async()
            return not waiting
        return done

    def close(self) -> None:
        self.load.halt()
        for m in self.members:
            m.close()


@pytest.mark.parametrize("protocol,how", [("consumer", "kill"), ("consumer", "stop"), ("classic", "kill"),
                                          ("mixed", "kill")])
def test_group_coordinator_lost_under_load(cluster: ClusterProcess, topic: str, protocol: str, how: str) -> None:
    """A stable group: reloaded as it was, no rebalance, no acknowledged commit lost. "mixed": a consumer group
    with classic (cooperative) members too, as in a migration."""
    scene = Scene(cluster, topic, protocol)
    members = scene.members
    try:
        scene.start(3)
        victim = scene.coordinator()
        if protocol != "classic":
            poll_until(members, lambda: settled(victim), what="the group to settle")
            before = consumer_group(victim)
        assert scene.ledger.acked, "no commit acknowledged before the kill"
        acked, changes = dict(scene.ledger.acked), scene.ledger.changes

        now = scene.fail_over(victim, how)
        assert scene.ledger.changes == changes, \
            "a rebalance after the coordinator moved:\n" + "\n".join(scene.ledger.history[-20:])
        if protocol != "classic":
            assert consumer_group(now) == before
        after = committed(cluster.bootstrap, GROUP, topic, PARTITIONS)
        lost = {p: (o, after[p]) for p, o in acked.items() if after[p] < o}
        assert not lost, f"acknowledged commits lost (acked, now): {lost}"

        # partitions handed over through the new coordinator: the leaving member's commits, the others' fetches
        members[0].close()
        members[0] = scene.member(0)
        poll_until(members, lambda: shared(members, PARTITIONS) and members[0].consumed >= 20,
                   what="the replaced member to consume")
        scene.finish()
    finally:
        scene.close()


def revocation_pending(bootstrap: str, members: list[Member]) -> bool:
    """The coordinator told a member to give up partitions it still holds (its revoke callback not run yet). A
    classic group shows its members' assignments only once Stable (while it prepares a rebalance they are empty,
    which is no revocation yet)."""
    client = admin(bootstrap)  # kept alive until the answer is in
    described = client.describe_consumer_groups([GROUP], request_timeout=10)[GROUP].result(15)
    if described.type == ConsumerGroupType.CLASSIC and described.state != ConsumerGroupState.STABLE:
        return False
    held = {f"member-{m.index}": m.assigned for m in members}
    return any({tp.partition for tp in d.assignment.topic_partitions} < held.get(d.client_id, set())
               for d in described.members)


@pytest.mark.parametrize("protocol", ["consumer", "classic", "mixed"])
def test_group_coordinator_killed_during_a_rebalance(cluster: ClusterProcess, topic: str, protocol: str) -> None:
    """A fourth member joins; the others are not polled, so they cannot revoke what the coordinator takes from
    them for it; then the coordinator dies. The group reloaded with those revocations pending finishes the
    rebalance: four members share the partitions, nobody ever holds one twice, each record consumed once."""
    scene = Scene(cluster, topic, protocol)
    members = scene.members
    try:
        scene.start(3)
        victim = scene.coordinator()
        old = list(members)
        members.append(scene.member(3))
        poll_until(members[3:], lambda: revocation_pending(cluster.bootstrap, old), what="a pending revocation")
        assert not members[3].assigned
        scene.fail_over(victim, "kill")
        poll_until(members, lambda: shared(members, PARTITIONS) and members[3].consumed >= 20,
                   what="four members to share the partitions")
        scene.finish()
    finally:
        scene.close()
