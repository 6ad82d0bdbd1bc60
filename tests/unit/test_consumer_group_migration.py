"""Online migration in the coordinator: a classic group upgraded to a consumer group and back.

Two classic consumers (eager, protocol "range") share topic t; a consumer-protocol
member's first heartbeat converts the group, the classic members go on with
JoinGroup/SyncGroup/Heartbeat against it and get their partitions from the
consumer group's target assignment; when the consumer-protocol member leaves,
the group is classic again and rebalances. Offsets survive both, and each state
comes back after a restart (a replay of the log).
"""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

import pytest

from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from klamm.coordinator.consumer_coordinator import ConsumerGroupConfig
from klamm.coordinator.consumer_group import LEAVE_GROUP_MEMBER_EPOCH
from klamm.coordinator.coordinator import GroupCoordinator, JoinRequest, OffsetToCommit, SyncRequest
from klamm.coordinator.group import GroupState as ClassicState
from klamm.coordinator.migration import MigrationPolicy
from klamm.coordinator.runtime import coordinator_config
from klamm.coordinator.timer import Timer
from klamm.protocol.errors import ErrorCode
from klamm.protocol.schema import packaged_spec

from tests.unit.test_consumer_group_coordinator import PARTITIONS, TOPICS, Harness, T, partitions

SUBSCRIPTION = packaged_spec("clients", "ConsumerProtocolSubscription")
ASSIGNMENT = packaged_spec("clients", "ConsumerProtocolAssignment")


def subscription(owned: list[int] | None = None) -> bytes:
    value = {"topics": ["t"], "user_data": None,
             "owned_partitions": [{"topic": "t", "partitions": owned}] if owned else []}
    return struct.pack(">h", 1) + SUBSCRIPTION.encode(value, 1)


def assignment(partitions: list[int]) -> bytes:
    return struct.pack(">h", 1) + ASSIGNMENT.encode(
        {"assigned_partitions": [{"topic": "t", "partitions": partitions}], "user_data": None}, 1)


def assigned(data: bytes) -> set[int]:
    (version,) = struct.unpack_from(">h", data)
    value = ASSIGNMENT.decode(data[2:], version)
    return {p for entry in value["assigned_partitions"] for p in entry["partitions"]}


class Classic:
    """A classic consumer driving the coordinator directly."""

    def __init__(self, h: Harness, client: str) -> None:
        self.h, self.client = h, client
        self.member_id = ""
        self.generation = -1

    def join(self, owned: list[int] | None = None) -> list[dict[str, Any]]:
        """Send JoinGroup; the replies it got so far (a classic group may park it)."""
        replies: list[dict[str, Any]] = []
        req = JoinRequest("g", self.member_id, None, self.client, "/127.0.0.1", 10_000, 20_000, "consumer",
                          [("range", subscription(owned))], False)
        self.h.apply(self.h.coordinator.join_group(req, replies.append))
        self.replies = replies
        return replies

    def joined(self) -> dict[str, Any]:
        assert len(self.replies) == 1, self.replies
        reply = self.replies[0]
        assert reply["error_code"] == ErrorCode.none, reply
        self.member_id, self.generation = reply["member_id"], reply["generation_id"]
        return reply

    def sync(self, assignments: dict[str, bytes] | None = None) -> list[dict[str, Any]]:
        replies: list[dict[str, Any]] = []
        req = SyncRequest("g", self.member_id, None, self.generation, "consumer", "range", assignments or {})
        self.h.apply(self.h.coordinator.sync_group(req, replies.append))
        return replies

    def heartbeat(self) -> ErrorCode:
        return self.h.apply(self.h.coordinator.heartbeat("g", self.member_id, None, self.generation))


