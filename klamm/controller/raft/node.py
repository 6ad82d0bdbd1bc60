"""One member of a KRaft quorum as a sans-io state machine: messages and time in, messages out.

The driver (the simulator in tests, the controller's event loop in a node)
calls `handle` with each envelope that arrives and `tick` when `next_deadline_ms`
comes, sends what `take_outbox` returns, and reads committed batches from the
log below `high_watermark`. Nothing here sleeps, reads a clock or opens a
socket, so a seeded scheduler replays any run exactly.

The states are Kafka's (QuorumState):

- Unattached: in an epoch with no leader to follow; a voter starts an election
  when its randomized election timer fires.
- Prospective (KIP-996): asks for pre-votes in its own epoch, changing nobody's
  state; only a majority of them makes it a candidate, so a voter cut off from
  the quorum cannot drive the epoch up and depose a healthy leader when it returns.
- Candidate: bumps the epoch, votes for itself (durably) and asks for votes.
- Leader: appends a LeaderChange control batch that opens its epoch, tells the
  voters with BeginQuorumEpoch (again, every half fetch timeout, to those that
  have not fetched: one stuck in a later epoch answers with it, and the quorum
  follows it there), serves fetches, and advances the high watermark
  to what a majority of voters hold (its own flushed end included), once that
  covers the start of its epoch. It resigns when a majority has not fetched
  within 1.5 fetch timeouts (check quorum).
- Follower: fetches from the leader; truncates where the leader reports its log
  diverging; downloads a snapshot when it fetches from below the leader's log
  start; becomes prospective when the leader is silent for the fetch timeout.
- Resigned: a leader stepping down (check quorum, or `resign` at shutdown,
  which sends EndQuorumEpoch so that the preferred successor starts at once).

Observers (nodes not among the voters) only fetch, from whichever voter they
learn leads. A voter grants one vote per epoch, never in an epoch whose leader
it knows, and only to a candidate whose log is at least as up to date as its
own; the epoch, the known leader and the vote are written through the
`QuorumStateStore` before anything depends on them.
"""

from __future__ import annotations

