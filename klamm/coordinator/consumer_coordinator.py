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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from klamm.coordinator.assignors import ASSIGNORS
from klamm.coordinator.consumer_group import (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH, Assignment,
                                              ConsumerGroup, ConsumerGroupRecord, GroupEpochRecord, GroupState,
                                              SubscriptionMetadataRecord, TargetEpochRecord, TopicMetadata)
from klamm.coordinator.consumer_heartbeat import (GroupSettings, HeartbeatRequest, Outcome, fence, heartbeat, leave,
                                                  remove_member, unrevoked, validate)
from klamm.coordinator.consumer_records import decode, encode
from klamm.coordinator.group import ClassicGroup
from klamm.coordinator.records import CommittedOffset, CoordinatorRecord, group_metadata_record
from klamm.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from klamm.coordinator.coordinator import GroupCoordinator, Result

log = logging.getLogger(__name__)

Topics = Mapping[str, TopicMetadata]


@dataclass(frozen=True)
class ConsumerGroupConfig:
    session_timeout_ms: int = 45000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5000  # group.consumer.heartbeat.interval.ms
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors
    max_size: int = 2**31 - 1  # group.consumer.max.size


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

    # ------------------------------------------------------------- heartbeat
    def heartbeat(self, req: HeartbeatRequest) -> Result:
        """ConsumerGroupHeartbeat: the records to write and the response."""
        try:
            self.owner.validate_group(req.group_id)
            validate(req, self.settings)
            topics = self.topics()
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                out = leave(self._existing(req.group_id), req, topics)
            else:
                out = heartbeat(self._group_for(req), req, topics, self.settings)
        except KafkaError as exc:
            log.debug("consumer group %s member %s epoch %d: %s", req.group_id, req.member_id, req.member_epoch,
                      exc.code.name)
            return self.owner.finish(heartbeat_error(exc))
        self._write_all(req.group_id, out.records)
        self._follow_timers(req, out)
        return self.owner.finish(out.response)

    def _existing(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise KafkaError(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        return group

    def _group_for(self, req: HeartbeatRequest) -> ConsumerGroup:
        """The member's group; a first heartbeat (epoch 0) may create it, over an empty classic group."""
        group = self.groups.get(req.group_id)
        if group is not None:
            return group
        if req.member_epoch != 0:
            raise KafkaError(ErrorCode.group_id_not_found, f"Consumer group {req.group_id} not found.")
        classic = self.owner.groups.get(req.group_id)
        if classic is not None and (classic.members or classic.pending_members):
            raise KafkaError(ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group.")
        if classic is not None and classic.protocol_type is not None:
            # an empty classic group that had members: its GroupMetadata goes, its offsets stay
            self.owner.write(group_metadata_record(classic.partition, req.group_id, None))
        return ConsumerGroup(req.group_id, self.owner.partition_for(req.group_id))

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
    def _schedule_session(self, group_id: str, member_id: str) -> None:
        self.owner.timer.schedule(("consumer-session", group_id, member_id), self.config.session_timeout_ms,
                                  lambda: self._fence(group_id, member_id, "the member session expired"))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self.owner.timer.cancel(("consumer-session", group_id, member_id))
        self.owner.timer.cancel(("consumer-rebalance", group_id, member_id))

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
        self._write_all(group_id, fence(group, member_id, self.topics()))

    # ---------------------------------------------------------------- replay
    def replay(self, record: CoordinatorRecord) -> None:
        typed = decode(record)
        group = self.groups.get(typed.group_id)
        if group is None:
            if _is_tombstone(typed):
                return
            group = self._create(typed.group_id, record.partition)
        group.replay(typed)
        if not group.exists:
            del self.groups[typed.group_id]
            self._keep_offsets(group)

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
                for member_id in group.members:
                    self._schedule_session(group.group_id, member_id)

    def unload(self, partition: int) -> set[str]:
        gone = {group_id for group_id, group in self.groups.items() if group.partition == partition}
        for group_id in gone:
            del self.groups[group_id]
        return gone

    # ----------------------------------------------------------- offsets
    def commit_error(self, group: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: a member commits in its current epoch."""
        if member_epoch < 0 and not group.members:
            return None  # the admin client, or a consumer outside group management
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    def fetch_error(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Kafka's validateOffsetFetch: without member id and epoch anyone may fetch."""
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return None if member_epoch == member.member_epoch else ErrorCode.stale_member_epoch

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
        """One group of ConsumerGroupDescribe."""
        try:
            self.owner.validate_group(group_id, allow_empty=True)
            group = self.groups.get(group_id)
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
                } for m in group.members.values()]}

    def listed(self) -> list[dict[str, Any]]:
        return [{"group_id": g.group_id, "protocol_type": "consumer", "group_state": g.state.value,
                 "group_type": "consumer"} for g in self.groups.values()]

    def is_empty(self, group: ConsumerGroup) -> bool:
        return group.state is GroupState.EMPTY


def _described(assignment: Assignment, names: Mapping[uuid.UUID, str]) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": topic, "topic_name": names.get(topic, ""), "partitions": sorted(parts)}
                                 for topic, parts in sorted(assignment.items(), key=lambda item: str(item[0]))]}


def _is_tombstone(record: ConsumerGroupRecord) -> bool:
    payload = next(value for name, value in vars(record).items() if name not in ("group_id", "member_id"))
    return payload is None