def classic_group_of_two(h: Harness) -> tuple[Classic, Classic]:
    """c1 and c2 Stable in generation 2: c1 owns 0-1, c2 owns 2-3."""
    c1, c2 = Classic(h, "c1"), Classic(h, "c2")
    c1.join()
    c1.joined()
    assert c1.sync({c1.member_id: assignment([0, 1, 2, 3])})[0]["error_code"] == ErrorCode.none
    assert c2.join() == []  # parked until c1 rejoins
    c1.join()
    c1.joined(), c2.joined()
    syncs = c1.sync({c1.member_id: assignment([0, 1]), c2.member_id: assignment([2, 3])}) + c2.sync()
    assert [assigned(s["assignment"]) for s in syncs] == [{0, 1}, {2, 3}]
    assert h.coordinator.groups["g"].generation == 2
    return c1, c2


def owners(h: Harness) -> dict[int, str]:
    group = h.coordinator.consumer.groups["g"]
    return {p: member_id for (topic, p), (member_id, _) in group.owners.items() if topic == T}


def test_upgrade_then_downgrade_keeps_offsets_and_moves_partitions_safely() -> None:
    h = Harness()
    c1, c2 = classic_group_of_two(h)
    h.apply(h.coordinator.commit_offsets("g", 2, c1.member_id, None, [OffsetToCommit("t", 0, 10, -1, "")]))

    # a consumer-protocol member joins: the group converts, the classic members keep their partitions
    first = h.beat("m1", 0)
    assert first["error_code"] == ErrorCode.none and first["member_epoch"] == 3
    assert "g" not in h.coordinator.groups
    group = h.coordinator.consumer.groups["g"]
    assert group.group_epoch == 3 and set(group.members) == {c1.member_id, c2.member_id, "m1"}
    assert group.members[c1.member_id].uses_classic and not group.members["m1"].uses_classic
    assert owners(h) == {0: c1.member_id, 1: c1.member_id, 2: c2.member_id, 3: c2.member_id}
    types = {m["member_id"]: m["member_type"] for m in h.coordinator.consumer.describe("g")["members"]}
    assert types == {c1.member_id: 0, c2.member_id: 0, "m1": 1}  # ConsumerGroupDescribe v1: classic or consumer
    assert h.coordinator.fetch_offsets("g", None)[("t", 0)].offset == 10

    # the classic members are told to rejoin; eager consumers rejoin owning nothing
    assert c1.heartbeat() == ErrorCode.rebalance_in_progress
    assert c1.sync()[0]["error_code"] == ErrorCode.rebalance_in_progress
    for c in (c1, c2):
        c.join()
        assert c.joined()["generation_id"] == 3 and c.replies[0]["leader"] == ""
    syncs = {c.member_id: assigned(c.sync()[0]["assignment"]) for c in (c1, c2)}
    m1 = set()
    for _ in range(3):  # m1 gets what the classic members released
        reply = h.beat("m1", h.coordinator.consumer.groups["g"].members["m1"].member_epoch, m1)
        if reply["assignment"] is not None:
            m1 = {p for tp in reply["assignment"]["topic_partitions"] for p in tp["partitions"]}
    held = [syncs[c1.member_id], syncs[c2.member_id], m1]
    assert all(held) and sum(map(len, held)) == 4 and set().union(*held) == {0, 1, 2, 3}
    assert c1.heartbeat() == c2.heartbeat() == ErrorCode.none
    assert c1.sync()[0]["error_code"] == ErrorCode.none  # SyncGroup again: the same assignment

    # a restart brings the classic members back with their classic metadata
    h.coordinator = h.load()
    group = h.coordinator.consumer.groups["g"]
    assert group.members[c2.member_id].subscription.classic is not None
    assert group.members[c2.member_id].subscription.classic.session_timeout_ms == 10_000
    assert c2.heartbeat() == ErrorCode.none

    # the last consumer-protocol member leaves: classic again, rebalancing
    assert h.beat("m1", LEAVE_GROUP_MEMBER_EPOCH)["error_code"] == ErrorCode.none
    assert "g" not in h.coordinator.consumer.groups
    classic = h.coordinator.groups["g"]
    assert classic.state is ClassicState.PREPARING_REBALANCE and set(classic.members) == {c1.member_id, c2.member_id}
    assert h.coordinator.fetch_offsets("g", None)[("t", 0)].offset == 10
    assert c1.heartbeat() in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation)
    c1.join(), c2.join()
    c1.joined(), c2.joined()
    leader = c1 if h.coordinator.groups["g"].leader_id == c1.member_id else c2
    other = c2 if leader is c1 else c1
    syncs2 = leader.sync({leader.member_id: assignment([0, 1]), other.member_id: assignment([2, 3])}) + other.sync()
    assert [s["error_code"] for s in syncs2] == [ErrorCode.none, ErrorCode.none]
    assert h.coordinator.groups["g"].state is ClassicState.STABLE

    h.coordinator = h.load()
    assert "g" not in h.coordinator.consumer.groups
    assert set(h.coordinator.groups["g"].members) == {c1.member_id, c2.member_id}
    assert h.coordinator.fetch_offsets("g", None)[("t", 0)].offset == 10


