"""The group coordinator reads committed offsets (and consumer groups) at the high watermark of their
__consumer_offsets partition.

First the state machine alone, told each record's log offset and where the HW is;
then the runtime on a real leader Partition with one follower in its ISR, whose
fetch position (on_follower_fetch) is what moves the HW.
"""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from klamm.broker.partition import Partition, log_config
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.coordinator.consumer_group import TopicMetadata
from klamm.coordinator.consumer_heartbeat import HeartbeatRequest
from klamm.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, OffsetToCommit, Result
from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.runtime import GroupCoordinatorRuntime
from klamm.coordinator.timer import Timer
from klamm.protocol.errors import ErrorCode
from klamm.protocol.topics import CONSUMER_OFFSETS
from klamm.storage.log import Log

PID = 4000


class Machine:
    """The state machine with a log of its own: records get offsets, the HW moves when the test says."""

    def __init__(self, high_watermark: int = 0) -> None:
        self.now = 1_700_000_000_000
        self.coordinator = GroupCoordinator(CoordinatorConfig(num_partitions=1), Timer(lambda: self.now))
        self.coordinator.begin_loading(0)
        self.coordinator.advance(0, high_watermark)
        self.coordinator.finish_loading(0)
        self.log: list[CoordinatorRecord | tuple[int, bool]] = []

    def apply(self, result: Result) -> Any:
        for record in result.records:
            self.log.append(record)
            self.coordinator.replay(record, len(self.log) - 1)
        for action in result.after_write:
            action(ErrorCode.none)
        return result.response

    def commit(self, offset: int, group: str = "g", partition: int = 0) -> None:
        assert self.apply(self.coordinator.commit_offsets(group, -1, "", None, [
            OffsetToCommit("t", partition, offset, -1, "")])) == {("t", partition): ErrorCode.none}

    def txn_commit(self, offset: int, group: str = "g") -> None:
        self.apply(self.coordinator.commit_txn_offsets(group, PID, 0, -1, "", None,
                                                       [OffsetToCommit("t", 0, offset, -1, "")]))

    def marker(self, commit: bool) -> None:
        self.log.append((PID, commit))
        self.coordinator.replay_marker(0, PID, commit, len(self.log) - 1)

    def hw(self, offset: int) -> None:
        self.coordinator.advance(0, offset)

    def read(self, group: str = "g", partition: int = 0) -> int:
        committed = self.coordinator.fetch_offsets(group, [("t", partition)])[("t", partition)]
        return -1 if committed is None else committed.offset

    def latest(self, group: str = "g", partition: int = 0) -> int:
        committed = self.coordinator.fetch_offsets(group, [("t", partition)], latest=True)[("t", partition)]
        return -1 if committed is None else committed.offset


def test_a_commit_above_the_hw_is_read_once_the_hw_passes_it() -> None:
    m = Machine()
    m.commit(10)  # at log offset 0, HW 0
    assert m.read() == -1
    assert m.latest() == 10  # what writes and a require_stable fetch see
    assert m.coordinator.fetch_offsets("g", None) == {}
    m.hw(1)
    assert m.read() == 10
    assert list(m.coordinator.fetch_offsets("g", None)) == [("t", 0)]


def test_each_commit_becomes_readable_as_the_hw_passes_its_record() -> None:
    m = Machine()
    m.commit(10)  # log offset 0
    m.hw(1)
    m.commit(20)  # 1
    m.commit(30)  # 2
    m.commit(5, partition=1)  # 3
    assert (m.read(), m.read(partition=1)) == (10, -1)
    m.hw(2)
    assert (m.read(), m.read(partition=1)) == (20, -1)
    m.hw(3)
    assert (m.read(), m.read(partition=1)) == (30, -1)
    m.hw(4)
    assert (m.read(), m.read(partition=1)) == (30, 5)
    m.hw(3)  # the HW does not go back
    assert m.read(partition=1) == 5


def test_deletions_above_the_hw_leave_the_offsets_readable_until_the_hw_passes_them() -> None:
    m = Machine()
    m.commit(10)
    m.commit(7, group="other")
    m.hw(2)
    error, errors = m.apply(m.coordinator.delete_offsets("g", [("t", 0)]))
    assert (error, errors) == (ErrorCode.none, {("t", 0): ErrorCode.none})
    assert m.apply(m.coordinator.delete_groups(["other"])) == {"other": ErrorCode.none}
    assert "other" not in m.coordinator.groups  # the latest state: the group is gone
    assert (m.read(), m.read("other")) == (10, 7)
    assert m.latest() == -1
    m.hw(len(m.log))
    assert (m.read(), m.read("other")) == (-1, -1)


