"""The classic group coordinator state machine, driven with a fake clock.

The harness plays the broker's runtime: it appends each result's records to an
in-memory log, replays them, runs the after-write actions and returns the
response. JoinGroup/SyncGroup answers land in `Reply` holders.
"""

from __future__ import annotations

from typing import Any

import pytest

from klamm.coordinator.coordinator import (CoordinatorConfig, GroupCoordinator, JoinRequest, OffsetToCommit, Result,
                                           SyncRequest)
from klamm.coordinator.group import GroupState
from klamm.coordinator.partitioning import java_string_hash, partition_for
from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.timer import Timer
from klamm.protocol.errors import ErrorCode

PARTITIONS = 4
SESSION = 10_000
REBALANCE = 30_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


class Reply:
    def __init__(self) -> None:
        self.responses: list[dict[str, Any]] = []

    def __call__(self, response: dict[str, Any]) -> None:
        self.responses.append(response)

    @property
    def done(self) -> bool:
        return bool(self.responses)

    @property
    def value(self) -> dict[str, Any]:
        assert len(self.responses) == 1, self.responses
        return self.responses[0]

    @property
    def error(self) -> ErrorCode:
        return self.value["error_code"]


class Harness:
    def __init__(self, **config: Any) -> None:
        self.clock = Clock()
        self.config = CoordinatorConfig(num_partitions=PARTITIONS, **{"initial_rebalance_delay_ms": 0, **config})
        self.log: list[CoordinatorRecord] = []
        self.coordinator = self.new_coordinator()
        for p in range(PARTITIONS):
            self.coordinator.finish_loading(p)

    def new_coordinator(self) -> GroupCoordinator:
        coordinator = GroupCoordinator(self.config, Timer(self.clock))
        for p in range(PARTITIONS):
            coordinator.begin_loading(p)
        return coordinator

    def apply(self, result: Result) -> Any:
        self.log += result.records
        for record in result.records:
            self.coordinator.replay(record)
        for action in result.after_write:
            action(ErrorCode.none)
        return result.response

    def advance(self, ms: int) -> None:
        self.clock.now += ms
        for result in self.coordinator.poll_timers():
            self.apply(result)

    def group(self, group_id: str = "g"):
        return self.coordinator.groups[group_id]

    # requests
    def join(self, member_id: str = "", group_id: str = "g", instance: str | None = None,
             protocols: list[tuple[str, bytes]] | None = None, session: int = SESSION, rebalance: int = REBALANCE,
             require_known: bool | None = None) -> Reply:
        reply = Reply()
        request = JoinRequest(group_id, member_id, instance, "client", "/127.0.0.1", session, rebalance, "consumer",
                              protocols or [("range", b"meta")],
                              instance is None if require_known is None else require_known)
        self.apply(self.coordinator.join_group(request, reply))
        return reply

    def join_new(self, group_id: str = "g", **kw: Any) -> Reply:
        """The two-step join of a v4+ dynamic member."""
        first = self.join(group_id=group_id, **kw)
        assert first.error == ErrorCode.member_id_required
        return self.join(first.value["member_id"], group_id=group_id, **kw)

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group_id: str = "g", instance: str | None = None) -> Reply:
        reply = Reply()
        self.apply(self.coordinator.sync_group(
            SyncRequest(group_id, member_id, instance, generation, "consumer", None, assignments or {}), reply))
        return reply

    def heartbeat(self, member_id: str, generation: int, group_id: str = "g", instance: str | None = None) -> ErrorCode:
        return self.apply(self.coordinator.heartbeat(group_id, member_id, instance, generation))

    def commit(self, offsets: dict[tuple[str, int], int], generation: int = -1, member_id: str = "",
               group_id: str = "g") -> dict[tuple[str, int], ErrorCode]:
        return self.apply(self.coordinator.commit_offsets(
            group_id, generation, member_id, None,
            [OffsetToCommit(t, p, o, -1, "meta") for (t, p), o in offsets.items()]))

    def fetch(self, group_id: str = "g", partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        return {tp: (c.offset if c else -1) for tp, c in self.coordinator.fetch_offsets(group_id, partitions).items()}

    def stable_member(self, group_id: str = "g", **kw: Any) -> tuple[str, int]:
        joined = self.join_new(group_id=group_id, **kw)
        member_id, generation = joined.value["member_id"], joined.value["generation_id"]
        assert self.sync(member_id, generation, {member_id: b"all"}, group_id=group_id).error == ErrorCode.none
        return member_id, generation


def test_java_string_hash_and_partition():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2**31  # Utils.abs maps it to 0, unlike Math.abs
    assert java_string_hash("\U0001F600") == 31 * 0xD83D + 0xDE00  # two UTF-16 code units, not one code point
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("abcdefghijklmnop", 50) == (-2093879032 & 0x7FFFFFFF) % 50


def test_member_id_required_then_join_sync_heartbeat():
    h = Harness()
    first = h.join()
    assert first.error == ErrorCode.member_id_required
    member_id = first.value["member_id"]
    assert member_id.startswith("client-")
    joined = h.join(member_id)
    assert joined.error == ErrorCode.none
    assert joined.value["generation_id"] == 1 and joined.value["leader"] == member_id
    assert joined.value["protocol_name"] == "range"
    assert [m["member_id"] for m in joined.value["members"]] == [member_id]
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    synced = h.sync(member_id, 1, {member_id: b"assignment"})
    assert synced.value["assignment"] == b"assignment" and synced.error == ErrorCode.none
    assert h.group().state is GroupState.STABLE
    assert h.heartbeat(member_id, 1) == ErrorCode.none


def test_old_join_version_gets_member_id_at_once():
    h = Harness()
    joined = h.join(require_known=False)
    assert joined.error == ErrorCode.none and joined.value["member_id"]


def test_invalid_session_timeout_and_group_id():
    h = Harness()
    assert h.join(session=10).error == ErrorCode.invalid_session_timeout
    assert h.join(group_id="").error == ErrorCode.invalid_group_id
    assert "g" not in h.coordinator.groups  # a failed first join leaves no group behind


def test_new_member_triggers_rebalance():
    h = Harness()
    a, gen = h.stable_member()
    b_join = h.join_new()
    assert not b_join.done and h.group().state is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, gen) == ErrorCode.rebalance_in_progress
    a_join = h.join(a)
    assert a_join.done and b_join.done
    assert a_join.value["generation_id"] == b_join.value["generation_id"] == 2
    assert a_join.value["leader"] == a
    assert len(a_join.value["members"]) == 2 and b_join.value["members"] == []
    b = b_join.value["member_id"]
    b_sync = h.sync(b, 2)
    assert not b_sync.done  # waits for the leader
    a_sync = h.sync(a, 2, {a: b"A", b: b"B"})
    assert (a_sync.value["assignment"], b_sync.value["assignment"]) == (b"A", b"B")
    assert h.group().state is GroupState.STABLE


