"""Group operations that write records answer once the high watermark passes them (Kafka 4's write operations).

The runtime on a real leader Partition with one follower in its ISR, whose fetch
position (on_follower_fetch) is what moves the HW, as in test_group_coordinator_hw:
the responses a classic leader's SyncGroup releases, and a static member's
JoinGroup that stores its new member id, wait for the HW; on RF=1 they come at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from klamm.broker.partition import Partition
from klamm.coordinator.coordinator import JoinRequest, SyncRequest
from klamm.coordinator.runtime import GroupCoordinatorRuntime
from klamm.protocol.errors import ErrorCode
from klamm.protocol.topics import CONSUMER_OFFSETS
from tests.unit.test_group_coordinator_hw import runtime_on as hw_runtime_on


def runtime_on(tmp_path: Any, replicated: bool = True, timeout_ms: int = 5000) -> tuple[GroupCoordinatorRuntime,
                                                                                         Partition]:
    return hw_runtime_on(tmp_path, replicated, timeout_ms, rebalance_delay_ms=0)


def join(runtime: GroupCoordinatorRuntime, responses: dict[str, Any], key: str, instance_id: str | None = None
         ) -> None:
    request = JoinRequest("cg", "", instance_id, "c", "/10.0.0.1", 10_000, 10_000, "consumer",
                          [("range", b"meta")], require_known_member_id=False)
    runtime.apply(runtime.ready().join_group(request, lambda response: responses.__setitem__(key, response)))


def sync(runtime: GroupCoordinatorRuntime, responses: dict[str, Any], key: str, member_id: str, generation: int,
         assignments: dict[str, bytes]) -> None:
    request = SyncRequest("cg", member_id, None, generation, "consumer", "range", assignments)
    runtime.apply(runtime.ready().sync_group(request, lambda response: responses.__setitem__(key, response)))


def leaders_sync(runtime: GroupCoordinatorRuntime, responses: dict[str, Any], instance_id: str | None = None) -> int:
    """A group of one member, Completing its rebalance; the leader's SyncGroup sent. The log's end before it."""
    join(runtime, responses, "join", instance_id)
    joined = responses["join"]
    assert joined["error_code"] == ErrorCode.none and joined["leader"] == joined["member_id"]
    end = runtime.broker.replicas.get(CONSUMER_OFFSETS, 0).log_end_offset
    sync(runtime, responses, "sync", joined["member_id"], joined["generation_id"], {joined["member_id"]: b"a0"})
    return end


def test_the_leaders_sync_answers_once_the_hw_passes_the_stored_assignment(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path)

    async def run() -> tuple[bool, Any]:
        responses: dict[str, Any] = {}
        before = leaders_sync(runtime, responses)
        assert partition.log_end_offset > before  # the group's record with the assignment
        await asyncio.sleep(0.05)
        waited = "sync" not in responses and runtime.ready().groups["cg"].state.name == "COMPLETING_REBALANCE"
        partition.on_follower_fetch(2, partition.log_end_offset)
        for _ in range(10):
            await asyncio.sleep(0)
        return waited, responses.get("sync")

    waited, response = asyncio.run(run())
    assert waited
    assert response is not None and response["error_code"] == ErrorCode.none and response["assignment"] == b"a0"
    assert runtime.ready().groups["cg"].state.name == "STABLE"


def test_a_sync_the_hw_does_not_reach_in_time_is_coordinator_not_available(tmp_path: Any) -> None:
    runtime, _ = runtime_on(tmp_path, timeout_ms=50)

    async def run() -> Any:
        responses: dict[str, Any] = {}
        leaders_sync(runtime, responses)
        await asyncio.sleep(0.2)
        return responses.get("sync")

    response = asyncio.run(run())
    assert response is not None and response["error_code"] == ErrorCode.coordinator_not_available
    assert runtime.ready().groups["cg"].state.name == "PREPARING_REBALANCE"  # as Kafka: it rebalances again


def test_on_rf1_the_leaders_sync_answers_at_once(tmp_path: Any) -> None:
    runtime, _ = runtime_on(tmp_path, replicated=False)
    responses: dict[str, Any] = {}
    leaders_sync(runtime, responses)  # no event loop: nothing may wait
    assert responses["sync"]["error_code"] == ErrorCode.none and responses["sync"]["assignment"] == b"a0"
    assert runtime.ready().groups["cg"].state.name == "STABLE"


def test_a_static_member_rejoining_a_stable_group_answers_once_the_hw_passes_its_new_member_id(
        tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path)

    async def run() -> tuple[bool, Any, Any]:
        responses: dict[str, Any] = {}
        leaders_sync(runtime, responses, instance_id="i1")
        partition.on_follower_fetch(2, partition.log_end_offset)
        for _ in range(10):
            await asyncio.sleep(0)
        assert responses["sync"]["error_code"] == ErrorCode.none
        join(runtime, responses, "rejoin", instance_id="i1")  # a new member id, stored without a rebalance
        await asyncio.sleep(0.05)
        waited = "rejoin" not in responses
        partition.on_follower_fetch(2, partition.log_end_offset)
        for _ in range(10):
            await asyncio.sleep(0)
        return waited, responses["join"], responses.get("rejoin")

    waited, first, rejoined = asyncio.run(run())
    assert waited
    assert rejoined is not None and rejoined["error_code"] == ErrorCode.none
    assert rejoined["member_id"] != first["member_id"] and rejoined["generation_id"] == first["generation_id"]
    assert list(runtime.ready().groups["cg"].members) == [rejoined["member_id"]]
