"""The consumer-protocol half of the group coordinator (KIP-848): groups, records and timers.

GroupCoordinator owns one `ConsumerGroups` and delegates to it: heartbeats,
ConsumerGroupDescribe, and the replay of ConsumerGroup* records. Records are
written through the owner's running Result, so a heartbeat is one `Result` as
a JoinGroup is; state changes only when they replay. A consumer group shares
its id space with classic groups: it keeps its committed offsets itself, and
takes those of an empty classic group of the same id when it is created (Kafka
replaces an empty classic group the same way; its GroupMetadata is tombstoned).

Timers (keys carry the group id second, as the owner's do): a member's session
(`group.consumer.session.timeout.ms`) restarts at each heartbeat and fences the
member when it runs out; a member asked to revoke partitions has its rebalance
timeout to do so, or is fenced.
"""

from __future__ import annotations

import logging
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from klamm.config.group import CONSUMER_HEARTBEAT_INTERVAL_MS, CONSUMER_SESSION_TIMEOUT_MS
from klamm.coordinator import classic_members
from klamm.coordinator.assignors import ASSIGNORS
from klamm.coordinator.classic_members import ClassicJoin
from klamm.coordinator.consumer_group import (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, Assignment,
                                              ConsumerGroup, ConsumerGroupRecord, ConsumerMember, GroupEpochRecord,
                                              GroupState, MemberSubscriptionRecord, SubscriptionMetadataRecord,
                                              TargetEpochRecord, TopicMetadata)
from klamm.coordinator.consumer_heartbeat import (AuthorizedTopics, DeniedTopics, GroupSettings, HeartbeatRequest,
                                                  Outcome, fence, heartbeat, leave, remove_member, unrevoked,
                                                  validate)
from klamm.coordinator.consumer_records import decode, encode
from klamm.coordinator.group import Callback, ClassicGroup, join_error, sync_response
from klamm.coordinator.migration import MigrationPolicy, can_downgrade, can_downgrade_replacing, can_upgrade, \
    classic_group_from, scratch_group, upgrade_records
from klamm.coordinator.records import CommittedOffset, CoordinatorRecord
from klamm.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from klamm.coordinator.coordinator import GroupCoordinator, JoinRequest, Result, SyncRequest

log = logging.getLogger(__name__)

Topics = Mapping[str, TopicMetadata]
TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    max_size: int = 2**31 - 1  # group.consumer.max.size
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL  # group.consumer.migration.policy


def heartbeat_error(exc: KafkaError) -> dict[str, Any]:
    return {"error_code": exc.code, "error_message": exc.message, "member_id": None, "member_epoch": 0,
            "heartbeat_interval": 0, "assignment": None}