def test_a_superseded_join_or_sync_is_answered_not_dropped():
    """A second JoinGroup (or SyncGroup) of a member replaces its pending one: the first still gets an answer."""
    h = Harness()
    a, gen = h.stable_member()
    b_join = h.join_new()
    first = h.join(a)  # completes the join at once: both members are in
    assert first.done and b_join.done
    c_join = h.join_new()  # a third member: a new rebalance, in which a joins twice
    a_first, a_second = h.join(a), None
    assert not a_first.done
    a_second = h.join(a)
    assert a_first.error == ErrorCode.rebalance_in_progress and not a_second.done
    b = b_join.value["member_id"]
    h.join(b)
    assert a_second.done and c_join.done and a_second.value["generation_id"] == gen + 2
    c = c_join.value["member_id"]
    c_sync = h.sync(c, gen + 2)
    c_sync_again = h.sync(c, gen + 2)
    assert c_sync.error == ErrorCode.rebalance_in_progress and not c_sync_again.done
    h.sync(a, gen + 2, {a: b"A", b: b"B", c: b"C"})
    assert c_sync_again.value["assignment"] == b"C"


def test_leave_triggers_rebalance():
    h = Harness()
    a, _ = h.stable_member()
    b_join = h.join_new()
    a_join = h.join(a)
    b = b_join.value["member_id"]
    h.sync(b, 2)
    h.sync(a, 2, {a: b"A", b: b"B"})
    error, errors = h.apply(h.coordinator.leave_group("g", [(b, None), ("nobody", None)]))
    assert error == ErrorCode.none and errors == [ErrorCode.none, ErrorCode.unknown_member_id]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.join(a).value["generation_id"] == 3
    assert a_join.value["generation_id"] == 2


