"""OffsetFetch reads a commit only once the ISR of its __consumer_offsets partition has it (three brokers).

The followers of the group's partition are killed without being fenced: they stay
in the ISR for replica.lag.time.max.ms, and the high watermark stays where it was.
A commit sent meanwhile is on the leader's log only; another client's OffsetFetch
still reads the previous offset, a require_stable fetch waits, and both read the
new one once the ISR shrinks to the leader and the HW passes the commit.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from klamm.protocol.errors import ErrorCode
from klamm.protocol.topics import CONSUMER_OFFSETS
from klamm.testing import EmbeddedCluster, run_cluster

from tests.integration.conftest import RawClient
from tests.integration.test_coordinator_failures import OFFSET_COMMIT, OFFSET_FETCH, commit, committed
from tests.integration.test_replication import coordinator_of, create, eventually

pytestmark = [pytest.mark.timeout(120)]

LAG_MS = 2500


def coordinator_partition(c: EmbeddedCluster, node: int, group: str) -> Any:
    broker = c.brokers[node]
    return broker.replicas.partitions[(CONSUMER_OFFSETS, broker.group_coordinator.coordinator.partition_for(group))]


async def _on_loop(fn: Any) -> Any:
    return fn()


def marks(c: EmbeddedCluster, partition: Any) -> tuple[int, int]:
    return c.call(_on_loop(lambda: (partition.high_watermark, partition.log_end_offset)))


def commit_request(offset: int) -> dict[str, Any]:
    return {"group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}


def test_an_offset_fetch_reads_a_commit_once_the_hw_passes_it() -> None:
    with run_cluster(3, replica_lag_time_max_ms=LAG_MS, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=50,
                     offsets_commit_timeout_ms=30_000) as c:
        create(c, "t")
        node = coordinator_of(c, "g")
        writer, reader, stable = (RawClient(c.brokers[node].port) for _ in range(3))
        eventually(lambda: commit(writer, "g", "t", 1) == 0)  # once the followers fetch the new partition
        partition = coordinator_partition(c, node, "g")
        eventually(lambda: len(partition.isr) == 3)
        assert committed(reader, "g", "t") == 1
        for follower in [n for n in c.brokers if n != node]:
            c.call(c.kill_broker(follower, fence=False))  # in the ISR still: the HW cannot move
        started = time.monotonic()
        writer.send(OFFSET_COMMIT, 7, commit_request(2))  # answered once the ISR has it
        eventually(lambda: marks(c, partition)[1] > marks(c, partition)[0])
        held_at, end = marks(c, partition)
        assert committed(reader, "g", "t") == 1  # on the leader's log, not yet on the ISR
        stable.send(OFFSET_FETCH, 7, {"group_id": "g", "require_stable": True,
                                      "topics": [{"name": "t", "partition_indexes": [0]}]})
        assert committed(reader, "g", "t") == 1
        assert marks(c, partition)[0] == held_at < end  # it was read while the HW was held
        assert time.monotonic() - started < LAG_MS / 1000

        _, fetched = stable.receive()  # the ISR shrank to the leader: the HW passed the commit
        assert marks(c, partition)[0] >= end
        assert (fetched.error_code, fetched.topics[0].partitions[0].committed_offset) == (ErrorCode.none, 2)
        _, answered = writer.receive()
        assert answered.topics[0].partitions[0].error_code == ErrorCode.none
        assert committed(reader, "g", "t") == 2


CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE, LIST_GROUPS = 68, 69, 16


def test_a_consumer_group_is_described_and_listed_once_the_hw_passes_its_records() -> None:
    """The joining heartbeat answers only once the HW passes its records; meanwhile the group is not read."""
    with run_cluster(3, replica_lag_time_max_ms=LAG_MS, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=50,
                     offsets_commit_timeout_ms=30_000) as c:
        create(c, "t")
        node = coordinator_of(c, "cg")
        member, admin = RawClient(c.brokers[node].port), RawClient(c.brokers[node].port)
        eventually(lambda: commit(member, "cg", "t", 0) == 0)  # the partition's followers are fetching
        partition = coordinator_partition(c, node, "cg")
        eventually(lambda: len(partition.isr) == 3)
        for follower in [n for n in c.brokers if n != node]:
            c.call(c.kill_broker(follower, fence=False))
        started = time.monotonic()
        member.send(CONSUMER_GROUP_HEARTBEAT, 0, {  # answered once the ISR has what it wrote
            "group_id": "cg", "member_id": "", "member_epoch": 0, "rebalance_timeout": 30000,
            "subscribed_topic_names": ["t"], "server_assignor": None, "topic_partitions": []})
        eventually(lambda: marks(c, partition)[1] > marks(c, partition)[0])

        def described() -> Any:
            return admin.request(CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["cg"],
                                                              "include_authorized_operations": False}).groups[0]

        def listed() -> set[str]:
            return {g.group_id for g in admin.request(LIST_GROUPS, 5, {"states_filter": [],
                                                                       "types_filter": ["consumer"]}).groups}

        assert described().error_code == ErrorCode.group_id_not_found and "cg" not in listed()
        assert marks(c, partition)[0] < marks(c, partition)[1]  # read while the HW was held
        assert time.monotonic() - started < LAG_MS / 1000
        _, joined = member.receive()  # the ISR shrank to the leader: the HW passed the heartbeat's records
        assert joined.error_code == ErrorCode.none
        held_at, end = marks(c, partition)
        assert held_at >= end and time.monotonic() - started >= LAG_MS / 1000 / 2
        assert described().error_code == ErrorCode.none  # read at once: the HW is past the records
        assert [m.member_id for m in described().members] == [joined.member_id] and "cg" in listed()
