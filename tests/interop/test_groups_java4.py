"""Consumer-protocol groups (KIP-848) with the Apache Kafka Java client 4.x: `group.protocol=consumer`.

No package registry the test set-up uses ships kafka-clients 4.x, so these tests run only when
KLAMM_JAVA4_CLASSPATH names a kafka-clients 4.x jar (and, if it wants, more jars: the 3.9.1 set-up's
slf4j-api, lz4-java, snappy-java and zstd-jni are added after it); without it they skip. A 4.x jar built
from Apache Kafka's source for a local check is enough.

Every member is java/CoopMember.java in a process of its own (ownership.JavaMember): it commits
synchronously, in its revoke callback, what it consumed of the partitions it gives up, so each step must
leave a disjoint, covering assignment and every record consumed exactly once, in order, resumed from the
committed offsets. A member killed with SIGKILL commits nothing: what it consumed since its last commit
may be consumed again (and nothing else), once the broker's session timeout has removed it.

Covered: members joining, leaving and crashing (uniform and range assignors), heterogeneous subscriptions, a
pattern subscription taking a new topic up and giving a deleted one up, static membership, a member past
max.poll.interval.ms, a rolling upgrade from and downgrade to classic 3.9.1 members, a broker restart, the group
coordinator lost in a three-node cluster, exactly-once transactional jobs, and Admin's describeConsumerGroups
(ConsumerGroupDescribe) against what the members hold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.conftest import BrokerFactory, ClusterProcess

from .conftest import JARS, JAVA_LIBS, ROOT, compile_java
from .helpers import SequenceStream, admin, create_topic, wait_for
from .ownership import (
    JavaMember,
    Ledger,
    Load,
    all_consumed,
    committed,
    poll_until,
    shared,
)
from .test_cluster_group_coordinator_failover import (
    CONFIG,
    GROUP,
    consumer_group,
    coordinator,
    settled,
)
from .test_groups_migration_cooperative import group_type, roll, settle

pytestmark = [pytest.mark.timeout(240), pytest.mark.java]

PARTITIONS = 6
SESSION_MS = 6000
OVERRIDES = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
             "group.consumer.migration.policy": "bidirectional",
             "group.consumer.session.timeout.ms": SESSION_MS, "group.consumer.min.session.timeout.ms": SESSION_MS,
             "group.consumer.heartbeat.interval.ms": 500, "group.consumer.min.heartbeat.interval.ms": 500}


def compile_java4(name: str) -> str:
    """Compile tests/interop/java/<name>.java against the 4.x client (if stale); the classpath to run it."""
    given = os.environ.get("KLAMM_JAVA4_CLASSPATH", "")
    if not given:
        pytest.skip("KLAMM_JAVA4_CLASSPATH (a kafka-clients 4.x jar) not set")
    compile_java(name)  # skips without a JDK or the 3.9.1 set-up, whose other jars this uses
    jars = [given, *(str(JAVA_LIBS / f"{j}.jar") for j in JARS if j != "kafka-clients")]
    source = ROOT / "tests" / "interop" / "java" / f"{name}.java"
    build = ROOT / ".cache" / f"java4-build-{name}"
    compiled = build / f"{name}.class"
    newest = max(source.stat().st_mtime, *(Path(p).stat().st_mtime for p in given.split(":")))
    if not compiled.exists() or compiled.stat().st_mtime < newest:
        build.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "--release", "17",
                            "-cp", ":".join(jars), "-d", str(build), str(source)],
                           capture_output=True, text=True, timeout=180, check=False)
        assert p.returncode == 0, f"javac failed:\n{p.stdout}\n{p.stderr}"
    return ":".join([str(build), *jars])


@pytest.fixture(scope="module")
def java4_member() -> str:
    return compile_java4("CoopMember")


@pytest.fixture(scope="module")
def java4_admin() -> str:
    return compile_java4("GroupClient")


@pytest.fixture(scope="module")
def java4_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("groups-java4"))
    yield factory(overrides=OVERRIDES)
    factory.close()


def describe(classpath: str, bootstrap: str, group: str) -> dict:
    """Admin.describeConsumerGroups on the 4.x client: ConsumerGroupDescribe, DescribeGroups for a classic group."""
    p = subprocess.run(["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", classpath, "GroupClient",
                        "admin-describe-group", bootstrap, group], capture_output=True, text=True, timeout=90,
                       check=False)
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines, (p.returncode, p.stdout, p.stderr[-2000:])
    return lines[-1]


def described_matches(classpath: str, bootstrap: str, group: str, topic: str, members: list[JavaMember],
                      state: str) -> bool:
    """The group's description names every live member with the partitions it holds."""
    d = describe(classpath, bootstrap, group)
    held = {f"member-{m.index}": sorted(f"{topic}-{p}" for p in m.assigned) for m in members if not m.closed}
    told = {m["clientId"]: sorted(m["assignment"]) for m in d["members"]}
    return d["state"] == state and told == held