def test_last_member_leaving_empties_the_group():
    h = Harness()
    a, _ = h.stable_member()
    h.apply(h.coordinator.leave_group("g", [(a, None)]))
    assert h.group().state is GroupState.EMPTY and h.group().generation == 2
    assert h.heartbeat(a, 2) == ErrorCode.unknown_member_id


def test_a_pending_member_joins_the_group_its_last_member_left():
    """The last member leaves while another waits between MEMBER_ID_REQUIRED and its join: until the join
    completes the group rebalances with no members, and (as Kafka) it takes that join, of the same type."""
    h = Harness()
    a, _ = h.stable_member()
    pending = h.join()
    assert pending.error == ErrorCode.member_id_required
    h.apply(h.coordinator.leave_group("g", [(a, None)]))
    assert h.group().state is GroupState.PREPARING_REBALANCE and not h.group().members
    other_type = Reply()
    h.apply(h.coordinator.join_group(JoinRequest("g", pending.value["member_id"], None, "client", "/127.0.0.1",
                                                 SESSION, REBALANCE, "connect", [("range", b"meta")], True),
                                     other_type))
    assert other_type.error == ErrorCode.inconsistent_group_protocol
    b = pending.value["member_id"]
    joined = h.join(b, protocols=[("cooperative-sticky", b"meta")])
    assert joined.error == ErrorCode.none
    assert joined.value["leader"] == b and joined.value["protocol_name"] == "cooperative-sticky"
    assert h.sync(b, joined.value["generation_id"], {b: b"all"}).error == ErrorCode.none