def test_what_the_hw_never_passed_is_never_read_after_the_partition_is_unloaded() -> None:
    m = Machine()
    m.commit(10)
    m.hw(1)
    m.commit(20)  # never replicated: the leadership goes
    m.coordinator.unload(0)
    # the next leader of this broker's partition: its log ends at the old HW
    m.coordinator.begin_loading(0)
    m.coordinator.advance(0, 1)
    for offset, record in enumerate(m.log[:1]):
        assert isinstance(record, CoordinatorRecord)
        m.coordinator.replay(record, offset)
    m.coordinator.finish_loading(0)
    assert m.read() == 10
    m.hw(5)
    assert m.read() == 10


def test_transactional_offsets_are_read_once_the_hw_passes_their_commit_marker() -> None:
    m = Machine()
    m.commit(10)
    m.hw(1)
    m.txn_commit(50)  # log offset 1
    m.hw(2)
    assert m.coordinator.has_pending_offset("g", "t", 0) and m.read() == 10
    m.marker(commit=True)  # log offset 2
    assert not m.coordinator.has_pending_offset("g", "t", 0)
    assert (m.read(), m.latest()) == (10, 50)
    m.hw(3)
    assert m.read() == 50
    m.txn_commit(60)
    m.marker(commit=False)
    m.hw(len(m.log))
    assert m.read() == 50


def test_a_partition_whose_hw_was_never_given_reads_at_once() -> None:
    coordinator = GroupCoordinator(CoordinatorConfig(num_partitions=1), Timer(lambda: 0))
    coordinator.begin_loading(0)
    coordinator.finish_loading(0)
    for record in coordinator.commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, 3, -1, "")]).records:
        coordinator.replay(record, 0)
    assert coordinator.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 3


# ------------------------------------------------------------------ the runtime on a replicated partition
def runtime_on(tmp_path: Any, replicated: bool = True, timeout_ms: int = 200, rebalance_delay_ms: int = 3000
               ) -> tuple[GroupCoordinatorRuntime, Partition]:
    """The runtime over a real leader Partition of __consumer_offsets-0; replicated: a follower (node 2) in its
    ISR whose fetch position (on_follower_fetch) is what moves the HW. Shared by the commit-wait tests."""
    config = TopicConfig.resolve(BrokerConfig.from_properties({}), {})
    partition = Partition(CONSUMER_OFFSETS, 0, uuid.uuid4(), Log.open(tmp_path / "co-0", log_config(config)),
                          config)
    if replicated:
        partition.become_leader(1, node_id=1, replicas=[1, 2], isr=[1, 2])
    broker = SimpleNamespace(
        node_id=1, authorizer=SimpleNamespace(enabled=False),
        config=SimpleNamespace(offsets_commit_timeout_ms=timeout_ms,
                               group_coordinator_rebalance_protocols=["classic", "consumer"]),
        replicas=SimpleNamespace(partitions={(CONSUMER_OFFSETS, 0): partition},
                                 get=lambda topic, index: partition))
    runtime = GroupCoordinatorRuntime(broker)
    broker.group_coordinator = runtime
    runtime.coordinator = GroupCoordinator(
        CoordinatorConfig(num_partitions=1, initial_rebalance_delay_ms=rebalance_delay_ms), runtime.timer)
    runtime.coordinator.begin_loading(0)
    runtime._load(0)
    return runtime, partition


def commit(runtime: GroupCoordinatorRuntime, offset: int) -> None:
    coordinator = runtime.ready()
    assert runtime.apply(coordinator.commit_offsets("g", -1, "", None, [OffsetToCommit("t", 0, offset, -1, "")])) \
        == {("t", 0): ErrorCode.none}


def read(runtime: GroupCoordinatorRuntime) -> int:
    committed = runtime.committed("g").fetch_offsets("g", [("t", 0)])[("t", 0)]
    return -1 if committed is None else committed.offset


def test_the_runtime_reads_at_the_partitions_hw(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path)
    commit(runtime, 10)
    assert (partition.log_end_offset, partition.high_watermark) == (1, 0)
    assert read(runtime) == -1
    partition.on_follower_fetch(2, 1)  # the follower has the record: the HW passes it
    assert partition.high_watermark == 1
    assert read(runtime) == 10
    commit(runtime, 20)
    assert read(runtime) == 10
    partition.on_follower_fetch(2, 2)
    assert read(runtime) == 20