def crash(member: JavaMember) -> None:
    """SIGKILL the member's process: it leaves nothing behind but what it printed. Its partitions count as given
    up now, uncommitted past its last commit (its revoke callbacks' commits)."""
    member.proc.send_signal(signal.SIGKILL)
    member.proc.wait(10)
    member._reader.join(10)
    while not member._lines.empty():
        member._apply(json.loads(member._lines.get_nowait()))
    member.closed = True
    ledger = member.ledger
    for p, position in member._positions.items():
        ledger.uncommitted[p] = max(ledger.uncommitted.get(p, 0), position)
    ledger.note(f"member {member.index} killed")
    ledger.revoked(member.index, sorted(member.assigned), lost=False)
    member.assigned = set()


def finish(bootstrap: str, group: str, topic: str, members: list[JavaMember], load: Load, ledger: Ledger) -> None:
    produced = load.stop()
    poll_until(members, all_consumed(ledger, produced), what="every record to be consumed")
    for m in members:
        m.close()
    assert ledger.owners()[0] == {}
    ledger.check(produced)
    assert committed(bootstrap, group, topic, PARTITIONS) == produced
    print(f"\n{sum(produced)} records consumed; redelivered only below these positions (partition: position) of "
          f"a member killed or past max.poll.interval.ms: {ledger.uncommitted}")


@contextmanager
def loaded_group(bs: str, topic: str, **ledger_options) -> Iterator[tuple[Ledger, Load, list[JavaMember]]]:
    """A ledger of the topic's PARTITIONS, a producer load on them, and the list of members a test starts: at the
    end, whatever happened, the load halts and every member still open closes."""
    ledger = Ledger(PARTITIONS, **ledger_options)
    load = Load(bs, topic, PARTITIONS)
    members: list[JavaMember] = []
    try:
        yield ledger, load, members
    finally:
        load.halt()
        for m in members:
            if not m.closed:
                m.close()


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_leave_and_crash(java4_broker, java4_member, java4_admin, assignor):
    """Three members join one at a time, one leaves, a fourth joins, one is killed and its session expires."""
    bs, topic = java4_broker.bootstrap, f"j4-{assignor}-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    create_topic(bs, topic, PARTITIONS)
    with loaded_group(bs, topic) as (ledger, load, members):
        def join() -> None:
            members.append(JavaMember(java4_member, bs, group, topic, ledger, "consumer",
                                      (f"group.remote.assignor={assignor}",)))
            settle([m for m in members if not m.closed], f"member {members[-1].index} joining")
        for _ in range(3):
            join()
        assert group_type(bs, group) == "CONSUMER"
        live = [m for m in members if not m.closed]
        poll_until(live, lambda: described_matches(java4_admin, bs, group, topic, live, "Stable"),
                   what="ConsumerGroupDescribe to show the members' partitions", timeout=30)
        assert describe(java4_admin, bs, group)["assignor"] == assignor
        members[0].close()
        settle([m for m in members if not m.closed], "member 0 leaving")
        join()
        started = time.monotonic()
        crash(members[1])
        settle([m for m in members if not m.closed], "a killed member's session expiring")
        assert time.monotonic() - started >= SESSION_MS / 1000 - 1  # its partitions waited for the expiry
        finish(bs, group, topic, [m for m in members if not m.closed], load, ledger)


