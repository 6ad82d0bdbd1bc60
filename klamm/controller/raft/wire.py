"""The Raft messages on Kafka's wire: which API and version carries each, and the field mapping both ways.

A controller sends Vote (52) v2 (KIP-996's pre_vote), BeginQuorumEpoch (53)
v0, EndQuorumEpoch (54) v0, Fetch (1) v12 and FetchSnapshot (59) v0 for
`__cluster_metadata` partition 0, the versions klamm's controller listener
serves. Requests and responses each name that one partition; records travel as
the stored v2 batches.
"""

from __future__ import annotations

from typing import Any

from klamm.controller.metadata_log import METADATA_PARTITION, METADATA_TOPIC
from klamm.controller.raft.file_log import decode_batches, encode_batch
from klamm.controller.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    OffsetAndEpoch,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from klamm.protocol.errors import ErrorCode

FETCH, VOTE, BEGIN_QUORUM_EPOCH, END_QUORUM_EPOCH, FETCH_SNAPSHOT = 1, 52, 53, 54, 59
VERSIONS = {FETCH: 12, VOTE: 2, BEGIN_QUORUM_EPOCH: 0, END_QUORUM_EPOCH: 0, FETCH_SNAPSHOT: 0}
FETCH_MAX_BYTES = 8 << 20


def _topic(partition: dict[str, Any], name_field: str = "topic_name") -> list[dict[str, Any]]:
    return [{name_field: METADATA_TOPIC, "partitions": [partition]}]


def request_body(request: Request, cluster_id: str, destination: int) -> tuple[int, int, dict[str, Any]]:
    """(api key, version, request body) that carries `request`."""
    if isinstance(request, VoteRequest):
        return VOTE, 2, {"cluster_id": cluster_id, "voter_id": destination, "topics": _topic({
            "partition_index": METADATA_PARTITION, "replica_epoch": request.epoch, "replica_id": request.candidate_id,
            "last_offset_epoch": request.last_epoch, "last_offset": request.end_offset,
            "pre_vote": request.pre_vote})}
    if isinstance(request, BeginQuorumEpochRequest):
        return BEGIN_QUORUM_EPOCH, 0, {"cluster_id": cluster_id, "topics": _topic({
            "partition_index": METADATA_PARTITION, "leader_id": request.leader_id, "leader_epoch": request.epoch})}
    if isinstance(request, EndQuorumEpochRequest):
        return END_QUORUM_EPOCH, 0, {"cluster_id": cluster_id, "topics": _topic({
            "partition_index": METADATA_PARTITION, "leader_id": request.leader_id, "leader_epoch": request.epoch,
            "preferred_successors": list(request.preferred_successors)})}
    if isinstance(request, FetchRequest):
        return FETCH, 12, {"cluster_id": cluster_id, "replica_id": request.replica_id, "max_wait": request.max_wait_ms,
                           "min_bytes": 1, "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0, "session_id": 0,
                           "session_epoch": -1, "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                               "partition": METADATA_PARTITION, "current_leader_epoch": request.epoch,
                               "fetch_offset": request.fetch_offset, "last_fetched_epoch": request.last_fetched_epoch,
                               "log_start_offset": -1, "partition_max_bytes": FETCH_MAX_BYTES}]}],
                           "forgotten_topics_data": [], "rack_id": ""}
    assert isinstance(request, FetchSnapshotRequest)
    return FETCH_SNAPSHOT, 0, {"cluster_id": cluster_id, "replica_id": request.replica_id,
                               "max_bytes": request.max_bytes, "topics": _topic({
                                   "partition": METADATA_PARTITION, "current_leader_epoch": request.epoch,
                                   "snapshot_id": {"end_offset": request.snapshot_id.offset,
                                                   "epoch": request.snapshot_id.epoch},
                                   "position": request.position}, "name")}


def _partition(response: Any, topics_field: str = "topics") -> Any:
    topics = getattr(response, topics_field)
    if not topics or not topics[0].partitions:
        return None
    return topics[0].partitions[0]


def response_message(api_key: int, response: Any) -> Response:
    """The Raft response a kio response carries; a missing partition reads as an error."""
    if api_key == FETCH:
        p = _partition(response, "responses")
        if p is None:
            return FetchResponse(response.error_code or ErrorCode.unknown_server_error, -1, NO_LEADER)
        diverging = p.diverging_epoch
        snapshot = p.snapshot_id
        return FetchResponse(
            p.error_code, p.current_leader.leader_epoch, p.current_leader.leader_id, p.high_watermark,
            p.log_start_offset, tuple(decode_batches(p.records or b"")),
            OffsetAndEpoch(diverging.epoch, diverging.end_offset) if diverging.epoch >= 0 else None,
            OffsetAndEpoch(snapshot.epoch, snapshot.end_offset) if snapshot.end_offset >= 0 else None)
    if api_key == FETCH_SNAPSHOT:
        p = _partition(response)
        if p is None:
            return FetchSnapshotResponse(response.error_code or ErrorCode.unknown_server_error, -1, NO_LEADER)
        return FetchSnapshotResponse(p.error_code, p.current_leader.leader_epoch, p.current_leader.leader_id,
                                     OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset), p.size,
                                     p.position, bytes(p.unaligned_records or b""))
    p = _partition(response)
    error = response.error_code if p is None or response.error_code != ErrorCode.none else p.error_code
    epoch, leader = (-1, NO_LEADER) if p is None else (p.leader_epoch, p.leader_id)
    if api_key == VOTE:
        return VoteResponse(error, epoch, leader, bool(p is not None and p.vote_granted))
    if api_key == BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpochResponse(error, epoch, leader)
    return EndQuorumEpochResponse(error, epoch, leader)