def test_session_timeout_removes_member():
    h = Harness()
    a, _ = h.stable_member()
    b_join = h.join_new()
    h.join(a)
    b = b_join.value["member_id"]
    h.sync(b, 2)
    h.sync(a, 2, {a: b"A", b: b"B"})
    for _ in range(3):  # a heartbeats, b has died
        h.advance(SESSION // 2)
        assert h.heartbeat(a, 2) in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    assert b not in h.group().members
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.join(a).value["generation_id"] == 3


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    h = Harness()
    a, _ = h.stable_member(rebalance=REBALANCE, session=REBALANCE * 2)
    b_join = h.join_new(session=REBALANCE * 2)
    assert not b_join.done
    h.advance(REBALANCE)
    assert b_join.value["generation_id"] == 2 and b_join.value["leader"] == b_join.value["member_id"]
    assert list(h.group().members) == [b_join.value["member_id"]]
    assert h.heartbeat(a, 1) == ErrorCode.unknown_member_id


def test_initial_rebalance_delay_waits_for_more_members():
    h = Harness(initial_rebalance_delay_ms=3000)
    a_join = h.join_new()
    h.advance(2000)
    b_join = h.join_new()
    h.advance(2000)
    assert not a_join.done  # the second member extended the delay
    h.advance(3000)
    assert a_join.value["generation_id"] == b_join.value["generation_id"] == 1
    assert len(h.group().members) == 2


def test_pending_member_expires():
    h = Harness()
    a, _ = h.stable_member()
    first = h.join()
    assert first.error == ErrorCode.member_id_required
    h.join(a)  # a rejoins (as leader); the pending member holds the join...
    assert h.group().state is GroupState.PREPARING_REBALANCE
    h.advance(SESSION)  # ...until its session passes without it joining
    assert h.group().state is GroupState.COMPLETING_REBALANCE


def test_static_member_rejoins_without_rebalance():
    h = Harness()
    a_first = h.join(instance="a")
    assert a_first.error == ErrorCode.none  # static members join at once
    a = a_first.value["member_id"]
    assert a.startswith("a-")
    h.sync(a, 1, {a: b"A"})
    b_join = h.join(instance="b")
    h.join(a, instance="a")
    b = b_join.value["member_id"]
    h.sync(b, 2, instance="b")
    h.sync(a, 2, {a: b"A", b: b"B"}, instance="a")
    assert h.group().state is GroupState.STABLE
    # b restarts: a new member id, same instance id, before its session ends
    again = h.join(instance="b")
    assert again.error == ErrorCode.none
    new_b = again.value["member_id"]
    assert new_b != b and again.value["generation_id"] == 2
    assert h.group().state is GroupState.STABLE
    assert h.sync(new_b, 2, instance="b").value["assignment"] == b"B"
    assert h.heartbeat(b, 2, instance="b") == ErrorCode.fenced_instance_id
    assert h.heartbeat(new_b, 2, instance="b") == ErrorCode.none
    # the leader comes back: it is told the old leader id and to skip the assignment
    leader_again = h.join(instance="a")
    assert leader_again.value["skip_assignment"] is True and leader_again.value["leader"] == a
    assert h.group().state is GroupState.STABLE and h.group().generation == 2


def test_errors_for_unknown_members_and_generations():
    h = Harness()
    a, gen = h.stable_member()
    assert h.heartbeat("nobody", gen) == ErrorCode.unknown_member_id
    assert h.heartbeat(a, gen + 1) == ErrorCode.illegal_generation
    assert h.heartbeat(a, gen, group_id="other") == ErrorCode.unknown_member_id
    assert h.sync(a, gen + 1).error == ErrorCode.illegal_generation
    assert h.sync("nobody", gen).error == ErrorCode.unknown_member_id
    assert h.join("nobody").error == ErrorCode.unknown_member_id
    assert h.commit({("t", 0): 1}, generation=gen + 1, member_id=a) == {("t", 0): ErrorCode.illegal_generation}
    assert h.commit({("t", 0): 1}, generation=gen, member_id="x") == {("t", 0): ErrorCode.unknown_member_id}
    assert h.commit({("t", 0): 1}, generation=5, group_id="unknown") == {("t", 0): ErrorCode.illegal_generation}


def test_commit_during_completing_rebalance_is_refused():
    h = Harness()
    joined = h.join_new()
    member, gen = joined.value["member_id"], joined.value["generation_id"]
    assert h.commit({("t", 0): 1}, gen, member) == {("t", 0): ErrorCode.rebalance_in_progress}


def test_offset_commit_and_fetch():
    h = Harness()
    a, gen = h.stable_member()
    assert h.commit({("t", 0): 10, ("t", 1): 20}, gen, a) == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none}
    assert h.fetch(partitions=[("t", 0), ("t", 1), ("t", 2)]) == {("t", 0): 10, ("t", 1): 20, ("t", 2): -1}
    assert h.fetch() == {("t", 0): 10, ("t", 1): 20}
    assert h.fetch("nogroup", [("t", 0)]) == {("t", 0): -1}
    # a simple consumer (generation -1) commits to a group of its own
    assert h.commit({("t", 0): 5}, group_id="simple") == {("t", 0): ErrorCode.none}
    assert h.fetch("simple") == {("t", 0): 5}
    assert h.coordinator.groups["simple"].state is GroupState.EMPTY
    # metadata beyond offset.metadata.max.bytes is refused per partition
    result = h.apply(h.coordinator.commit_offsets("g", gen, a, None, [OffsetToCommit("t", 3, 1, -1, "x" * 5000)]))
    assert result == {("t", 3): ErrorCode.offset_metadata_too_large}


def test_retention_expires_offsets_of_empty_groups():
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    a, gen = h.stable_member()
    h.commit({("t", 0): 10}, gen, a)
    h.commit({("t", 0): 3}, group_id="simple")
    h.advance(120_000)
    assert h.fetch() == {("t", 0): 10}  # the group has members: kept
    h.apply(h.coordinator.leave_group("g", [(a, None)]))
    h.advance(50_000)
    assert h.fetch() == {("t", 0): 10}
    assert "simple" not in h.coordinator.groups  # committed long ago: expired, and the empty group died
    h.advance(20_000)
    assert "g" not in h.coordinator.groups
    assert any(r.value is None for r in h.log)


