"""LeaveGroup, OffsetDelete, DeleteGroups and the classic Heartbeat answer once the high watermark passes what
they wrote (Kafka 4's write operations), through their request handlers.

The runtime on a real leader Partition with one follower in its ISR, whose fetch
position (on_follower_fetch) is what moves the HW, as in test_group_coordinator_commit_wait:
an answer waits for the HW; if it does not get there within offsets.commit.timeout.ms
the API's error is COORDINATOR_NOT_AVAILABLE (Kafka's mapping of a timed-out write);
an operation that wrote nothing waits for what its group's partition had already (Kafka's write that turned
out a read waits on the last pending write) and answers at once if the HW has passed it; any on RF=1 answers at
once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from klamm.broker.handlers.groups import heartbeat, leave_group
from klamm.broker.handlers.groups_admin import delete_groups
from klamm.broker.handlers.groups_offsets import offset_delete
from klamm.broker.partition import Partition
from klamm.coordinator.coordinator import OffsetToCommit
from klamm.coordinator.runtime import GroupCoordinatorRuntime
from klamm.protocol.errors import ErrorCode, KafkaError
from tests.unit.test_group_coordinator_commit_wait import leaders_sync, runtime_on


def on(tmp_path: Any, replicated: bool = True, timeout_ms: int = 5000) -> tuple[GroupCoordinatorRuntime, Partition]:
    runtime, partition = runtime_on(tmp_path, replicated, timeout_ms)
    # the metadata image OffsetDelete checks its partitions against: topic "t" with partition 0
    runtime.broker.controller = SimpleNamespace(image=SimpleNamespace(
        topics_by_name={"t": SimpleNamespace(partitions={0: None})}))
    return runtime, partition


def request(api_version: int, **body: Any) -> Any:
    return SimpleNamespace(api_version=api_version, body=SimpleNamespace(**body), client_id="c",
                           client_host="/10.0.0.1", listener="")


def catch_up(partition: Partition) -> None:
    partition.on_follower_fetch(2, partition.log_end_offset)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def stable_member(runtime: GroupCoordinatorRuntime, partition: Partition) -> tuple[str, int]:
    """A classic group "cg" of one member, Stable, everything committed: its member id and generation."""
    responses: dict[str, Any] = {}
    leaders_sync(runtime, responses)
    catch_up(partition)
    await settle()
    assert responses["sync"]["error_code"] == ErrorCode.none
    return responses["join"]["member_id"], responses["join"]["generation_id"]


def committed_offset(runtime: GroupCoordinatorRuntime, partition: Partition, group_id: str = "g") -> None:
    """Offset 5 of t-0 committed by a simple consumer of `group_id` (an Empty group), the HW past it."""
    assert runtime.apply(runtime.ready().commit_offsets(group_id, -1, "", None, [OffsetToCommit("t", 0, 5, -1, "")])) \
        == {("t", 0): ErrorCode.none}
    catch_up(partition)


async def answered_once_committed(partition: Partition, call: Callable[[], Awaitable[dict[str, Any]]]
                                  ) -> tuple[bool, bool, dict[str, Any]]:
    """Run a handler: whether it wrote, whether it was still waiting before the follower caught up, its answer."""
    before = partition.log_end_offset
    task = asyncio.ensure_future(call())
    await asyncio.sleep(0.05)
    wrote, waited = partition.log_end_offset > before, not task.done()
    catch_up(partition)
    return wrote, waited, await asyncio.wait_for(task, 1)


def test_leave_group_answers_once_the_hw_passes_the_groups_new_metadata(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path)

    async def run() -> tuple[str, tuple[bool, bool, dict[str, Any]]]:
        member_id, _ = await stable_member(runtime, partition)
        member = SimpleNamespace(member_id=member_id, group_instance_id=None)
        return member_id, await answered_once_committed(
            partition, lambda: leave_group(runtime.broker, request(3, group_id="cg", members=[member])))

    member_id, (wrote, waited, response) = asyncio.run(run())
    assert wrote and waited
    assert response == {"error_code": ErrorCode.none, "members": [
        {"member_id": member_id, "group_instance_id": None, "error_code": ErrorCode.none}]}
    assert runtime.ready().groups["cg"].state.name == "EMPTY"


def test_leave_group_the_hw_does_not_reach_in_time_is_coordinator_not_available_without_members(
        tmp_path: Any) -> None:
    runtime, partition = on(tmp_path, timeout_ms=50)

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        member_id, _ = await stable_member(runtime, partition)
        member = SimpleNamespace(member_id=member_id, group_instance_id=None)
        v3 = await leave_group(runtime.broker, request(3, group_id="cg", members=[member]))
        return v3, await leave_group(runtime.broker, request(0, group_id="cg", member_id=member_id))

    v3, v0 = asyncio.run(run())
    assert v3 == {"error_code": ErrorCode.coordinator_not_available, "members": []}  # Kafka: the group's error alone
    # the member is gone already (the record replayed): v0 writes nothing, but waits for that record all the same
    assert v0 == {"error_code": ErrorCode.coordinator_not_available}


async def waits_for_pending(partition: Partition, call: Callable[[], Awaitable[dict[str, Any]]]
                            ) -> tuple[bool, dict[str, Any]]:
    """Run a handler that writes nothing while the partition has a write the HW has not passed: whether it was
    still waiting (and wrote nothing) before the follower caught up, its answer."""
    assert partition.high_watermark < partition.log_end_offset
    before = partition.log_end_offset
    task = asyncio.ensure_future(call())
    await asyncio.sleep(0.05)
    waited = not task.done() and partition.log_end_offset == before
    catch_up(partition)
    return waited, await asyncio.wait_for(task, 1)


async def answers_at_once(call: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    task = asyncio.ensure_future(call())
    await settle()
    assert task.done()
    return await task


def test_a_leave_group_that_wrote_nothing_waits_for_the_partitions_pending_write(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path)
    committed_offset(runtime, partition)
    nobody = SimpleNamespace(member_id="nobody", group_instance_id=None)

    def leave() -> Awaitable[dict[str, Any]]:
        return leave_group(runtime.broker, request(3, group_id="g", members=[nobody]))

    async def run() -> tuple[dict[str, Any], tuple[bool, dict[str, Any]]]:
        at_once = await answers_at_once(leave)  # the HW has passed everything written
        runtime.apply(runtime.ready().commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, 6, -1, "")]))
        return at_once, await waits_for_pending(partition, leave)

    at_once, (waited, response) = asyncio.run(run())
    assert waited
    for answer in (at_once, response):
        assert answer["members"][0]["error_code"] == ErrorCode.unknown_member_id


def test_a_classic_heartbeat_writes_nothing_and_waits_for_the_partitions_pending_write(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path)

    async def run() -> tuple[dict[str, Any], tuple[bool, dict[str, Any]]]:
        member_id, generation = await stable_member(runtime, partition)

        def beat() -> Awaitable[dict[str, Any]]:
            return heartbeat(runtime.broker, request(4, group_id="cg", member_id=member_id, group_instance_id=None,
                                                     generation_id=generation))

        at_once = await answers_at_once(beat)
        runtime.apply(runtime.ready().commit_offsets("cg", generation, member_id, None,
                                                     [OffsetToCommit("t", 0, 6, -1, "")]))
        return at_once, await waits_for_pending(partition, beat)

    at_once, (waited, response) = asyncio.run(run())
    assert waited
    assert at_once == response == {"error_code": ErrorCode.none}


def test_a_classic_heartbeat_while_the_groups_partition_loads_is_answered_none(tmp_path: Any) -> None:
    runtime, _ = on(tmp_path)
    coordinator = runtime.ready()
    coordinator._loading.add(coordinator.partition_for("cg"))  # Kafka answers blindly while it loads
    response = asyncio.run(heartbeat(runtime.broker, request(4, group_id="cg", member_id="m", group_instance_id=None,
                                                            generation_id=1)))
    assert response == {"error_code": ErrorCode.none}
    with pytest.raises(KafkaError) as raised:  # everything else hears the load
        coordinator.validate_group("cg")
    assert raised.value.code == ErrorCode.coordinator_load_in_progress


def test_offset_delete_answers_once_the_hw_passes_the_tombstone(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path)
    committed_offset(runtime, partition)
    body = {"group_id": "g", "topics": [SimpleNamespace(name="t", partitions=[SimpleNamespace(partition_index=0)])]}

    wrote, waited, response = asyncio.run(answered_once_committed(
        partition, lambda: offset_delete(runtime.broker, request(0, **body))))
    assert wrote and waited
    assert response == {"error_code": ErrorCode.none, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "error_code": ErrorCode.none}]}]}
    assert runtime.committed("g").fetch_offsets("g", [("t", 0)]) == {("t", 0): None}


def test_offset_delete_the_hw_does_not_reach_in_time_is_coordinator_not_available(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path, timeout_ms=50)
    committed_offset(runtime, partition)
    body = {"group_id": "g", "topics": [SimpleNamespace(name="t", partitions=[SimpleNamespace(partition_index=0)])]}
    response = asyncio.run(offset_delete(runtime.broker, request(0, **body)))
    assert response == {"error_code": ErrorCode.coordinator_not_available, "topics": []}


def test_delete_groups_answers_once_the_hw_passes_the_tombstones(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path)
    committed_offset(runtime, partition)

    wrote, waited, response = asyncio.run(answered_once_committed(
        partition, lambda: delete_groups(runtime.broker, request(2, groups_names=["g", "missing"]))))
    assert wrote and waited
    assert response == {"results": [{"group_id": "g", "error_code": ErrorCode.none},
                                    {"group_id": "missing", "error_code": ErrorCode.group_id_not_found}]}
    assert "g" not in runtime.ready().groups


def test_delete_groups_the_hw_does_not_reach_in_time_is_coordinator_not_available(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path, timeout_ms=50)
    committed_offset(runtime, partition)
    response = asyncio.run(delete_groups(runtime.broker, request(2, groups_names=["g"])))
    assert response == {"results": [{"group_id": "g", "error_code": ErrorCode.coordinator_not_available}]}


def test_delete_groups_that_writes_nothing_waits_for_the_partitions_pending_write(tmp_path: Any) -> None:
    runtime, partition = on(tmp_path)
    committed_offset(runtime, partition)
    runtime.apply(runtime.ready().commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, 6, -1, "")]))

    waited, response = asyncio.run(waits_for_pending(
        partition, lambda: delete_groups(runtime.broker, request(2, groups_names=["missing"]))))
    assert waited and response == {"results": [{"group_id": "missing", "error_code": ErrorCode.group_id_not_found}]}
