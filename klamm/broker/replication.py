"""Replication of one partition as pure state machines: the leader's and the follower's decisions.

No sockets, no asyncio, no files: time and offsets come in as arguments, and
the decisions come out as return values, so the broker and the deterministic
simulator (tests/sim) drive the same code. The semantics are Kafka's
(Partition.scala, Replica.scala, AbstractFetcherThread.scala):

Leader (`LeaderState`)
- It tracks each follower's log end offset (LEO), as the follower's fetch
  offset tells it, and when the follower last "caught up": its fetch offset
  reached the leader's LEO as of this fetch, or of its previous fetch.
- The high watermark (HW) is the smallest LEO among the leader and the
  followers of the *maximal* ISR — the committed ISR plus a member whose
  addition is pending — and of any follower caught up enough to be about to
  join. It never goes back during a leadership. A follower whose LEO is not
  known yet (none fetched since this leadership began) holds the HW still.
- A follower joins the ISR (an `IsrProposal` for AlterPartition) once its LEO
  reached the HW and the start offset of this leader epoch, and the image does
  not say its broker is fenced or shutting down; it leaves after
  `replica.lag.time.max.ms` without catching up (`tick`). One proposal is in
  flight at a time; the image's next partition epoch settles it. Unlike Kafka, a
  proposal answered INVALID_UPDATE_VERSION stays in the maximal ISR until then:
  that answer may be to a retry of a proposal already committed, and dropping
  the new member early would let the HW pass a replica the controller counts
  in the ISR.
- acks=all completes once the HW passes the batch; NOT_ENOUGH_REPLICAS_AFTER_APPEND
  when the ISR is below min.insync.replicas by then.

Follower (`diverging_epoch`, `truncation_offset`, `out_of_range_offset`)
- It fetches from its LEO with the epoch of its last record; the leader answers
  a diverging epoch when its own log ends that epoch earlier (or does not have
  it), and the follower truncates to where the two logs agree before fetching
  again. Its HW is the leader's, capped by its own LEO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from klamm.protocol.errors import ErrorCode

__all__ = [
    "UNKNOWN_OFFSET",
    "IsrProposal",
    "LeaderState",
    "diverging_epoch",
    "follower_high_watermark",
    "out_of_range_offset",
    "truncation_offset",
]

UNKNOWN_OFFSET = -1


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An AlterPartition the leader sends: this ISR, at the leader's epochs."""

    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET  # as its last fetch said (v5+)
    last_caught_up_ms: int | None = None  # None: never in this leadership (Kafka's 0, on any clock)
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int | None = None

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int, lag_max_ms: int) -> bool:
        if self.log_end_offset == leader_log_end_offset:
            return True
        return self.last_caught_up_ms is not None and now_ms - self.last_caught_up_ms <= lag_max_ms

    def caught_up_at(self, when_ms: int | None) -> None:
        if when_ms is not None and (self.last_caught_up_ms is None or when_ms > self.last_caught_up_ms):
            self.last_caught_up_ms = when_ms


