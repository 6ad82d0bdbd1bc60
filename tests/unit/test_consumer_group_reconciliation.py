"""Consumer-protocol groups (KIP-848) as a state machine: heartbeats in, records out, replay.

The helpers play clients: each heartbeat's records are replayed into the group
(as the broker's runtime does after appending them), and a client owns what
the last assignment it took gave it.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from klamm.coordinator.assignors import ASSIGNORS, MemberSpec, range_, uniform
from klamm.coordinator.consumer_group import ConsumerGroup, GroupState, MemberState, TopicMetadata
from klamm.coordinator.consumer_heartbeat import GroupSettings, HeartbeatRequest, fence, heartbeat, leave, validate
from klamm.protocol.errors import ErrorCode, KafkaError

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
SETTINGS = GroupSettings(ASSIGNORS)


def topics(**partitions: int) -> dict[str, TopicMetadata]:
    return {name: TopicMetadata(uuid.UUID(int=index + 1), name, count)
            for index, (name, count) in enumerate(sorted(partitions.items()))}


class Sim:
    def __init__(self, **partitions: int) -> None:
        self.group = ConsumerGroup("g", 0)
        self.topics = topics(**partitions)

    def beat(self, member_id: str, epoch: int, owned: dict[uuid.UUID, frozenset[int]] | None = None,
             **fields: Any) -> dict[str, Any]:
        if epoch == 0:
            fields.setdefault("rebalance_timeout_ms", 30_000)
            fields.setdefault("topic_names", tuple(self.topics))
            owned = {} if owned is None else owned
        req = HeartbeatRequest("g", member_id, epoch, owned=owned, **fields)
        validate(req, SETTINGS)
        run = leave if epoch < 0 else heartbeat
        out = run(self.group, req, self.topics, SETTINGS) if epoch >= 0 else run(self.group, req, self.topics)
        for record in out.records:
            self.group.replay(record)
        return out.response


def assigned(response: dict[str, Any]) -> dict[uuid.UUID, frozenset[int]]:
    return {tp["topic_id"]: frozenset(tp["partitions"]) for tp in response["assignment"]["topic_partitions"]}


def test_first_member_gets_everything_at_epoch_one() -> None:
    sim = Sim(a=3)
    response = sim.beat("m1", 0)
    assert response["member_epoch"] == 1
    assert assigned(response) == {T1: frozenset({0, 1, 2})}
    assert sim.group.state is GroupState.STABLE


def test_partitions_move_only_after_the_previous_owner_revoked_them() -> None:
    sim = Sim(a=4)
    sim.beat("m1", 0)
    joined = sim.beat("m2", 0)
    assert joined["member_epoch"] == 2 and assigned(joined) == {}  # the partitions are m1's still
    assert sim.group.members["m2"].current.state is MemberState.UNRELEASED_PARTITIONS
    # m1 still owns all four: it is asked to revoke two and stays in epoch 1
    still = sim.beat("m1", 1, {T1: frozenset(range(4))})
    assert still["member_epoch"] == 1 and assigned(still) == {T1: frozenset({0, 1})}
    assert sim.group.members["m1"].current.state is MemberState.UNREVOKED_PARTITIONS
    assert sim.beat("m2", 2, {})["assignment"] is None  # nothing released yet
    revoked = sim.beat("m1", 1, {T1: frozenset({0, 1})})
    assert revoked["member_epoch"] == 2
    got = sim.beat("m2", 2, {})
    assert assigned(got) == {T1: frozenset({2, 3})}
    assert sim.group.state is GroupState.STABLE


def test_epochs_fence_a_member_that_is_ahead_or_behind() -> None:
    sim = Sim(a=2)
    sim.beat("m1", 0)
    with pytest.raises(KafkaError) as ahead:
        sim.beat("m1", 5, {})
    assert ahead.value.code == ErrorCode.fenced_member_epoch
    sim.beat("m2", 0)
    sim.beat("m1", 1, {T1: frozenset({0})})  # revoked 1: epoch 2, previous 1
    # the epoch-2 response was lost: epoch 1 with a subset of the assignment is still taken
    assert sim.beat("m1", 1, {T1: frozenset({0})})["member_epoch"] == 2
    with pytest.raises(KafkaError) as behind:
        sim.beat("m1", 1, {T1: frozenset({0, 1})})
    assert behind.value.code == ErrorCode.fenced_member_epoch
    with pytest.raises(KafkaError) as unknown:
        sim.beat("nobody", 3, {})
    assert unknown.value.code == ErrorCode.unknown_member_id


def test_leaving_member_frees_its_partitions_and_bumps_the_epoch() -> None:
    sim = Sim(a=2)
    sim.beat("m1", 0)
    sim.beat("m2", 0)
    sim.beat("m1", 1, {T1: frozenset({0})})
    sim.beat("m2", 2, {})
    epoch = sim.group.group_epoch
    assert sim.beat("m2", -1)["member_epoch"] == -1
    assert "m2" not in sim.group.members and sim.group.group_epoch == epoch + 1
    assert assigned(sim.beat("m1", 2, {T1: frozenset({0})})) == {T1: frozenset({0, 1})}


def test_static_member_pauses_with_minus_two_and_its_next_incarnation_keeps_the_partitions() -> None:
    sim = Sim(a=2)
    sim.beat("m1", 0, instance_id="i1")
    sim.beat("m2", 0)
    sim.beat("m1", 1, {T1: frozenset({0})})
    sim.beat("m2", 2, {})
    epoch = sim.group.group_epoch
    assert sim.beat("m1", -2, instance_id="i1")["member_epoch"] == -2
    with pytest.raises(KafkaError) as taken:  # the instance id is not released by a member still in the group
        sim.beat("m3", 0, instance_id="i2")
        sim.beat("m4", 0, instance_id="i2")
    assert taken.value.code == ErrorCode.unreleased_instance_id
    back = sim.beat("m1b", 0, instance_id="i1")
    assert assigned(back) == {T1: frozenset({0})} and back["member_epoch"] == sim.group.group_epoch
    assert "m1" not in sim.group.members and sim.group.static_members["i1"] == "m1b"
    assert sim.group.group_epoch >= epoch


def test_fencing_a_crashed_member_lets_the_others_take_its_partitions() -> None:
    sim = Sim(a=2)
    sim.beat("m1", 0)
    sim.beat("m2", 0)
    sim.beat("m1", 1, {T1: frozenset({0})})
    sim.beat("m2", 2, {})
    for record in fence(sim.group, "m2", sim.topics):
        sim.group.replay(record)
    assert assigned(sim.beat("m1", 2, {T1: frozenset({0})})) == {T1: frozenset({0, 1})}


def test_regex_subscription_sees_a_new_topic_on_the_next_heartbeat() -> None:
    sim = Sim(orders=1, other=1)
    first = sim.beat("m1", 0, topic_names=(), topic_regex="(^ord.*)")
    assert assigned(first) == {sim.topics["orders"].topic_id: frozenset({0})}
    sim.topics["orders2"] = TopicMetadata(uuid.UUID(int=9), "orders2", 2)
    grown = sim.beat("m1", 1, {sim.topics["orders"].topic_id: frozenset({0})})
    assert assigned(grown)[uuid.UUID(int=9)] == frozenset({0, 1})


def test_invalid_requests() -> None:
    def code(**fields: Any) -> ErrorCode:
        base = {"group_id": "g", "member_id": "m", "member_epoch": 0, "rebalance_timeout_ms": 1, "owned": {},
                "topic_names": ("a",)}
        with pytest.raises(KafkaError) as exc:
            validate(HeartbeatRequest(**{**base, **fields}), SETTINGS)
        return exc.value.code

    assert code(rebalance_timeout_ms=-1) == ErrorCode.invalid_request
    assert code(owned={T1: frozenset({0})}) == ErrorCode.invalid_request
    assert code(topic_names=None) == ErrorCode.invalid_request
    assert code(member_id="") == ErrorCode.invalid_request
    assert code(member_epoch=-2) == ErrorCode.invalid_request
    assert code(server_assignor="sticky") == ErrorCode.unsupported_assignor
    assert code(topic_regex="(") == ErrorCode.invalid_regular_expression


def test_uniform_is_balanced_and_sticky() -> None:
    members = {f"m{i}": MemberSpec(frozenset({T1, T2})) for i in range(3)}
    first = uniform(members, {T1: 5, T2: 5}, {})
    counts = sorted(sum(len(p) for p in a.values()) for a in first.values())
    assert counts == [3, 3, 4]
    members["m3"] = MemberSpec(frozenset({T1, T2}))
    second = uniform(members, {T1: 5, T2: 5}, first)
    assert sorted(sum(len(p) for p in a.values()) for a in second.values()) == [2, 2, 3, 3]
    kept = sum(len(second[m].get(t, frozenset()) & first[m].get(t, frozenset())) for m in first for t in (T1, T2))
    assert kept == 8  # only the two partitions the new member needs moved


def test_range_co_partitions() -> None:
    members = {m: MemberSpec(frozenset({T1, T2})) for m in ("b", "a")}
    result = range_(members, {T1: 3, T2: 3}, {})
    assert result["a"] == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert result["b"] == {T1: frozenset({2}), T2: frozenset({2})}