def test_classic_leave_and_session_expiry_in_a_consumer_group() -> None:
    h = Harness()
    c1, c2 = classic_group_of_two(h)
    h.beat("m1", 0)
    epoch = h.coordinator.consumer.groups["g"].group_epoch
    left = h.apply(h.coordinator.leave_group("g", [(c1.member_id, None), ("nobody", None)]))
    assert left == (ErrorCode.none, [ErrorCode.none, ErrorCode.unknown_member_id])
    group = h.coordinator.consumer.groups["g"]
    assert c1.member_id not in group.members and group.group_epoch == epoch + 1
    h.advance(10_001)  # c2's own session timeout (10 s) passed without a heartbeat: fenced, m1 alone
    assert c2.member_id not in h.coordinator.consumer.groups["g"].members


def policy_harness(policy: MigrationPolicy) -> Harness:
    h = Harness()
    config = replace(h.coordinator.config, consumer=ConsumerGroupConfig(session_timeout_ms=45_000,
                                                                       migration_policy=policy))
    coordinator = GroupCoordinator(config, Timer(h.clock))
    coordinator.consumer.topics = lambda: TOPICS
    for p in range(PARTITIONS):
        coordinator.begin_loading(p)
        coordinator.finish_loading(p)
    h.coordinator = coordinator
    return h


def test_migration_policy_decides() -> None:
    h = policy_harness(MigrationPolicy.DISABLED)
    classic_group_of_two(h)
    refused = h.beat("m1", 0)
    assert refused["error_code"] == ErrorCode.group_id_not_found and "g" in h.coordinator.groups

    h = policy_harness(MigrationPolicy.UPGRADE)
    c1, _ = classic_group_of_two(h)
    assert h.beat("m1", 0)["error_code"] == ErrorCode.none
    h.beat("m1", LEAVE_GROUP_MEMBER_EPOCH)  # no downgrade: a consumer group of classic members stays
    assert "g" not in h.coordinator.groups and len(h.coordinator.consumer.groups["g"].members) == 2
    assert c1.heartbeat() == ErrorCode.rebalance_in_progress


def test_migration_policy_and_timeout_bounds_follow_broker_config() -> None:
    config = BrokerConfig.from_properties({"group.consumer.migration.policy": "Downgrade"})
    assert coordinator_config(config, 1).consumer.migration_policy is MigrationPolicy.DOWNGRADE
    assert coordinator_config(BrokerConfig.from_properties({}), 1).consumer.migration_policy \
        is MigrationPolicy.BIDIRECTIONAL
    with pytest.raises(ConfigError, match="String must be one of"):
        BrokerConfig.from_properties({"group.consumer.migration.policy": "sideways"})
    refused = {  # Kafka's GroupCoordinatorConfig rules, with its defaults 45/60 s and 5/15 s
        "group.consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms":
            {"group.consumer.session.timeout.ms": "6000"},
        "group.consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms":
            {"group.consumer.max.session.timeout.ms": "45000", "group.consumer.session.timeout.ms": "50000"},
        "group.consumer.max.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms":
            {"group.consumer.max.session.timeout.ms": "40000", "group.consumer.min.session.timeout.ms": "45000"},
        "group.consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms":
            {"group.consumer.heartbeat.interval.ms": "500"},
        "group.consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms":
            {"group.consumer.heartbeat.interval.ms": "20000"},
        "group.consumer.max.heartbeat.interval.ms must be greater than or equal to "
        "group.consumer.min.heartbeat.interval.ms": {"group.consumer.max.heartbeat.interval.ms": "4000"},
        "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms": {
            "group.consumer.min.session.timeout.ms": "1000", "group.consumer.session.timeout.ms": "5000"},
    }
    for message, props in refused.items():
        with pytest.raises(ConfigError, match=message):
            BrokerConfig.from_properties(props)
    lowered = BrokerConfig.from_properties({
        "group.consumer.min.session.timeout.ms": "6000", "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.max.heartbeat.interval.ms": "500", "group.consumer.max.session.timeout.ms": "6000"})
    assert coordinator_config(lowered, 1).consumer.session_timeout_ms == 6000