def test_delete_groups_and_offsets():
    h = Harness()
    a, gen = h.stable_member()
    h.commit({("t", 0): 10, ("u", 0): 1}, gen, a)
    assert h.apply(h.coordinator.delete_groups(["g", "missing"])) == {
        "g": ErrorCode.non_empty_group, "missing": ErrorCode.group_id_not_found}
    # the members subscribe to nothing parseable here: a non-empty group refuses offset deletes
    assert h.apply(h.coordinator.delete_offsets("g", [("u", 0)]))[0] == ErrorCode.non_empty_group
    h.apply(h.coordinator.leave_group("g", [(a, None)]))
    assert h.apply(h.coordinator.delete_offsets("g", [("u", 0)])) == (ErrorCode.none, {("u", 0): ErrorCode.none})
    assert h.fetch() == {("t", 0): 10}
    assert h.apply(h.coordinator.delete_groups(["g"])) == {"g": ErrorCode.none}
    assert "g" not in h.coordinator.groups
    assert h.apply(h.coordinator.delete_offsets("g", [("t", 0)]))[0] == ErrorCode.group_id_not_found


def test_delete_offsets_of_subscribed_topic_refused():
    h = Harness()
    subscription = b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\xff\xff\xff\xff"
    a, gen = h.stable_member(protocols=[("range", subscription)])
    h.commit({("t", 0): 1, ("u", 0): 2}, gen, a)
    error, errors = h.apply(h.coordinator.delete_offsets("g", [("t", 0), ("u", 0)]))
    assert error == ErrorCode.none
    assert errors == {("t", 0): ErrorCode.group_subscribed_to_topic, ("u", 0): ErrorCode.none}


def test_describe_and_list():
    h = Harness()
    a, _ = h.stable_member()
    h.commit({("t", 0): 1}, group_id="simple")
    described = h.coordinator.describe_group("g")
    assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
    assert described["members"][0]["member_assignment"] == b"all"
    assert h.coordinator.describe_group("nope")["group_state"] == "Dead"
    error, groups = h.coordinator.list_groups()
    assert {g["group_id"]: g["group_state"] for g in groups} == {"g": "Stable", "simple": "Empty"}
    assert [g["group_id"] for g in h.coordinator.list_groups(["empty"])[1]] == ["simple"]
    assert h.coordinator.list_groups(types=["consumer"])[1] == []


def test_load_in_progress():
    h = Harness()
    coordinator = h.new_coordinator()
    reply = Reply()
    coordinator.join_group(JoinRequest("g", "", None, "c", "h", SESSION, REBALANCE, "consumer", [("r", b"")], True),
                           reply)
    assert reply.error == ErrorCode.coordinator_load_in_progress


