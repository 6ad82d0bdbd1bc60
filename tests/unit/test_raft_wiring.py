"""The KRaft core's ties to klamm: the file log under it, its messages on Kafka's wire, its configuration."""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
from kio.serial import entity_reader, entity_writer

from klamm.config.broker import BrokerConfig
from klamm.controller.metadata_log import FileMetadataLog
from klamm.controller.raft import wire
from klamm.controller.raft.driver import raft_config
from klamm.controller.raft.file_log import FileRaftLog, decode_batches
from klamm.controller.raft.log import MemoryRaftLog
from klamm.controller.raft.messages import (
    Batch,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    VoteRequest,
    VoteResponse,
)
from klamm.controller.raft.node import RaftNode, Role, leader_change_record
from klamm.controller.raft.quorum_state import MemoryQuorumStateStore
from klamm.controller.snapshot import SnapshotId
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.errors import ErrorCode


def test_quorum_configs_reach_the_raft_node() -> None:
    config = BrokerConfig.from_properties({
        "controller.quorum.election.timeout.ms": "300", "controller.quorum.fetch.timeout.ms": "700",
        "controller.quorum.election.backoff.max.ms": "50", "controller.quorum.request.timeout.ms": "900",
        "controller.quorum.retry.backoff.ms": "7", "controller.quorum.append.linger.ms": "3"})
    raft = raft_config(config)
    assert (raft.election_timeout_ms, raft.fetch_timeout_ms, raft.election_backoff_max_ms, raft.request_timeout_ms,
            raft.retry_backoff_ms, raft.append_linger_ms) == (300, 700, 50, 900, 7, 3)
    defaults = raft_config(BrokerConfig.from_properties({}))
    assert (defaults.election_timeout_ms, defaults.fetch_timeout_ms, defaults.append_linger_ms) == (1000, 2000, 25)
    # The election timer of a voter without a leader is randomized in [T, 2T); a leader flushes after the linger.
    node = RaftNode(1, {1, 2, 3}, MemoryRaftLog(), MemoryQuorumStateStore(), config=raft, now_ms=0)
    assert 300 <= node.next_deadline_ms() < 600
    solo = RaftNode(1, {1}, MemoryRaftLog(), MemoryQuorumStateStore(), config=raft, now_ms=0)
    solo.tick(0)
    solo.tick(5)  # the LeaderChange batch flushed
    solo.append([b"x"], 10)
    assert solo.role is Role.LEADER and solo.next_deadline_ms() == 13


def _files(tmp_path: Path) -> tuple[FileMetadataLog, FileRaftLog]:
    files = FileMetadataLog.open(tmp_path, segment_bytes=2048)
    return files, FileRaftLog(files)


def test_the_file_log_behaves_as_the_memory_log(tmp_path: Path) -> None:
    """Random appends (data and control), truncations and reads: the same answers from both logs."""
    rng = random.Random(3)
    files, on_disk = _files(tmp_path)
    memory = MemoryRaftLog()
    epoch = 1
    for step in range(400):
        action = rng.random()
        if action < 0.7:
            epoch += rng.random() < 0.1
            control = rng.random() < 0.1
            records = (leader_change_record(1, [1, 2, 3]),) if control else tuple(
                f"{step}.{i}".encode() for i in range(rng.randint(1, 4)))
            batch = Batch(memory.end_offset, epoch, records, control)
            memory.append(batch)
            on_disk.append(batch)
        elif action < 0.8 and memory.end_offset:
            offset = rng.randrange(memory.end_offset)
            memory.truncate_to(offset)
            on_disk.truncate_to(offset)
            epoch = max(1, memory.last_fetched_epoch())
        assert on_disk.end_offset == memory.end_offset
        assert on_disk.last_fetched_epoch() == memory.last_fetched_epoch()
        for asked in range(epoch + 2):
            assert on_disk.end_offset_for_epoch(asked) == memory.end_offset_for_epoch(asked), (step, asked)
        if memory.end_offset:
            offset = rng.randrange(memory.end_offset)
            mine = [(b.base_offset, b.epoch, b.records, b.control) for b in memory.read(offset, 5)]
            theirs = [(b.base_offset, b.epoch, b.records, b.control) for b in on_disk.read(offset, 5)]
            assert theirs == mine
    on_disk.flush()
    assert on_disk.flushed_end_offset == memory.end_offset
    files.close()
    files, reopened = _files(tmp_path)
    assert reopened.end_offset == memory.end_offset
    assert reopened.end_offset_for_epoch(epoch) == memory.end_offset_for_epoch(epoch)
    files.close()


def test_a_fetched_snapshot_restarts_the_file_log(tmp_path: Path) -> None:
    source, leader = _files(tmp_path / "leader")
    source.write_snapshot(SnapshotId(40, 6), [b"r1", b"r2"], 1234)
    data = leader.read_snapshot(OffsetAndEpoch(6, 40))
    assert data is not None and leader.latest_snapshot() == OffsetAndEpoch(6, 40)
    files, follower = _files(tmp_path / "follower")
    follower.append(Batch(0, 1, (b"old",)))
    with pytest.raises(ValueError):
        follower.install_snapshot(OffsetAndEpoch(6, 40), data[:-3])  # not whole: refused, nothing changes
    assert follower.end_offset == 1
    follower.install_snapshot(OffsetAndEpoch(6, 40), data)
    assert (follower.start_offset, follower.end_offset, follower.last_fetched_epoch()) == (40, 40, 6)
    assert follower.end_offset_for_epoch(6) == OffsetAndEpoch(6, 40)
    assert files.read_snapshot(SnapshotId(40, 6)).values == [b"r1", b"r2"]
    source.close()
    files.close()


