"""A ConsumerGroupHeartbeat that writes records answers once the high watermark passes them (Kafka 4's write
operation); one that writes nothing answers once the HW passes what its group's partition had already (at once
if it has), and any on RF=1 answers at once.

Through the handler, on the runtime over a real leader Partition with one follower in its ISR, whose fetch
position (on_follower_fetch) is what moves the HW, as in test_group_coordinator_hw.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from klamm.broker.handlers import consumer_groups
from klamm.broker.partition import Partition
from klamm.coordinator.consumer_group import TopicMetadata
from klamm.coordinator.coordinator import OffsetToCommit
from klamm.coordinator.runtime import GroupCoordinatorRuntime
from klamm.protocol.errors import ErrorCode, KafkaError
from tests.unit.test_group_coordinator_hw import runtime_on as hw_runtime_on

TOPIC_ID = uuid.UUID(int=7)


def runtime_on(tmp_path: Any, replicated: bool = True, timeout_ms: int = 5000) -> tuple[GroupCoordinatorRuntime,
                                                                                         Partition]:
    runtime, partition = hw_runtime_on(tmp_path, replicated, timeout_ms, rebalance_delay_ms=0)
    runtime.coordinator.consumer.topics = lambda: {"t": TopicMetadata(TOPIC_ID, "t", 4)}
    return runtime, partition


def beat(runtime: GroupCoordinatorRuntime, member_id: str, epoch: int = 0, owned: list[int] | None = None) -> Any:
    """ConsumerGroupHeartbeat v1 through its handler: a coroutine."""
    body = SimpleNamespace(
        group_id="g", member_id=member_id, member_epoch=epoch, instance_id=None, rack_id=None,
        rebalance_timeout=30_000 if epoch == 0 else -1, subscribed_topic_names=["t"] if epoch == 0 else None,
        subscribed_topic_regex=None, server_assignor=None,
        topic_partitions=[] if epoch == 0 else None if owned is None  # a joining member owns nothing
        else [SimpleNamespace(topic_id=TOPIC_ID, partitions=owned)])
    request = SimpleNamespace(body=body, api_version=1, client_id="c", client_host="/10.0.0.1")
    return consumer_groups.heartbeat(runtime.broker, request)


def described_members(runtime: GroupCoordinatorRuntime) -> list[str]:
    group = runtime.committed("g").consumer.describe("g")  # as of the HW
    return [m["member_id"] for m in group["members"]]


def assigned(response: dict[str, Any]) -> list[int]:
    return sorted(p for tp in response["assignment"]["topic_partitions"] for p in tp["partitions"])


def test_a_heartbeat_that_writes_answers_once_the_hw_passes_its_records(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path)

    async def run() -> tuple[bool, int, dict[str, Any]]:
        answer = asyncio.ensure_future(beat(runtime, "m1"))
        await asyncio.sleep(0.05)
        waited = not answer.done()
        held = partition.high_watermark
        partition.on_follower_fetch(2, partition.log_end_offset - 1)  # short of the last record: still waiting
        await asyncio.sleep(0.02)
        waited = waited and not answer.done()
        partition.on_follower_fetch(2, partition.log_end_offset)
        return waited, held, await answer

    waited, held, response = asyncio.run(run())
    assert waited and held == 0
    assert response["error_code"] == ErrorCode.none and response["member_epoch"] == 1
    assert assigned(response) == [0, 1, 2, 3]
    assert described_members(runtime) == ["m1"]


def test_a_heartbeat_the_hw_does_not_reach_in_time_is_coordinator_not_available(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path, timeout_ms=50)
    response = asyncio.run(beat(runtime, "m1"))
    assert response["error_code"] == ErrorCode.coordinator_not_available  # Kafka's REQUEST_TIMED_OUT mapping
    assert partition.log_end_offset > partition.high_watermark == 0
    assert described_members(runtime) == []


def test_a_heartbeat_waiting_when_the_leadership_goes_is_not_coordinator(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path)

    async def run() -> dict[str, Any]:
        answer = asyncio.ensure_future(beat(runtime, "m1"))
        await asyncio.sleep(0.02)
        assert not answer.done()
        partition.become_follower(2, 2, [1, 2], [1, 2])
        return await asyncio.wait_for(answer, 1)

    assert asyncio.run(run())["error_code"] == ErrorCode.not_coordinator


def completes_without_waiting(coroutine: Any) -> Any:
    """The coroutine's result if it finishes without suspending once (no await on the HW), else fails."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("the coroutine suspended")


