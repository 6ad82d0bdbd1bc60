"""A deterministic simulation of a KRaft quorum: klamm's RaftNode on a faulty network, crashing disks, a clock.

Everything runs from one seeded `random.Random` and a priority queue of timed
events on a simulated clock, so a seed replays exactly. The code under test is
`klamm.controller.raft` itself, unchanged: the simulator only delivers its
envelopes, calls `tick` when it asks to be woken, and plays the client (appends
to whichever node leads) and the state machine (applies what is committed and
takes snapshots of it, after which the log is cleaned behind them, so lagging
replicas must fetch snapshots).

Faults: messages are dropped, delayed (and so reordered), duplicated; links are
cut, one way or both, for a while; nodes crash (kill -9: what the log did not
flush is lost, the quorum-state file and snapshots are kept) and restart, or
stop gracefully (resign first). A response reaches a node only on the
"connection" its request went out on: not after the node restarted.

The invariants (Raft's, from the paper, plus Kafka's high watermark) are
checked after every event by `Checker`; at the end the faults stop, the network
heals, every node is up, and the quorum must converge: one leader, every node's
high watermark at the leader's log end, and records appended after the healing
committed.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from klamm.controller.raft.log import MemoryRaftLog
from klamm.controller.raft.messages import Batch, Envelope, OffsetAndEpoch
from klamm.controller.raft.node import RaftConfig, RaftNode, Role
from klamm.controller.raft.quorum_state import MemoryQuorumStateStore


class InvariantViolation(AssertionError):
    pass


@dataclass(frozen=True)
class Config:
    voters: int = 3
    observers: int = 1
    duration_ms: int = 20_000
    settle_ms: int = 12_000
    drop: float = 0.03
    duplicate: float = 0.02
    max_delay_ms: int = 20
    append_every_ms: tuple[int, int] = (20, 200)
    crash_every_ms: int = 2_500
    crash_soon_after: float = 0.003  # chance that a node crashes within a few ms of handling a message
    crash_leader: float = 0.4  # share of the random crashes aimed at a leader
    down_ms: tuple[int, int] = (100, 4_000)
    graceful: float = 0.3  # share of stops that resign first
    cut_every_ms: int = 3_000
    cut_ms: tuple[int, int] = (200, 4_000)
    snapshot_every_ms: int = 1_500
    raft: RaftConfig = field(default_factory=lambda: RaftConfig(
        election_timeout_ms=300, fetch_timeout_ms=600, election_backoff_max_ms=300, request_timeout_ms=400,
        retry_backoff_ms=20, fetch_max_wait_ms=150, append_linger_ms=10, max_fetch_batches=8,
        snapshot_chunk_bytes=7))


Key = tuple[int, int]  # a batch: (base offset, epoch)


def _chain(state: str, batch: Batch) -> str:
    digest = hashlib.blake2b(state.encode(), digest_size=8)
    digest.update(repr((batch.base_offset, batch.epoch, batch.control, batch.records)).encode())
    return digest.hexdigest()


class CheckedLog(MemoryRaftLog):
    """The simulated disk, reporting every change to the checker."""

    def __init__(self, node_id: int, checker: Checker) -> None:
        super().__init__()
        self.node_id = node_id
        self.checker = checker
        self.node: RaftNode | None = None

    def append(self, batch: Batch) -> None:
        previous = (self.batches[-1].base_offset, self.batches[-1].epoch) if self.batches else None
        super().append(batch)
        self.checker.on_append(self.node_id, batch, previous, self.start_offset)

    def truncate_to(self, offset: int) -> None:
        if offset < self.end_offset and self.node is not None and self.node.role is Role.LEADER:
            raise InvariantViolation(f"leader {self.node_id} truncates its own log to {offset} in epoch "
                                     f"{self.node.epoch} (leader append-only)")
        super().truncate_to(offset)

    def install_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        super().install_snapshot(snapshot_id, data)
        self.checker.on_install(self.node_id, snapshot_id, data)


class Checker:
    """Raft's invariants, checked incrementally."""

    def __init__(self) -> None:
        self.batches: dict[Key, tuple[Any, Key | None]] = {}  # every batch any log held, with its predecessor
        self.leaders: dict[int, int] = {}  # epoch -> the node that led it
        self.committed: list[Key] = []  # the committed batches, in order
        self.commit_epochs: list[int] = []  # the epoch in which each was committed
        self.committed_end = 0
        self.state_at: dict[int, str] = {0: ""}  # committed end offset -> the state machine's state there
        self.applied: dict[int, tuple[int, str]] = {}  # node -> (offset applied to, state)
        self.hw_seen: dict[int, int] = {}  # node (this life) -> last high watermark
        self.checked_leaders: set[tuple[int, int]] = set()

    def on_append(self, node: int, batch: Batch, previous: Key | None, start: int) -> None:
        key = (batch.base_offset, batch.epoch)
        content = (batch.records, batch.control, batch.next_offset)
        if previous is None and batch.base_offset != start:
            raise InvariantViolation(f"node {node} appended {key} to an empty log starting at {start}")
        seen = self.batches.get(key)
        if seen is None:
            self.batches[key] = (content, previous)
        elif seen[0] != content or (previous is not None and seen[1] is not None and seen[1] != previous):
            raise InvariantViolation(f"log matching: node {node} holds batch {key} as {content} after {previous}, "
                                     f"another log as {seen[0]} after {seen[1]}")

    def on_install(self, node: int, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        offset, state = _parse_snapshot(data)
        if offset != snapshot_id.offset:
            raise InvariantViolation(f"node {node} installed snapshot {snapshot_id} holding offset {offset}")
        self._check_state(node, offset, state, "installed snapshot")
        self.applied[node] = (offset, state)

    def _check_state(self, node: int, offset: int, state: str, what: str) -> None:
        expected = self.state_at.get(offset)
        if offset <= self.committed_end and expected != state:
            raise InvariantViolation(f"state machine safety: node {node} {what} at {offset}: {state}, "
                                     f"committed {expected}")

    def forget(self, node: int) -> None:
        """The node restarted: its high watermark starts again from what it knows."""
        self.hw_seen.pop(node, None)

    def check(self, nodes: dict[int, RaftNode | None], logs: dict[int, CheckedLog]) -> None:
        for node_id, node in nodes.items():
            if node is None:
                continue
            if node.role is Role.LEADER:
                leader = self.leaders.setdefault(node.epoch, node_id)
                if leader != node_id:
                    raise InvariantViolation(f"election safety: nodes {leader} and {node_id} lead epoch {node.epoch}")
                if (node.epoch, node_id) not in self.checked_leaders:
                    self.checked_leaders.add((node.epoch, node_id))
                    self._check_leader_completeness(node_id, node.epoch, logs[node_id])
            self._check_high_watermark(node_id, node, logs[node_id])

    def _check_leader_completeness(self, node_id: int, epoch: int, log: CheckedLog) -> None:
        """A new leader holds every batch that leaders of earlier epochs committed."""
        index = len(self.committed) - 1
        while index >= 0 and self.commit_epochs[index] >= epoch:
            index -= 1
        if index < 0 or self.committed[index][0] < log.start_offset:
            return  # nothing, or only what its snapshot holds
        base, batch_epoch = self.committed[index]
        held = log.read(base, 1)
        if not held or (held[0].base_offset, held[0].epoch) != (base, batch_epoch):
            raise InvariantViolation(f"leader completeness: leader {node_id} of epoch {epoch} lacks batch "
                                     f"{(base, batch_epoch)}, committed in epoch {self.commit_epochs[index]}")

    def _check_high_watermark(self, node_id: int, node: RaftNode, log: CheckedLog) -> None:
        hw = node.high_watermark
        previous = self.hw_seen.get(node_id)
        if previous is not None and hw < previous:
            raise InvariantViolation(f"node {node_id}'s high watermark went back from {previous} to {hw}")
        self.hw_seen[node_id] = hw
        offset, state = self.applied.get(node_id, (0, ""))
        if offset < log.start_offset:  # the node restarted on a snapshot it had taken
            snapshot = log.latest_snapshot()
            assert snapshot is not None
            offset, state = _parse_snapshot(log.read_snapshot(snapshot) or b"")
        # Apply what became committed, from the node's own log, and compare with the quorum's history.
        for batch in log.read(offset, 1 << 30) if hw > offset else ():
            if batch.next_offset > hw:
                break
            if batch.base_offset != offset:
                raise InvariantViolation(f"node {node_id} applies batch {batch.base_offset} after offset {offset}")
            state = _chain(state, batch)
            offset = batch.next_offset
            if offset > self.committed_end:
                self.committed.append((batch.base_offset, batch.epoch))
                self.commit_epochs.append(node.epoch)
                self.committed_end = offset
                self.state_at[offset] = state
            else:
                self._check_state(node_id, offset, state, "applied")
        if offset < hw:
            raise InvariantViolation(f"node {node_id}'s high watermark {hw} is not a batch end (applied to {offset})")
        self.applied[node_id] = (offset, state)


def _parse_snapshot(data: bytes) -> tuple[int, str]:
    offset, _, state = data.decode().partition(":")
    return int(offset), state


class Simulation:
    def __init__(self, seed: int, config: Config | None = None, *, trace: bool = False) -> None:
        self.seed = seed
        self.config = config or Config()
        self.rng = random.Random(seed)
        self.now = 0
        self.trace_on = trace
        self.trace: deque[str] = deque(maxlen=400)
        self.checker = Checker()
        self.voters = list(range(1, self.config.voters + 1))
        self.ids = self.voters + list(range(100, 100 + self.config.observers))
        self.logs = {i: CheckedLog(i, self.checker) for i in self.ids}
        self.stores = {i: MemoryQuorumStateStore() for i in self.ids}
        self.nodes: dict[int, RaftNode | None] = {i: None for i in self.ids}
        self.incarnation = {i: 0 for i in self.ids}
        self.cut: set[tuple[int, int]] = set()
        self.faults = True
        self.appended = 0
        self._queue: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self._connections: dict[tuple[int, int, int], int] = {}  # (replier, requester, correlation) -> requester life
        self._tick_at: dict[int, int] = {}

    # -- scheduling ----------------------------------------------------------------------

    def at(self, time_ms: int, kind: str, payload: Any = None) -> None:
        heapq.heappush(self._queue, (time_ms, next(self._seq), kind, payload))

    def log(self, text: str) -> None:
        if self.trace_on:
            self.trace.append(f"{self.now:>6} {text}")

    def run(self) -> None:
        c = self.config
        for node_id in self.ids:
            self._boot(node_id)
        self.at(self.rng.randint(*c.append_every_ms), "append")
        self.at(self.rng.randint(0, 2 * c.crash_every_ms), "crash")
        self.at(self.rng.randint(0, 2 * c.cut_every_ms), "cut")
        self.at(self.rng.randint(0, 2 * c.snapshot_every_ms), "snapshot")
        self.at(c.duration_ms, "heal")
        end = c.duration_ms + c.settle_ms
        while self._queue and self._queue[0][0] <= end:
            self.now, _, kind, payload = heapq.heappop(self._queue)
            getattr(self, f"_on_{kind}")(payload)
            self.checker.check(self.nodes, self.logs)
        self._check_converged()

    # -- nodes ---------------------------------------------------------------------------

    def _boot(self, node_id: int) -> None:
        node = RaftNode(node_id, self.voters, self.logs[node_id], self.stores[node_id], config=self.config.raft,
                        rng=random.Random(self.rng.random()), now_ms=self.now)
        self.nodes[node_id] = node
        self.logs[node_id].node = node
        self._tick_at.pop(node_id, None)  # a wake-up of its previous life is void
        self.log(f"node {node_id} starts: {node.role.value} epoch {node.epoch}")
        self._after(node_id)

    def _after(self, node_id: int) -> None:
        """Send what the node wrote and wake it when it asks."""
        node = self.nodes[node_id]
        if node is None:
            return
        for envelope in node.take_outbox():
            self._send(envelope)
        deadline = max(node.next_deadline_ms(), self.now)
        if deadline < self._tick_at.get(node_id, 1 << 62) or self._tick_at.get(node_id, 0) < self.now:
            self._tick_at[node_id] = deadline
            self.at(deadline, "tick", (node_id, self.incarnation[node_id]))

    def _send(self, envelope: Envelope) -> None:
        if envelope.is_request:
            life = self.incarnation[envelope.source]
        else:
            life = self._connections.get((envelope.source, envelope.destination, envelope.correlation_id), -1)
        copies = 1
        if self.faults:
            if self.rng.random() < self.config.drop:
                copies = 0
            elif self.rng.random() < self.config.duplicate:
                copies = 2
        for _ in range(copies):
            self.at(self.now + self.rng.randint(1, self.config.max_delay_ms), "deliver", (envelope, life))

    def _on_deliver(self, payload: tuple[Envelope, int]) -> None:
        envelope, life = payload
        source, destination = envelope.source, envelope.destination
        node = self.nodes[destination]
        if node is None or (source, destination) in self.cut:
            return
        if envelope.is_request:
            self._connections[(destination, source, envelope.correlation_id)] = life
        elif life != self.incarnation[destination]:
            return  # the connection this answers died with the requester
        self.log(f"{source}->{destination} {envelope.body}")
        node.handle(envelope, self.now)
        self._after(destination)
        if self.faults and self.rng.random() < self.config.crash_soon_after:
            self.at(self.now + self.rng.randint(0, 2 * self.config.raft.append_linger_ms), "crash", destination)

    def _on_tick(self, payload: tuple[int, int]) -> None:
        node_id, life = payload
        node = self.nodes[node_id]
        if node is None or life != self.incarnation[node_id]:
            return
        if self._tick_at.get(node_id) == self.now:
            self._tick_at.pop(node_id)
        before = (node.role, node.epoch)
        node.tick(self.now)
        if (node.role, node.epoch) != before:
            self.log(f"node {node_id}: {node.role.value} epoch {node.epoch}")
        self._after(node_id)

    # -- the client and the state machine ------------------------------------------------

    def _on_append(self, _: Any) -> None:
        for node_id, node in self.nodes.items():
            if node is not None and node.is_leader:
                self.appended += 1
                records = tuple(f"r{self.appended}.{i}".encode() for i in range(self.rng.randint(1, 3)))
                last = node.append(records, self.now)
                self.log(f"append {records[0]!r}.. to {node_id}: last offset {last}")
                self._after(node_id)
        self.at(self.now + self.rng.randint(*self.config.append_every_ms), "append")

    def _on_snapshot(self, _: Any) -> None:
        """Each live node snapshots what it applied and cleans its log behind it."""
        for node_id, node in self.nodes.items():
            log = self.logs[node_id]
            applied = self.checker.applied.get(node_id)
            if node is None or applied is None or applied[0] <= log.start_offset:
                continue
            offset, state = applied
            last = [b for b in log.read(offset - 1, 1) if b.next_offset == offset]
            if last:
                snapshot_id = OffsetAndEpoch(last[0].epoch, offset)
                log.create_snapshot(snapshot_id, f"{offset}:{state}".encode())
                log.delete_before(snapshot_id)
                self.log(f"node {node_id} snapshots at {snapshot_id}, log starts at {log.start_offset}")
        if self.faults:
            self.at(self.now + self.rng.randint(1, 2 * self.config.snapshot_every_ms), "snapshot")

    # -- faults --------------------------------------------------------------------------

    def _on_crash(self, target: int | None) -> None:
        if not self.faults:
            return
        if target is None:  # a crash of the steady schedule, not one aimed at a moment
            self.at(self.now + self.rng.randint(1, 2 * self.config.crash_every_ms), "crash")
        alive = [i for i in self.ids if self.nodes[i] is not None]
        leaders = [i for i in alive if self.nodes[i].is_leader]  # type: ignore[union-attr]
        if target is not None:
            alive = [target] if target in alive else []
        elif leaders and self.rng.random() < self.config.crash_leader:
            alive = leaders
        if not alive:
            return
        node_id = self.rng.choice(alive)
        node = self.nodes[node_id]
        assert node is not None
        if self.rng.random() < self.config.graceful:
            node.resign(self.now)
            for envelope in node.take_outbox():
                self._send(envelope)
        self.nodes[node_id] = None
        self.logs[node_id].node = None
        self.logs[node_id].lose_unflushed()
        self.incarnation[node_id] += 1
        self.checker.forget(node_id)
        self.checker.applied.pop(node_id, None)
        self.log(f"node {node_id} crashes (log now ends at {self.logs[node_id].end_offset})")
        self.at(self.now + self.rng.randint(*self.config.down_ms), "restart", node_id)

    def _on_restart(self, node_id: int) -> None:
        if self.nodes[node_id] is None:
            self._boot(node_id)

    def _on_cut(self, _: Any) -> None:
        if not self.faults:
            return
        node_id = self.rng.choice(self.ids)
        others = [i for i in self.ids if i != node_id]
        links = set()
        for other in others:
            direction = self.rng.choice(("in", "out", "both"))
            if direction in ("in", "both"):
                links.add((other, node_id))
            if direction in ("out", "both"):
                links.add((node_id, other))
        self.cut |= links
        self.log(f"links cut: {sorted(links)}")
        self.at(self.now + self.rng.randint(*self.config.cut_ms), "mend", frozenset(links))
        self.at(self.now + self.rng.randint(1, 2 * self.config.cut_every_ms), "cut")

    def _on_mend(self, links: frozenset[tuple[int, int]]) -> None:
        self.cut -= links

    def _on_heal(self, _: Any) -> None:
        self.faults = False
        self.cut.clear()
        self.log("the network heals; every node restarts")
        for node_id in self.ids:
            if self.nodes[node_id] is None:
                self._boot(node_id)
        self.healed_appended = self.appended

    # -- liveness ------------------------------------------------------------------------

    def _check_converged(self) -> None:
        nodes = {i: n for i, n in self.nodes.items() if n is not None}
        leaders = [n for n in nodes.values() if n.is_leader]
        if len(leaders) != 1:
            raise InvariantViolation(f"liveness: {len(leaders)} leaders after the network healed")
        leader = leaders[0]
        # Stop appending and let the last ones commit everywhere.
        self._queue = [e for e in self._queue if e[2] != "append"]
        heapq.heapify(self._queue)
        end = self.now + 3 * self.config.raft.fetch_timeout_ms
        while self._queue and self._queue[0][0] <= end:
            self.now, _, kind, payload = heapq.heappop(self._queue)
            getattr(self, f"_on_{kind}")(payload)
            self.checker.check(self.nodes, self.logs)
        if not leader.is_leader:
            raise InvariantViolation("liveness: the leader changed with no fault")
        target = self.logs[leader.node_id].end_offset
        for node_id, node in nodes.items():
            if node.high_watermark != target or self.logs[node_id].end_offset != target:
                raise InvariantViolation(f"liveness: node {node_id} has high watermark {node.high_watermark} and "
                                         f"log end {self.logs[node_id].end_offset}, the leader's log ends at {target}")
            if node.epoch != leader.epoch or (node_id in self.voters and node_id != leader.node_id
                                              and node.role is not Role.FOLLOWER):
                raise InvariantViolation(f"liveness: node {node_id} is {node.role.value} in epoch {node.epoch}")
        if self.appended > self.healed_appended and self.checker.committed_end < target:
            raise InvariantViolation("liveness: records appended after the healing are not committed")


def run_seed(seed: int, config: Config | None = None) -> Simulation:
    simulation = Simulation(seed, config)
    simulation.run()
    return simulation