import enum
import itertools
import logging
import random
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from klamm.controller.raft.log import RaftLog
from klamm.controller.raft.messages import (
    NO_LEADER,
    Batch,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
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
from klamm.controller.raft.quorum_state import ElectionState, QuorumStateStore
from klamm.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = ["RaftConfig", "RaftNode", "ReplicaProgress", "Role", "leader_change_record"]


class Role(enum.Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


@dataclass(frozen=True)
class RaftConfig:
    """Kafka's controller.quorum.* settings, with Kafka's defaults."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    retry_backoff_ms: int = 20
    fetch_max_wait_ms: int = 500
    append_linger_ms: int = 25
    max_fetch_batches: int = 64
    snapshot_chunk_bytes: int = 1 << 20


@dataclass
class ReplicaProgress:
    """What the leader knows of a replica: what it holds and when it last fetched (DescribeQuorum shows it)."""

    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1


@dataclass
class _Parked:
    deadline_ms: int
    envelope: Envelope
    high_watermark: int


@dataclass
class _InFlight:
    correlation_id: int
    request: Request
    deadline_ms: int


@dataclass
class _SnapshotDownload:
    snapshot_id: OffsetAndEpoch
    data: bytearray = field(default_factory=bytearray)


def leader_change_record(leader_id: int, voters: Iterable[int]) -> bytes:
    """The LeaderChange control record's value that opens a leader's epoch: Kafka's LeaderChangeMessage v0
    (flexible: version, leader id, voters, granting voters, each voter its id and no tagged fields)."""
    ids = sorted(voters)
    array = bytes([len(ids) + 1]) + b"".join(struct.pack(">i", v) + b"\x00" for v in ids)
    return struct.pack(">hi", 0, leader_id) + array + array + b"\x00"


class RaftNode:
    def __init__(self, node_id: int, voters: Iterable[int], log_: RaftLog, store: QuorumStateStore, *,
                 config: RaftConfig | None = None, rng: random.Random | None = None, now_ms: int = 0) -> None:
        self.node_id = node_id
        self.voters = frozenset(voters)
        self.log = log_
        self.store = store
        self.config = config or RaftConfig()
        self.rng = rng or random.Random()
        self.high_watermark = log_.start_offset  # unknown after a start: at least what a snapshot holds
        self._outbox: list[Envelope] = []
        self._correlation = itertools.count(1)
        self._in_flight: dict[int, _InFlight] = {}
        self._backoff_until: dict[int, int] = {}
        self._parked: list[_Parked] = []
        self._reset_role_state()
        state = store.read() or ElectionState()
        self._state = state
        self._start(state, now_ms)
        self._send_requests(now_ms)

    # -- what the driver and the controller see ------------------------------------------

    @property
    def epoch(self) -> int:
        return self._state.epoch

    @property
    def leader_id(self) -> int:
        return self._state.leader_id if self.role in (Role.LEADER, Role.FOLLOWER) else NO_LEADER

    @property
    def voted_id(self) -> int:
        return self._state.voted_id

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    def take_outbox(self) -> list[Envelope]:
        out, self._outbox = self._outbox, []
        return out

    def next_deadline_ms(self) -> int:
        """The latest time `tick` must be called (sooner is harmless)."""
        times = [t for t in (self._election_deadline, self._fetch_deadline, self._check_quorum_deadline,
                             self._flush_deadline, self._begin_epoch_deadline) if t is not None]
        times += [p.deadline_ms for p in self._parked]
        times += [f.deadline_ms for f in self._in_flight.values()]
        times += [t for dest, t in self._backoff_until.items() if dest not in self._in_flight]
        return min(times, default=1 << 62)

    def append(self, records: Sequence[bytes], now_ms: int) -> int:
        """Append records as one batch in the leader's epoch; their last offset. Committed once the HW passes it."""
        if self.role is not Role.LEADER:
            raise KafkaError(ErrorCode.not_leader_or_follower, f"node {self.node_id} is not the leader")
        if not records:
            raise ValueError("nothing to append")
        batch = Batch(self.log.end_offset, self.epoch, tuple(records))
        self.log.append(batch)
        if self._flush_deadline is None:
            self._flush_deadline = now_ms + self.config.append_linger_ms
        self._complete_parked(now_ms)
        return batch.next_offset - 1

    def resign(self, now_ms: int) -> None:
        """Graceful resignation at shutdown: EndQuorumEpoch names the most caught-up voters as successors."""
        if self.role is Role.LEADER:
            self._flush(now_ms)
            successors = sorted((v for v in self.voters if v != self.node_id),
                                key=lambda v: -self._progress[v].end_offset)
            self._become_resigned(now_ms, tuple(successors))
        self._send_requests(now_ms)

    def progress(self) -> tuple[dict[int, ReplicaProgress], dict[int, ReplicaProgress]]:
        """The leader's view of voters and observers (empty unless leader)."""
        mine = ReplicaProgress(self.log.end_offset, -1, -1)
        voters = {**self._progress, self.node_id: mine} if self.is_leader else {}
        return voters, dict(self._observers) if self.is_leader else {}

    # -- events --------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        if self._flush_deadline is not None and now_ms >= self._flush_deadline:
            self._flush(now_ms)
        for dest, flight in list(self._in_flight.items()):
            if now_ms >= flight.deadline_ms:
                del self._in_flight[dest]
                self._backoff_until[dest] = now_ms + self.config.retry_backoff_ms
        for dest in [d for d, until in self._backoff_until.items() if until <= now_ms]:
            del self._backoff_until[dest]
        if self._parked:
            self._complete_parked(now_ms)
        if self._begin_epoch_deadline is not None and now_ms >= self._begin_epoch_deadline:
            self._remind_silent_voters(now_ms)
        if self._check_quorum_deadline is not None and now_ms >= self._check_quorum_deadline:
            self._check_quorum(now_ms)
        if self._fetch_deadline is not None and now_ms >= self._fetch_deadline:
            self._on_fetch_timeout(now_ms)
        if self._election_deadline is not None and now_ms >= self._election_deadline:
            self._on_election_timeout(now_ms)
        self._send_requests(now_ms)

    def handle(self, envelope: Envelope, now_ms: int) -> None:
        if envelope.is_request:
            response = self._handle_request(envelope, now_ms)
            if response is not None:
                self._reply(envelope, response)
        else:
            flight = self._in_flight.get(envelope.source)
            if flight is None or flight.correlation_id != envelope.correlation_id:
                return  # a response to a request of an earlier state, or a duplicate
            del self._in_flight[envelope.source]
            self._handle_response(envelope.source, flight.request, envelope.body, now_ms)  # type: ignore[arg-type]
        self._send_requests(now_ms)

    # -- start-up and transitions --------------------------------------------------------

    def _reset_role_state(self) -> None:
        self.role = Role.UNATTACHED
        self._election_deadline: int | None = None
        self._fetch_deadline: int | None = None
        self._check_quorum_deadline: int | None = None
        self._begin_epoch_deadline: int | None = None
        self._flush_deadline: int | None = None
        self._granted: set[int] = set()
        self._rejected: set[int] = set()
        self._endorsed: set[int] = set()
        self._progress: dict[int, ReplicaProgress] = {}
        self._observers: dict[int, ReplicaProgress] = {}
        self._told_high_watermark: dict[int, int] = {}  # the last high watermark a fetcher was answered with
        self._epoch_start_offset = -1
        self._leader_since_ms = 0
        self._successors: tuple[int, ...] = ()
        self._end_acked: set[int] = set()
        self._snapshot: _SnapshotDownload | None = None
        self._fetched_from_leader_ms: int | None = None

    def _start(self, state: ElectionState, now_ms: int) -> None:
        last_epoch = self.log.last_fetched_epoch()
        if state.epoch < last_epoch:  # the log saw a later epoch than the file recorded
            self._persist(ElectionState(last_epoch), now_ms)
            self._become_unattached(now_ms)
        elif state.leader_id == self.node_id and self.is_voter:
            self._become_resigned(now_ms, ())
        elif state.leader_id != NO_LEADER:
            self._become_follower(state.leader_id, now_ms)
        else:
            self._become_unattached(now_ms)

    def _persist(self, state: ElectionState, now_ms: int) -> None:
        if state != self._state:
            self.store.write(state)
            self._state = state

    def _transition(self, role: Role, now_ms: int) -> None:
        parked = self._parked
        self._parked = []
        self._reset_role_state()
        self.role = role
        self._in_flight.clear()
        self._backoff_until.clear()
        for p in parked:  # a former leader's parked fetches get its new answer (an error) at once
            self._reply(p.envelope, self._fetch_response(p.envelope, now_ms, may_park=False))  # type: ignore[arg-type]
        log.debug("node %d: %s in epoch %d (leader %d, voted %d)", self.node_id, role.value, self.epoch,
                  self._state.leader_id, self._state.voted_id)

    def _new_epoch(self, epoch: int, leader_id: int, now_ms: int) -> None:
        """Learn of a later epoch (a message said so): follow its leader if it is known."""
        self._persist(ElectionState(epoch, leader_id, NO_LEADER), now_ms)
        if leader_id != NO_LEADER and leader_id != self.node_id:
            self._become_follower(leader_id, now_ms)
        else:
            self._become_unattached(now_ms)

    def _become_unattached(self, now_ms: int, election_delay_ms: int | None = None) -> None:
        self._transition(Role.UNATTACHED, now_ms)
        if self.is_voter:
            delay = self._election_timeout() if election_delay_ms is None else election_delay_ms
            self._election_deadline = now_ms + (0 if self.voters == {self.node_id} else delay)

    def _become_follower(self, leader_id: int, now_ms: int) -> None:
        self._persist(ElectionState(self.epoch, leader_id, self._state.voted_id), now_ms)
        self._transition(Role.FOLLOWER, now_ms)
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms

    def _become_prospective(self, now_ms: int) -> None:
        self._transition(Role.PROSPECTIVE, now_ms)
        self._granted = {self.node_id}
        self._election_deadline = now_ms + self._election_timeout()
        self._maybe_win(now_ms)

    def _become_candidate(self, now_ms: int) -> None:
        self._persist(ElectionState(self.epoch + 1, NO_LEADER, self.node_id), now_ms)
        self._transition(Role.CANDIDATE, now_ms)
        self._granted = {self.node_id}
        self._election_deadline = now_ms + self._election_timeout()
        self._maybe_win(now_ms)

    def _become_leader(self, now_ms: int) -> None:
        self._persist(ElectionState(self.epoch, self.node_id, self.node_id), now_ms)
        self._transition(Role.LEADER, now_ms)
        self._progress = {v: ReplicaProgress() for v in self.voters if v != self.node_id}
        self._endorsed = {self.node_id}
        self._leader_since_ms = now_ms
        self._epoch_start_offset = self.log.end_offset
        self.log.append(Batch(self.log.end_offset, self.epoch, (leader_change_record(self.node_id, self.voters),),
                              control=True))
        self._flush_deadline = now_ms + self.config.append_linger_ms
        self._check_quorum_deadline = now_ms + self._check_quorum_timeout()
        self._begin_epoch_deadline = now_ms + self.config.fetch_timeout_ms // 2
        log.info("node %d is the leader of epoch %d", self.node_id, self.epoch)
        self._update_high_watermark(now_ms)

    def _become_resigned(self, now_ms: int, successors: tuple[int, ...]) -> None:
        self._transition(Role.RESIGNED, now_ms)
        self._successors = successors
        self._end_acked = {self.node_id}
        self._election_deadline = now_ms + self._election_timeout()

    def _maybe_win(self, now_ms: int) -> None:
        if len(self._granted & self.voters) * 2 > len(self.voters):
            if self.role is Role.PROSPECTIVE:
                self._become_candidate(now_ms)
            elif self.role is Role.CANDIDATE:
                self._become_leader(now_ms)
        elif len(self._rejected & self.voters) * 2 >= len(self.voters) and self._rejected:
            self._lose_election(now_ms)

    def _lose_election(self, now_ms: int) -> None:
        """Back off; a prospective that knew a live leader goes back to following it."""
        backoff = self.rng.randrange(1, max(2, self.config.election_backoff_max_ms))
        leader = self._state.leader_id
        if self.role is Role.PROSPECTIVE and leader not in (NO_LEADER, self.node_id):
            self._become_follower(leader, now_ms)
        else:
            self._become_unattached(now_ms, backoff)

    def _election_timeout(self) -> int:
        return self.config.election_timeout_ms + self.rng.randrange(self.config.election_timeout_ms)

    def _check_quorum_timeout(self) -> int:
        return self.config.fetch_timeout_ms * 3 // 2

    # -- timers --------------------------------------------------------------------------

    def _on_election_timeout(self, now_ms: int) -> None:
        if self.is_voter and self.role in (Role.UNATTACHED, Role.RESIGNED, Role.PROSPECTIVE, Role.CANDIDATE):
            if self.role in (Role.PROSPECTIVE, Role.CANDIDATE):
                self._lose_election(now_ms)
            else:
                self._become_prospective(now_ms)

    def _on_fetch_timeout(self, now_ms: int) -> None:
        if self.role is Role.FOLLOWER:
            if self.is_voter:
                self._become_prospective(now_ms)
            else:
                self._persist(ElectionState(self.epoch, NO_LEADER, NO_LEADER), now_ms)
                self._become_unattached(now_ms)

    def _check_quorum(self, now_ms: int) -> None:
        timeout = self._check_quorum_timeout()
        recent = sorted((p.last_fetch_ms for p in self._progress.values()), reverse=True)
        needed = len(self.voters) // 2  # other voters that must have fetched, besides this one
        if needed == 0:
            self._check_quorum_deadline = None
            return
        oldest_of_majority = max(recent[needed - 1], self._leader_since_ms)
        if now_ms - oldest_of_majority >= timeout:
            log.info("node %d resigns epoch %d: no majority fetched for %d ms", self.node_id, self.epoch, timeout)
            self._become_resigned(now_ms, ())
        else:
            self._check_quorum_deadline = oldest_of_majority + timeout

    def _remind_silent_voters(self, now_ms: int) -> None:
        """Every half fetch timeout, BeginQuorumEpoch again to the voters that have not fetched meanwhile
        (as Kafka's leader does since KIP-853): one that moved to a later epoch on its own answers with it,
        and the quorum moves there too, rather than leave it unable ever to follow this leader."""
        since = now_ms - self.config.fetch_timeout_ms // 2
        self._endorsed = {self.node_id} | {v for v, p in self._progress.items() if p.last_fetch_ms >= since}
        self._begin_epoch_deadline = now_ms + self.config.fetch_timeout_ms // 2

    def _flush(self, now_ms: int) -> None:
        self._flush_deadline = None
        self.log.flush()
        if self.role is Role.LEADER:
            self._update_high_watermark(now_ms)

    # -- requests this node sends --------------------------------------------------------

    def _send_requests(self, now_ms: int) -> None:
        if self.role is Role.PROSPECTIVE or self.role is Role.CANDIDATE:
            pre_vote = self.role is Role.PROSPECTIVE
            request = VoteRequest(self.epoch, self.node_id, self.log.last_fetched_epoch(), self.log.end_offset,
                                  pre_vote)
            for voter in self.voters - self._granted - self._rejected:
                self._send(voter, request, now_ms)
        elif self.role is Role.LEADER:
            for voter in self.voters - self._endorsed:
                self._send(voter, BeginQuorumEpochRequest(self.epoch, self.node_id), now_ms)
        elif self.role is Role.RESIGNED and self._successors:
            request = EndQuorumEpochRequest(self.epoch, self.node_id, self._successors)
            for voter in self.voters - self._end_acked:
                self._send(voter, request, now_ms)
        elif self.role is Role.FOLLOWER:
            self._send(self._state.leader_id, self._fetch_request(), now_ms)
        elif self.role is Role.UNATTACHED and not self.is_voter and not self._in_flight:
            ready = sorted(v for v in self.voters if self._backoff_until.get(v, 0) <= now_ms)
            if ready:
                self._send(self.rng.choice(ready), self._fetch_request(), now_ms)

    def _fetch_request(self) -> FetchRequest | FetchSnapshotRequest:
        if self._snapshot is not None:
            return FetchSnapshotRequest(self.node_id, self.epoch, self._snapshot.snapshot_id,
                                        len(self._snapshot.data), self.config.snapshot_chunk_bytes)
        return FetchRequest(self.node_id, self.epoch, self.log.end_offset, self.log.last_fetched_epoch(),
                            self.config.fetch_max_wait_ms)

    def _send(self, destination: int, request: Request, now_ms: int) -> None:
        if destination in self._in_flight or self._backoff_until.get(destination, 0) > now_ms:
            return
        correlation = next(self._correlation)
        timeout = self.config.request_timeout_ms
        if isinstance(request, FetchRequest):
            timeout += request.max_wait_ms
        self._in_flight[destination] = _InFlight(correlation, request, now_ms + timeout)
        self._outbox.append(Envelope(self.node_id, destination, correlation, request))

    def _reply(self, request: Envelope, body: Response) -> None:
        self._outbox.append(Envelope(self.node_id, request.source, request.correlation_id, body))

    # -- requests this node answers ------------------------------------------------------

    def _handle_request(self, envelope: Envelope, now_ms: int) -> Response | None:
        body = envelope.body
        if isinstance(body, VoteRequest):
            return self._handle_vote(body, now_ms)
        if isinstance(body, BeginQuorumEpochRequest):
            return self._handle_begin_epoch(body, now_ms)
        if isinstance(body, EndQuorumEpochRequest):
            return self._handle_end_epoch(body, now_ms)
        if isinstance(body, FetchRequest):
            return self._fetch_response(envelope, now_ms, may_park=True)
        if isinstance(body, FetchSnapshotRequest):
            return self._handle_fetch_snapshot(body)
        raise TypeError(f"not a Raft request: {body!r}")

    def _handle_vote(self, request: VoteRequest, now_ms: int) -> VoteResponse:
        if request.epoch < self.epoch:
            return VoteResponse(ErrorCode.fenced_leader_epoch, self.epoch, self.leader_id, False)
        if request.candidate_id not in self.voters or not self.is_voter:
            return VoteResponse(ErrorCode.inconsistent_voter_set, self.epoch, self.leader_id, False)
        if request.epoch > self.epoch and not request.pre_vote:
            self._new_epoch(request.epoch, NO_LEADER, now_ms)
        up_to_date = OffsetAndEpoch(request.last_epoch, request.end_offset) >= \
            OffsetAndEpoch(self.log.last_fetched_epoch(), self.log.end_offset)
        granted = self._can_grant(request, up_to_date, now_ms)
        if granted and not request.pre_vote and self._state.voted_id == NO_LEADER:
            self._persist(ElectionState(self.epoch, NO_LEADER, request.candidate_id), now_ms)
            if self.role is Role.PROSPECTIVE:
                self._become_unattached(now_ms)
            else:
                self._election_deadline = now_ms + self._election_timeout()
        return VoteResponse(ErrorCode.none, self.epoch, self.leader_id, granted)

    def _can_grant(self, request: VoteRequest, up_to_date: bool, now_ms: int) -> bool:
        if request.pre_vote:
            if self.role is Role.LEADER:
                return False
            if self.role is Role.FOLLOWER and self._fetched_from_leader_ms is not None \
                    and now_ms - self._fetched_from_leader_ms < self.config.fetch_timeout_ms:
                return False  # the leader is alive: no reason to elect another
            return up_to_date
        if request.epoch != self.epoch or self._state.leader_id != NO_LEADER:
            return False
        if self.role not in (Role.UNATTACHED, Role.PROSPECTIVE):
            return False
        if self._state.voted_id != NO_LEADER:
            return self._state.voted_id == request.candidate_id
        return up_to_date

    def _handle_begin_epoch(self, request: BeginQuorumEpochRequest, now_ms: int) -> BeginQuorumEpochResponse:
        if request.epoch < self.epoch:
            return BeginQuorumEpochResponse(ErrorCode.fenced_leader_epoch, self.epoch, self.leader_id)
        if request.epoch == self.epoch and self.role in (Role.LEADER, Role.RESIGNED):
            if request.leader_id != self.node_id:
                raise AssertionError(f"two leaders in epoch {self.epoch}: {self.node_id} and {request.leader_id}")
        elif request.epoch > self.epoch:
            self._new_epoch(request.epoch, request.leader_id, now_ms)
        elif not (self.role is Role.FOLLOWER and self._state.leader_id == request.leader_id):
            self._become_follower(request.leader_id, now_ms)
        return BeginQuorumEpochResponse(ErrorCode.none, self.epoch, self.leader_id)

    def _handle_end_epoch(self, request: EndQuorumEpochRequest, now_ms: int) -> EndQuorumEpochResponse:
        if request.epoch < self.epoch:
            return EndQuorumEpochResponse(ErrorCode.fenced_leader_epoch, self.epoch, self.leader_id)
        if request.epoch > self.epoch:
            self._new_epoch(request.epoch, request.leader_id, now_ms)
        if self.role is Role.FOLLOWER and self._state.leader_id == request.leader_id:
            # The leader is leaving: its preferred successor stands at once, the others a little later.
            position = request.preferred_successors.index(self.node_id) \
                if self.node_id in request.preferred_successors else len(request.preferred_successors)
            delay = 0 if position == 0 else min(self.config.election_backoff_max_ms,
                                                self.config.retry_backoff_ms << position)
            self._fetch_deadline = min(self._fetch_deadline or now_ms, now_ms + delay)
            self._fetched_from_leader_ms = None
        return EndQuorumEpochResponse(ErrorCode.none, self.epoch, self.leader_id)

    def _fetch_response(self, envelope: Envelope, now_ms: int, *, may_park: bool) -> FetchResponse | None:
        request: FetchRequest = envelope.body  # type: ignore[assignment]
        error = self._leader_only_error(request.epoch)
        if error is not None:
            return FetchResponse(error, self.epoch, self.leader_id)
        if request.fetch_offset < 0 or request.last_fetched_epoch < 0 or request.replica_id < 0:
            return FetchResponse(ErrorCode.invalid_request, self.epoch, self.node_id)
        base = FetchResponse(ErrorCode.none, self.epoch, self.node_id, self.high_watermark, self.log.start_offset)
        snapshot = self.log.latest_snapshot()
        if request.fetch_offset < self.log.start_offset:
            return replace(base, snapshot_id=snapshot)
        boundary = snapshot is not None and request.fetch_offset == self.log.start_offset == snapshot.offset \
            and request.last_fetched_epoch == snapshot.epoch
        if request.fetch_offset > 0 and not boundary:
            end = self.log.end_offset_for_epoch(request.last_fetched_epoch)
            if end.epoch != request.last_fetched_epoch or end.offset < request.fetch_offset:
                if end.offset < self.log.start_offset and snapshot is not None:
                    return replace(base, snapshot_id=snapshot)
                if end.offset < self.log.start_offset:  # no epoch this old here: all of the fetcher's log goes
                    end = OffsetAndEpoch(0, self.log.start_offset)
                return replace(base, diverging=end)
        self._record_fetch(request, now_ms)
        batches = self.log.read(request.fetch_offset, self.config.max_fetch_batches)
        # Park an empty fetch, unless its fetcher has not been told the high watermark yet (this fetch moved
        # it, or another's did since this one's last answer): it learns that at once, as KIP-1166 has it, so
        # every replica applies a commit one round trip after it, not one fetch wait.
        told = self._told_high_watermark.get(request.replica_id, -1)
        if not batches and may_park and request.max_wait_ms > 0 and self.role is Role.LEADER \
                and told >= self.high_watermark:
            self._parked.append(_Parked(now_ms + request.max_wait_ms, envelope, self.high_watermark))
            return None
        self._told_high_watermark[request.replica_id] = self.high_watermark
        return replace(base, high_watermark=self.high_watermark, batches=tuple(batches))

    def _leader_only_error(self, epoch: int) -> ErrorCode | None:
        if epoch < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if epoch > self.epoch:
            return ErrorCode.unknown_leader_epoch
        if self.role is not Role.LEADER:
            return ErrorCode.not_leader_or_follower
        return None

    def _record_fetch(self, request: FetchRequest, now_ms: int) -> None:
        replica = request.replica_id
        if replica in self.voters:
            progress = self._progress[replica]
            self._endorsed.add(replica)
        else:
            progress = self._observers.setdefault(replica, ReplicaProgress())
        progress.end_offset = request.fetch_offset
        progress.last_fetch_ms = now_ms
        if request.fetch_offset >= self.log.end_offset:
            progress.last_caught_up_ms = now_ms
        if replica in self.voters:
            self._update_high_watermark(now_ms)

    def _update_high_watermark(self, now_ms: int) -> None:
        offsets = sorted([self.log.flushed_end_offset] + [p.end_offset for p in self._progress.values()],
                         reverse=True)
        candidate = offsets[len(self.voters) // 2]
        if candidate > self._epoch_start_offset and candidate > self.high_watermark:
            self.high_watermark = candidate
            self._complete_parked(now_ms)

    def _complete_parked(self, now_ms: int) -> None:
        # Answering a fetch can move the high watermark and so re-enter here: work on a taken list.
        parked, self._parked = self._parked, []
        for p in parked:
            request: FetchRequest = p.envelope.body  # type: ignore[assignment]
            if now_ms >= p.deadline_ms or self.log.end_offset > request.fetch_offset \
                    or self.high_watermark != p.high_watermark:
                self._reply(p.envelope, self._fetch_response(p.envelope, now_ms, may_park=False))  # type: ignore
            else:
                self._parked.append(p)

    def _handle_fetch_snapshot(self, request: FetchSnapshotRequest) -> FetchSnapshotResponse:
        error = self._leader_only_error(request.epoch)
        if error is not None:
            return FetchSnapshotResponse(error, self.epoch, self.leader_id)
        data = self.log.read_snapshot(request.snapshot_id)
        if data is None:
            return FetchSnapshotResponse(ErrorCode.snapshot_not_found, self.epoch, self.node_id)
        if not 0 <= request.position <= len(data):
            return FetchSnapshotResponse(ErrorCode.position_out_of_range, self.epoch, self.node_id)
        chunk = data[request.position:request.position + max(1, request.max_bytes)]
        return FetchSnapshotResponse(ErrorCode.none, self.epoch, self.node_id, request.snapshot_id, len(data),
                                     request.position, chunk)

    # -- responses to this node's requests -----------------------------------------------

    def _handle_response(self, source: int, request: Request, response: Response, now_ms: int) -> None:
        if response.epoch > self.epoch:
            self._new_epoch(response.epoch, response.leader_id, now_ms)
            return
        if response.epoch < self.epoch:
            return  # stale
        known = response.leader_id
        if known not in (NO_LEADER, self.node_id) and self._state.leader_id == NO_LEADER:
            # News of this epoch's leader. A prospective that already knew it stopped following it
            # because it went silent: hearing its name again from another follower changes nothing.
            self._become_follower(known, now_ms)
            return
        if isinstance(response, VoteResponse):
            self._on_vote(source, request, response, now_ms)
        elif isinstance(response, BeginQuorumEpochResponse):
            if self.role is Role.LEADER and response.error == ErrorCode.none:
                self._endorsed.add(source)
        elif isinstance(response, EndQuorumEpochResponse):
            if self.role is Role.RESIGNED:
                self._end_acked.add(source)
        elif isinstance(response, FetchResponse):
            self._on_fetch(source, request, response, now_ms)
        elif isinstance(response, FetchSnapshotResponse):
            self._on_fetch_snapshot(source, response, now_ms)

    def _on_vote(self, source: int, request: Request, response: VoteResponse, now_ms: int) -> None:
        pre_vote = isinstance(request, VoteRequest) and request.pre_vote
        if (self.role is Role.PROSPECTIVE) != pre_vote or self.role not in (Role.PROSPECTIVE, Role.CANDIDATE):
            return
        if response.error != ErrorCode.none:
            self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
            return
        (self._granted if response.granted else self._rejected).add(source)
        self._maybe_win(now_ms)

    def _on_fetch(self, source: int, request: Request, response: FetchResponse, now_ms: int) -> None:
        if response.error != ErrorCode.none:
            self._backoff_until[source] = now_ms + self.config.retry_backoff_ms
            return
        if self.role is not Role.FOLLOWER or source != self._state.leader_id or not isinstance(request, FetchRequest):
            return
        self._fetched_from_leader_ms = now_ms
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        if request.fetch_offset != self.log.end_offset:
            return  # the log moved since this fetch was sent
        if response.diverging is not None:
            self._truncate(response.diverging)
        elif response.snapshot_id is not None:
            self._snapshot = _SnapshotDownload(response.snapshot_id)
        else:
            for batch in response.batches:
                if batch.base_offset == self.log.end_offset:
                    self.log.append(batch)
            self.log.flush()  # the next fetch reports this offset: it must survive a crash
            self._advance_follower_hw(response.high_watermark)

    def _truncate(self, diverging: OffsetAndEpoch) -> None:
        mine = self.log.end_offset_for_epoch(diverging.epoch)
        offset = max(self.log.start_offset, min(diverging.offset, mine.offset))
        if offset < self.high_watermark:
            raise AssertionError(f"node {self.node_id} asked to truncate to {offset}, below its high watermark "
                                 f"{self.high_watermark}")
        log.info("node %d truncates its log to %d (the leader's epoch %d ends at %d)", self.node_id, offset,
                 diverging.epoch, diverging.offset)
        self.log.truncate_to(offset)

    def _advance_follower_hw(self, leader_hw: int) -> None:
        self.high_watermark = max(self.high_watermark, min(leader_hw, self.log.end_offset))

    def _on_fetch_snapshot(self, source: int, response: FetchSnapshotResponse, now_ms: int) -> None:
        download = self._snapshot
        if self.role is not Role.FOLLOWER or source != self._state.leader_id or download is None:
            return
        if response.error != ErrorCode.none or response.snapshot_id != download.snapshot_id:
            self._snapshot = None  # gone (cleaned) on the leader: fetch again to learn the newer one
            return
        self._fetched_from_leader_ms = now_ms
        self._fetch_deadline = now_ms + self.config.fetch_timeout_ms
        if response.position == len(download.data):
            download.data += response.data
        if len(download.data) >= response.size:
            self.log.install_snapshot(download.snapshot_id, bytes(download.data))
            self._snapshot = None
            self._advance_follower_hw(download.snapshot_id.offset)
            log.info("node %d installed snapshot %s", self.node_id, download.snapshot_id)
