"""What DescribeQuorum (55) reports of the `__cluster_metadata` quorum: one narrow interface.

`QuorumDescriber.describe_quorum()` returns a `QuorumInfo`: the leader, its
epoch, the high watermark, and per voter and per observer the log end offset
and the leader's wall-clock times of that replica's last fetch and of the last
time it was caught up. Whoever leads the metadata log provides it: today
`SingleVoterQuorum` (a single controller); a replicated Raft quorum will
provide the same from its leader state.

A single voter commits on append, so the high watermark and its own log end
offset are the log end, and its epoch is the one its log is written in
(`SINGLE_VOTER_EPOCH`, in every batch and snapshot id). Its observers are the
brokers fetching the log from the controller listener; each fetch is recorded
as Kafka's leader records it (LeaderState.ReplicaState.updateFollowerState):
the fetch offset is the replica's log end offset; it was caught up at a fetch
whose offset reached the leader's log end, or, when it reached the log end of
its previous fetch, at that previous fetch. An observer silent for
`OBSERVER_SESSION_TIMEOUT_MS` is forgotten. The quorum is static
(controller.quorum.voters), so voters have no directory id (Kafka's
kraft.version 0); an observer has the one its fetch carries, if any.

`from_response` reads a DescribeQuorum answer back into a QuorumInfo, for a
broker that asked its controller and for `klamm metadata-quorum`. This module
imports nothing of klamm: the CLI tools load it without the broker.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["NO_DIRECTORY_ID", "OBSERVER_SESSION_TIMEOUT_MS", "SINGLE_VOTER_EPOCH", "QuorumDescriber", "QuorumInfo",
           "ReplicaInfo", "SingleVoterQuorum", "from_response"]

NO_DIRECTORY_ID = uuid.UUID(int=0)
# The leader epoch a single controller's batches and snapshots carry (metadata_log.py, controller.SNAPSHOT_EPOCH;
# tests/unit/test_quorum_info.py holds them equal). Not imported from there: the CLI reads this module too.
SINGLE_VOTER_EPOCH = 0
OBSERVER_SESSION_TIMEOUT_MS = 300_000  # Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS

Endpoint = tuple[str, str, int]  # (listener name, host, port)


@dataclass(frozen=True)
class ReplicaInfo:
    replica_id: int
    directory_id: uuid.UUID
    log_end_offset: int  # -1: unknown
    last_fetch_timestamp: int  # leader wall-clock ms; -1: unknown
    last_caught_up_timestamp: int  # leader wall-clock ms; -1: unknown


@dataclass(frozen=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[ReplicaInfo]
    observers: list[ReplicaInfo]
    voter_endpoints: dict[int, list[Endpoint]]


class QuorumDescriber(Protocol):
    def describe_quorum(self) -> QuorumInfo: ...


class LogEnd(Protocol):
    @property
    def end_offset(self) -> int: ...

    @property
    def committed_end_offset(self) -> int: ...


class _FetchState:
    """One observer's fetches, as the leader saw them."""

    def __init__(self) -> None:
        self.directory_id = NO_DIRECTORY_ID
        self.end_offset = -1
        self.last_fetch_ms = -1
        self.last_caught_up_ms = -1
        self.log_end_at_last_fetch = -1

    def update(self, directory_id: uuid.UUID, fetch_offset: int, log_end: int, now_ms: int) -> None:
        if fetch_offset >= log_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif self.log_end_at_last_fetch > 0 and fetch_offset >= self.log_end_at_last_fetch:
            # It has now what the log held at its previous fetch: it was caught up as of then.
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_at_last_fetch = log_end
        self.last_fetch_ms = max(self.last_fetch_ms, now_ms)
        self.end_offset = fetch_offset
        self.directory_id = directory_id


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class SingleVoterQuorum:
    """The quorum of one controller: it leads, and brokers follow its log as observers."""

    def __init__(self, node_id: int, log: LogEnd, endpoints: list[Endpoint],
                 time_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.node_id = node_id
        self._log = log
        self._endpoints = list(endpoints)
        self._time_ms = time_ms
        self._observers: dict[int, _FetchState] = {}

    def record_fetch(self, replica_id: int, fetch_offset: int, directory_id: uuid.UUID = NO_DIRECTORY_ID) -> None:
        """A fetch of the metadata log by `replica_id`; consumers' fetches (negative ids) are not replicas."""
        if replica_id < 0 or replica_id == self.node_id:
            return
        state = self._observers.setdefault(replica_id, _FetchState())
        state.update(directory_id, fetch_offset, self._log.end_offset, self._time_ms())

    def describe_quorum(self) -> QuorumInfo:
        now = self._time_ms()
        log_end = self._log.end_offset
        self._forget_silent_observers(now)
        leader = ReplicaInfo(self.node_id, NO_DIRECTORY_ID, log_end, now, now)  # Kafka reports "now" for the leader
        # a single voter's high watermark is the end of what it fsynced (klamm.controller.flushed_commits)
        return QuorumInfo(leader_id=self.node_id, leader_epoch=SINGLE_VOTER_EPOCH,
                          high_watermark=self._log.committed_end_offset,
                          voters=[leader], observers=_observers(self._observers),
                          voter_endpoints={self.node_id: list(self._endpoints)})

    def _forget_silent_observers(self, now_ms: int) -> None:
        for replica_id, state in list(self._observers.items()):
            if now_ms - state.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS:
                del self._observers[replica_id]


def _observers(states: Mapping[int, _FetchState]) -> list[ReplicaInfo]:
    return [ReplicaInfo(replica_id, s.directory_id, s.end_offset, s.last_fetch_ms, s.last_caught_up_ms)
            for replica_id, s in sorted(states.items())]


def from_response(partition: Any, nodes: Iterable[Any] = ()) -> QuorumInfo:
    """The QuorumInfo of a DescribeQuorum response's partition (any version) and its `nodes` (v2)."""
    return QuorumInfo(leader_id=partition.leader_id, leader_epoch=partition.leader_epoch,
                      high_watermark=partition.high_watermark,
                      voters=[_replica_from(r) for r in partition.current_voters],
                      observers=[_replica_from(r) for r in partition.observers],
                      voter_endpoints={n.node_id: [(e.name, e.host, e.port) for e in n.listeners] for n in nodes})


def _replica_from(state: Any) -> ReplicaInfo:
    # Fields a version lacks are unknown: no directory id before v2, no times (-1) before v1.
    return ReplicaInfo(state.replica_id, getattr(state, "replica_directory_id", None) or NO_DIRECTORY_ID,
                       state.log_end_offset, getattr(state, "last_fetch_timestamp", -1),
                       getattr(state, "last_caught_up_timestamp", -1))