def request_message(api_key: int, body: Any, current_epoch: int) -> Request | None:
    """The Raft request a served kio request carries, or None when it names no `__cluster_metadata-0`.

    An observer that does not know the epoch (current_leader_epoch -1, as brokers start) fetches in the
    current one."""
    topics = body.topics
    if len(topics) != 1 or len(topics[0].partitions) != 1:
        return None
    p = topics[0].partitions[0]
    name = getattr(topics[0], "topic_name", None) or getattr(topics[0], "topic", None) or topics[0].name
    index = getattr(p, "partition_index", None)
    if index is None:
        index = p.partition
    if name != METADATA_TOPIC or index != METADATA_PARTITION:
        return None
    if api_key == VOTE:
        return VoteRequest(p.replica_epoch, p.replica_id, p.last_offset_epoch, p.last_offset, p.pre_vote)
    if api_key == BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpochRequest(p.leader_epoch, p.leader_id)
    if api_key == END_QUORUM_EPOCH:
        return EndQuorumEpochRequest(p.leader_epoch, p.leader_id, tuple(p.preferred_successors))
    epoch = current_epoch if p.current_leader_epoch < 0 else p.current_leader_epoch
    if api_key == FETCH:
        max_wait = body.max_wait
        max_wait_ms = int(max_wait.total_seconds() * 1000) if hasattr(max_wait, "total_seconds") else int(max_wait)
        return FetchRequest(body.replica_id, epoch, p.fetch_offset, max(0, p.last_fetched_epoch),
                            min(max_wait_ms, 60_000))
    return FetchSnapshotRequest(body.replica_id, epoch, OffsetAndEpoch(p.snapshot_id.epoch, p.snapshot_id.end_offset),
                                p.position, body.max_bytes)


def error_body(api_key: int, error: ErrorCode) -> dict[str, Any]:
    """A response naming no partition, with `error` for the whole request."""
    if api_key == FETCH:
        return {"error_code": error, "session_id": 0, "responses": []}
    return {"error_code": error, "topics": [], **({"node_endpoints": []} if api_key == VOTE else {})}


def response_body(api_key: int, response: Response) -> dict[str, Any]:
    """The kio response body for a Raft response."""
    leader = {"leader_id": response.leader_id, "leader_epoch": response.epoch}
    if isinstance(response, FetchResponse):
        diverging = response.diverging or OffsetAndEpoch(-1, -1)
        snapshot = response.snapshot_id or OffsetAndEpoch(-1, -1)
        return {"error_code": ErrorCode.none, "session_id": 0, "responses": [{"topic": METADATA_TOPIC, "partitions": [{
            "partition_index": METADATA_PARTITION, "error_code": response.error,
            "high_watermark": response.high_watermark, "last_stable_offset": response.high_watermark,
            "log_start_offset": response.log_start_offset,
            "diverging_epoch": {"epoch": diverging.epoch, "end_offset": diverging.offset},
            "current_leader": leader, "snapshot_id": {"end_offset": snapshot.offset, "epoch": snapshot.epoch},
            "aborted_transactions": None, "preferred_read_replica": -1,
            "records": b"".join(encode_batch(b) for b in response.batches)}]}]}
    if isinstance(response, FetchSnapshotResponse):
        snapshot = response.snapshot_id or OffsetAndEpoch(-1, -1)
        return {"error_code": ErrorCode.none, "topics": [{"name": METADATA_TOPIC, "partitions": [{
            "index": METADATA_PARTITION, "error_code": response.error,
            "snapshot_id": {"end_offset": snapshot.offset, "epoch": snapshot.epoch}, "current_leader": leader,
            "size": response.size, "position": response.position, "unaligned_records": response.data}]}]}
    partition: dict[str, Any] = {"partition_index": METADATA_PARTITION, "error_code": response.error, **leader}
    if isinstance(response, VoteResponse):
        partition["vote_granted"] = response.granted
        return {"error_code": ErrorCode.none, "topics": _topic(partition), "node_endpoints": []}
    return {"error_code": ErrorCode.none, "topics": _topic(partition)}
