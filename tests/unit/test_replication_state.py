"""The leader's ISR/HW state machine and the follower's truncation rules (klamm.broker.replication)."""

from __future__ import annotations

import asyncio
import uuid

from klamm.broker.partition import Partition
from klamm.broker.replication import (IsrProposal, LeaderState, diverging_epoch, follower_high_watermark,
                                      out_of_range_offset, truncation_offset)
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.protocol.errors import ErrorCode
from klamm.protocol.records import build_batch
from klamm.storage.log import Log, LogConfig

LAG = 1000


def leader(isr=(1, 2, 3), leo=10, hw=10, start=10, now=0) -> LeaderState:
    return LeaderState(1, 5, 7, (1, 2, 3), isr, start, leo, hw, now, LAG)


def test_the_hw_waits_for_every_isr_member_and_never_goes_back():
    state = leader()
    assert not state.on_local_append(15, 1)
    assert state.high_watermark == 10  # no follower has fetched in this epoch yet
    assert state.on_follower_fetch(2, 15, 15, 2) == (False, None)
    assert state.on_follower_fetch(3, 12, 15, 3) == (True, None)
    assert state.high_watermark == 12
    state.on_follower_fetch(3, 11, 15, 4)  # a stale fetch position
    assert state.high_watermark == 12
    assert state.on_follower_fetch(3, 15, 15, 5) == (True, None)
    assert state.high_watermark == 15


def test_an_isr_of_one_commits_on_append():
    state = leader(isr=(1,))
    assert state.on_local_append(11, 1) and state.high_watermark == 11


def test_a_lagging_follower_is_proposed_out_then_back_in():
    state = leader()
    state.on_local_append(20, 0)
    state.on_follower_fetch(2, 20, 20, 100)
    state.on_follower_fetch(3, 12, 20, 100)
    assert state.tick(LAG, 20) is None  # 3 caught up at its previous... not yet lagging long enough
    proposal = state.tick(LAG + 1, 20)
    assert proposal == IsrProposal(5, 7, (1, 2))
    assert state.tick(LAG + 2, 20) is None  # one proposal at a time
    assert state.maximal_isr == (1, 2, 3)  # a shrink keeps counting 3 until committed
    assert not state.on_partition_change(5, 8, (1, 2), (1, 2, 3), LAG + 3) or state.high_watermark == 20
    assert state.isr == (1, 2) and state.pending is None
    # 3 catches up: it joins once it reached the HW and the epoch start
    moved, expand = state.on_follower_fetch(3, 20, 20, LAG + 4)
    assert expand == IsrProposal(5, 8, (1, 2, 3))
    assert state.maximal_isr == (1, 2, 3)


def test_a_fenced_broker_cannot_join_and_an_early_follower_waits_for_the_epoch_start():
    state = leader(isr=(1, 2), leo=10, hw=4, start=10)
    assert state.on_follower_fetch(3, 8, 10, 1) == (False, None)  # past the HW, short of the epoch start
    state.fenced_or_shutting_down = {3}
    assert state.on_follower_fetch(3, 10, 10, 2)[1] is None


def test_a_failed_proposal_allows_another_except_after_invalid_update_version():
    state = leader(isr=(1, 2))
    _, proposal = state.on_follower_fetch(3, 10, 10, 1)
    assert proposal is not None
    state.on_proposal_failed(ErrorCode.invalid_update_version)  # maybe committed: still counted for the HW
    assert state.pending == proposal and state.maximal_isr == (1, 2, 3)
    state.on_proposal_failed(ErrorCode.ineligible_replica)
    assert state.pending is None and state.maximal_isr == (1, 2)


def test_acks_all_outcome():
    state = leader(isr=(1, 2))
    state.on_local_append(12, 0)
    assert state.acks_all_outcome(12, 2) is None
    state.on_follower_fetch(2, 12, 12, 1)
    assert state.acks_all_outcome(12, 2) == ErrorCode.none
    assert state.acks_all_outcome(12, 3) == ErrorCode.not_enough_replicas_after_append
    assert state.has_enough_replicas(2) and not state.has_enough_replicas(3)


def test_diverging_epoch_and_truncation():
    # leader: epochs 0 [0,10) 3 [10,25): a follower fetching at 14 after epoch 2 diverges at (0, 10)
    assert diverging_epoch((0, 10), 14, 2) == (0, 10)
    assert diverging_epoch((3, 25), 14, 3) is None
    assert diverging_epoch((3, 12), 14, 3) == (3, 12)  # the leader's epoch 3 ends before 14
    # follower with that epoch: keep the common part
    assert truncation_offset((3, 12), (3, 14), 14) == 12
    # follower without the leader's epoch: back to the end of its own earlier epoch, then fetch again
    assert truncation_offset((0, 10), (0, 11), 14) == 10
    assert truncation_offset((2, 10), (1, 8), 14) == 8
    assert truncation_offset((2, 10), (-1, -1), 14) == 10


def test_out_of_range_and_follower_high_watermark():
    assert out_of_range_offset(30, 0, 25) == (25, False)
    assert out_of_range_offset(5, 10, 25) == (10, True)
    assert follower_high_watermark(20, 15) == 15 and follower_high_watermark(10, 15) == 10


def test_an_acks_all_wait_is_answered_by_the_hw_or_times_out(tmp_path) -> None:
    """Partition.wait_for_replication: the HW passing the records answers it; else its timeout does, with
    REQUEST_TIMED_OUT. Either way it leaves no waiter and no timer behind."""
    partition = Partition("t", 0, uuid.uuid4(), Log.open(tmp_path / "t-0", LogConfig()),
                          TopicConfig.resolve(BrokerConfig.from_properties({}), {}))
    partition.become_leader(1, node_id=1, replicas=(1, 2), isr=(1, 2))

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        end = partition.append(build_batch([(None, b"x")])).last_offset + 1
        timers = len(loop._scheduled)  # type: ignore[attr-defined]
        assert await partition.wait_for_replication(end, 0.05) == ErrorCode.request_timed_out
        assert not partition._replication_waiters
        waiting = asyncio.ensure_future(partition.wait_for_replication(end, 30))
        await asyncio.sleep(0)
        assert len(partition._replication_waiters) == 1
        partition.on_follower_fetch(2, end, 0)
        assert await waiting == ErrorCode.none
        assert not partition._replication_waiters
        assert sum(not h.cancelled() for h in loop._scheduled) <= timers  # type: ignore[attr-defined]

    asyncio.run(scenario())
