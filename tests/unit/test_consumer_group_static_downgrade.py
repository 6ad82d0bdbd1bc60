"""A classic static member replacing the last consumer-protocol member, a static one with the same
group.instance.id, turns the group back into a classic group (Kafka's validateOnlineDowngradeWithReplacedMemberId
and convertToClassicGroup with a joining member): Stable, no rebalance, the joining member in the replaced
one's place with its target assignment."""

from __future__ import annotations

from typing import Any

from klamm.coordinator.coordinator import JoinRequest, SyncRequest
from klamm.coordinator.group import GroupState as ClassicState
from klamm.coordinator.migration import MigrationPolicy

from tests.unit.test_consumer_group_coordinator import T, Harness
from tests.unit.test_consumer_group_migration import Classic, assigned, classic_group_of_two, policy_harness, \
    subscription


def static_join(h: Harness, instance_id: str) -> dict[str, Any]:
    replies: list[dict[str, Any]] = []
    req = JoinRequest("g", "", instance_id, "static-client", "/127.0.0.1", 10_000, 20_000, "consumer",
                      [("range", subscription())], False)
    h.apply(h.coordinator.join_group(req, replies.append))
    assert len(replies) == 1, replies
    return replies[0]


def upgraded_with_static_member(h: Harness) -> tuple[Classic, Classic]:
    """c1 and c2 classic members of the consumer group, m1 its only consumer-protocol member (instance s1)."""
    c1, c2 = classic_group_of_two(h)
    first = h.beat("m1", 0, instance_id="s1")
    assert first["error_code"] == 0
    assert "g" in h.coordinator.consumer.groups and "g" not in h.coordinator.groups
    return c1, c2


def test_replacing_the_last_consumer_protocol_static_member_downgrades_the_group() -> None:
    h = Harness()
    c1, c2 = upgraded_with_static_member(h)
    group = h.coordinator.consumer.groups["g"]
    epoch, m1_target = group.group_epoch, group.target("m1")
    joined = static_join(h, "s1")
    assert joined["error_code"] == 0 and joined["leader"] == ""
    new_id = joined["member_id"]
    assert "g" not in h.coordinator.consumer.groups
    classic = h.coordinator.groups["g"]
    assert classic.state is ClassicState.STABLE and classic.generation == epoch  # no rebalance
    assert set(classic.members) == {c1.member_id, c2.member_id, new_id}
    assert assigned(classic.members[new_id].assignment) == set(m1_target.get(T, ()))
    assert classic.members[new_id].group_instance_id == "s1"
    # its SyncGroup gets the replaced member's partitions
    replies: list[dict[str, Any]] = []
    h.apply(h.coordinator.sync_group(SyncRequest("g", new_id, "s1", classic.generation, "consumer", "range", {}),
                                     replies.append))
    assert replies[0]["error_code"] == 0 and assigned(replies[0]["assignment"]) == set(m1_target.get(T, ()))
    # a restart finds the classic group in the log
    reloaded = h.load()
    assert "g" not in reloaded.consumer.groups
    assert set(reloaded.groups["g"].members) == {c1.member_id, c2.member_id, new_id}


def test_no_downgrade_while_another_consumer_protocol_member_stays() -> None:
    h = Harness()
    upgraded_with_static_member(h)
    assert h.beat("m2", 0)["error_code"] == 0
    joined = static_join(h, "s1")
    assert joined["error_code"] == 0
    group = h.coordinator.consumer.groups["g"]
    assert "g" not in h.coordinator.groups and joined["member_id"] in group.members and "m1" not in group.members


def test_no_downgrade_when_the_policy_forbids_it() -> None:
    h = policy_harness(MigrationPolicy.UPGRADE)
    upgraded_with_static_member(h)
    joined = static_join(h, "s1")
    assert joined["error_code"] == 0
    assert "g" not in h.coordinator.groups and joined["member_id"] in h.coordinator.consumer.groups["g"].members
