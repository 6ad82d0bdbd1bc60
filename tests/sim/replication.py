"""A deterministic simulation of one replicated partition: brokers, a controller, a producer, a bad network.

Everything runs from one seeded `random.Random` and a priority queue of timed
events on a simulated clock, so a seed replays exactly. The code under test is
klamm's own: `klamm.broker.replication` (the leader's ISR/HW state machine, the
follower's truncation rules), `klamm.controller.partition_changes` (fencing,
unfencing, AlterPartition, elections) applied to a real `MetadataImage`, and
`klamm.storage.leader_epoch.LeaderEpochCache` for each replica's epochs. The
rest — the log, the fetch loop, the controller's session tracking, the
producer — is modelled here as the broker does it, message by message.

Faults: messages are dropped, delayed, duplicated and so reordered; brokers are
killed (kill -9: memory lost, the log kept, as the page cache keeps it) and
restarted; a broker is cut off from everyone for a while. Metadata reaches the
brokers late but in the end (brokers follow the metadata log), each keeping the
newest image it has seen.

After every event the invariants are checked (see `check_invariants`); at the
end the faults stop, the network heals and the cluster must converge: every
replica's log equal to the leader's, every acknowledged record in it.
"""

from __future__ import annotations

import heapq
import itertools
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from klamm.broker.replication import (LeaderState, diverging_epoch, follower_high_watermark, out_of_range_offset,
                                      truncation_offset)
from klamm.controller.image import MetadataImage, apply_batch, empty_image
from klamm.controller.partition_changes import (decide_alter_partition, decide_fence_broker,
                                                decide_unfence_broker)
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.protocol.errors import ErrorCode
from klamm.storage.leader_epoch import EpochEntry, LeaderEpochCache

TOPIC_ID = uuid.UUID(int=1)
CONTROLLER = 0


class InvariantViolation(AssertionError):
    pass


@dataclass(frozen=True)
class Config:
    brokers: int = 3
    min_insync: int = 2
    duration_ms: int = 20_000
    settle_ms: int = 8_000
    drop: float = 0.03
    duplicate: float = 0.02
    max_delay_ms: int = 15
    lag_max_ms: int = 300
    session_timeout_ms: int = 400
    heartbeat_ms: int = 100
    fetch_backoff_ms: int = 5
    fetch_timeout_ms: int = 100
    request_timeout_ms: int = 400
    crash_every_ms: int = 1_500
    down_ms: tuple[int, int] = (200, 2_500)
    isolate_every_ms: int = 4_000
    isolated_ms: tuple[int, int] = (200, 1_500)
    max_fetch_records: int = 8


# ------------------------------------------------------------------ the log
class MemoryEpochCache(LeaderEpochCache):
    """klamm's leader-epoch cache, kept in memory: the simulated disk never loses it."""

    def __init__(self, log_end_offset: Callable[[], int]) -> None:
        self._log_end_offset = log_end_offset
        self.entries = []

    def _changed(self, entries: list[EpochEntry], *, write: bool) -> None:
        self.entries = entries  # nothing to write


@dataclass(frozen=True)
class Entry:
    epoch: int
    value: str


class SimLog:
    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.epochs = MemoryEpochCache(lambda: len(self.entries))

    @property
    def end_offset(self) -> int:
        return len(self.entries)

    @property
    def last_epoch(self) -> int:
        return self.epochs.latest_epoch

    def append(self, entries: list[Entry]) -> None:
        for entry in entries:
            if entry.epoch > self.epochs.latest_epoch:
                self.epochs.assign(entry.epoch, len(self.entries))
            self.entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        """As klamm's Log.truncate_to: an epoch begun past the end goes even when no entry does."""
        del self.entries[offset:]
        self.epochs.truncate_from_end(len(self.entries))


# ------------------------------------------------------------------ messages
@dataclass(frozen=True)
class Fetch:
    seq: int
    replica: int
    leader_epoch: int
    offset: int
    last_fetched_epoch: int


@dataclass(frozen=True)
class FetchResult:
    seq: int
    error: ErrorCode
    entries: tuple[Entry, ...] = ()
    high_watermark: int = 0
    diverging: tuple[int, int] | None = None
    log_end_offset: int = 0


@dataclass(frozen=True)
class Produce:
    attempt: int
    value: str


@dataclass(frozen=True)
class ProduceResult:
    attempt: int
    error: ErrorCode
    offset: int = -1


@dataclass(frozen=True)
class AlterPartition:
    broker: int
    broker_epoch: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True)