class RegexMember(JavaMember):
    """A member subscribed to a pattern: its partitions, of several topics, are numbered in the order of
    `topics` (partitions each), for the ledger. Its revoke callback's commit of a deleted topic's partitions
    fails (UNKNOWN_TOPIC_OR_PARTITION, retried until default.api.timeout.ms, as with Kafka): not counted."""

    def __init__(self, topics: list[str], per_topic: int, *args, **kwargs) -> None:
        self.numbers = {f"{t}-{p}": i * per_topic + p for i, t in enumerate(topics) for p in range(per_topic)}
        self.deleted: set[str] = set()
        super().__init__(*args, **kwargs)

    def _apply(self, event: dict) -> None:
        if event["ev"] == "rec":
            event["p"] = self.numbers[f"{event['topic']}-{event['p']}"]
        elif "tp" in event:
            event["p"] = [self.numbers[tp] for tp in event["tp"]]
            if (event.get("commit", "ok") != "ok" and event["tp"]
                    and all(tp.rsplit("-", 1)[0] in self.deleted for tp in event["tp"])):
                self.ledger.note(f"member {self.index}: commit of deleted {event['tp']}: {event['commit']}")
                event["commit"] = "ok"
        super()._apply(event)


def test_regex_subscription_picks_up_a_new_topic(java4_broker, java4_member):
    """Two members subscribed to a pattern share one topic's partitions; a second matching topic is created
    and they share both; it is deleted and they share the first again. Each record consumed once."""
    bs, prefix = java4_broker.bootstrap, f"rx{uuid.uuid4().hex[:8]}"
    topics, per_topic = [f"{prefix}-a", f"{prefix}-b"], 3
    group = f"g-{prefix}"
    ledger = Ledger(2 * per_topic)
    produced = [0] * (2 * per_topic)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 5})

    def produce(t: int, count: int) -> None:
        for i in range(count):
            producer.produce(topics[t], value=str(i).encode(), partition=i % per_topic)
            produced[t * per_topic + i % per_topic] += 1
        assert producer.flush(30) == 0

    create_topic(bs, topics[0], per_topic)
    produce(0, 60)
    members = [RegexMember(topics, per_topic, java4_member, bs, group, f"re:{prefix}-.*", ledger, "consumer",
                           ("default.api.timeout.ms=5000",)) for _ in range(2)]
    try:
        first = set(range(per_topic))
        poll_until(members, lambda: set().union(*(m.assigned for m in members)) == first
                   and all(m.assigned for m in members) and all_consumed(ledger, produced)(),
                   what=f"both members to share {topics[0]}")
        create_topic(bs, topics[1], per_topic)
        produce(1, 60)
        produce(0, 30)
        poll_until(members, lambda: shared(members, 2 * per_topic) and all_consumed(ledger, produced)(),
                   what=f"the members to take {topics[1]} up, found by their pattern")
        client = admin(bs)  # kept alive until the answer is in
        client.delete_topics([topics[1]], request_timeout=15)[topics[1]].result(20)
        ledger.note(f"{topics[1]} deleted")
        for m in members:
            m.deleted.add(topics[1])
        produce(0, 30)
        poll_until(members, lambda: set().union(*(m.assigned for m in members)) == first
                   and all(m.assigned for m in members) and all_consumed(ledger, produced)(),
                   what=f"the members to give {topics[1]} up, deleted")
        for m in members:
            m.close()
        assert ledger.owners()[0] == {}
        ledger.check(produced)
        assert committed(bs, group, topics[0], per_topic) == produced[:per_topic]
    finally:
        for m in members:
            m.close()


