"""The KRaft core's pieces, one behaviour at a time (the simulator covers them together)."""

from __future__ import annotations

import json
from pathlib import Path

from klamm.controller.raft.log import UNKNOWN, MemoryRaftLog
from klamm.controller.raft.messages import (
    Batch,
    BeginQuorumEpochRequest,
    Envelope,
    FetchRequest,
    FetchResponse,
    OffsetAndEpoch,
    VoteRequest,
    VoteResponse,
)
from klamm.controller.raft.node import RaftConfig, RaftNode, Role
from klamm.controller.raft.quorum_state import (
    ElectionState,
    FileQuorumStateStore,
    MemoryQuorumStateStore,
)
from klamm.protocol.errors import ErrorCode

CONFIG = RaftConfig(append_linger_ms=5)


def node(node_id: int, voters: set[int], log: MemoryRaftLog | None = None,
         store: MemoryQuorumStateStore | None = None) -> RaftNode:
    return RaftNode(node_id, voters, log or MemoryRaftLog(), store or MemoryQuorumStateStore(), config=CONFIG)


def test_a_single_voter_leads_at_once_and_commits_on_flush() -> None:
    solo = node(1, {1})
    solo.tick(0)
    assert solo.role is Role.LEADER and solo.epoch == 1
    assert solo.store.read() == ElectionState(1, 1, 1)  # type: ignore[attr-defined]
    assert solo.log.read(0, 10)[0].control  # the LeaderChange batch opens the epoch
    last = solo.append([b"a", b"b"], 1)
    assert last == 2 and solo.high_watermark < 3
    solo.tick(1 + CONFIG.append_linger_ms)
    assert solo.high_watermark == 3


def test_a_follower_that_hears_from_its_leader_refuses_pre_votes_and_keeps_its_epoch() -> None:
    follower = node(2, {1, 2, 3})
    follower.handle(Envelope(1, 2, 1, BeginQuorumEpochRequest(4, 1)), 0)
    assert follower.role is Role.FOLLOWER and follower.epoch == 4
    fetch = follower.take_outbox()[-1]
    assert isinstance(fetch.body, FetchRequest)
    follower.handle(Envelope(1, 2, fetch.correlation_id, FetchResponse(ErrorCode.none, 4, 1, 0)), 10)
    follower.take_outbox()
    follower.handle(Envelope(3, 2, 7, VoteRequest(4, 3, 9, 100, pre_vote=True)), 20)
    answer = follower.take_outbox()[0].body
    assert isinstance(answer, VoteResponse) and not answer.granted and answer.leader_id == 1
    assert follower.epoch == 4 and follower.role is Role.FOLLOWER
    # A standard vote in a later epoch does move it (the candidate won its pre-vote elsewhere).
    follower.handle(Envelope(3, 2, 8, VoteRequest(5, 3, 9, 100)), 30)
    answer = follower.take_outbox()[0].body
    assert isinstance(answer, VoteResponse) and answer.granted and follower.epoch == 5
    assert follower.store.read() == ElectionState(5, -1, 3)  # type: ignore[attr-defined]


def test_a_vote_is_granted_once_per_epoch_and_only_to_an_up_to_date_log() -> None:
    log = MemoryRaftLog()
    log.append(Batch(0, 2, (b"x", b"y")))
    voter = node(1, {1, 2, 3}, log)
    voter.handle(Envelope(2, 1, 1, VoteRequest(3, 2, 1, 10)), 0)  # older last epoch: not up to date
    assert not voter.take_outbox()[0].body.granted  # type: ignore[union-attr]
    voter.handle(Envelope(2, 1, 2, VoteRequest(3, 2, 2, 2)), 0)
    assert voter.take_outbox()[0].body.granted  # type: ignore[union-attr]
    voter.handle(Envelope(3, 1, 3, VoteRequest(3, 3, 2, 5)), 0)  # same epoch, another candidate
    assert not voter.take_outbox()[0].body.granted  # type: ignore[union-attr]
    restarted = node(1, {1, 2, 3}, log, voter.store)  # type: ignore[arg-type]
    restarted.handle(Envelope(3, 1, 1, VoteRequest(3, 3, 2, 5)), 0)
    assert not restarted.take_outbox()[0].body.granted  # type: ignore[union-attr]


