"""The Raft RPCs as plain values: what the core reads and writes, before any wire encoding.

They carry the fields of Kafka's KRaft messages (Vote v2 with KIP-996's
pre_vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of `__cluster_metadata-0`,
FetchSnapshot) for one partition, so the socket layer maps them one to one on
kio's request and response classes. An `Envelope` addresses one of them from a
node to a node; a response carries the correlation id of its request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from klamm.protocol.errors import ErrorCode

NO_LEADER = -1


@dataclass(frozen=True, order=True)
class OffsetAndEpoch:
    """A log position: compared by epoch first, as Raft compares how up to date two logs are."""

    epoch: int
    offset: int


@dataclass(frozen=True)
class Batch:
    """Records appended together in one leader epoch; a control batch holds Raft's own records."""

    base_offset: int
    epoch: int
    records: tuple[bytes, ...]
    control: bool = False
    raw: bytes | None = field(default=None, compare=False, repr=False)  # the batch as stored, when read from a file

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)


@dataclass(frozen=True)
class VoteRequest:
    epoch: int  # the candidate's epoch; a prospective's own, unbumped epoch for a pre-vote
    candidate_id: int
    last_epoch: int
    end_offset: int
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    error: ErrorCode
    epoch: int
    leader_id: int
    granted: bool


@dataclass(frozen=True)
class BeginQuorumEpochRequest:
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    error: ErrorCode
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:
    epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    error: ErrorCode
    epoch: int
    leader_id: int


@dataclass(frozen=True)
class FetchRequest:
    replica_id: int  # -1 for a consumer that is no replica (not served here)
    epoch: int  # the leader epoch the fetcher knows
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int


@dataclass(frozen=True)
class FetchResponse:
    error: ErrorCode
    epoch: int
    leader_id: int
    high_watermark: int = -1
    log_start_offset: int = 0
    batches: tuple[Batch, ...] = ()
    diverging: OffsetAndEpoch | None = None  # truncate to this end offset of this epoch
    snapshot_id: OffsetAndEpoch | None = None  # fetch this snapshot instead (offset: its end offset)


@dataclass(frozen=True)
class FetchSnapshotRequest:
    replica_id: int
    epoch: int
    snapshot_id: OffsetAndEpoch
    position: int
    max_bytes: int


@dataclass(frozen=True)
class FetchSnapshotResponse:
    error: ErrorCode
    epoch: int
    leader_id: int
    snapshot_id: OffsetAndEpoch | None = None
    size: int = 0
    position: int = 0
    data: bytes = b""


Request = VoteRequest | BeginQuorumEpochRequest | EndQuorumEpochRequest | FetchRequest | FetchSnapshotRequest
Response = (VoteResponse | BeginQuorumEpochResponse | EndQuorumEpochResponse | FetchResponse
            | FetchSnapshotResponse)
REQUEST_TYPES = (VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest)


@dataclass(frozen=True)
class Envelope:
    source: int
    destination: int
    correlation_id: int
    body: Request | Response = field(compare=False)

    @property
    def is_request(self) -> bool:
        return isinstance(self.body, REQUEST_TYPES)