def test_rolling_upgrade_from_classic_java_391_members(java4_broker, java4_member, java4_admin):
    """Three classic members on the Java client 3.9.1 (CooperativeStickyAssignor) are replaced one at a time by
    consumer-protocol members on 4.x, under load: the first converts the group, nothing is lost or consumed
    twice, and the 4.x Admin describes the group before (DescribeGroups) and after (ConsumerGroupDescribe)."""
    bs, topic = java4_broker.bootstrap, f"j4-upgrade-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    classic = compile_java("CoopMember")
    create_topic(bs, topic, PARTITIONS)
    with loaded_group(bs, topic) as (ledger, load, members):
        members += [JavaMember(classic, bs, group, topic, ledger, "classic") for _ in range(3)]
        poll_until(members, lambda: shared(members, PARTITIONS) and all(m.consumed for m in members),
                   what="a group of classic members")
        assert group_type(bs, group) == "CLASSIC"
        poll_until(members, lambda: described_matches(java4_admin, bs, group, topic, members, "Stable"),
                   what="the classic group described by the 4.x Admin", timeout=30)
        for step in range(3):
            roll(members, step, lambda: JavaMember(java4_member, bs, group, topic, ledger, "consumer"))
            assert group_type(bs, group) == "CONSUMER", step
            # ConsumerGroupDescribe shows the classic members of the consumer group too, with what they hold
            poll_until(members, lambda: described_matches(java4_admin, bs, group, topic, members, "Stable"),
                       what=f"the group described by ConsumerGroupDescribe after step {step}", timeout=30)
        finish(bs, group, topic, members, load, ledger)


def test_static_member_restarts_into_its_partitions(java4_broker, java4_member):
    """Three static members (group.instance.id); one closes (a static leave, epoch -2) and a new process with
    its instance id takes its place: it gets the very partitions the old one held, and no other member gives
    anything up."""
    bs, topic = java4_broker.bootstrap, f"j4-static-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    create_topic(bs, topic, PARTITIONS)
    with loaded_group(bs, topic) as (ledger, load, members):
        def start(instance: int) -> JavaMember:
            return JavaMember(java4_member, bs, group, topic, ledger, "consumer",
                              (f"group.instance.id={group}-{instance}",))
        for i in range(3):
            members.append(start(i))
            settle(members, f"static member {i} joining")
        held = set(members[1].assigned)
        before = {m.index: m.partial_revocations + m.full_revocations for m in members}
        members[1].close()
        members[1] = start(1)
        settle(members, "static member 1 restarting")
        assert members[1].assigned == held
        assert all(m.partial_revocations + m.full_revocations == before[m.index] for m in (members[0], members[2]))
        finish(bs, group, topic, members, load, ledger)


def test_rolling_downgrade_to_classic_java_391_members(java4_broker, java4_member):
    """Three 4.x consumer-protocol members replaced one at a time by classic 3.9.1 ones (policy bidirectional):
    when the last 4.x member leaves, the group is classic again. A classic member behind the group epoch may be
    refused its revoke-callback commit (ILLEGAL_GENERATION, as in Kafka): only those records come again."""
    bs, topic = java4_broker.bootstrap, f"j4-downgrade-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    classic = compile_java("CoopMember")
    create_topic(bs, topic, PARTITIONS)
    with loaded_group(bs, topic, stale_generation_ok=True) as (ledger, load, members):
        members += [JavaMember(java4_member, bs, group, topic, ledger, "consumer") for _ in range(3)]
        poll_until(members, lambda: shared(members, PARTITIONS) and all(m.consumed for m in members),
                   what="a group of 4.x consumer-protocol members")
        for step, kind in enumerate(("CONSUMER", "CONSUMER", "CLASSIC")):
            roll(members, step, lambda: JavaMember(classic, bs, group, topic, ledger, "classic"))
            assert group_type(bs, group) == kind, step
        finish(bs, group, topic, members, load, ledger)