def test_a_loaded_partition_reads_what_is_past_its_hw_once_the_hw_passes_it(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path)
    commit(runtime, 10)
    partition.on_follower_fetch(2, 1)
    commit(runtime, 20)  # log offset 1, above the HW
    coordinator = runtime.ready()
    coordinator.unload(0)
    coordinator.begin_loading(0)
    runtime._load(0)  # replays both records
    assert read(runtime) == 10
    partition.on_follower_fetch(2, 2)
    assert read(runtime) == 20


def test_an_unreplicated_partition_reads_at_the_append(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path, replicated=False)
    commit(runtime, 10)
    assert partition.high_watermark == 1 and read(runtime) == 10


def test_a_stable_fetch_waits_for_the_hw_to_pass_what_was_written(tmp_path: Any) -> None:
    runtime, partition = runtime_on(tmp_path, timeout_ms=5000)

    async def run() -> tuple[bool, ErrorCode]:
        commit(runtime, 10)
        waiting = asyncio.ensure_future(runtime.written_replicated("g"))
        await asyncio.sleep(0.05)
        done_before = waiting.done()
        partition.on_follower_fetch(2, partition.log_end_offset)
        return done_before, await waiting

    assert asyncio.run(run()) == (False, ErrorCode.none)
    assert read(runtime) == 10


def test_a_stable_fetch_the_hw_does_not_reach_in_time_is_not_coordinator(tmp_path: Any) -> None:
    runtime, _ = runtime_on(tmp_path, timeout_ms=50)

    async def run() -> ErrorCode:
        commit(runtime, 10)
        return await runtime.written_replicated("g")

    assert asyncio.run(run()) == ErrorCode.not_coordinator
    assert read(runtime) == -1


# ------------------------------------------------------------------ consumer groups described at the HW
class ConsumerMachine(Machine):
    def __init__(self) -> None:
        super().__init__()
        self.coordinator.consumer.topics = lambda: {"t": TopicMetadata(uuid.UUID(int=7), "t", 4)}

    def beat(self, member_id: str, epoch: int = 0, **fields: Any) -> dict:
        if epoch == 0:
            fields = {"rebalance_timeout_ms": 30_000, "topic_names": ("t",), "owned": {}, **fields}
        return self.apply(self.coordinator.consumer.heartbeat(HeartbeatRequest("g", member_id, epoch, **fields)))

    def described(self) -> tuple[int, int, list[str]]:
        d = self.coordinator.consumer.describe("g")
        return d["error_code"], d["group_epoch"], sorted(m["member_id"] for m in d["members"])

    def listed(self) -> list[str]:
        return [g["group_id"] for g in self.coordinator.list_groups()[1]]


def test_a_consumer_group_is_described_and_listed_as_of_the_hw() -> None:
    m = ConsumerMachine()
    m.beat("m1")
    assert m.described()[0] == ErrorCode.group_id_not_found and m.listed() == []  # only past the HW so far
    m.hw(len(m.log))
    assert m.described() == (ErrorCode.none, 1, ["m1"]) and m.listed() == ["g"]
    first_join = len(m.log)
    m.beat("m2")
    assert m.described() == (ErrorCode.none, 1, ["m1"])
    m.hw(first_join + 1)  # m2's subscription record alone
    assert m.described() == (ErrorCode.none, 1, ["m1", "m2"])
    m.hw(len(m.log))
    assert m.described() == (ErrorCode.none, 2, ["m1", "m2"])
    assert m.coordinator.consumer._at_hw == {}  # nothing kept once the HW passed it all


def test_a_consumer_group_deleted_past_the_hw_is_still_described() -> None:
    m = ConsumerMachine()
    left = m.beat("m1")
    m.beat("m1", -1)  # leaves: the group is empty
    m.hw(len(m.log))
    assert m.apply(m.coordinator.delete_groups(["g"])) == {"g": ErrorCode.none}
    assert "g" not in m.coordinator.consumer.groups
    assert m.described()[0] == ErrorCode.none and m.listed() == ["g"]
    m.hw(len(m.log))
    assert m.described()[0] == ErrorCode.group_id_not_found and m.listed() == []
    assert left["error_code"] == ErrorCode.none


def test_unloading_forgets_the_consumer_groups_as_of_the_hw() -> None:
    m = ConsumerMachine()
    m.beat("m1")
    m.coordinator.unload(0)
    assert m.coordinator.consumer._at_hw == {} and m.coordinator.consumer._past_hw == {}