class ConsumerGroups:
    def __init__(self, owner: GroupCoordinator, config: ConsumerGroupConfig) -> None:
        self.owner = owner
        self.config = config
        self.settings = GroupSettings({name: ASSIGNORS[name] for name in config.assignors},
                                      config.heartbeat_interval_ms, config.max_size)
        self.groups: dict[str, ConsumerGroup] = {}
        # the cluster's topics by name; the broker's runtime points it at its metadata image
        self.topics: Callable[[], Topics] = dict
        # a group's dynamic configs (KIP-848) by group id; the runtime points it at the metadata image
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda _group_id: {}
        # group id -> member id -> its principal's DESCRIBE check, from its last heartbeat (soft state): what of
        # its regex's matches it may have
        self._principals: dict[str, dict[str, DeniedTopics]] = {}
        # Reads at the high watermark (ConsumerGroupDescribe, ListGroups): a group with records past its partition's
        # HW is read as it was at the HW (None: there was none), and those records wait to be replayed into that
        # copy as the HW passes them.
        self._at_hw: dict[str, ConsumerGroup | None] = {}
        self._past_hw: dict[int, deque[tuple[int, ConsumerGroupRecord]]] = {}
        self._past_hw_count: dict[str, int] = {}

    # ------------------------------------------------------------- heartbeat
    def heartbeat(self, req: HeartbeatRequest) -> Result:
        """ConsumerGroupHeartbeat: the records to write and the response."""
        upgrade: list[ConsumerGroupRecord] = []
        try:
            self.owner.validate_group(req.group_id)
            validate(req, self.settings)
            self._remember_principal(req)
            topics = self._topics_for(req.group_id)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                group = self._existing(req.group_id)
                out = leave(group, req, topics)
                if out.member is None:  # it leaves: maybe only classic members remain
                    out.records = self._removal(group, out.response["member_id"], topics)
            else:
                group, upgrade = self._group_for(req, topics)
                out = heartbeat(group, req, topics, self._group_settings(req.group_id))
        except KafkaError as exc:
            log.debug("consumer group %s member %s epoch %d: %s", req.group_id, req.member_id, req.member_epoch,
                      exc.code.name)
            return self.owner.finish(heartbeat_error(exc))
        if upgrade:
            self._upgrade(req.group_id, upgrade)
        self._write_all(req.group_id, out.records)
        self._follow_timers(req, out)
        return self.owner.finish(out.response)

    def _group_values(self, group_id: str) -> dict[str, int]:
        """The group's consumer.session.timeout.ms and consumer.heartbeat.interval.ms: its own, else the broker's.

        Read at each heartbeat, so a change reaches a member at its next heartbeat (Kafka's GroupConfigManager).
        """
        defaults = {CONSUMER_SESSION_TIMEOUT_MS: self.config.session_timeout_ms,
                    CONSUMER_HEARTBEAT_INTERVAL_MS: self.config.heartbeat_interval_ms}
        overrides = self.group_configs(group_id)
        if not overrides:
            return defaults
        values = dict(defaults)
        for name in values:
            text = overrides.get(name)
            if text is not None:
                try:
                    values[name] = int(text)
                except ValueError:
                    pass  # validated when set; the broker's value rather than failing the group
        return values

    def _remember_principal(self, req: HeartbeatRequest) -> None:
        if req.denied_topics is None:
            return
        principals = self._principals.setdefault(req.group_id, {})
        principals[req.member_id] = req.denied_topics
        group = self.groups.get(req.group_id)
        if group is not None and len(principals) > 2 * len(group.members) + 8:  # members gone meanwhile
            for member_id in [m for m in principals if m not in group.members and m != req.member_id]:
                del principals[member_id]

    def _topics_for(self, group_id: str) -> AuthorizedTopics:
        """The cluster's topics, with what each member of the group may DESCRIBE of its regex's matches."""
        principals = self._principals.get(group_id, {})
        return AuthorizedTopics(self.topics(), principals.get)

    def _group_settings(self, group_id: str) -> GroupSettings:
        interval = self._group_values(group_id)[CONSUMER_HEARTBEAT_INTERVAL_MS]
        if interval == self.settings.heartbeat_interval_ms:
            return self.settings
        return replace(self.settings, heartbeat_interval_ms=interval)

    def _existing(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        return group

    def _group_for(self, req: HeartbeatRequest, topics: Topics) -> tuple[ConsumerGroup, list[ConsumerGroupRecord]]:
        """The member's group, and the records that create it from a classic group (upgrade) if any.

        A first heartbeat (epoch 0) may create the group: over an empty classic group, or by converting a
        classic group whose members use the consumer protocol type, as the migration policy permits.
        """
        group = self.groups.get(req.group_id)
        if group is not None:
            return group, []
        if req.member_epoch != 0:
            raise KafkaError(ErrorCode.group_id_not_found, f"Consumer group {req.group_id} not found.")
        partition = self.owner.partition_for(req.group_id)
        classic = self.owner.groups.get(req.group_id)
        if classic is not None and classic.members:
            if not can_upgrade(classic, self.config.migration_policy, self.config.max_size):
                raise KafkaError(ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group.")
            records = upgrade_records(classic, topics)
            return scratch_group(req.group_id, partition, records), records
        if classic is not None and (classic.protocol_type is not None or classic.pending_members):
            # An empty classic group goes (Kafka's maybeDeleteEmptyClassicGroup), even while members-to-be hold
            # the member ids of MEMBER_ID_REQUIRED: their joins come to the consumer group. Its offsets stay.
            self.owner.release_classic(classic)
        return ConsumerGroup(req.group_id, partition), []

    def _upgrade(self, group_id: str, records: list[ConsumerGroupRecord]) -> None:
        """Write the conversion of a classic group; its members go on as classic members of the consumer group."""
        classic = self.owner.groups[group_id]
        log.info("classic group %s (generation %d, %d members) converted to a consumer group", group_id,
                 classic.generation, len(classic.members))
        self.owner.release_classic(classic)  # answers its parked joins and syncs, stops its timers, tombstones it
        self._write_all(group_id, records)
        for record in records:
            if isinstance(record, MemberSubscriptionRecord) and record.subscription is not None \
                    and record.subscription.classic is not None:
                self._schedule_session(group_id, record.member_id, record.subscription.classic.session_timeout_ms)

    def _removal(self, group: ConsumerGroup, member_id: str, topics: Topics) -> list[ConsumerGroupRecord]:
        """The records removing a member; when only classic members remain, the group goes back to classic."""
        if not can_downgrade(group, member_id, self.config.migration_policy, self.owner.config.max_group_size):
            return fence(group, member_id, topics)
        log.info("consumer group %s: member %s was the last to use the consumer protocol: converted to a classic "
                 "group", group.group_id, member_id)
        for other in group.members:
            self._cancel_timers(group.group_id, other)
        classic = classic_group_from(group, member_id, topics, self.owner.clock())
        records: list[ConsumerGroupRecord] = []
        for other in group.members:
            records.extend(remove_member(group.group_id, other))
        records += [TargetEpochRecord(group.group_id, None), SubscriptionMetadataRecord(group.group_id, None),
                    GroupEpochRecord(group.group_id, None)]
        # the classic group replaces this one in memory now (Kafka's too): the tombstones' replay gives it the
        # offsets, its GroupMetadata record follows them
        self._write_all(group.group_id, records)
        self.owner.adopt_classic(classic, f"downgrade of group {group.group_id} from consumer to classic")
        return []

    def _downgrade_replacing(self, group: ConsumerGroup, out: Outcome, respond: Callback) -> None:
        """A classic static member replaced the last consumer-protocol member: the group goes back to classic,
        Stable, with the joining member in the replaced one's place (Kafka's convertToClassicGroup with a joining
        member). The join's records, then the consumer group's tombstones, then the classic group's record."""
        assert out.member is not None and out.replaced is not None
        joining, replaced = out.member, out.replaced
        log.info("consumer group %s: classic static member %s replaced %s, the last to use the consumer protocol: "
                 "converted to a classic group", group.group_id, joining.member_id, replaced)
        for other in group.members:
            self._cancel_timers(group.group_id, other)
        classic = classic_group_from(group, replaced, self._topics_for(group.group_id), self.owner.clock(), joining)
        records = list(out.records)
        for member_id in group.members:
            records.extend(remove_member(group.group_id, joining.member_id if member_id == replaced else member_id))
        records += [TargetEpochRecord(group.group_id, None), SubscriptionMetadataRecord(group.group_id, None),
                    GroupEpochRecord(group.group_id, None)]
        self._write_all(group.group_id, records)
        self.owner.adopt_classic(classic, None)
        response = out.response

        def answer(error: ErrorCode) -> None:
            respond(response if error == ErrorCode.none else join_error(error, joining.member_id))

        self.owner.after_write(answer)

    # ---------------------------------------------------------- classic members
    def classic_join(self, req: JoinRequest, respond: Callback) -> ErrorCode | None:
        """A classic JoinGroup to a non-empty consumer group (Kafka's classicGroupJoinToConsumerGroup)."""
        group = self.groups[req.group_id]
        member_id = req.member_id or str(uuid.uuid4())
        join = ClassicJoin(req.group_id, member_id, req.group_instance_id, req.client_id, req.client_host,
                           req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
                           tuple(req.protocols))
        try:
            classic_members.check_join(group, join, self.settings)
            if not req.member_id and req.require_known_member_id:
                respond(join_error(ErrorCode.member_id_required, member_id))
                return None
            out = classic_members.join(group, join, self._topics_for(req.group_id), self.settings)
        except KafkaError as exc:
            log.debug("consumer group %s classic member %s join: %s", req.group_id, member_id, exc.message)
            return exc.code
        if out.replaced is not None:
            self._cancel_timers(req.group_id, out.replaced)
            if can_downgrade_replacing(group, out.replaced, self.config.migration_policy,
                                       self.owner.config.max_group_size):
                self._downgrade_replacing(group, out, respond)
                return None
        self._write_all(req.group_id, out.records)
        response = out.response

        def answer(error: ErrorCode) -> None:
            if error != ErrorCode.none:
                respond(join_error(error, req.member_id))
                return
            joined = response["member_id"]
            self.owner.timer.cancel(("consumer-join", req.group_id, joined))
            self._schedule_session(req.group_id, joined, req.session_timeout_ms)
            self.owner.timer.schedule(("consumer-sync", req.group_id, joined), req.rebalance_timeout_ms,
                                      lambda: self._fence(req.group_id, joined, "it sent no SyncGroup in time"))
            respond(response)

        self.owner.after_write(answer)
        return None

    def classic_sync(self, req: SyncRequest, respond: Callback) -> ErrorCode | None:
        group = self.groups[req.group_id]
        try:
            member = classic_members.classic_member(group, req.member_id, req.group_instance_id)
            response = classic_members.sync(group, member, req.generation, req.protocol_type, req.protocol_name,
                                            self._topics_for(req.group_id))
        except KafkaError as exc:
            if exc.code == ErrorCode.rebalance_in_progress:
                self._schedule_join_timeout(group, member)
            return exc.code
        member_id = member.member_id
        assert member.subscription.classic is not None
        session_ms = member.subscription.classic.session_timeout_ms

        def answer(error: ErrorCode) -> None:
            if error != ErrorCode.none:
                respond(sync_response(error))
                return
            self.owner.timer.cancel(("consumer-sync", req.group_id, member_id))
            self._schedule_session(req.group_id, member_id, session_ms)
            respond(response)

        self.owner.after_write(answer)
        return None

    def classic_heartbeat(self, group_id: str, member_id: str, instance_id: str | None,
                          generation: int) -> ErrorCode:
        group = self.groups[group_id]
        try:
            member = classic_members.check_heartbeat(group, member_id, instance_id, generation)
        except KafkaError as exc:
            return exc.code
        assert member.subscription.classic is not None
        self._schedule_session(group_id, member.member_id, member.subscription.classic.session_timeout_ms)
        error = classic_members.heartbeat_error(group, member)
        if error != ErrorCode.none:
            self._schedule_join_timeout(group, member)
        return error

    def classic_leave(self, group_id: str, leaving: list[tuple[str, str | None]]) -> list[ErrorCode]:
        group = self.groups[group_id]
        errors: list[ErrorCode] = []
        gone: dict[str, ConsumerMember] = {}
        for member_id, instance_id in leaving:
            try:
                member = classic_members.classic_member(group, member_id, instance_id)
            except KafkaError as exc:
                errors.append(exc.code)
                continue
            log.info("consumer group %s: classic member %s left", group_id, member.member_id)
            gone[member.member_id] = member
            self._cancel_timers(group_id, member.member_id)
            errors.append(ErrorCode.none)
        self._write_all(group_id, classic_members.leave(group, list(gone.values()), self._topics_for(group_id)))
        return errors

    def _schedule_join_timeout(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """A classic member told to rejoin has its rebalance timeout to do so (Kafka's join timeout)."""
        key = ("consumer-join", group.group_id, member.member_id)
        if not self.owner.timer.is_scheduled(key):
            group_id, member_id = group.group_id, member.member_id
            self.owner.timer.schedule(key, member.subscription.rebalance_timeout_ms,
                                      lambda: self._fence(group_id, member_id, "it did not rejoin in time"))

    def _write_all(self, group_id: str, records: list[ConsumerGroupRecord]) -> None:
        partition = self.owner.partition_for(group_id)
        for record in records:
            self.owner.write(encode(partition, record))

    def _follow_timers(self, req: HeartbeatRequest, out: Outcome) -> None:
        if out.replaced is not None:
            self._cancel_timers(req.group_id, out.replaced)
        if req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH and out.member is None:
            self._cancel_timers(req.group_id, out.response["member_id"])
            return
        member_id = out.response["member_id"]
        self._schedule_session(req.group_id, member_id)
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            return  # its session still runs: it is fenced unless it comes back in time
        if unrevoked(out.member):
            assert out.member is not None
            epoch = out.member.member_epoch
            self.owner.timer.schedule(("consumer-rebalance", req.group_id, member_id),
                                      out.member.subscription.rebalance_timeout_ms,
                                      lambda: self._rebalance_expired(req.group_id, member_id, epoch))
        else:
            self.owner.timer.cancel(("consumer-rebalance", req.group_id, member_id))

    # ---------------------------------------------------------------- timers
    def _schedule_session(self, group_id: str, member_id: str, timeout_ms: int | None = None) -> None:
        """A consumer-protocol member's session is its group's (or the broker's); a classic member's is its own."""
        if timeout_ms is None:
            timeout_ms = self._group_values(group_id)[CONSUMER_SESSION_TIMEOUT_MS]
        self.owner.timer.schedule(("consumer-session", group_id, member_id), timeout_ms,
                                  lambda: self._fence(group_id, member_id, "the member session expired"))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for kind in ("consumer-session", "consumer-rebalance", "consumer-join", "consumer-sync"):
            self.owner.timer.cancel((kind, group_id, member_id))

    def _rebalance_expired(self, group_id: str, member_id: str, epoch: int) -> None:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if member is not None and member.member_epoch == epoch:
            self._fence(group_id, member_id, f"it did not leave epoch {epoch} within its rebalance timeout")

    def _fence(self, group_id: str, member_id: str, reason: str) -> None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members or group.partition not in self.owner.owned:
            return
        log.info("consumer group %s: member %s fenced: %s", group_id, member_id, reason)
        self._cancel_timers(group_id, member_id)
        self._write_all(group_id, self._removal(group, member_id, self._topics_for(group_id)))

    # ---------------------------------------------------------------- replay
    def replay(self, record: CoordinatorRecord, offset: int | None = None) -> None:
        typed = decode(record)
        committed = None if offset is None else self.owner.committed_offset(record.partition)
        if offset is not None and committed is not None and offset >= committed:
            self._past_high_watermark(record.partition, offset, typed)
        group = self.groups.get(typed.group_id)
        if group is None:
            if _is_tombstone(typed):
                return
            group = self._create(typed.group_id, record.partition)
        group.replay(typed)
        if not group.exists:
            del self.groups[typed.group_id]
            self._principals.pop(typed.group_id, None)
            self._keep_offsets(group)

    def _past_high_watermark(self, partition: int, offset: int, typed: ConsumerGroupRecord) -> None:
        group_id = typed.group_id
        if group_id not in self._at_hw:
            live = self.groups.get(group_id)
            self._at_hw[group_id] = None if live is None else _copy(live)
        self._past_hw.setdefault(partition, deque()).append((offset, typed))
        self._past_hw_count[group_id] = self._past_hw_count.get(group_id, 0) + 1

    def advance(self, partition: int, high_watermark: int) -> None:
        """The partition's HW moved: the groups as of the HW take the records it passed."""
        waiting = self._past_hw.get(partition)
        while waiting and waiting[0][0] < high_watermark:
            _, typed = waiting.popleft()
            group_id = typed.group_id
            group = self._at_hw.get(group_id)
            if group is None and not _is_tombstone(typed):
                group = ConsumerGroup(group_id, partition)
            if group is not None:
                group.replay(typed)
                if not group.exists:
                    group = None
            left = self._past_hw_count[group_id] - 1
            if left:
                self._past_hw_count[group_id], self._at_hw[group_id] = left, group
            else:  # the HW passed all it had: as it is in memory
                del self._past_hw_count[group_id], self._at_hw[group_id]
        if waiting is not None and not waiting:
            del self._past_hw[partition]

    def committed_group(self, group_id: str) -> ConsumerGroup | None:
        """The group as of its partition's high watermark (None: there was none then), for a read there:
        ConsumerGroupDescribe, ListGroups, and OffsetFetch v9's member-epoch check (Kafka's validateOffsetFetch
        at the last committed offset)."""
        return self._at_hw[group_id] if group_id in self._at_hw else self.groups.get(group_id)

    def _keep_offsets(self, group: ConsumerGroup) -> None:
        """A deleted group's offsets outlive its metadata (Kafka keeps them apart): a classic group holds them."""
        holder = self.owner.groups.get(group.group_id)  # a classic group replacing this one may exist already
        if holder is not None:
            holder.offsets.update(group.offsets)
        elif group.offsets:
            self.owner.groups[group.group_id] = ClassicGroup(group.group_id, group.partition, offsets=group.offsets)

    def _create(self, group_id: str, partition: int) -> ConsumerGroup:
        group = self.groups[group_id] = ConsumerGroup(group_id, partition)
        classic = self.owner.groups.get(group_id)
        if classic is not None and not classic.members:  # an empty classic group: its offsets come along
            group.offsets = classic.offsets
            del self.owner.groups[group_id]
        return group

    def finish_loading(self, partition: int) -> None:
        """Loaded members must heartbeat within a session, as after any heartbeat."""
        for group in self.groups.values():
            if group.partition == partition:
                for member_id, member in group.members.items():
                    classic = member.subscription.classic
                    self._schedule_session(group.group_id, member_id,
                                           None if classic is None else classic.session_timeout_ms)

    def unload(self, partition: int) -> set[str]:
        gone = {group_id for group_id, group in self.groups.items() if group.partition == partition}
        for group_id in gone:
            del self.groups[group_id]
            self._principals.pop(group_id, None)
        for _, typed in self._past_hw.pop(partition, ()):
            self._at_hw.pop(typed.group_id, None)
            self._past_hw_count.pop(typed.group_id, None)
        return gone

    # ----------------------------------------------------------- offsets
    def commit_error(self, group: ConsumerGroup, member_id: str, member_epoch: int,
                     partitions: Iterable[TopicPartition], api_version: int | None = None) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: a consumer-protocol member's plain OffsetCommit must be v9 or
        newer (`api_version`; None: a transactional commit). A classic member commits in its current epoch. A
        consumer-protocol member may also commit with an older epoch (KIP-1251: the answer that moved it on may not
        have reached it yet) when it was given every partition committed (`partitions`: (topic, partition)) in
        that epoch or before."""
        if member_epoch < 0 and not group.members:
            return None  # the admin client, or a consumer outside group management
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if api_version is not None and api_version < 9 and not member.uses_classic:
            return ErrorCode.unsupported_version
        if member.uses_classic or member_epoch >= member.member_epoch:
            return _epoch_error(member, member_epoch)
        topics = self.topics()
        for name, partition in partitions:
            topic = topics.get(name)
            given = None if topic is None else member.current.assignment_epoch(topic.topic_id, partition)
            if given is None or given > member_epoch:
                return ErrorCode.stale_member_epoch
        return None

    def fetch_error(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Kafka's validateOffsetFetch: without member id and epoch anyone may fetch."""
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return _epoch_error(member, member_epoch)

    def subscribed_topics(self, group: ConsumerGroup) -> set[str]:
        return set(group.subscription_metadata)

    def expired_offsets(self, group: ConsumerGroup, now: int, retention_ms: int) -> list[tuple[str, int]]:
        """Offsets of topics no member subscribes to, older than the retention (or past their expiry)."""
        subscribed = self.subscribed_topics(group)
        def expired(o: CommittedOffset) -> bool:
            if o.expire_timestamp >= 0:
                return now >= o.expire_timestamp
            return now - o.commit_timestamp >= retention_ms

        return [tp for tp, o in group.offsets.items() if tp[0] not in subscribed and expired(o)]

    def delete_records(self, group: ConsumerGroup) -> None:
        """The tombstones of an empty group's metadata (DeleteGroups, or its last offsets expiring)."""
        records: list[ConsumerGroupRecord] = []
        for member_id in group.members:
            records.extend(remove_member(group.group_id, member_id))
        records += [TargetEpochRecord(group.group_id, None), SubscriptionMetadataRecord(group.group_id, None),
                    GroupEpochRecord(group.group_id, None)]
        self._write_all(group.group_id, records)

    # ----------------------------------------------------------------- admin
    def describe(self, group_id: str) -> dict[str, Any]:
        """One group of ConsumerGroupDescribe, as of the high watermark of its partition."""
        try:
            self.owner.validate_group(group_id, allow_empty=True)
            group = self.committed_group(group_id)
            if group is None:
                if group_id in self.owner.groups:
                    raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
                raise KafkaError(ErrorCode.group_id_not_found, f"Group {group_id} not found.")
        except KafkaError as exc:
            return {"error_code": exc.code, "error_message": exc.message, "group_id": group_id, "group_state": "",
                    "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}
        names = {t.topic_id: t.name for t in self.topics().values()}
        return {"error_code": ErrorCode.none, "error_message": None, "group_id": group_id,
                "group_state": group.state.value, "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": group.preferred_assignor() or next(iter(self.settings.assignors)),
                "members": [{
                    "member_id": m.member_id, "instance_id": m.subscription.instance_id,
                    "rack_id": m.subscription.rack_id, "member_epoch": m.member_epoch,
                    "client_id": m.subscription.client_id, "client_host": m.subscription.client_host,
                    "subscribed_topic_names": list(m.subscription.topic_names),
                    "subscribed_topic_regex": m.subscription.topic_regex,
                    "assignment": _described(m.current.assigned, names),
                    "target_assignment": _described(group.target(m.member_id), names),
                    "member_type": 0 if m.uses_classic else 1,  # v1 (KIP-1099): classic or consumer member
                } for m in group.members.values()]}

    def listed(self) -> list[dict[str, Any]]:
        """The groups as of the high watermarks of their partitions (ListGroups)."""
        groups = [self.committed_group(group_id) for group_id in {**self.groups, **self._at_hw}]
        return [{"group_id": g.group_id, "protocol_type": "consumer", "group_state": g.state.value,
                 "group_type": "consumer"} for g in groups if g is not None]

    def is_empty(self, group: ConsumerGroup) -> bool:
        return group.state is GroupState.EMPTY


def _epoch_error(member: ConsumerMember, epoch: int) -> ErrorCode | None:
    """Kafka's validateMemberEpoch: a classic member's generation is its member epoch (ILLEGAL_GENERATION)."""
    if epoch == member.member_epoch:
        return None
    return ErrorCode.illegal_generation if member.uses_classic else ErrorCode.stale_member_epoch


def _described(assignment: Assignment, names: Mapping[uuid.UUID, str]) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": topic, "topic_name": names.get(topic, ""), "partitions": sorted(parts)}
                                 for topic, parts in sorted(assignment.items(), key=lambda item: str(item[0]))]}


def _is_tombstone(record: ConsumerGroupRecord) -> bool:
    payload = next(value for name, value in vars(record).items() if name not in ("group_id", "member_id"))
    return payload is None


def _copy(group: ConsumerGroup) -> ConsumerGroup:
    """A copy that replaying into leaves `group` as it is (members and assignments are immutable values)."""
    return replace(group, members=dict(group.members), static_members=dict(group.static_members),
                   targets=dict(group.targets), subscription_metadata=dict(group.subscription_metadata),
                   owners=dict(group.owners), offsets={})