@pytest.mark.parametrize("how", ["restart", "kill"])
def test_members_keep_their_partitions_across_a_broker_restart(tmp_path, java4_member, how):
    """Three members consume under load; the broker restarts (SIGTERM, or SIGKILL) and loads the group back
    from __consumer_offsets: the members go on heartbeating with their epochs, keep what they hold, lose
    nothing and commit on."""
    factory = BrokerFactory(tmp_path)
    broker = factory(overrides=OVERRIDES)
    bs, topic = broker.bootstrap, f"j4-{how}-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    create_topic(bs, topic, PARTITIONS)
    ledger = Ledger(PARTITIONS)
    load = Load(bs, topic, PARTITIONS)
    members: list[JavaMember] = []
    try:
        for i in range(3):
            members.append(JavaMember(java4_member, bs, group, topic, ledger, "consumer"))
            settle(members, f"member {i} joining")
        held = [set(m.assigned) for m in members]
        changes = ledger.changes
        if how == "kill":
            broker.kill()
            broker.start()
        else:
            broker.restart()
        ledger.note(f"broker {how}")
        settle(members, f"the broker's {how}")
        assert [m.assigned for m in members] == held and ledger.changes == changes, "\n".join(ledger.history[-20:])
        finish(bs, group, topic, members, load, ledger)
    finally:
        load.halt()
        for m in members:
            m.close()
        factory.close()


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_group_coordinator_lost_in_a_cluster(tmp_path, java4_member, how):
    """Three klamm nodes (a Raft quorum), __consumer_offsets replicated three times; three 4.x consumer-protocol
    members consume under load; the node coordinating the group is killed (or stopped). The new coordinator
    reloads the group as it was: same group epoch, member epochs and assignments, no rebalance; a member
    replaced afterwards hands its partitions over through it; each record consumed once."""
    cluster = ClusterProcess(tmp_path, CONFIG, quorum=True).start()
    members: list[JavaMember] = []
    load = None
    try:
        bs, topic = cluster.bootstrap, f"j4-failover-{uuid.uuid4().hex[:8]}"
        create_topic(bs, topic, PARTITIONS)
        ledger = Ledger(PARTITIONS)
        load = Load(bs, topic, PARTITIONS)
        for i in range(3):
            members.append(JavaMember(java4_member, bs, GROUP, topic, ledger, "consumer"))
            settle(members, f"member {i} joining")
        victim = cluster.nodes[coordinator(cluster.nodes[0]) - 1]
        poll_until(members, lambda: settled(victim), what="the group to settle")
        before, changes = consumer_group(victim), ledger.changes
        victim.kill() if how == "kill" else victim.stop()
        survivor = next(n for n in cluster.nodes if n is not victim)

        def moved() -> bool:
            node_id = coordinator(survivor)
            return node_id is not None and cluster.nodes[node_id - 1] is not victim
        poll_until(members, moved, what="a new coordinator")
        now = cluster.nodes[coordinator(survivor) - 1]
        settle(members, f"the coordinator's {how}")
        assert ledger.changes == changes, "a rebalance after the coordinator moved:\n" + "\n".join(ledger.history[-20:])
        assert consumer_group(now) == before
        members[0].close()
        members[0] = JavaMember(java4_member, bs, GROUP, topic, ledger, "consumer")
        settle(members, "member 0 replaced")
        finish(bs, GROUP, topic, members, load, ledger)
    finally:
        if load is not None:
            load.halt()
        for m in members:
            m.close()
        cluster.kill()