class LeaderState:
    """The leader's side of one partition for one leader epoch."""

    def __init__(self, local_id: int, leader_epoch: int, partition_epoch: int, replicas: Sequence[int],
                 isr: Sequence[int], leader_epoch_start_offset: int, log_end_offset: int, high_watermark: int,
                 now_ms: int, replica_lag_time_max_ms: int) -> None:
        self.local_id = local_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.leader_epoch_start_offset = leader_epoch_start_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        self.lag_max_ms = replica_lag_time_max_ms
        self.pending: IsrProposal | None = None
        self.fenced_or_shutting_down: set[int] = set()  # from the image: such brokers cannot join the ISR
        # A new leader counts the ISR's followers as caught up now, the others never (Kafka's resetReplicaState).
        self._followers = {replica: FollowerProgress(last_caught_up_ms=now_ms if replica in self.isr else None)
                           for replica in self.replicas if replica != local_id}

    # ---------------------------------------------------------------- inputs
    def on_local_append(self, log_end_offset: int, now_ms: int) -> bool:
        """The leader appended: its LEO moved. True if the HW moved (an ISR of one)."""
        self.log_end_offset = log_end_offset
        return self._maybe_advance_high_watermark(now_ms)

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, leader_log_end_offset: int,
                          now_ms: int, log_start_offset: int = UNKNOWN_OFFSET) -> tuple[bool, IsrProposal | None]:
        """A follower fetched from `fetch_offset` (a fetch not answered with a diverging epoch), its log
        starting at `log_start_offset`.

        Returns (HW moved, the ISR expansion to propose if the follower may now join).
        """
        follower = self._followers.get(replica_id)
        if follower is None:
            return False, None
        self.log_end_offset = leader_log_end_offset
        if fetch_offset >= leader_log_end_offset:
            follower.caught_up_at(now_ms)
        elif fetch_offset >= follower.last_fetch_leader_log_end_offset:
            follower.caught_up_at(follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.log_start_offset = log_start_offset
        follower.last_fetch_leader_log_end_offset = max(leader_log_end_offset,
                                                        follower.last_fetch_leader_log_end_offset)
        follower.last_fetch_ms = now_ms
        proposal = self._maybe_expand(replica_id, follower)
        return self._maybe_advance_high_watermark(now_ms), proposal

    def tick(self, now_ms: int, leader_log_end_offset: int) -> IsrProposal | None:
        """The periodic ISR check: the shrink to propose, if followers lag (Kafka's maybeShrinkIsr)."""
        self.log_end_offset = leader_log_end_offset
        if self.pending is not None:
            return None
        lagging = [replica for replica in self.isr if replica != self.local_id and
                   not self._followers[replica].is_caught_up(leader_log_end_offset, now_ms, self.lag_max_ms)]
        if not lagging:
            return None
        return self._propose(tuple(r for r in self.isr if r not in lagging))

    def on_partition_change(self, leader_epoch: int, partition_epoch: int, isr: Sequence[int],
                            replicas: Sequence[int], now_ms: int) -> bool:
        """The image committed a new partition state in this leader epoch. True if the HW moved."""
        if leader_epoch != self.leader_epoch or partition_epoch <= self.partition_epoch:
            return False
        self.partition_epoch = partition_epoch
        self.isr = tuple(isr)
        self.pending = None  # committed, or superseded: either way no longer in flight
        if tuple(replicas) != self.replicas:
            self.replicas = tuple(replicas)
            for replica in self.replicas:
                if replica != self.local_id and replica not in self._followers:
                    self._followers[replica] = FollowerProgress()
            for replica in [r for r in self._followers if r not in self.replicas]:
                del self._followers[replica]
        return self._maybe_advance_high_watermark(now_ms)

    def on_proposal_failed(self, error: ErrorCode) -> None:
        """AlterPartition answered an error for the proposal in flight.

        The committed ISR stands and a new proposal may go, except after
        INVALID_UPDATE_VERSION: the controller is at a later partition epoch, which may
        be this very proposal committed (a retried request is answered so), so it stays
        in the HW's maximal ISR until the image shows the partition's state.
        """
        if error != ErrorCode.invalid_update_version:
            self.pending = None

    # ---------------------------------------------------------------- queries
    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the HW must wait for: the committed one plus a member whose addition is in flight."""
        if self.pending is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending.isr if r not in self.isr)

    def follower_log_end_offset(self, replica_id: int) -> int:
        follower = self._followers.get(replica_id)
        return follower.log_end_offset if follower is not None else UNKNOWN_OFFSET

    def follower_lag_ms(self, replica_id: int, now_ms: int) -> int | None:
        """Time since the follower last caught up with the leader; None if it has not in this leadership."""
        follower = self._followers.get(replica_id)
        if follower is None or follower.last_caught_up_ms is None:
            return None
        return now_ms - follower.last_caught_up_ms

    def readable_followers(self, offset: int, now_ms: int) -> list[tuple[int, int, int]]:
        """(node id, log end offset, ms since caught up) of each ISR follower whose log holds `offset`: those a
        consumer could read it from (Kafka's findPreferredReadReplica). Never caught up counts as since 0."""
        return [(replica, follower.log_end_offset,
                 now_ms - (follower.last_caught_up_ms if follower.last_caught_up_ms is not None else 0))
                for replica, follower in self._followers.items()
                if replica in self.isr and follower.log_start_offset <= offset <= follower.log_end_offset]

    def has_enough_replicas(self, min_insync_replicas: int) -> bool:
        return len(self.isr) >= min_insync_replicas

    def acks_all_outcome(self, required_offset: int, min_insync_replicas: int) -> ErrorCode | None:
        """An acks=all append ending before `required_offset`: None while waiting, else its answer."""
        if self.high_watermark < required_offset:
            return None
        if len(self.isr) < min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    # ---------------------------------------------------------------- internals
    def _maybe_expand(self, replica_id: int, follower: FollowerProgress) -> IsrProposal | None:
        if self.pending is not None or replica_id in self.isr or replica_id in self.fenced_or_shutting_down:
            return None
        if follower.log_end_offset < self.high_watermark or \
                follower.log_end_offset < self.leader_epoch_start_offset:
            return None
        return self._propose(self.isr + (replica_id,))

    def _propose(self, isr: tuple[int, ...]) -> IsrProposal:
        self.pending = IsrProposal(self.leader_epoch, self.partition_epoch, isr)
        return self.pending

    def _maybe_advance_high_watermark(self, now_ms: int) -> bool:
        candidate = self.log_end_offset
        maximal = self.maximal_isr
        for replica, follower in self._followers.items():
            if follower.log_end_offset >= candidate:
                continue
            about_to_join = follower.is_caught_up(self.log_end_offset, now_ms, self.lag_max_ms) and \
                replica not in self.fenced_or_shutting_down
            if replica in maximal or about_to_join:
                candidate = follower.log_end_offset
        if candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False


# ---------------------------------------------------------------------- follower side
def diverging_epoch(epoch_end: tuple[int, int], fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
    """The leader's check of a follower fetch (Kafka's validateFetchOffsetAndMaybeGetDivergingEpoch).

    `epoch_end` is the leader's (epoch, end offset) for `last_fetched_epoch` (its
    leader-epoch cache answer). The follower's log diverges from the leader's when
    the leader ends that epoch before the fetch offset, or knows only an older one:
    then (epoch, end offset) is what the follower truncates by; None when they agree.
    """
    epoch, end_offset = epoch_end
    if epoch < last_fetched_epoch or end_offset < fetch_offset:
        return epoch, end_offset
    return None


def truncation_offset(diverging: tuple[int, int], local_epoch_end: tuple[int, int], log_end_offset: int) -> int:
    """Where a follower truncates after a diverging epoch (Kafka's getOffsetTruncationState).

    `local_epoch_end` is the follower's own (epoch, end offset) for the diverging
    epoch: the largest epoch it has at or below it. When it has that very epoch,
    the logs agree up to the smaller of the two ends; when it does not, it keeps
    what it has up to the end of its own earlier epoch, and the next fetch (with
    that earlier epoch) finds the exact point.
    """
    leader_epoch, leader_end = diverging
    local_epoch, local_end = local_epoch_end
    if local_epoch < 0 or local_end < 0:
        return min(leader_end, log_end_offset)
    if local_epoch == leader_epoch:
        return min(local_end, leader_end, log_end_offset)
    return min(local_end, log_end_offset)


def out_of_range_offset(log_end_offset: int, leader_log_start_offset: int, leader_log_end_offset: int) -> tuple[int, bool]:
    """After OFFSET_OUT_OF_RANGE: (offset, start over). Above the leader's end the
    follower truncates to it; below the leader's start it empties its log and
    starts over there."""
    if log_end_offset > leader_log_end_offset:
        return leader_log_end_offset, False
    return leader_log_start_offset, True


def follower_high_watermark(leader_high_watermark: int, log_end_offset: int) -> int:
    return min(leader_high_watermark, log_end_offset)