class AlterPartitionResult:
    leader_epoch: int
    partition_epoch: int
    error: ErrorCode


@dataclass(frozen=True)
class Heartbeat:
    broker: int


@dataclass(frozen=True)
class ImageUpdate:
    image: MetadataImage


PRODUCER = -1


# ------------------------------------------------------------------ the brokers
@dataclass
class Broker:
    node: int
    log: SimLog = field(default_factory=SimLog)
    alive: bool = True
    image: MetadataImage | None = None
    leader: LeaderState | None = None
    follower_hw: int = 0
    fetch_seq: int = 0  # the fetch whose answer is awaited; older answers are stale
    waiting: dict[int, tuple[int, int]] = field(default_factory=dict)  # produce attempt -> (end offset, deadline)
    incarnation: int = 0  # bumped by each restart: timers of an earlier life do nothing


class Simulation:
    def __init__(self, seed: int, config: Config = Config(), *, trace: bool = False) -> None:
        self.seed = seed
        self.config = config
        self.rng = random.Random(seed)
        self.now = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.trace: list[str] = []
        self.keep_trace = trace
        self.faults = True
        self.isolated: set[int] = set()
        self.brokers = {n: Broker(n) for n in range(1, config.brokers + 1)}
        self.image = self._bootstrap()
        self.last_contact = {n: 0 for n in self.brokers}
        self.leader_of_epoch: dict[int, int] = {0: 1}
        self.acked: dict[str, int] = {}  # value -> offset, as the producer was told
        self.producer_attempt = 0
        self.producer_inflight: tuple[int, str, int] | None = None  # (attempt, value, sent to)
        self.producer_view: MetadataImage = self.image
        self.step_count = 0
        self.producing = True

    # -------------------------------------------------------------- scheduling
    def at(self, delay_ms: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._queue, (self.now + delay_ms, next(self._seq), action))

    def log(self, text: str) -> None:
        if self.keep_trace:
            self.trace.append(f"{self.now:>6} {text}")

    def send(self, src: int, dst: int, message: Any) -> None:
        """Deliver later, maybe twice, maybe never; nothing crosses an isolation."""
        if self.faults and (src in self.isolated or dst in self.isolated or self.rng.random() < self.config.drop):
            self.log(f"drop {src}->{dst} {message}")
            return
        copies = 2 if self.faults and self.rng.random() < self.config.duplicate else 1
        for _ in range(copies):
            self.at(self.rng.randint(1, self.config.max_delay_ms), lambda: self._deliver(src, dst, message))

    def _deliver(self, src: int, dst: int, message: Any) -> None:
        if self.faults and (src in self.isolated or dst in self.isolated):
            return
        if dst == CONTROLLER:
            self.controller_receive(src, message)
        elif dst == PRODUCER:
            self.producer_receive(message)
        elif self.brokers[dst].alive:
            self.broker_receive(self.brokers[dst], src, message)

    # -------------------------------------------------------------- the controller
    def _bootstrap(self) -> MetadataImage:
        nodes = list(self.brokers)
        records = [MetadataRecord("RegisterBrokerRecord", {
            "broker_id": n, "incarnation_id": uuid.UUID(int=n), "broker_epoch": n, "end_points": [],
            "features": [], "rack": None, "fenced": False}) for n in nodes]
        records.append(MetadataRecord("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}))
        records.append(MetadataRecord("PartitionRecord", {
            "partition_id": 0, "topic_id": TOPIC_ID, "replicas": nodes, "isr": nodes, "leader": nodes[0],
            "leader_epoch": 0, "partition_epoch": 0}))
        records.append(MetadataRecord("ConfigRecord", {"resource_type": 2, "resource_name": "t",
                                                       "name": "min.insync.replicas",
                                                       "value": str(self.config.min_insync)}))
        return _replay(empty_image("sim", CONTROLLER), records)

    def commit(self, records: list[MetadataRecord], why: str) -> None:
        if not records:
            return
        self.image = _replay(self.image, records)
        partition = self.partition()
        known = self.leader_of_epoch.get(partition.leader_epoch)
        if known is not None and known != partition.leader:
            raise InvariantViolation(f"epoch {partition.leader_epoch} has leaders {known} and {partition.leader}")
        self.leader_of_epoch[partition.leader_epoch] = partition.leader
        self.log(f"controller {why}: leader {partition.leader} epoch {partition.leader_epoch} "
                 f"isr {partition.isr} pe {partition.partition_epoch}")
        self.publish()

    def publish(self) -> None:
        """Brokers follow the metadata log: the image reaches each eventually, late, maybe out of order."""
        image = self.image
        for node in self.brokers:
            self.at(self.rng.randint(1, 3 * self.config.max_delay_ms), lambda n=node: self._metadata(n, image))
        self.at(self.rng.randint(1, 5 * self.config.max_delay_ms), lambda: self._producer_metadata(image))

    def _metadata(self, node: int, image: MetadataImage) -> None:
        broker = self.brokers[node]
        if broker.alive and (node not in self.isolated or not self.faults):
            self.apply_image(broker, image)

    def partition(self, image: MetadataImage | None = None):
        return (image or self.image).topics_by_id[TOPIC_ID].partitions[0]

    def controller_receive(self, src: int, message: Any) -> None:
        if isinstance(message, Heartbeat):
            self.last_contact[src] = self.now
            if self.image.brokers[src].fenced:
                self.commit(decide_unfence_broker(self.image, src), f"unfence {src}")
        elif isinstance(message, AlterPartition):
            error, records = decide_alter_partition(self.image, message.broker, message.broker_epoch, TOPIC_ID, 0,
                                                    message.leader_epoch, message.partition_epoch, message.isr)
            self.commit(records, f"alter-partition from {src} {message.isr}")
            p = self.partition()
            self.send(CONTROLLER, src, AlterPartitionResult(message.leader_epoch, p.partition_epoch, error))

    def controller_tick(self) -> None:
        for node, last in self.last_contact.items():
            if not self.image.brokers[node].fenced and self.now - last > self.config.session_timeout_ms:
                self.commit(decide_fence_broker(self.image, node), f"fence {node}")
        self.at(self.config.heartbeat_ms // 2, self.controller_tick)

    # -------------------------------------------------------------- a broker
    def apply_image(self, broker: Broker, image: MetadataImage) -> None:
        if broker.image is not None and image.offset <= broker.image.offset:
            return  # an older image arriving late
        broker.image = image
        p = self.partition(image)
        if p.leader == broker.node:
            if broker.leader is None or broker.leader.leader_epoch != p.leader_epoch:
                self.become_leader(broker, p)
            else:
                if broker.leader.on_partition_change(p.leader_epoch, p.partition_epoch, p.isr, p.replicas, self.now):
                    self.complete_produces(broker)
                broker.leader.fenced_or_shutting_down = _ineligible(image)
        elif broker.leader is not None:
            self.resign(broker)
        if broker.leader is None and p.leader >= 0:
            self.fetch(broker)

    def become_leader(self, broker: Broker, p: Any) -> None:
        self.resign(broker)
        log = broker.log
        log.epochs.assign(p.leader_epoch, log.end_offset)
        broker.leader = LeaderState(broker.node, p.leader_epoch, p.partition_epoch, p.replicas, p.isr, log.end_offset,
                                    log.end_offset, min(broker.follower_hw, log.end_offset), self.now,
                                    self.config.lag_max_ms)
        broker.leader.fenced_or_shutting_down = _ineligible(broker.image)
        self.log(f"broker {broker.node} leads epoch {p.leader_epoch} from {log.end_offset}")
        incarnation = broker.incarnation
        self.at(self.config.lag_max_ms // 2, lambda: self.isr_tick(broker, incarnation, p.leader_epoch))

    def resign(self, broker: Broker) -> None:
        if broker.leader is None:
            return
        broker.follower_hw = broker.leader.high_watermark
        broker.leader = None
        for attempt in list(broker.waiting):
            del broker.waiting[attempt]
            self.send(broker.node, PRODUCER, ProduceResult(attempt, ErrorCode.not_leader_or_follower))

    def isr_tick(self, broker: Broker, incarnation: int, epoch: int) -> None:
        state = broker.leader
        if broker.incarnation != incarnation or state is None or state.leader_epoch != epoch:
            return
        proposal = state.tick(self.now, broker.log.end_offset)
        self.propose(broker, proposal)
        if state.pending is not None and proposal is None:
            self.propose(broker, state.pending)  # a proposal not yet settled goes again (its answer may be lost)
        self.at(self.config.lag_max_ms // 2, lambda: self.isr_tick(broker, incarnation, epoch))

    def propose(self, broker: Broker, proposal: Any) -> None:
        if proposal is None:
            return
        epoch = broker.image.brokers[broker.node].epoch
        self.send(broker.node, CONTROLLER, AlterPartition(broker.node, epoch, proposal.leader_epoch,
                                                          proposal.partition_epoch, proposal.isr))

    def fetch(self, broker: Broker) -> None:
        """Send the next fetch to the leader the broker's image names (a follower's fetcher)."""
        p = self.partition(broker.image)
        if broker.leader is not None or p.leader < 0 or p.leader == broker.node:
            return
        broker.fetch_seq += 1
        seq, incarnation = broker.fetch_seq, broker.incarnation
        self.send(broker.node, p.leader, Fetch(seq, broker.node, p.leader_epoch, broker.log.end_offset,
                                              broker.log.last_epoch))
        self.at(self.config.fetch_timeout_ms, lambda: self._fetch_timed_out(broker, incarnation, seq))

    def _fetch_timed_out(self, broker: Broker, incarnation: int, seq: int) -> None:
        if broker.alive and broker.incarnation == incarnation and broker.fetch_seq == seq:
            self.fetch(broker)

    def broker_receive(self, broker: Broker, src: int, message: Any) -> None:
        if isinstance(message, Fetch):
            self.send(broker.node, src, self.serve_fetch(broker, message))
        elif isinstance(message, FetchResult):
            self.fetched(broker, message)
        elif isinstance(message, Produce):
            self.serve_produce(broker, message)
        elif isinstance(message, AlterPartitionResult):
            state = broker.leader
            if state is not None and message.error != ErrorCode.none and message.leader_epoch == state.leader_epoch:
                state.on_proposal_failed(message.error)

    def serve_fetch(self, broker: Broker, fetch: Fetch) -> FetchResult:
        state = broker.leader
        if state is None:
            return FetchResult(fetch.seq, ErrorCode.not_leader_or_follower)
        if fetch.leader_epoch < state.leader_epoch:
            return FetchResult(fetch.seq, ErrorCode.fenced_leader_epoch)
        if fetch.leader_epoch > state.leader_epoch:
            return FetchResult(fetch.seq, ErrorCode.unknown_leader_epoch)
        log = broker.log
        if fetch.last_fetched_epoch >= 0:
            diverging = diverging_epoch(log.epochs.end_offset_for(fetch.last_fetched_epoch), fetch.offset,
                                        fetch.last_fetched_epoch)
            if diverging is not None:
                return FetchResult(fetch.seq, ErrorCode.none, diverging=diverging,
                                   high_watermark=state.high_watermark)
        if fetch.offset > log.end_offset:
            return FetchResult(fetch.seq, ErrorCode.offset_out_of_range, log_end_offset=log.end_offset)
        moved, proposal = state.on_follower_fetch(fetch.replica, fetch.offset, log.end_offset, self.now)
        self.propose(broker, proposal)
        if moved:
            self.complete_produces(broker)
        entries = tuple(log.entries[fetch.offset:fetch.offset + self.config.max_fetch_records])
        return FetchResult(fetch.seq, ErrorCode.none, entries, state.high_watermark, log_end_offset=log.end_offset)

    def fetched(self, broker: Broker, result: FetchResult) -> None:
        if result.seq != broker.fetch_seq or broker.leader is not None:
            return  # stale, duplicated, or this broker leads now
        log = broker.log
        incarnation = broker.incarnation
        if result.diverging is not None:
            local = log.epochs.end_offset_for(result.diverging[0])
            offset = truncation_offset(result.diverging, local, log.end_offset)
            self.log(f"broker {broker.node} truncates {log.end_offset} -> {offset} (diverging {result.diverging})")
            log.truncate_to(offset)
        elif result.error == ErrorCode.offset_out_of_range:
            offset, _ = out_of_range_offset(log.end_offset, 0, result.log_end_offset)
            log.truncate_to(offset)
        elif result.error == ErrorCode.none:
            log.append(list(result.entries))
            broker.follower_hw = max(broker.follower_hw, follower_high_watermark(result.high_watermark,
                                                                                 log.end_offset))
            broker.follower_hw = min(broker.follower_hw, log.end_offset)
        delay = 0 if result.entries or result.diverging else self.config.fetch_backoff_ms
        if result.error not in (ErrorCode.none, ErrorCode.offset_out_of_range):
            delay = 3 * self.config.fetch_backoff_ms  # wait for the image to name the leader
        broker.fetch_seq += 1  # this answer is handled: a duplicate of it is stale
        self.at(delay, lambda: self._fetch_again(broker, incarnation))

    def _fetch_again(self, broker: Broker, incarnation: int) -> None:
        if broker.alive and broker.incarnation == incarnation:
            self.fetch(broker)

    def serve_produce(self, broker: Broker, produce: Produce) -> None:
        state = broker.leader
        if state is None:
            self.send(broker.node, PRODUCER, ProduceResult(produce.attempt, ErrorCode.not_leader_or_follower))
            return
        if not state.has_enough_replicas(self.config.min_insync):
            self.send(broker.node, PRODUCER, ProduceResult(produce.attempt, ErrorCode.not_enough_replicas))
            return
        broker.log.append([Entry(state.leader_epoch, produce.value)])
        broker.waiting[produce.attempt] = (broker.log.end_offset, self.now + self.config.request_timeout_ms)
        if state.on_local_append(broker.log.end_offset, self.now):
            pass
        self.complete_produces(broker)
        attempt, incarnation = produce.attempt, broker.incarnation
        self.at(self.config.request_timeout_ms, lambda: self._produce_timed_out(broker, incarnation, attempt))

    def complete_produces(self, broker: Broker) -> None:
        state = broker.leader
        for attempt, (end, _deadline) in list(broker.waiting.items()):
            outcome = state.acks_all_outcome(end, self.config.min_insync)
            if outcome is None:
                continue
            del broker.waiting[attempt]
            self.send(broker.node, PRODUCER, ProduceResult(attempt, outcome, end - 1))

    def _produce_timed_out(self, broker: Broker, incarnation: int, attempt: int) -> None:
        if broker.incarnation == incarnation and broker.waiting.pop(attempt, None) is not None:
            self.send(broker.node, PRODUCER, ProduceResult(attempt, ErrorCode.request_timed_out))

    def heartbeat(self, broker: Broker, incarnation: int) -> None:
        if not broker.alive or broker.incarnation != incarnation:
            return
        self.send(broker.node, CONTROLLER, Heartbeat(broker.node))
        self.at(self.config.heartbeat_ms, lambda: self.heartbeat(broker, incarnation))

    # -------------------------------------------------------------- faults
    def crash(self, node: int) -> None:
        broker = self.brokers[node]
        if not broker.alive:
            return
        self.log(f"broker {node} killed")
        broker.alive = False
        broker.incarnation += 1
        broker.leader = None
        broker.waiting.clear()
        broker.image = None
        down = self.rng.randint(*self.config.down_ms)
        self.at(down, lambda: self.restart(node))

    def restart(self, node: int) -> None:
        broker = self.brokers[node]
        if broker.alive:
            return  # restarted already (the faults stopped first)
        self.log(f"broker {node} restarts with log end {broker.log.end_offset}")
        broker.alive = True
        broker.incarnation += 1
        broker.follower_hw = min(broker.follower_hw, broker.log.end_offset)
        self.heartbeat(broker, broker.incarnation)
        self.at(self.rng.randint(1, 3 * self.config.max_delay_ms), lambda: self._metadata(node, self.image))

    def chaos(self) -> None:
        if not self.faults:
            return
        alive = [n for n, b in self.brokers.items() if b.alive]
        if len(alive) > 1:
            self.crash(self.rng.choice(alive))
        self.at(self.rng.randint(self.config.crash_every_ms // 2, self.config.crash_every_ms * 3 // 2), self.chaos)

    def isolate(self) -> None:
        if not self.faults:
            return
        node = self.rng.choice(list(self.brokers))
        self.isolated.add(node)
        self.log(f"broker {node} cut off")
        self.at(self.rng.randint(*self.config.isolated_ms), lambda: self._heal(node))
        self.at(self.rng.randint(self.config.isolate_every_ms // 2, self.config.isolate_every_ms * 3 // 2),
                self.isolate)

    def _heal(self, node: int) -> None:
        self.isolated.discard(node)
        self.log(f"broker {node} reconnected")
        broker = self.brokers[node]
        if broker.alive:
            self.at(self.rng.randint(1, 3 * self.config.max_delay_ms), lambda: self._metadata(node, self.image))

    # -------------------------------------------------------------- the producer
    def produce(self) -> None:
        if not self.producing:
            return
        if self.producer_inflight is None:
            self.producer_attempt += 1
            value = f"v{self.producer_attempt}"
            leader = self.partition(self.producer_view).leader
            if leader >= 0:
                self.producer_inflight = (self.producer_attempt, value, leader)
                self.send(PRODUCER, leader, Produce(self.producer_attempt, value))
                attempt = self.producer_attempt
                self.at(2 * self.config.request_timeout_ms, lambda: self._producer_gave_up(attempt))
        self.at(self.rng.randint(1, 10), self.produce)

    def _producer_gave_up(self, attempt: int) -> None:
        if self.producer_inflight is not None and self.producer_inflight[0] == attempt:
            self.producer_inflight = None

    def _producer_metadata(self, image: MetadataImage) -> None:
        if image.offset > self.producer_view.offset:
            self.producer_view = image

    def producer_receive(self, result: ProduceResult) -> None:
        inflight = self.producer_inflight
        if inflight is None or inflight[0] != result.attempt:
            return
        self.producer_inflight = None
        if result.error == ErrorCode.none:
            self.acked[inflight[1]] = result.offset
            self.log(f"acked {inflight[1]} at {result.offset}")

    # -------------------------------------------------------------- running
    def run(self) -> None:
        for node, broker in self.brokers.items():
            self.heartbeat(broker, broker.incarnation)
            self._metadata(node, self.image)
        self.at(0, self.controller_tick)
        self.at(self.config.heartbeat_ms, self.produce)
        self.at(self.config.crash_every_ms, self.chaos)
        self.at(self.config.isolate_every_ms, self.isolate)
        self._run_until(self.config.duration_ms)
        self.faults = False
        self.isolated.clear()
        for node, broker in self.brokers.items():
            if not broker.alive:
                self.restart(node)
        self.publish()
        self._run_until(self.config.duration_ms + self.config.settle_ms // 2)
        self.producing = False  # the last half of the settling time replicates what is in flight
        self._run_until(self.config.duration_ms + self.config.settle_ms)
        self.check_converged()

    def _run_until(self, end_ms: int) -> None:
        while self._queue and self._queue[0][0] <= end_ms:
            when, _, action = heapq.heappop(self._queue)
            self.now = when
            action()
            self.step_count += 1
            self.check_invariants()

    # -------------------------------------------------------------- invariants
    def check_invariants(self) -> None:
        p = self.partition()
        for broker in self.brokers.values():
            state = broker.leader
            if state is None:
                continue
            if self.leader_of_epoch.get(state.leader_epoch) != broker.node:
                raise InvariantViolation(f"broker {broker.node} leads epoch {state.leader_epoch}, which the "
                                         f"controller gave to {self.leader_of_epoch.get(state.leader_epoch)}")
            for member in state.maximal_isr:
                if state.high_watermark > self.brokers[member].log.end_offset:
                    raise InvariantViolation(
                        f"leader {broker.node}'s HW {state.high_watermark} is past ISR member {member}'s log end "
                        f"{self.brokers[member].log.end_offset}")
        # every acknowledged record, in every replica of the committed ISR, where it was acknowledged
        for member in p.isr:
            entries = self.brokers[member].log.entries
            for value, offset in self.acked.items():
                if offset >= len(entries) or entries[offset].value != value:
                    have = entries[offset].value if offset < len(entries) else None
                    raise InvariantViolation(f"acknowledged {value}@{offset} is not in ISR member {member}'s log "
                                             f"(it holds {have!r}; ISR {p.isr}, leader {p.leader})")
        offsets = sorted(self.acked.values())
        if len(set(offsets)) != len(offsets):
            raise InvariantViolation("two acknowledged records share an offset")

    def check_converged(self) -> None:
        p = self.partition()
        if p.leader < 0:
            raise InvariantViolation(f"no leader after the faults stopped (ISR {p.isr})")
        leader = self.brokers[p.leader]
        if set(p.isr) != set(self.brokers):
            raise InvariantViolation(f"ISR {p.isr} did not grow back to every broker")
        for broker in self.brokers.values():
            if broker.log.entries != leader.log.entries[:broker.log.end_offset] or \
                    broker.log.end_offset != leader.log.end_offset:
                raise InvariantViolation(f"broker {broker.node}'s log is not the leader's "
                                         f"({broker.log.end_offset} vs {leader.log.end_offset})")
        if not self.acked:
            raise InvariantViolation("nothing was acknowledged: the run proves nothing")


def _ineligible(image: MetadataImage) -> set[int]:
    return {b.node_id for b in image.brokers.values() if b.fenced or b.in_controlled_shutdown}


def _replay(image: MetadataImage, records: list[MetadataRecord]) -> MetadataImage:
    return apply_batch(image, enumerate((decode_record(encode_record(r)) for r in records), start=image.offset + 1))


def run_seed(seed: int, config: Config = Config(), *, trace: bool = False) -> Simulation:
    simulation = Simulation(seed, config, trace=trace)
    simulation.run()
    return simulation