class PausingMember(JavaMember):
    """A member that can stop polling: past max.poll.interval.ms its client leaves the group (epoch -1) at once,
    but runs its onPartitionsLost only when it polls again. For the ledger, it gave its partitions up when it left:
    the pause's start plus max.poll.interval.ms."""

    def __init__(self, max_poll_ms: int, *args, **kwargs) -> None:
        self.max_poll_ms = max_poll_ms
        self.left_at: float | None = None
        super().__init__(*args, extra=(f"max.poll.interval.ms={max_poll_ms}",), **kwargs)

    def pause(self, ms: int) -> None:
        self.left_at = time.time() + self.max_poll_ms / 1000
        self.proc.stdin.write(f"pause {ms}\n")
        self.proc.stdin.flush()

    def _apply(self, event: dict) -> None:
        if event["ev"] == "lost" and self.left_at is not None:
            event["t"] = int(self.left_at * 1e6)
            self.left_at = None
        super()._apply(event)


def test_member_past_max_poll_interval_leaves_and_rejoins(java4_broker, java4_member):
    """A member stops polling past max.poll.interval.ms: its client leaves the group, the others take its
    partitions; when it polls again it loses them (onPartitionsLost), rejoins with epoch 0 and gets its share
    back from them. Only what it consumed since its last commit is consumed again."""
    bs, topic = java4_broker.bootstrap, f"j4-poll-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    create_topic(bs, topic, PARTITIONS)
    with loaded_group(bs, topic, stale_generation_ok=True) as (ledger, load, members):
        members.append(JavaMember(java4_member, bs, group, topic, ledger, "consumer"))
        settle(members, "member 0 joining")
        members.append(PausingMember(4000, java4_member, bs, group, topic, ledger, "consumer"))
        settle(members, "member 1 joining")
        members.append(JavaMember(java4_member, bs, group, topic, ledger, "consumer"))
        settle(members, "member 2 joining")
        paused, others = members[1], [members[0], members[2]]
        paused.pause(8000)
        poll_until(others, lambda: shared(others, PARTITIONS), what="the others to take the paused member's share")
        assert paused.assigned, "the paused member has not polled: it still believes it holds its partitions"
        settle(members, "the paused member polling again")
        finish(bs, group, topic, members, load, ledger)


