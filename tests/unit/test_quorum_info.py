"""The single controller's quorum description: its leader state, its observers' fetches, and the wire round trip."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from klamm.broker.handlers.quorum import response
from klamm.controller.controller import SNAPSHOT_EPOCH, Controller
from klamm.controller.metadata_log import FileMetadataLog
from klamm.controller.quorum_info import (NO_DIRECTORY_ID, OBSERVER_SESSION_TIMEOUT_MS, SINGLE_VOTER_EPOCH, QuorumInfo,
                                          ReplicaInfo, SingleVoterQuorum, from_response)
from klamm.protocol.api import message_types
from klamm.protocol.batch import split_batches
from klamm.protocol.build import build


class FakeLog:
    def __init__(self, end_offset: int) -> None:
        self.end_offset = self.committed_end_offset = end_offset


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def quorum(end: int = 10) -> tuple[SingleVoterQuorum, FakeLog, Clock]:
    log, clock = FakeLog(end), Clock()
    return SingleVoterQuorum(1, log, [("CONTROLLER", "h", 9093)], clock), log, clock


def observer(q: SingleVoterQuorum, replica_id: int) -> ReplicaInfo:
    return {o.replica_id: o for o in q.describe_quorum().observers}[replica_id]


def test_the_single_voter_leads_at_its_log_end() -> None:
    q, log, clock = quorum(10)
    info = q.describe_quorum()
    assert info == QuorumInfo(leader_id=1, leader_epoch=SINGLE_VOTER_EPOCH, high_watermark=10,
                              voters=[ReplicaInfo(1, NO_DIRECTORY_ID, 10, clock.now, clock.now)], observers=[],
                              voter_endpoints={1: [("CONTROLLER", "h", 9093)]})
    log.end_offset = log.committed_end_offset = 12
    clock.now += 5
    info = q.describe_quorum()
    assert info.high_watermark == info.voters[0].log_end_offset == 12
    assert info.voters[0].last_fetch_timestamp == info.voters[0].last_caught_up_timestamp == clock.now
    log.end_offset = 14  # appended, its fsync not done yet: not committed
    info = q.describe_quorum()
    assert (info.high_watermark, info.voters[0].log_end_offset) == (12, 14)


def test_a_fetch_at_the_log_end_is_caught_up_one_behind_is_not() -> None:
    q, _, clock = quorum(10)
    q.record_fetch(3, 10)
    q.record_fetch(2, 4)
    assert observer(q, 3) == ReplicaInfo(3, NO_DIRECTORY_ID, 10, clock.now, clock.now)
    assert observer(q, 2) == ReplicaInfo(2, NO_DIRECTORY_ID, 4, clock.now, -1)
    assert [o.replica_id for o in q.describe_quorum().observers] == [2, 3]  # by id


def test_reaching_the_previous_fetchs_log_end_is_caught_up_as_of_that_fetch() -> None:
    # Kafka's updateFollowerState: the log grew meanwhile, but the replica has all it held at its previous fetch.
    q, log, clock = quorum(10)
    q.record_fetch(2, 4)
    first = clock.now
    log.end_offset, clock.now = 15, first + 100
    q.record_fetch(2, 10)
    assert observer(q, 2).last_caught_up_timestamp == first
    clock.now += 100
    q.record_fetch(2, 12)  # short of 15, the log end at its previous fetch: no news
    assert observer(q, 2).last_caught_up_timestamp == first
    assert observer(q, 2).last_fetch_timestamp == clock.now and observer(q, 2).log_end_offset == 12


def test_consumers_and_the_leader_itself_are_not_observers() -> None:
    q, _, _ = quorum()
    q.record_fetch(-1, 10)
    q.record_fetch(1, 10)
    assert q.describe_quorum().observers == []


def test_an_observer_silent_for_the_session_timeout_is_forgotten() -> None:
    q, _, clock = quorum()
    q.record_fetch(2, 10)
    q.record_fetch(3, 10)
    clock.now += OBSERVER_SESSION_TIMEOUT_MS - 1
    q.record_fetch(3, 10)
    clock.now += 1
    assert [o.replica_id for o in q.describe_quorum().observers] == [3]


def test_an_observer_keeps_the_directory_id_its_fetch_names() -> None:
    q, _, _ = quorum()
    directory = uuid.uuid4()
    q.record_fetch(2, 10, directory)
    assert observer(q, 2).directory_id == directory


def test_the_epoch_is_the_one_the_metadata_log_is_written_in(tmp_path: Path) -> None:
    controller = Controller(FileMetadataLog.open(tmp_path), node_id=1)
    try:
        controller.load()
        data = controller.log.log.read_bytes(0, 1 << 20)
        epochs = {header.partition_leader_epoch for header in split_batches(bytearray(data))}
        assert epochs == {SINGLE_VOTER_EPOCH} == {SNAPSHOT_EPOCH}
    finally:
        controller.close()


@pytest.mark.parametrize("version", [0, 1, 2])
def test_the_response_reads_back_as_the_same_quorum(version: int) -> None:
    directory = uuid.uuid4()
    info = QuorumInfo(leader_id=1, leader_epoch=0, high_watermark=42,
                      voters=[ReplicaInfo(1, NO_DIRECTORY_ID, 42, 1000, 1000)],
                      observers=[ReplicaInfo(2, directory, 40, 990, 900), ReplicaInfo(3, NO_DIRECTORY_ID, -1, -1, -1)],
                      voter_endpoints={1: [("CONTROLLER", "::1", 9093)]})
    body = build(message_types(55, version).response, response(info))
    partition = body.topics[0].partitions[0]
    back = from_response(partition, getattr(body, "nodes", ()))
    if version == 2:
        assert back == info
        return
    # Older versions lack the directory ids and endpoints (and v0 the times): those read back unknown.
    def older(r: ReplicaInfo) -> ReplicaInfo:
        times = (r.last_fetch_timestamp, r.last_caught_up_timestamp) if version == 1 else (-1, -1)
        return ReplicaInfo(r.replica_id, NO_DIRECTORY_ID, r.log_end_offset, *times)
    assert back == QuorumInfo(1, 0, 42, [older(r) for r in info.voters], [older(r) for r in info.observers], {})
