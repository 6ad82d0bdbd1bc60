"""Consumer-protocol groups inside the GroupCoordinator: records in Kafka's bytes, timers, offsets, reloading.

The harness plays the broker's runtime as test_group_coordinator's does: each
Result's records go to an in-memory log and replay; a new coordinator replaying
that log is a restart.
"""

from __future__ import annotations

import uuid
from typing import Any

from klamm.config.broker import BrokerConfig
from klamm.coordinator.consumer_coordinator import ConsumerGroupConfig
from klamm.coordinator.consumer_group import GroupState, TopicMetadata
from klamm.coordinator.consumer_heartbeat import HeartbeatRequest
from klamm.coordinator.consumer_records import decode, encode
from klamm.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, JoinRequest, OffsetToCommit, Result
from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.runtime import coordinator_config
from klamm.coordinator.timer import Timer
from klamm.protocol.errors import ErrorCode

PARTITIONS = 2
SESSION = 45_000
TOPICS = {"t": TopicMetadata(uuid.UUID(int=7), "t", 4)}
T = TOPICS["t"].topic_id


class Clock:
    now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Harness:
    def __init__(self) -> None:
        self.clock = Clock()
        self.log: list[CoordinatorRecord] = []
        self.coordinator = self.load()

    def load(self) -> GroupCoordinator:
        """A coordinator that replays the log so far (a restart)."""
        config = CoordinatorConfig(num_partitions=PARTITIONS, initial_rebalance_delay_ms=0,
                                   consumer=ConsumerGroupConfig(session_timeout_ms=SESSION))
        coordinator = GroupCoordinator(config, Timer(self.clock))
        coordinator.consumer.topics = lambda: TOPICS
        for p in range(PARTITIONS):
            coordinator.begin_loading(p)
        for record in self.log:
            coordinator.replay(record)
        for p in range(PARTITIONS):
            coordinator.finish_loading(p)
        return coordinator

    def apply(self, result: Result) -> Any:
        self.log += result.records
        for record in result.records:
            self.coordinator.replay(record)
        for action in result.after_write:
            action(ErrorCode.none)
        return result.response

    def beat(self, member_id: str, epoch: int, owned: set[int] | None = None, **fields: Any) -> dict[str, Any]:
        if epoch == 0:
            fields = {"rebalance_timeout_ms": 30_000, "topic_names": ("t",), **fields}
            owned = set()
        reported = None if owned is None else {T: frozenset(owned)} if owned else {}
        req = HeartbeatRequest("g", member_id, epoch, owned=reported, client_id="c", client_host="/127.0.0.1",
                               **fields)
        return self.apply(self.coordinator.consumer.heartbeat(req))

    def advance(self, ms: int) -> None:
        self.clock.now += ms
        for result in self.coordinator.poll_timers():
            self.apply(result)


def partitions(response: dict[str, Any]) -> set[int]:
    return {p for tp in response["assignment"]["topic_partitions"] for p in tp["partitions"]}


def two_members(h: Harness) -> None:
    h.beat("m1", 0)
    h.beat("m2", 0)
    h.beat("m1", 1, {0, 1, 2, 3})
    h.beat("m1", 1, {0, 1})
    h.beat("m2", 2, set())


def test_records_are_kafkas_and_round_trip() -> None:
    h = Harness()
    h.beat("m1", 0)
    versions = [int.from_bytes(r.key[:2], "big") for r in h.log]
    assert versions == [5, 4, 3, 7, 6, 8]  # member, partition metadata, epoch, target member, target epoch, current
    for record in h.log:
        assert encode(record.partition, decode(record)) == record