def test_the_leader_reports_a_diverging_epoch() -> None:
    log = MemoryRaftLog()
    log.append(Batch(0, 1, (b"a", b"b")))
    log.append(Batch(2, 3, (b"c",)))
    store = MemoryQuorumStateStore()
    store.write(ElectionState(3, 1, 1))
    leader = node(1, {1}, log, store)
    leader.tick(0)
    leader.tick(10_000)
    assert leader.role is Role.LEADER and leader.epoch == 4
    leader.handle(Envelope(7, 1, 1, FetchRequest(7, 4, 5, 2, 0)), 0)
    response = leader.take_outbox()[0].body
    assert isinstance(response, FetchResponse) and response.diverging == OffsetAndEpoch(1, 2)


def a_leader_of_three() -> tuple[RaftNode, int]:
    """Node 1 elected by 2 and 3 (their votes answered by hand), and when."""
    leader = node(1, {1, 2, 3})
    now = 0
    while leader.role is not Role.LEADER:
        now += 1_000
        leader.tick(now)
        for envelope in leader.take_outbox():
            if isinstance(envelope.body, VoteRequest):
                answer = VoteResponse(ErrorCode.none, envelope.body.epoch, -1, True)
                leader.handle(Envelope(envelope.destination, 1, envelope.correlation_id, answer), now)
    leader.take_outbox()
    return leader, now


def test_a_fetch_by_a_replica_not_yet_told_the_high_watermark_is_answered_at_once() -> None:
    leader, now = a_leader_of_three()
    epoch = leader.epoch
    leader.append([b"a"], now)
    leader.tick(now + CONFIG.append_linger_ms)  # flushed
    end = leader.log.end_offset
    leader.handle(Envelope(3, 1, 1, FetchRequest(3, epoch, 0, 0, 500)), now)  # 3 takes the batches
    before = leader.take_outbox()[0].body
    assert isinstance(before, FetchResponse) and before.batches and before.high_watermark < end
    leader.handle(Envelope(2, 1, 1, FetchRequest(2, epoch, end, epoch, 500)), now)  # 2 makes the majority
    assert leader.take_outbox()[0].body.high_watermark == end  # type: ignore[union-attr]
    # 3 holds everything, but the high watermark moved after its last answer: no waiting for new records.
    leader.handle(Envelope(3, 1, 2, FetchRequest(3, epoch, end, epoch, 500)), now + 1)
    (answer,) = leader.take_outbox()
    assert isinstance(answer.body, FetchResponse) and answer.body.high_watermark == end and not answer.body.batches
    # Told now, its next fetch waits for records (or the high watermark) as before.
    leader.handle(Envelope(3, 1, 3, FetchRequest(3, epoch, end, epoch, 500)), now + 2)
    assert leader.take_outbox() == []
    leader.tick(now + 502)
    assert leader.take_outbox()[0].body.high_watermark == end  # type: ignore[union-attr]


def test_memory_log_epochs_truncation_and_cleaning() -> None:
    log = MemoryRaftLog()
    for base, epoch in ((0, 1), (2, 1), (4, 3), (6, 5)):
        log.append(Batch(base, epoch, (b"r", b"r")))
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(1, 4)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(1, 4)
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(3, 6)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(5, 8)
    assert log.end_offset_for_epoch(0) == UNKNOWN
    log.flush()
    log.truncate_to(5)  # inside a batch: the whole batch goes
    assert log.end_offset == 4 and log.last_fetched_epoch() == 1
    log.append(Batch(4, 2, (b"s",)))
    log.lose_unflushed()
    assert log.end_offset == 4
    log.create_snapshot(OffsetAndEpoch(1, 2), b"state")
    log.delete_before(OffsetAndEpoch(1, 2))
    assert log.start_offset == 2 and [b.base_offset for b in log.read(0, 10)] == [2]
    log.install_snapshot(OffsetAndEpoch(6, 40), b"later")
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch()) == (40, 40, 6)


def test_quorum_state_file_is_kafkas(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path, frozenset({1, 2, 3}))
    assert store.read() is None
    store.write(ElectionState(7, 2, 3))
    data = json.loads((tmp_path / "quorum-state").read_text())
    assert data == {"clusterId": "", "leaderId": 2, "leaderEpoch": 7, "votedId": 3, "appliedOffset": 0,
                    "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}], "data_version": 0}
    assert store.read() == ElectionState(7, 2, 3)
    # What Kafka 3.9 writes with a dynamic quorum (version 1) reads too.
    (tmp_path / "quorum-state").write_text('{"leaderId":-1,"leaderEpoch":12,"votedId":3,'
                                           '"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}')
    assert store.read() == ElectionState(12, -1, 3)