def _over_the_wire(api_key: int, version: int, body: dict, kind: str) -> object:
    types = message_types(api_key, version)
    entity = getattr(types, kind)
    buffer = io.BytesIO()
    entity_writer(entity)(buffer, build(entity, body))
    decoded, _ = entity_reader(entity)(buffer.getvalue(), 0)
    return decoded


REQUESTS = [VoteRequest(7, 2, 6, 120, pre_vote=True), VoteRequest(8, 3, 6, 120),
            BeginQuorumEpochRequest(8, 3), EndQuorumEpochRequest(8, 3, (1, 2)),
            FetchRequest(2, 8, 130, 7, 500), FetchSnapshotRequest(2, 8, OffsetAndEpoch(7, 100), 4096, 1 << 20)]


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_requests_cross_the_wire_unchanged(request_: object) -> None:
    api_key, version, body = wire.request_body(request_, "cluster", 1)  # type: ignore[arg-type]
    assert (api_key, version) in [(k, v) for k, v in wire.VERSIONS.items()]
    decoded = _over_the_wire(api_key, version, body, "request")
    assert wire.request_message(api_key, decoded, current_epoch=99) == request_


BATCHES = (Batch(120, 8, (leader_change_record(3, [1, 2, 3]),), control=True), Batch(121, 8, (b"a", b"b")))
RESPONSES = [(wire.VOTE, VoteResponse(ErrorCode.none, 8, 3, True)),
             (wire.BEGIN_QUORUM_EPOCH, BeginQuorumEpochResponse(ErrorCode.fenced_leader_epoch, 9, 1)),
             (wire.END_QUORUM_EPOCH, EndQuorumEpochResponse(ErrorCode.none, 8, -1)),
             (wire.FETCH, FetchResponse(ErrorCode.none, 8, 3, 121, 0, BATCHES)),
             (wire.FETCH, FetchResponse(ErrorCode.none, 8, 3, 121, 0, diverging=OffsetAndEpoch(6, 100))),
             (wire.FETCH, FetchResponse(ErrorCode.none, 8, 3, 121, 100, snapshot_id=OffsetAndEpoch(7, 100))),
             (wire.FETCH, FetchResponse(ErrorCode.not_leader_or_follower, 8, 3)),
             (wire.FETCH_SNAPSHOT, FetchSnapshotResponse(ErrorCode.none, 8, 3, OffsetAndEpoch(7, 100), 9000, 4096,
                                                         b"chunk"))]


@pytest.mark.parametrize(("api_key", "response"), RESPONSES, ids=lambda r: type(r).__name__)
def test_responses_cross_the_wire_unchanged(api_key: int, response: object) -> None:
    decoded = _over_the_wire(api_key, wire.VERSIONS[api_key], wire.response_body(api_key, response), "response")
    back = wire.response_message(api_key, decoded)
    if isinstance(response, FetchResponse):
        assert [(b.base_offset, b.epoch, b.records, b.control) for b in back.batches] == \
            [(b.base_offset, b.epoch, b.records, b.control) for b in response.batches]  # type: ignore[union-attr]
        assert back == response  # type: ignore[comparison-overlap]
    else:
        assert back == response


def test_a_leader_change_is_kafkas_control_record() -> None:
    from klamm.controller.raft.file_log import encode_batch
    raw = encode_batch(Batch(5, 3, (leader_change_record(2, [1, 2, 3]),), control=True))
    [batch] = decode_batches(raw)
    assert batch.control and batch.epoch == 3 and batch.base_offset == 5
    # LeaderChangeMessage v0: version 0, leader 2, voters [1, 2, 3] twice (voters, granting voters).
    assert batch.records[0] == (b"\x00\x00" + b"\x00\x00\x00\x02" + (b"\x04" + b"".join(
        i.to_bytes(4, "big") + b"\x00" for i in (1, 2, 3))) * 2 + b"\x00")


def test_dump_log_prints_a_leader_change_as_kafka_does(tmp_path: Path) -> None:
    from klamm.cli.tools import dump_log
    from klamm.controller.raft.file_log import encode_batch
    from klamm.protocol.batch import read_batch_header
    from klamm.protocol.records import decode_batch
    raw = encode_batch(Batch(0, 4, (leader_change_record(2, [1, 2, 3]),), control=True))
    header = read_batch_header(raw)
    [record] = decode_batch(raw, 0)[1]
    assert dump_log.control_text(record) == (
        ' LeaderChange: {"version":0,"leaderId":2,"voters":[{"voterId":1},{"voterId":2},{"voterId":3}],'
        '"grantingVoters":[{"voterId":1},{"voterId":2},{"voterId":3}]}')
    assert "isControl: true" in dump_log.batch_line(header, True, 0)


@pytest.mark.parametrize("api_key", sorted(wire.VERSIONS))
def test_a_whole_request_error_crosses_the_wire(api_key: int) -> None:
    body = wire.error_body(api_key, ErrorCode.inconsistent_cluster_id)
    decoded = _over_the_wire(api_key, wire.VERSIONS[api_key], body, "response")
    assert wire.response_message(api_key, decoded).error == ErrorCode.inconsistent_cluster_id