def test_a_classic_member_commits_in_its_member_epoch() -> None:
    h = Harness()
    c1, _ = classic_group_of_two(h)
    h.beat("m1", 0)
    epoch = h.coordinator.consumer.groups["g"].members[c1.member_id].member_epoch
    commit = OffsetToCommit("t", 0, 7, -1, "")
    assert h.apply(h.coordinator.commit_offsets("g", epoch, c1.member_id, None, [commit])) == \
        {("t", 0): ErrorCode.none}
    assert h.apply(h.coordinator.commit_offsets("g", epoch + 1, c1.member_id, None, [commit])) == \
        {("t", 0): ErrorCode.illegal_generation}  # not STALE_MEMBER_EPOCH: it speaks the classic protocol
    assert h.apply(h.coordinator.commit_offsets("g", 5, "m1", None, [commit])) == \
        {("t", 0): ErrorCode.stale_member_epoch}


def test_a_classic_member_that_does_not_rejoin_in_time_is_fenced() -> None:
    h = Harness()
    c1, c2 = classic_group_of_two(h)
    h.beat("m1", 0)
    assert c1.heartbeat() == ErrorCode.rebalance_in_progress  # its rebalance timeout (20 s) to rejoin starts
    h.advance(9_000)
    assert c2.heartbeat() == ErrorCode.rebalance_in_progress  # c2's own timer starts now
    assert c1.heartbeat() == ErrorCode.rebalance_in_progress  # its session (10 s) goes on, its timer does not
    h.advance(9_000)
    assert c1.heartbeat() == c2.heartbeat() == ErrorCode.rebalance_in_progress
    h.advance(2_001)
    members = h.coordinator.consumer.groups["g"].members
    assert c1.member_id not in members and c2.member_id in members


def test_a_classic_group_with_only_pending_members_gives_way_to_a_consumer_group() -> None:
    """Kafka drops an Empty classic group for a first consumer-protocol heartbeat even while classic members hold
    the ids of MEMBER_ID_REQUIRED (GROUP_ID_NOT_FOUND is fatal to librdkafka); their joins then reach the
    consumer group."""
    h = Harness()
    replies: list[dict[str, Any]] = []
    request = JoinRequest("g", "", None, "c", "/h", 10_000, 30_000, "consumer", [("range", subscription())], True)
    h.apply(h.coordinator.join_group(request, replies.append))
    assert replies[0]["error_code"] == ErrorCode.member_id_required
    assert h.coordinator.groups["g"].pending_members
    response = h.beat("m1", 0)
    assert response["error_code"] == ErrorCode.none and partitions(response) == {0, 1, 2, 3}
    assert "g" not in h.coordinator.groups
    pending_id = replies[0]["member_id"]
    h.apply(h.coordinator.join_group(
        JoinRequest("g", pending_id, None, "c", "/h", 10_000, 30_000, "consumer", [("range", subscription())], True),
        replies.append))
    assert set(h.coordinator.consumer.groups["g"].members) == {"m1", pending_id}
    h.advance(10_000 * 2)  # no pending-member timer of the dropped classic group fires into the consumer group
    assert "g" not in h.coordinator.groups