def test_session_expiry_fences_a_silent_member() -> None:
    h = Harness()
    two_members(h)
    epoch = 2
    for _ in range(3):  # m1 heartbeats within its session, m2 does not
        h.advance(SESSION // 2)
        response = h.beat("m1", epoch, {0, 1})
        epoch = response["member_epoch"]
    group = h.coordinator.consumer.groups["g"]
    assert list(group.members) == ["m1"] and epoch == 3
    assert group.members["m1"].current.assigned == {T: frozenset({0, 1, 2, 3})}


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    h = Harness()
    h.beat("m1", 0)
    h.beat("m2", 0)
    h.beat("m1", 1, {0, 1, 2, 3})  # asked to revoke 2 and 3: its rebalance timeout starts
    h.advance(20_000)
    h.beat("m2", 2, set())
    h.advance(15_000)
    assert "m1" not in h.coordinator.consumer.groups["g"].members
    assert partitions(h.beat("m2", 2, set())) == {0, 1, 2, 3}


def test_offset_commit_and_fetch_use_the_member_epoch() -> None:
    h = Harness()
    two_members(h)
    commit = h.coordinator.commit_offsets
    ok = h.apply(commit("g", 2, "m1", None, [OffsetToCommit("t", 0, 42, -1, "")]))
    assert ok == {("t", 0): ErrorCode.none}
    assert h.apply(commit("g", 3, "m1", None, [OffsetToCommit("t", 0, 43, -1, "")])) == \
        {("t", 0): ErrorCode.stale_member_epoch}  # newer than the member's epoch
    assert h.apply(commit("g", 2, "nobody", None, [OffsetToCommit("t", 0, 43, -1, "")])) == \
        {("t", 0): ErrorCode.unknown_member_id}
    # a consumer-protocol member commits with OffsetCommit v9 or newer (Kafka's validateOffsetCommit)
    assert h.apply(commit("g", 2, "m1", None, [OffsetToCommit("t", 0, 43, -1, "")], -1, 8)) == \
        {("t", 0): ErrorCode.unsupported_version}
    assert h.coordinator.fetch_offsets("g", [("t", 0)], "m1", 2)[("t", 0)].offset == 42
    assert h.coordinator.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 42  # the admin client


def test_an_older_epoch_commits_partitions_assigned_in_it_or_before() -> None:
    """KIP-1251: m1 was given 0-3 at epoch 1 and kept 0 and 1 at epoch 2; m2 was given 2 and 3 at epoch 2. A commit
    with an epoch the member left is taken for partitions it was given by then, so one sent before the answer that
    moved it on reached it is not refused; nothing else is, and a restart keeps the epochs."""
    h = Harness()
    two_members(h)
    commit = h.coordinator.commit_offsets

    def at(member: str, epoch: int, *parts: int) -> set[ErrorCode]:
        offsets = [OffsetToCommit("t", p, 9, -1, "") for p in parts]
        return set(h.apply(commit("g", epoch, member, None, offsets)).values())

    assert at("m1", 1, 0, 1) == {ErrorCode.none}
    assert at("m1", 1, 0, 2) == {ErrorCode.stale_member_epoch}  # 2 went to m2: the whole commit is refused
    assert at("m2", 2, 2, 3) == {ErrorCode.none}
    assert at("m2", 1, 2) == {ErrorCode.stale_member_epoch}  # given at epoch 2
    # a transactional commit is checked alike, refused as ILLEGAL_GENERATION
    txn = h.apply(h.coordinator.commit_txn_offsets("g", 1, 0, 1, "m1", None, [OffsetToCommit("t", 2, 9, -1, "")]))
    assert txn == {("t", 2): ErrorCode.illegal_generation}
    h.coordinator = h.load()
    assert at("m1", 1, 0, 1) == {ErrorCode.none}
    assert at("m2", 1, 3) == {ErrorCode.stale_member_epoch}


def test_a_restart_brings_back_epochs_assignments_and_offsets() -> None:
    h = Harness()
    two_members(h)
    h.apply(h.coordinator.commit_offsets("g", 2, "m1", None, [OffsetToCommit("t", 1, 7, -1, "")]))
    before = h.coordinator.consumer.groups["g"]
    h.coordinator = h.load()
    after = h.coordinator.consumer.groups["g"]
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert after.members == before.members and after.targets == before.targets and after.owners == before.owners
    assert after.offsets == before.offsets and after.state is GroupState.STABLE
    # the members carry on in their epochs, without a rebalance
    assert h.beat("m1", 2, {0, 1})["member_epoch"] == 2
    assert h.coordinator.consumer.groups["g"].group_epoch == before.group_epoch
    # and the loaded members' sessions run: one that never comes back is fenced
    h.advance(SESSION + 1)
    assert "m1" not in h.coordinator.consumer.groups["g"].members


def test_an_empty_classic_group_becomes_a_consumer_group_with_its_offsets() -> None:
    h = Harness()
    h.apply(h.coordinator.commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, 5, -1, "")]))
    assert "g" in h.coordinator.groups
    h.beat("m1", 0)
    assert "g" not in h.coordinator.groups
    assert h.coordinator.fetch_offsets("g", None)[("t", 0)].offset == 5
    h.coordinator = h.load()
    assert "g" not in h.coordinator.groups and h.coordinator.fetch_offsets("g", None)[("t", 0)].offset == 5