def test_a_heartbeat_that_writes_nothing_answers_at_once_unless_its_partition_has_a_pending_write(
        tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path)

    async def join() -> dict[str, Any]:
        answer = asyncio.ensure_future(beat(runtime, "m1"))
        await asyncio.sleep(0)
        partition.on_follower_fetch(2, partition.log_end_offset)
        return await answer

    joined = asyncio.run(join())
    owned = assigned(joined)
    # the member reports what it owns: it has reconciled, its epoch is current, nothing to write
    first = completes_without_waiting(beat(runtime, "m1", joined["member_epoch"], owned))
    assert first["error_code"] == ErrorCode.none
    end = partition.log_end_offset
    again = completes_without_waiting(beat(runtime, "m1", joined["member_epoch"], owned))
    assert again["error_code"] == ErrorCode.none and again["member_epoch"] == joined["member_epoch"]
    assert partition.log_end_offset == end == partition.high_watermark  # it wrote nothing

    # another group's commit leaves the HW behind what was written: a heartbeat writing nothing waits for it, as
    # Kafka's write that turned out a read waits on the partition's last pending write
    async def behind() -> tuple[bool, dict[str, Any]]:
        runtime.apply(runtime.ready().commit_offsets("other", -1, "", None, [OffsetToCommit("t", 0, 5, -1, "")]))
        assert partition.high_watermark < partition.log_end_offset
        end = partition.log_end_offset
        task = asyncio.ensure_future(beat(runtime, "m1", joined["member_epoch"], owned))
        await asyncio.sleep(0.05)
        waited = not task.done() and partition.log_end_offset == end
        partition.on_follower_fetch(2, partition.log_end_offset)
        return waited, await asyncio.wait_for(task, 1)

    waited, steady = asyncio.run(behind())
    assert waited
    assert steady["error_code"] == ErrorCode.none and steady["member_epoch"] == joined["member_epoch"]


def test_on_rf1_a_heartbeat_that_writes_answers_at_once(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path, replicated=False)
    response = completes_without_waiting(beat(runtime, "m1"))
    assert response["error_code"] == ErrorCode.none and response["member_epoch"] == 1
    assert partition.high_watermark == partition.log_end_offset > 0


def test_offset_fetch_v9_checks_the_member_epoch_as_of_the_hw(tmp_path: Any) -> None:
    """Kafka's validateOffsetFetch runs at the last committed offset: a member whose leaving is not committed yet
    still fetches in its epoch; a require_stable fetch (a write in Kafka 4) checks the latest state."""
    runtime, partition = runtime_on(tmp_path)

    def fetch_error(latest: bool = False) -> ErrorCode:
        coordinator = runtime.ready() if latest else runtime.committed("g")
        try:
            coordinator.fetch_offsets("g", [("t", 0)], "m1", 1, latest=latest)
        except KafkaError as exc:
            return exc.code
        return ErrorCode.none

    async def run() -> tuple[list[ErrorCode], dict[str, Any]]:
        joined = asyncio.ensure_future(beat(runtime, "m1"))
        await asyncio.sleep(0.02)
        partition.on_follower_fetch(2, partition.log_end_offset)
        assert (await joined)["member_epoch"] == 1
        leaving = asyncio.ensure_future(beat(runtime, "m1", epoch=-1))
        await asyncio.sleep(0.02)
        assert not leaving.done() and partition.high_watermark < partition.log_end_offset
        errors = [fetch_error(), fetch_error(latest=True)]
        partition.on_follower_fetch(2, partition.log_end_offset)
        response = await leaving
        return errors + [fetch_error()], response

    errors, left = asyncio.run(run())
    assert left["error_code"] == ErrorCode.none and left["member_epoch"] == -1
    assert errors == [ErrorCode.none, ErrorCode.unknown_member_id, ErrorCode.unknown_member_id]