def test_replay_rebuilds_the_same_state():
    h = Harness()
    a, _ = h.stable_member()
    b_join = h.join_new()
    h.join(a)
    b = b_join.value["member_id"]
    h.sync(b, 2)
    h.sync(a, 2, {a: b"A", b: b"B"})
    h.commit({("t", 0): 10, ("t", 1): 11}, 2, a)
    h.commit({("t", 0): 12}, 2, b)
    h.commit({("x", 0): 1}, group_id="simple")
    h.commit({("x", 0): 1}, group_id="gone")
    h.apply(h.coordinator.delete_groups(["gone"]))

    loaded = h.new_coordinator()
    for record in h.log:
        loaded.replay(record)
    for p in range(PARTITIONS):
        loaded.finish_loading(p)
    assert set(loaded.groups) == {"g", "simple"}
    for group_id, group in h.coordinator.groups.items():
        other = loaded.groups[group_id]
        assert (other.state, other.generation, other.protocol_type, other.protocol, other.leader_id) == \
               (group.state, group.generation, group.protocol_type, group.protocol, group.leader_id)
        assert {m: x.assignment for m, x in other.members.items()} == {m: x.assignment for m, x in group.members.items()}
        assert other.offsets == group.offsets
    # loaded members must heartbeat: b does not and is removed after its session
    h.coordinator = loaded
    h.advance(SESSION // 2)
    assert h.heartbeat(a, 2) == ErrorCode.none
    h.advance(SESSION // 2 + 1)
    assert b not in loaded.groups["g"].members


def test_record_formats():
    h = Harness()
    h.stable_member()
    h.commit({("t", 0): 10}, group_id="simple")
    group_record = next(r for r in h.log if r.key[:2] == b"\x00\x02")
    assert group_record.value[:2] == b"\x00\x03"  # GroupMetadataValue v3
    offset_record = next(r for r in h.log if r.key[:2] == b"\x00\x01")
    assert offset_record.value[:2] == b"\x00\x03"  # OffsetCommitValue v3
    assert offset_record.partition == partition_for("simple", PARTITIONS)
    assert offset_record.key == b"\x00\x01" + b"\x00\x06simple" + b"\x00\x01t" + b"\x00\x00\x00\x00"


@pytest.mark.parametrize("expire", [True, False])
def test_commit_with_retention_time_writes_v1(expire):
    h = Harness()
    result = h.coordinator.commit_offsets("s", -1, "", None, [OffsetToCommit("t", 0, 1, -1, "")],
                                          retention_ms=1000 if expire else -1)
    h.apply(result)
    assert h.log[-1].value[:2] == (b"\x00\x01" if expire else b"\x00\x03")


def test_a_v1_commit_timestamp_sets_the_expiry():
    """OffsetCommit v1: the offset expires offsets.retention.ms after the client's commit timestamp."""
    h = Harness()
    stamp = h.clock.now - 60_000
    h.apply(h.coordinator.commit_offsets("s", -1, "", None, [OffsetToCommit("t", 0, 7, -1, "m", stamp)]))
    committed = h.coordinator.groups["s"].offsets[("t", 0)]
    assert (committed.offset, committed.commit_timestamp) == (7, h.clock.now)
    assert committed.expire_timestamp == stamp + h.config.offsets_retention_ms
    assert h.log[-1].value[:2] == b"\x00\x01"  # the value version that carries an expiry


def test_writes_that_fail_change_no_group():
    """Nothing is replayed when the append fails (the runtime's contract): groups stay exactly as they were."""
    h = Harness(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=10_000)
    h.commit({("t", 0): 3}, group_id="simple")
    group = h.coordinator.groups["simple"]

    def fail(result: Result) -> None:  # what the runtime does when the append raises
        for action in result.after_write:
            action(ErrorCode.not_coordinator)

    fail(h.coordinator.delete_groups(["simple"]))
    assert h.coordinator.groups["simple"] is group and group.state is GroupState.EMPTY
    fail(h.coordinator.commit_offsets("new", -1, "", None, [OffsetToCommit("t", 0, 1, -1, None)]))
    assert "new" not in h.coordinator.groups
    h.clock.now += 120_000
    for result in h.coordinator.poll_timers():  # offsets retention: the expired group's tombstones fail
        fail(result)
    assert h.coordinator.groups["simple"] is group and group.state is GroupState.EMPTY
    assert h.fetch("simple") == {("t", 0): 3}
    h.advance(10_000)  # the next retention pass writes them
    assert "simple" not in h.coordinator.groups and group.state is GroupState.DEAD


def test_unload_answers_parked_requests_not_coordinator_and_reload_restores_the_groups():
    h = Harness()
    a, gen = h.stable_member()
    h.commit({("t", 0): 7}, gen, a)
    b_join = h.join_new()  # parked: the rebalance waits for a to rejoin
    assert not b_join.done
    other = next(g for g in ("x%d" % i for i in range(100)) if partition_for(g, PARTITIONS) != partition_for("g", PARTITIONS))
    h.commit({("t", 0): 3}, group_id=other)
    partition = partition_for("g", PARTITIONS)

    h.coordinator.unload(partition)
    assert b_join.error == ErrorCode.not_coordinator
    assert "g" not in h.coordinator.groups and other in h.coordinator.groups
    assert not any(isinstance(key, tuple) and key[1] == "g" for key in h.coordinator.timer._entries)
    assert h.heartbeat(a, gen) == ErrorCode.not_coordinator
    assert h.fetch(other) == {("t", 0): 3}
    h.advance(REBALANCE + SESSION)  # the unloaded group's timers are gone: nothing fires for it

    # leadership comes back: the partition is replayed from the log
    h.coordinator.begin_loading(partition)
    for record in h.log:
        if record.partition == partition:
            h.coordinator.replay(record)
    h.coordinator.finish_loading(partition)
    assert h.fetch() == {("t", 0): 7}
    assert partition in h.coordinator.owned