def test_classic_join_of_another_protocol_type_to_a_live_consumer_group_is_refused() -> None:
    h = Harness()
    h.beat("m1", 0)
    replies: list[dict[str, Any]] = []
    request = JoinRequest("g", "", None, "c", "/h", 10_000, 10_000, "connect", [("range", b"")], False)
    h.apply(h.coordinator.join_group(request, replies.append))
    assert replies[0]["error_code"] == ErrorCode.inconsistent_group_protocol


def test_list_describe_and_delete() -> None:
    h = Harness()
    two_members(h)
    _, listed = h.coordinator.list_groups(types=["consumer"])
    assert listed == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable",
                       "group_type": "consumer"}]
    assert h.coordinator.list_groups(types=["classic"])[1] == []
    described = h.coordinator.consumer.describe("g")
    assert described["group_epoch"] == 2 and described["assignor_name"] == "uniform"
    assert {m["member_id"]: m["member_epoch"] for m in described["members"]} == {"m1": 2, "m2": 2}
    assert h.apply(h.coordinator.delete_groups(["g"])) == {"g": ErrorCode.non_empty_group}
    h.beat("m1", -1)
    h.beat("m2", -1)
    assert h.apply(h.coordinator.delete_groups(["g"])) == {"g": ErrorCode.none}
    assert "g" not in h.coordinator.consumer.groups
    h.coordinator = h.load()
    assert "g" not in h.coordinator.consumer.groups and "g" not in h.coordinator.groups


def test_consumer_config_follows_broker_config() -> None:
    config = BrokerConfig.from_properties({
        "group.consumer.session.timeout.ms": "12000", "group.consumer.heartbeat.interval.ms": "700",
        "group.consumer.min.session.timeout.ms": "12000", "group.consumer.min.heartbeat.interval.ms": "700",
        "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor,uniform",
        "group.consumer.max.size": "3"})
    assert coordinator_config(config, 1).consumer == ConsumerGroupConfig(12000, 700, ("range", "uniform"), 3)
    h = Harness()
    coordinator = GroupCoordinator(coordinator_config(config, PARTITIONS), Timer(h.clock))
    coordinator.consumer.topics = lambda: TOPICS
    for p in range(PARTITIONS):
        coordinator.begin_loading(p)
        coordinator.finish_loading(p)
    h.coordinator = coordinator
    first = h.beat("m1", 0)
    assert first["heartbeat_interval"] == 700
    assert h.coordinator.consumer.describe("g")["assignor_name"] == "range"
    h.beat("m2", 0)
    h.beat("m3", 0)
    assert h.beat("m4", 0)["error_code"] == ErrorCode.group_max_size_reached
    h.advance(12_001)
    assert not h.coordinator.consumer.groups["g"].members