def test_exactly_once_jobs_in_a_consumer_protocol_group(tmp_path, java4_broker):
    """Exactly-once consume-transform-produce jobs (java/TxnClient.java `job`, read_committed, offsets sent to
    each transaction with the consumer's group metadata: the member id and epoch) in a consumer-protocol group
    on 4.x, fed by an idempotent producer: a third job joins, the first stops (the group rebalances each time,
    a member's transactional offset commits checked against its epoch: one sent with the epoch it just left is
    refused with ILLEGAL_GENERATION, as Kafka's OffsetMetadataManager maps STALE_MEMBER_EPOCH for transactions,
    and the job aborts and rewinds). Afterwards output holds every acknowledged input exactly once."""
    from .test_cluster_rolling import TransformJob, progress

    classpath = compile_java4("TxnClient")
    bs, suffix = java4_broker.bootstrap, uuid.uuid4().hex[:8]
    source, sink, group = f"in-{suffix}", f"out-{suffix}", f"etl-{suffix}"
    for name in (source, sink):
        create_topic(bs, name, 3)

    def start(i: int) -> TransformJob:
        stop = tmp_path / f"stop-{i}"
        return TransformJob(["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m", "-cp", classpath,
                             "TxnClient", "job", bs, f"etl-{suffix}-{i}", source, sink, group, str(stop),
                             "consumer"], stop)

    def advance(by: int, what: str) -> None:
        """Until every running job has committed `by` more records: each holds partitions."""
        before = {id(j): j.committed for j in jobs}
        wait_for(lambda: all(j.committed > before[id(j)] + by for j in jobs if not j.stop_file.exists()),
                 timeout=60, what=f"every job going on after {what} ({progress(jobs)})")
        assert not [j.failure() for j in jobs if j.failure()], [j.failure() for j in jobs]

    jobs = [start(1), start(2)]
    try:
        with SequenceStream(bs, source, partition=None) as feeder:
            advance(100, "starting")
            jobs.append(start(3))
            advance(100, "a third job joining")
            jobs[0].stop()
            advance(100, "the first job stopping")
        assert not feeder.failed, feeder.failed[:3]
        acked = set(feeder.acked)
        consumer = Consumer({"bootstrap.servers": bs, "group.id": group})
        try:
            def through() -> bool:
                tps = consumer.committed([TopicPartition(source, p) for p in range(3)], 10)
                return sum(max(tp.offset, 0) for tp in tps) >= len(acked)
            wait_for(through, timeout=60, what=f"the jobs through all {len(acked)} records ({progress(jobs)})")
        finally:
            consumer.close()
    finally:
        for job in jobs:
            job.stop()
    assert not [j.failure() for j in jobs if j.failure()], [j.failure() for j in jobs]
    seen = [int(v.removesuffix(b"-out")) for v in read_committed(bs, sink, 3)]
    assert len(seen) == len(set(seen)), "a record was written twice"
    assert set(seen) == acked, "output is input, exactly once"
    print(f"\n{len(acked)} records, {progress(jobs)}")
    for job in jobs:  # why a job aborted or restarted, if it did
        print("".join(line for line in job.stderr if line.startswith(("aborting", "restarting")))[-1500:])


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every committed record of `topic`, read_committed, to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"verify-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
                for p in range(partitions)]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = consumer.position([TopicPartition(topic, p) for p in range(partitions)])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                return values
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                values.append(message.value())
    finally:
        consumer.close()
    raise AssertionError(f"{topic} not read to its end")


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_with_different_subscriptions(java4_broker, java4_member, assignor):
    """Heterogeneous subscriptions: member 0 subscribes to topic a, member 1 to a pattern matching a and b,
    member 2 to b. Each gets partitions of its own topics only, together all of both; member 1 leaves and
    members 0 and 2 take all of a and of b. Each record consumed once."""
    bs, prefix = java4_broker.bootstrap, f"het{uuid.uuid4().hex[:8]}"
    topics, per_topic = [f"{prefix}-a", f"{prefix}-b"], 3
    group = f"g-{prefix}"
    for t in topics:
        create_topic(bs, t, per_topic)
    ledger = Ledger(2 * per_topic)
    loads = [Load(bs, t, per_topic) for t in topics]
    first, second = set(range(per_topic)), set(range(per_topic, 2 * per_topic))
    members: list[RegexMember] = []
    try:
        for subscription in (topics[0], f"re:{prefix}-.*", topics[1]):
            members.append(RegexMember(topics, per_topic, java4_member, bs, group, subscription, ledger, "consumer",
                                       (f"group.remote.assignor={assignor}",)))

        def covered(live: list[RegexMember]) -> bool:
            return set().union(*(m.assigned for m in live)) == first | second \
                and sum(len(m.assigned) for m in live) == 2 * per_topic
        poll_until(members, lambda: covered(members) and all(m.assigned for m in members),
                   what="three members with different subscriptions to cover both topics")
        assert members[0].assigned <= first and members[2].assigned <= second, \
            [sorted(m.assigned) for m in members]
        # (not necessarily two each with uniform: as Kafka's UniformHeterogeneousAssignmentBuilder, it balances
        # topic by topic among the topic's subscribers, so 3/2/1 after joins in this order is balanced enough)
        members[1].close()
        live = [members[0], members[2]]
        poll_until(live, lambda: members[0].assigned == first and members[2].assigned == second,
                   what="the members of a and of b to take the leaving member's partitions")
        produced = [n for load in loads for n in load.stop()]
        poll_until(live, all_consumed(ledger, produced), what="every record to be consumed")
        for m in live:
            m.close()
        ledger.check(produced)
        assert [o for t in topics for o in committed(bs, group, t, per_topic)] == produced
    finally:
        for load in loads:
            load.halt()
        for m in members:
            m.close()
