"""The classic group coordinator as a state machine, after Kafka's GroupCoordinator.

Every operation returns a `Result`: the records to append to __consumer_offsets,
the response, and actions to run once the records are written (the leader's
assignment reaches the members only after it is stored). The owner appends the
records, then feeds each one to `replay` — committed offsets and deletions
change only there — then runs the actions. JoinGroup and SyncGroup answer
through callbacks, when the rebalance gets that far.

Group membership (members, their callbacks, timers) is soft state kept in
memory; each generation's hard state (protocol, leader, members with their
subscriptions and assignments) is a GroupMetadata record. Replaying those
records rebuilds groups while a partition loads; at run time the group in
memory is already ahead of them, so only tombstones matter then.

Transactional offset commits (TxnOffsetCommit) are records written in the
producer's transaction: replay keeps them pending per producer id until the
transaction's marker reaches the same partition (`replay_marker`): a commit
makes them the group's offsets, an abort drops them.

Reads at the high watermark: the runtime passes each record's log offset to
`replay` and tells the coordinator where the partition's HW is (`advance`).
Offsets replayed above the HW are the group's latest, which writes see, but
OffsetFetch (`fetch_offsets`) answers from the `OffsetTimeline`, as of the HW —
as Kafka 4's runtime reads its timeline at the last committed offset.

Time comes from the injected timer's clock; deadlines (session, new-member,
join, sync, retention) are timer entries whose callbacks run in `poll_timers`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from klamm.coordinator.consumer_coordinator import ConsumerGroupConfig, ConsumerGroups
from klamm.coordinator.consumer_group import ConsumerGroup
from klamm.coordinator.consumer_records import is_consumer_group_key
from klamm.coordinator.group import (UNKNOWN_MEMBER_ID, Callback, ClassicGroup, GroupState, Member,
                                     join_error, sync_response)
from klamm.coordinator.partitioning import partition_for
from klamm.coordinator.records import (CommittedOffset, CoordinatorRecord, GroupKey, OffsetKey, decode_group_value,
                                       decode_key, decode_offset_value, group_metadata_record,
                                       offset_commit_record)
from klamm.coordinator.timeline import OffsetTimeline
from klamm.coordinator.timer import Timer
from klamm.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's: a new member's JoinGroup may wait this long


@dataclass(frozen=True)
class CoordinatorConfig:
    num_partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_group_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    consumer: ConsumerGroupConfig = ConsumerGroupConfig()


@dataclass
class Result:
    records: list[CoordinatorRecord] = field(default_factory=list)
    response: Any = None
    after_write: list[Callable[[ErrorCode], None]] = field(default_factory=list)
    offset_commit: bool = False  # (Txn)OffsetCommit: records too large are INVALID_COMMIT_OFFSET_SIZE


@dataclass(frozen=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool


@dataclass(frozen=True)
class SyncRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: dict[str, bytes]


@dataclass(frozen=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_timestamp: int = -1  # OffsetCommit v1's: the offset expires offsets.retention.ms after it


def _logged(kind: str, group_id: str, member_id: str, respond: Callback) -> Callback:
    log.debug("%s group %s member %r: request", kind, group_id, member_id)

    def logged(response: dict[str, Any]) -> None:
        log.debug("%s group %s member %r: %s generation %s member %r leader %r, %d bytes/members",
                  kind, group_id, member_id, ErrorCode(response["error_code"]).name, response.get("generation_id"),
                  response.get("member_id"), response.get("leader"),
                  len(response.get("members", response.get("assignment", b"")) or ()))
        respond(response)
    return logged


class GroupCoordinator:
    def __init__(self, config: CoordinatorConfig, timer: Timer) -> None:
        self.config = config
        self.timer = timer
        self.groups: dict[str, ClassicGroup] = {}
        self._owned: set[int] = set()  # partitions of __consumer_offsets this coordinator serves
        self._loading: set[int] = set()
        self._result = Result()  # what the running operation has to write; taken by _done()
        # producer id -> (group, topic, partition) -> offset, written in a still open transaction
        self._pending_txn: dict[int, dict[tuple[str, str, int], CommittedOffset]] = {}
        self._timeline = OffsetTimeline()  # offsets as of each partition's high watermark, for OffsetFetch
        self.consumer = ConsumerGroups(self, config.consumer)  # consumer-protocol groups (KIP-848)

    @property
    def clock(self) -> Callable[[], int]:
        return self.timer.clock

    # ---------------------------------------------------------------- loading
    def begin_loading(self, partition: int) -> None:
        self._owned.add(partition)
        self._loading.add(partition)

    def finish_loading(self, partition: int) -> None:
        """Loaded groups with members are Stable: their members must heartbeat within a session."""
        self._loading.discard(partition)
        for group in self.groups.values():
            if group.partition == partition:
                for member in group.members.values():
                    self._schedule_session(group, member)
        self.consumer.finish_loading(partition)
        self._schedule_retention()

    def unload(self, partition: int) -> None:
        """Stop serving a partition this broker no longer leads (Kafka's onResignation).

        Its groups leave memory (their state stays in the log, for the new leader to
        load), their timers go, and requests parked in a join or sync answer
        NOT_COORDINATOR so their members look for the new coordinator.
        """
        self._owned.discard(partition)
        self._loading.discard(partition)
        gone = {group_id for group_id, group in self.groups.items() if group.partition == partition}
        for group_id in gone:
            for member in self.groups.pop(group_id).members.values():
                if member.join_callback is not None:
                    member.join_callback(join_error(ErrorCode.not_coordinator, member.member_id))
                    member.join_callback = None
                if member.sync_callback is not None:
                    member.sync_callback(sync_response(ErrorCode.not_coordinator))
                    member.sync_callback = None
        gone |= self.consumer.unload(partition)
        self._timeline.drop(partition)
        self.timer.cancel_where(lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] in gone)
        for producer_id, pending in list(self._pending_txn.items()):
            for key in [key for key in pending if self.partition_for(key[0]) == partition]:
                del pending[key]
            if not pending:
                del self._pending_txn[producer_id]

    @property
    def owned(self) -> frozenset[int]:
        """Partitions of __consumer_offsets served here (loaded or loading)."""
        return frozenset(self._owned)

    def is_loading(self) -> bool:
        return bool(self._loading)

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.config.num_partitions)

    def validate_group(self, group_id: str | None, *, allow_empty: bool = False) -> None:
        """NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / INVALID_GROUP_ID for a group served here."""
        self._validate(group_id, allow_empty=allow_empty)

    def _validate(self, group_id: str | None, *, allow_empty: bool = False) -> None:
        if group_id is None or (not group_id and not allow_empty):
            raise KafkaError(ErrorCode.invalid_group_id)
        partition = self.partition_for(group_id)
        if partition not in self._owned:
            raise KafkaError(ErrorCode.not_coordinator)
        if partition in self._loading:
            raise KafkaError(ErrorCode.coordinator_load_in_progress)

    # ----------------------------------------------------------------- replay
    def advance(self, partition: int, high_watermark: int) -> None:
        """The partition's high watermark: what was replayed below it becomes visible to OffsetFetch."""
        if partition in self._owned:
            self._timeline.advance(partition, high_watermark)
            self.consumer.advance(partition, high_watermark)

    def committed_offset(self, partition: int) -> int | None:
        """The partition's high watermark as last given (None: not tracked, what replays is read at once)."""
        return self._timeline.committed_offset(partition)

    def replay(self, record: CoordinatorRecord, offset: int | None = None) -> None:
        """Apply one record of __consumer_offsets (while loading, or right after it was appended).

        `offset` is its offset in the log: readers see it once the partition's HW passes it (None: at once).
        """
        if is_consumer_group_key(record.key):
            self.consumer.replay(record, offset)
            return
        key = decode_key(record.key)
        if isinstance(key, OffsetKey) and record.producer_id >= 0 and record.value is not None:
            pending = self._pending_txn.setdefault(record.producer_id, {})
            pending[(key.group, key.topic, key.partition)] = decode_offset_value(record.value)
        elif isinstance(key, OffsetKey):
            self._replay_offset(record.partition, key, record.value, offset)
        elif isinstance(key, GroupKey):
            self._replay_group(record.partition, key.group, record.value)

    def _offsets_of(self, group_id: str) -> dict[tuple[str, int], CommittedOffset] | None:
        """The committed offsets of a group of either kind; None if there is no group."""
        group: ClassicGroup | ConsumerGroup | None = self.consumer.groups.get(group_id) or self.groups.get(group_id)
        return None if group is None else group.offsets

    def _replay_offset(self, partition: int, key: OffsetKey, value: bytes | None, offset: int | None) -> None:
        offsets = self._offsets_of(key.group)
        tp = (key.topic, key.partition)
        if value is None:
            if offsets is not None and tp in offsets:
                self._timeline.write(partition, offset, key.group, tp, offsets.pop(tp), None)
            return
        if offsets is None:
            state_timestamp = -1 if partition in self._loading else self.clock()
            group = self.groups[key.group] = ClassicGroup(key.group, partition, state_timestamp=state_timestamp)
            offsets = group.offsets
        committed = decode_offset_value(value)
        self._timeline.write(partition, offset, key.group, tp, offsets.get(tp), committed)
        offsets[tp] = committed

    def replay_marker(self, partition: int, producer_id: int, commit: bool, offset: int | None = None) -> None:
        """A transaction marker on `partition` (at log `offset`): its pending offsets there become the
        group's, or go."""
        pending = self._pending_txn.get(producer_id)
        if not pending:
            return
        for (group_id, topic, index), committed in list(pending.items()):
            if self.partition_for(group_id) != partition:
                continue
            del pending[(group_id, topic, index)]
            if commit:
                offsets = self._offsets_of(group_id)
                if offsets is None:
                    offsets = self.groups.setdefault(group_id, ClassicGroup(group_id, partition)).offsets
                tp = (topic, index)
                self._timeline.write(partition, offset, group_id, tp, offsets.get(tp), committed)
                offsets[tp] = committed
        if not pending:
            del self._pending_txn[producer_id]

    def has_pending_offset(self, group_id: str, topic: str, partition: int) -> bool:
        """A transaction not yet ended holds an offset for it (OffsetFetch require_stable: in the latest state)."""
        return any((group_id, topic, partition) in pending for pending in self._pending_txn.values())

    def _replay_group(self, partition: int, group_id: str, value: bytes | None) -> None:
        existing = self.groups.get(group_id)
        if value is None:
            # With members only when it is converted to a consumer group (release_classic); the
            # conversion has answered its members' parked requests and stopped their timers.
            if existing is None:
                return
            existing.transition(GroupState.DEAD, self.clock())
            del self.groups[group_id]
            if existing.offsets:  # offsets outlive the group's metadata (a consumer group replacing it)
                self.groups[group_id] = ClassicGroup(group_id, partition, offsets=existing.offsets)
            return
        if partition not in self._loading:
            return  # the group in memory wrote this record: it already holds that state
        group = ClassicGroup.from_record(group_id, partition, decode_group_value(value))
        if existing is not None:
            group.offsets = existing.offsets
        self.groups[group_id] = group

    # ----------------------------------------------------------------- timers
    def poll_timers(self) -> list[Result]:
        """Run the callbacks whose deadline passed; each yields the records it has to write."""
        results = []
        for callback in self.timer.pop_expired():
            callback()
            results.append(self._done())
        return results

    def _done(self, response: Any = None) -> Result:
        result, self._result = self._result, Result()
        result.response = response
        return result

    def _write(self, record: CoordinatorRecord) -> None:
        self._result.records.append(record)

    # what the consumer-protocol half (ConsumerGroups) writes and answers through
    write = _write
    finish = _done

    def _after_write(self, action: Callable[[ErrorCode], None]) -> None:
        self._result.after_write.append(action)

    after_write = _after_write

    # ------------------------------------------------------------ migration
    def release_classic(self, group: ClassicGroup) -> None:
        """A classic group being converted to a consumer group (upgrade): parked requests answer
        REBALANCE_IN_PROGRESS, so their members rejoin the consumer group; its timers stop; its
        GroupMetadata is tombstoned (the group leaves when that replays, its offsets stay)."""
        for member in group.members.values():
            self._fail_callbacks(member, ErrorCode.rebalance_in_progress)
        for member_id in group.pending_members:
            self.timer.cancel(("pending", group.group_id, member_id))
        self.timer.cancel_where(lambda key: isinstance(key, tuple) and len(key) > 1 and key[1] == group.group_id
                                and key[0] in ("session", "join", "sync", "pending"))
        self._write(group_metadata_record(group.partition, group.group_id, None))

    def adopt_classic(self, group: ClassicGroup, reason: str | None) -> None:
        """A consumer group converted back to classic (downgrade): stored as it is, then it rebalances for
        `reason` (None: it stays Stable, as when a static member replaced the last consumer-protocol one)."""
        self.groups[group.group_id] = group
        self._store_group(group)
        for member in group.members.values():
            self._schedule_session(group, member)
        if reason is not None:
            self._prepare_rebalance(group, reason)

    def _store_group(self, group: ClassicGroup, assignments: dict[str, bytes] | None = None) -> None:
        self._write(group_metadata_record(group.partition, group.group_id, group.to_record(assignments)))

    # ---------------------------------------------------------------- join
    def join_group(self, req: JoinRequest, respond: Callback) -> Result:
        """JoinGroup; `respond` gets the response now or when the rebalance completes its join phase."""
        if log.isEnabledFor(logging.DEBUG):
            respond = _logged("join", req.group_id, req.member_id, respond)
        error = self._join(req, respond)
        if error is not None:
            respond(join_error(error, req.member_id))
        return self._done()

    def _join(self, req: JoinRequest, respond: Callback) -> ErrorCode | None:
        try:
            self._validate(req.group_id)
        except KafkaError as exc:
            return exc.code
        if not self.config.min_session_timeout_ms <= req.session_timeout_ms <= self.config.max_session_timeout_ms:
            return ErrorCode.invalid_session_timeout
        unknown = req.member_id == UNKNOWN_MEMBER_ID
        if req.group_id in self.consumer.groups:
            consumer = self.consumer.groups[req.group_id]
            if consumer.members:  # it joins the consumer group as a classic member
                return self.consumer.classic_join(req, respond)
            self.consumer.delete_records(consumer)  # an empty consumer group becomes a classic one
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown:
                return ErrorCode.unknown_member_id
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, self.partition_for(req.group_id),
                                                             state_timestamp=self.clock())
        known_static = group.static_member_id(req.group_instance_id) is not None
        if (len(group.members) >= self.config.max_group_size and not known_static
                and (unknown or not group.has(req.member_id))):
            return ErrorCode.group_max_size_reached
        if unknown:
            error = self._join_new_member(group, req, respond)
        else:
            error = self._join_known_member(group, req, respond)
        if error is not None and group.is_(GroupState.EMPTY) and not group.members and not group.offsets \
                and not group.pending_members and group.generation == 0:
            del self.groups[group.group_id]  # created by this failed join: leave no trace
        return error

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, respond: Callback) -> ErrorCode | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if not group.supports(req.protocol_type, req.protocols):
            return ErrorCode.inconsistent_group_protocol
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        member_id = f"{prefix}-{uuid.uuid4()}"
        if req.group_instance_id is not None:
            old_member_id = group.static_member_id(req.group_instance_id)
            if old_member_id is not None:
                return self._replace_static_member(group, req, old_member_id, member_id, respond)
        elif req.require_known_member_id:
            # The client must come back with this id: then a member that dies before it does leaves no trace.
            group.pending_members.add(member_id)
            self.timer.schedule(("pending", group.group_id, member_id), req.session_timeout_ms,
                                lambda: self._expire_pending_member(group, member_id))
            respond(join_error(ErrorCode.member_id_required, member_id))
            return None
        self._add_member_and_rebalance(group, req, member_id, respond)
        return None

    def _join_known_member(self, group: ClassicGroup, req: JoinRequest, respond: Callback) -> ErrorCode | None:
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if not group.supports(req.protocol_type, req.protocols):
            return ErrorCode.inconsistent_group_protocol
        if req.member_id in group.pending_members:
            self._add_member_and_rebalance(group, req, req.member_id, respond)
            return None
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return ErrorCode.fenced_instance_id
        if not group.has(req.member_id):
            return ErrorCode.unknown_member_id
        member = group.members[req.member_id]
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):  # it missed the join response: send it again
                respond(self._join_response(group, member))
            else:
                self._update_member_and_rebalance(group, member, req, respond)
        elif group.is_(GroupState.STABLE):
            if member.member_id == group.leader_id or not member.matches(req.protocols):
                # The leader rejoins to reassign (e.g. its metadata changed); others only when theirs changed.
                self._update_member_and_rebalance(group, member, req, respond)
            else:
                respond(self._join_response(group, member, include_members=False))
        else:
            return ErrorCode.unknown_member_id
        return None

    def _add_member_and_rebalance(self, group: ClassicGroup, req: JoinRequest, member_id: str,
                                  respond: Callback) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, list(req.protocols), is_new=True)
        group.pending_members.discard(member_id)
        self.timer.cancel(("pending", group.group_id, member_id))
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation == 0:
            group.new_member_added = True
        group.add(member, respond)
        # A new member cannot heartbeat before its join completes; a client that went away must not
        # hold the group forever, so its join times out on its own (it retries if still there).
        self._schedule_session(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")
        self._check_join(group)

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, req: JoinRequest,
                                     respond: Callback) -> None:
        member.protocols = list(req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        self._supersede_join(member)
        member.join_callback = respond
        self._maybe_prepare_rebalance(group, f"updating metadata for member {member.member_id}")
        self._check_join(group)

    @staticmethod
    def _supersede_join(member: Member) -> None:
        """A member's new JoinGroup replaces its pending one, which gets an answer all the same.

        Requests of one connection are handled concurrently here (Kafka reads the next only
        after answering the last), and its responses go out in order: one never answered
        would hold back every later response on that connection.
        """
        if member.join_callback is not None:
            member.join_callback(join_error(ErrorCode.rebalance_in_progress, member.member_id))
            member.join_callback = None

    def _replace_static_member(self, group: ClassicGroup, req: JoinRequest, old_member_id: str, new_member_id: str,
                               respond: Callback) -> ErrorCode | None:
        """A static member came back (with a new member id): fence the old id, keep the assignment."""
        old = group.members[old_member_id]
        old_protocols = old.protocols
        self._fence(old)
        previous_leader = group.leader_id
        was_leader = previous_leader == old_member_id
        del group.members[old_member_id]
        self.timer.cancel(("session", group.group_id, old_member_id))
        group.pending_sync.discard(old_member_id)
        old.member_id = new_member_id
        old.protocols = list(req.protocols)
        old.session_timeout_ms = req.session_timeout_ms
        old.rebalance_timeout_ms = req.rebalance_timeout_ms
        old.client_id, old.client_host = req.client_id, req.client_host
        group.members[new_member_id] = old
        group.static_members[req.group_instance_id] = new_member_id  # type: ignore[index]
        if was_leader:
            group.leader_id = new_member_id
        self._schedule_session(group, old)
        if group.is_(GroupState.STABLE):
            if group.select_protocol() == group.protocol:
                self._rejoin_stable_static_member(group, old, old_member_id, old_protocols, previous_leader,
                                                  respond)
            else:
                old.join_callback = respond
                self._maybe_prepare_rebalance(group, f"static member {new_member_id} changed protocols")
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            old.join_callback = respond
            self._maybe_prepare_rebalance(group, f"static member {new_member_id} rejoined")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            old.join_callback = respond
            self._check_join(group)
        else:
            return ErrorCode.unknown_member_id
        return None

    def _rejoin_stable_static_member(self, group: ClassicGroup, member: Member, old_member_id: str,
                                     old_protocols: list[tuple[str, bytes]], previous_leader: str | None,
                                     respond: Callback) -> None:
        """No rebalance: store the new member id, then answer with the current generation."""
        self._store_group(group)
        new_member_id = member.member_id
        generation = group.generation

        def answer(error: ErrorCode) -> None:
            if error != ErrorCode.none:  # put the old member back, as if this join never happened
                if group.members.get(new_member_id) is member:
                    del group.members[new_member_id]
                    member.member_id, member.protocols = old_member_id, old_protocols
                    group.members[old_member_id] = member
                    group.static_members[member.group_instance_id] = old_member_id  # type: ignore[index]
                    if group.leader_id == new_member_id:
                        group.leader_id = old_member_id
                respond(join_error(error, UNKNOWN_MEMBER_ID))
                return
            is_leader = group.leader_id == new_member_id
            response = self._join_response(group, member, include_members=is_leader)
            # The old leader id tells a returning leader not to compute an assignment: a Stable group would
            # not pass it on (KIP-345); v9 says so explicitly with skip_assignment.
            response.update(generation_id=generation, leader=previous_leader, skip_assignment=is_leader)
            respond(response)

        self._after_write(answer)

    def _fence(self, member: Member) -> None:
        if member.join_callback is not None:
            member.join_callback(join_error(ErrorCode.fenced_instance_id, member.member_id))
            member.join_callback = None
        if member.sync_callback is not None:
            member.sync_callback(sync_response(ErrorCode.fenced_instance_id))
            member.sync_callback = None

    def _join_response(self, group: ClassicGroup, member: Member, include_members: bool | None = None) -> dict[str, Any]:
        if include_members is None:
            include_members = member.member_id == group.leader_id
        members = []
        if include_members and group.protocol is not None:
            members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                        "metadata": m.metadata(group.protocol)} for m in group.members.values()]
        return {"error_code": ErrorCode.none, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol, "leader": group.leader_id or "", "skip_assignment": False,
                "member_id": member.member_id, "members": members}

    # ------------------------------------------------------------ rebalance
    def _rebalance_timeout(self, group: ClassicGroup) -> int:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        log.info("preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
                 group.group_id, group.state.value, group.generation, reason)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self.timer.cancel(("sync", group.group_id))
        was_empty = group.is_(GroupState.EMPTY)
        group.transition(GroupState.PREPARING_REBALANCE, self.clock())
        timeout = self._rebalance_timeout(group)
        delay = self.config.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            group.in_initial_delay = True
            self._schedule_initial_delay(group, min(delay, timeout), max(timeout - delay, 0))
        else:
            group.in_initial_delay = False
            self.timer.schedule(("join", group.group_id), timeout, lambda: self._complete_join(group))

    def _schedule_initial_delay(self, group: ClassicGroup, delay: int, remaining: int) -> None:
        def expired() -> None:
            if group.new_member_added and remaining > 0:  # members still arrive: wait a little more
                group.new_member_added = False
                step = min(self.config.initial_rebalance_delay_ms, remaining)
                self._schedule_initial_delay(group, step, max(remaining - step, 0))
            else:
                self._complete_join(group)

        self.timer.schedule(("join", group.group_id), delay, expired)

    def _check_join(self, group: ClassicGroup) -> None:
        """Complete the join phase early once every member (and no pending one) has joined."""
        if group.is_(GroupState.PREPARING_REBALANCE) and not group.in_initial_delay and group.all_joined():
            self.timer.cancel(("join", group.group_id))
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        group.in_initial_delay = False
        group.new_member_added = False
        for member in group.not_yet_rejoined():  # they missed the rebalance: out
            log.info("group %s: member %s did not rejoin within the rebalance timeout: removed",
                     group.group_id, member.member_id)
            self.timer.cancel(("session", group.group_id, member.member_id))
            self._fail_callbacks(member, ErrorCode.unknown_member_id)
            group.remove(member.member_id)
        group.generation += 1
        if not group.members:
            group.protocol = None
            group.transition(GroupState.EMPTY, self.clock())
            self._store_group(group)
            return
        group.protocol = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, self.clock())
        log.info("group %s generation %d (protocol %s, leader %s): %d members joined",
                 group.group_id, group.generation, group.protocol, group.leader_id, len(group.members))
        group.pending_sync = set(group.members)
        for member in group.members.values():
            respond, member.join_callback = member.join_callback, None
            member.is_new = False
            self._schedule_session(group, member)
            if respond is not None:
                respond(self._join_response(group, member))
        generation = group.generation
        self.timer.schedule(("sync", group.group_id), self._rebalance_timeout(group),
                            lambda: self._expire_pending_sync(group, generation))

    def _expire_pending_sync(self, group: ClassicGroup, generation: int) -> None:
        """Members that never sent SyncGroup within the rebalance timeout are removed."""
        if generation != group.generation or group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                log.info("group %s: member %s sent no SyncGroup within the rebalance timeout: removed",
                         group.group_id, member_id)
                self._remove_member_and_update(group, member, "member did not sync")
        group.pending_sync.clear()

    def _fail_callbacks(self, member: Member, error: ErrorCode) -> None:
        if member.join_callback is not None:
            member.join_callback(join_error(error, member.member_id))
            member.join_callback = None
        if member.sync_callback is not None:
            member.sync_callback(sync_response(error))
            member.sync_callback = None

    def _remove_member_and_update(self, group: ClassicGroup, member: Member, reason: str) -> None:
        self.timer.cancel(("session", group.group_id, member.member_id))
        self._fail_callbacks(member, ErrorCode.unknown_member_id)
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"removing member {member.member_id}: {reason}")
        self._check_join(group)  # e.g. the last member left: the group empties at once

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.sync_callback is not None:
                member.sync_callback(sync_response(error))
                member.sync_callback = None

    # ------------------------------------------------------------- sessions
    def _schedule_session(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        member_id = member.member_id
        self.timer.schedule(("session", group.group_id, member_id),
                            member.session_timeout_ms if timeout_ms is None else timeout_ms,
                            lambda: self._expire_session(group, member_id))

    def _expire_session(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None or self.groups.get(group.group_id) is not group:
            return
        if not member.is_new and (member.awaiting_join or member.awaiting_sync):
            return  # the rebalance's own deadlines bound a member that is mid-rebalance
        log.info("group %s: member %s failed (session timeout): removed", group.group_id, member_id)
        self._remove_member_and_update(group, member, "session timeout")

    def _expire_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self._check_join(group)

    # ----------------------------------------------------------------- sync
    def sync_group(self, req: SyncRequest, respond: Callback) -> Result:
        """SyncGroup; `respond` gets the member's assignment once the leader's is stored."""
        if log.isEnabledFor(logging.DEBUG):
            respond = _logged("sync", req.group_id, req.member_id, respond)
        error = self._sync(req, respond)
        if error is not None:
            respond(sync_response(error))
        return self._done()

    def _sync(self, req: SyncRequest, respond: Callback) -> ErrorCode | None:
        try:
            self._validate(req.group_id)
        except KafkaError as exc:
            return exc.code
        if req.group_id in self.consumer.groups:
            return self.consumer.classic_sync(req, respond)
        group = self.groups.get(req.group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(req.group_instance_id, req.member_id):
            return ErrorCode.fenced_instance_id
        if not group.has(req.member_id):
            return ErrorCode.unknown_member_id
        if req.generation != group.generation:
            return ErrorCode.illegal_generation
        if (req.protocol_type is not None and req.protocol_type != group.protocol_type) or \
                (req.protocol_name is not None and req.protocol_name != group.protocol):
            return ErrorCode.inconsistent_group_protocol
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        member = group.members[req.member_id]
        group.pending_sync.discard(req.member_id)
        if group.is_(GroupState.STABLE):
            self._schedule_session(group, member)
            respond(sync_response(ErrorCode.none, group, member.assignment))
            return None
        if member.sync_callback is not None:  # superseded by this one: answered, never left hanging
            member.sync_callback(sync_response(ErrorCode.rebalance_in_progress))
        member.sync_callback = respond
        if req.member_id == group.leader_id:
            assignments = {member_id: req.assignments.get(member_id, b"") for member_id in group.members}
            self._store_group(group, assignments)
            generation = group.generation
            self._after_write(lambda error: self._assignment_stored(group, generation, assignments, error))
        return None

    def _assignment_stored(self, group: ClassicGroup, generation: int, assignments: dict[str, bytes],
                           error: ErrorCode) -> None:
        if not group.is_(GroupState.COMPLETING_REBALANCE) or group.generation != generation \
                or self.groups.get(group.group_id) is not group:
            return  # a rebalance began meanwhile, or the partition was unloaded: its members were told already
        if error != ErrorCode.none:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, f"storing the assignment failed: {error.name}")
            return
        for member_id, member in group.members.items():
            member.assignment = assignments.get(member_id, b"")
        group.transition(GroupState.STABLE, self.clock())
        log.info("group %s generation %d: assignment stored, stable with %d members",
                 group.group_id, generation, len(group.members))
        for member in group.members.values():
            if member.sync_callback is not None:
                member.sync_callback(sync_response(ErrorCode.none, group, member.assignment))
                member.sync_callback = None
            self._schedule_session(group, member)

    # ------------------------------------------------------------ heartbeat
    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> Result:
        return self._done(self._heartbeat(group_id, member_id, group_instance_id, generation))

    def _heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> ErrorCode:
        error = self._heartbeat_error(group_id, member_id, group_instance_id, generation)
        if error != ErrorCode.none:
            log.debug("heartbeat group %s member %r generation %d: %s", group_id, member_id, generation, error.name)
        return error

    def _heartbeat_error(self, group_id: str, member_id: str, group_instance_id: str | None,
                         generation: int) -> ErrorCode:
        try:
            self._validate(group_id)
        except KafkaError as exc:
            # Kafka answers a heartbeat blindly while the group's partition loads: the member keeps its session
            return ErrorCode.none if exc.code == ErrorCode.coordinator_load_in_progress else exc.code
        if group_id in self.consumer.groups:
            return self.consumer.classic_heartbeat(group_id, member_id, group_instance_id, generation)
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if group.is_static_member_fenced(group_instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self._schedule_session(group, group.members[member_id])
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ---------------------------------------------------------------- leave
    def leave_group(self, group_id: str, members: list[tuple[str, str | None]]) -> Result:
        """LeaveGroup of (member id, instance id) pairs; response: (error, [per-member error])."""
        try:
            self._validate(group_id)
        except KafkaError as exc:
            return self._done((exc.code, [exc.code] * len(members)))
        if group_id in self.consumer.groups:
            return self._done((ErrorCode.none, self.consumer.classic_leave(group_id, members)))
        group = self.groups.get(group_id)
        if group is None:
            return self._done((ErrorCode.none, [ErrorCode.unknown_member_id] * len(members)))
        if group.is_(GroupState.DEAD):
            return self._done((ErrorCode.coordinator_not_available, [ErrorCode.coordinator_not_available] * len(members)))
        errors = [self._leave_one(group, member_id, instance_id) for member_id, instance_id in members]
        return self._done((ErrorCode.none, errors))

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == UNKNOWN_MEMBER_ID and instance_id is not None:
            found = group.static_member_id(instance_id)
            if found is None:
                return ErrorCode.unknown_member_id
            member_id = found
        elif group.is_static_member_fenced(instance_id, member_id):
            return ErrorCode.fenced_instance_id
        if member_id in group.pending_members:
            group.pending_members.discard(member_id)
            self.timer.cancel(("pending", group.group_id, member_id))
            self._check_join(group)
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        log.info("group %s: member %s left", group.group_id, member_id)
        self._remove_member_and_update(group, member, "the member left")
        return ErrorCode.none

    # --------------------------------------------------------------- offsets
    def commit_offsets(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
                       offsets: list[OffsetToCommit], retention_ms: int = -1, api_version: int = 9) -> Result:
        """OffsetCommit; response: {(topic, partition): error}. The offsets change when the records replay."""
        error = self._commit_error(group_id, generation, member_id, group_instance_id, self._checked(offsets),
                                   api_version=api_version)
        if error is not None:
            return self._done({(o.topic, o.partition): error for o in offsets})
        # A simple consumer's group (no group management) appears when its first offsets replay.
        group = self.groups.get(group_id)
        if group is not None and group.has(member_id):  # a commit counts as a sign of life, as a heartbeat does
            self._schedule_session(group, group.members[member_id])
        partition = self.partition_for(group_id)
        now = self.clock()
        response = {}
        for o in offsets:
            metadata = o.metadata or ""
            if not self._fits(o):
                response[(o.topic, o.partition)] = ErrorCode.offset_metadata_too_large
                continue
            if o.commit_timestamp >= 0:
                expire = o.commit_timestamp + self.config.offsets_retention_ms
            else:
                expire = now + retention_ms if retention_ms >= 0 else -1
            value = CommittedOffset(o.offset, o.leader_epoch, metadata, now, expire)
            self._write(offset_commit_record(partition, OffsetKey(group_id, o.topic, o.partition), value))
            response[(o.topic, o.partition)] = ErrorCode.none
        self._result.offset_commit = True
        return self._done(response)

    def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                           member_id: str, group_instance_id: str | None,
                           offsets: list[OffsetToCommit]) -> Result:
        """TxnOffsetCommit; response: {(topic, partition): error}. Pending until the transaction ends."""
        error = self._commit_error(group_id, generation, member_id, group_instance_id, self._checked(offsets),
                                   transactional=True)
        if error is not None:
            return self._done({(o.topic, o.partition): error for o in offsets})
        partition = self.partition_for(group_id)
        now = self.clock()
        response = {}
        for o in offsets:
            metadata = o.metadata or ""
            if not self._fits(o):
                response[(o.topic, o.partition)] = ErrorCode.offset_metadata_too_large
                continue
            record = offset_commit_record(partition, OffsetKey(group_id, o.topic, o.partition),
                                          CommittedOffset(o.offset, o.leader_epoch, metadata, now))
            self._write(CoordinatorRecord(record.partition, record.key, record.value, producer_id, producer_epoch))
            response[(o.topic, o.partition)] = ErrorCode.none
        self._result.offset_commit = True
        return self._done(response)

    def _fits(self, offset: OffsetToCommit) -> bool:
        """Whether an offset's metadata is within offset.metadata.max.bytes."""
        return len((offset.metadata or "").encode()) <= self.config.offset_metadata_max_bytes

    def _checked(self, offsets: list[OffsetToCommit]) -> list[tuple[str, int]]:
        """The partitions a commit's member must own (Kafka checks those whose metadata fits)."""
        return [(o.topic, o.partition) for o in offsets if self._fits(o)]

    def _commit_error(self, group_id: str, generation: int, member_id: str, group_instance_id: str | None,
                      partitions: list[tuple[str, int]], transactional: bool = False,
                      api_version: int | None = None) -> ErrorCode | None:
        """Kafka's validateOffsetCommit (and validateTransactionalOffsetCommit)."""
        try:
            self._validate(group_id, allow_empty=True)
        except KafkaError as exc:
            return exc.code
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:  # generation is the member epoch
            error = self.consumer.commit_error(consumer, member_id, generation, partitions,
                                               None if transactional else api_version)
            return ErrorCode.illegal_generation if transactional and error == ErrorCode.stale_member_epoch else error
        group = self.groups.get(group_id)
        if group is None:
            return None if generation < 0 else ErrorCode.illegal_generation
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation < 0 and group.is_(GroupState.EMPTY):
            return None  # a simple consumer or the admin client
        if generation >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            if group.is_static_member_fenced(group_instance_id, member_id):
                return ErrorCode.fenced_instance_id
            if not group.has(member_id):
                return ErrorCode.unknown_member_id
            if generation != group.generation:
                return ErrorCode.illegal_generation
        elif not transactional:
            return ErrorCode.unknown_member_id  # without member and generation only an empty group takes commits
        # TxnOffsetCommit v0-2 carries neither member nor generation: Kafka takes it unchecked.
        if not transactional and group.is_(GroupState.COMPLETING_REBALANCE):
            # The member has this generation's join response but not its assignment yet.
            return ErrorCode.rebalance_in_progress
        return None  # Stable, or PreparingRebalance: the heartbeat tells the member to rejoin

    def fetch_offsets(self, group_id: str, partitions: list[tuple[str, int]] | None, member_id: str | None = None,
                      member_epoch: int = -1, latest: bool = False) -> dict[tuple[str, int], CommittedOffset | None]:
        """OffsetFetch of `partitions` (None: every committed one); raises KafkaError for group errors.

        The offsets as of the partition's high watermark, or with `latest` (require_stable, whose answer
        the runtime holds until the HW passes what is written) the latest ones.
        A consumer-protocol member (OffsetFetch v9) fetches in its current epoch: the one it has as of the HW
        (Kafka's validateOffsetFetch at the last committed offset; no group there, no check), or with `latest`
        its latest one.
        """
        self._validate(group_id, allow_empty=True)
        consumer = self.consumer.groups.get(group_id) if latest else self.consumer.committed_group(group_id)
        error = None if consumer is None else self.consumer.fetch_error(consumer, member_id, member_epoch)
        if error is not None:
            raise KafkaError(error)
        offsets = self._offsets_of(group_id) or {}
        if not latest and self._timeline.pending(group_id):  # some are above the HW: as of the HW
            if partitions is None:
                return dict(sorted(self._timeline.visible(group_id, offsets).items()))
            return {tp: self._timeline.value(group_id, tp, offsets.get(tp)) for tp in partitions}
        if partitions is None:
            return dict(sorted(offsets.items()))
        return {tp: offsets.get(tp) for tp in partitions}

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> Result:
        """OffsetDelete; response: (group error, {(topic, partition): error})."""
        try:
            self._validate(group_id)
        except KafkaError as exc:
            return self._done((exc.code, {}))
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            return self._done((ErrorCode.none, self._delete_offsets(consumer, self.consumer.subscribed_topics(consumer),
                                                                     partitions)))
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return self._done((ErrorCode.group_id_not_found, {}))
        subscribed: set[str] = set()
        if not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return self._done((ErrorCode.non_empty_group, {}))
            subscribed = topics
        return self._done((ErrorCode.none, self._delete_offsets(group, subscribed, partitions)))

    def _delete_offsets(self, group: ClassicGroup | ConsumerGroup, subscribed: set[str],
                        partitions: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        response = {}
        for topic, partition in partitions:
            if topic in subscribed:
                response[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            if (topic, partition) in group.offsets:
                self._write(offset_commit_record(group.partition, OffsetKey(group.group_id, topic, partition), None))
            response[(topic, partition)] = ErrorCode.none
        return response

    # -------------------------------------------------------------- retention
    def _schedule_retention(self) -> None:
        if not self.timer.is_scheduled("retention"):
            self.timer.schedule("retention", self.config.offsets_retention_check_interval_ms, self._expire_offsets)

    def _expire_offsets(self) -> None:
        """Tombstones for expired offsets; an empty group left without offsets dies (Kafka's cleanupGroupMetadata)."""
        self.timer.schedule("retention", self.config.offsets_retention_check_interval_ms, self._expire_offsets)
        now = self.clock()
        for group in list(self.groups.values()):
            if group.is_(GroupState.DEAD) or group.partition in self._loading:
                continue
            expired = self._expired_offsets(group, now)
            for topic, partition in expired:
                self._write(offset_commit_record(group.partition, OffsetKey(group.group_id, topic, partition), None))
            if group.is_(GroupState.EMPTY) and not group.members and len(expired) == len(group.offsets):
                self._write(group_metadata_record(group.partition, group.group_id, None))
        for consumer in list(self.consumer.groups.values()):
            if consumer.partition in self._loading:
                continue
            expired = self.consumer.expired_offsets(consumer, now, self.config.offsets_retention_ms)
            for topic, partition in expired:
                self._write(offset_commit_record(consumer.partition, OffsetKey(consumer.group_id, topic, partition),
                                                 None))
            if self.consumer.is_empty(consumer) and len(expired) == len(consumer.offsets):
                self.consumer.delete_records(consumer)

    def _expired_offsets(self, group: ClassicGroup, now: int) -> list[tuple[str, int]]:
        retention = self.config.offsets_retention_ms
        if not group.protocol_type:  # offsets only (simple consumers): each by its commit time
            base_of: Callable[[CommittedOffset], int] = lambda o: o.commit_timestamp  # noqa: E731
            candidates = group.offsets
        elif group.is_(GroupState.EMPTY):  # from when the group became empty
            base_of = lambda o: group.state_timestamp if group.state_timestamp >= 0 else o.commit_timestamp  # noqa: E731
            candidates = group.offsets
        elif group.protocol_type == "consumer" and group.is_(GroupState.STABLE):
            subscribed = group.subscribed_topics()  # offsets of topics no member subscribes to any more
            if subscribed is None:
                return []
            base_of = lambda o: o.commit_timestamp  # noqa: E731
            candidates = {tp: o for tp, o in group.offsets.items() if tp[0] not in subscribed}
        else:
            return []
        return [tp for tp, o in candidates.items()
                if (now >= o.expire_timestamp if o.expire_timestamp >= 0 else now - base_of(o) >= retention)]

    # ----------------------------------------------------------------- admin
    def describe_group(self, group_id: str, version: int = 0) -> dict[str, Any]:
        """One group of DescribeGroups; from v6 a group that is not classic (or none) is GROUP_ID_NOT_FOUND
        with a message, as in Kafka 4 (KIP-1043), before that it is Dead."""
        try:
            self._validate(group_id, allow_empty=True)
        except KafkaError as exc:
            return {"error_code": exc.code, "group_id": group_id, "group_state": "", "protocol_type": "",
                    "protocol_data": "", "members": []}
        group = self.groups.get(group_id)
        if group is None:
            described = {"error_code": ErrorCode.none, "group_id": group_id, "group_state": GroupState.DEAD.value,
                         "protocol_type": "", "protocol_data": "", "members": []}
            if version >= 6:
                kind = "is not a classic group" if group_id in self.consumer.groups else "not found"
                described.update(error_code=ErrorCode.group_id_not_found, error_message=f"Group {group_id} {kind}.")
            return described
        stable = group.is_(GroupState.STABLE)
        members = [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host,
            "member_metadata": m.metadata(group.protocol) if stable and group.protocol else b"",
            "member_assignment": m.assignment if stable else b"",
        } for m in group.members.values()]
        return {"error_code": ErrorCode.none, "group_id": group_id, "group_state": group.state.value,
                "protocol_type": group.protocol_type or "", "protocol_data": (group.protocol or "") if stable else "",
                "members": members}

    def list_groups(self, states: list[str] | None = None,
                    types: list[str] | None = None) -> tuple[ErrorCode, list[dict[str, Any]]]:
        if self._loading:
            return ErrorCode.coordinator_load_in_progress, []
        wanted_states = {s.lower() for s in states or []}
        wanted_types = {t.lower() for t in types or []}
        listed = []
        if not wanted_types or "classic" in wanted_types:
            listed += [{"group_id": g.group_id, "protocol_type": g.protocol_type or "", "group_state": g.state.value,
                        "group_type": "classic"} for g in self.groups.values()]
        if not wanted_types or "consumer" in wanted_types:
            listed += self.consumer.listed()
        return ErrorCode.none, [g for g in listed if not wanted_states or g["group_state"].lower() in wanted_states]

    def delete_groups(self, group_ids: list[str]) -> Result:
        """DeleteGroups; response: {group id: error}. Only empty groups can go."""
        response: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            # A repeated id: its first deletion is already written in this result.
            response[group_id] = ErrorCode.group_id_not_found if group_id in response \
                else self._delete_group(group_id)
        return self._done(response)

    def _delete_group(self, group_id: str) -> ErrorCode:
        try:
            self._validate(group_id, allow_empty=True)
        except KafkaError as exc:
            return exc.code
        consumer = self.consumer.groups.get(group_id)
        if consumer is not None:
            if not self.consumer.is_empty(consumer):
                return ErrorCode.non_empty_group
            for topic, partition in consumer.offsets:
                self._write(offset_commit_record(consumer.partition, OffsetKey(group_id, topic, partition), None))
            self.consumer.delete_records(consumer)
            return ErrorCode.none
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found
        if not group.is_(GroupState.EMPTY) or group.members:
            return ErrorCode.non_empty_group
        # The group dies when its tombstone replays, so a failed write leaves it as it was.
        for topic, partition in group.offsets:
            self._write(offset_commit_record(group.partition, OffsetKey(group_id, topic, partition), None))
        self._write(group_metadata_record(group.partition, group_id, None))
        return ErrorCode.none
