"""The ConsumerGroup* records of __consumer_offsets in Kafka's formats (KIP-848).

Key: int16 version + key struct; value: int16 version 0 + value struct
(flexible); a null value is the tombstone. The key version tells the type, as
Kafka's CoordinatorRecordType does:

  3 ConsumerGroupMetadata                 group epoch
  4 ConsumerGroupPartitionMetadata        subscribed topics: id, name, partition count
  5 ConsumerGroupMemberMetadata           a member's subscription
  6 ConsumerGroupTargetAssignmentMetadata target assignment epoch
  7 ConsumerGroupTargetAssignmentMember   a member's target partitions
  8 ConsumerGroupCurrentMemberAssignment  a member's epochs, state, owned and revoking partitions, and
                                          the epoch each was assigned in (a tagged field, KIP-1251)

A member that uses the classic protocol (online migration) carries its
session timeout and JoinGroup protocols in the member metadata's tagged
ClassicMemberMetadata. Partition racks (PartitionMetadata) are written empty: klamm's assignors do not
use racks.
"""

from __future__ import annotations

import struct
import uuid
from typing import Any

from klamm.coordinator.consumer_group import (Assignment, ClassicMetadata, ConsumerGroupRecord, CurrentAssignment,
                                              CurrentAssignmentRecord, GroupEpochRecord, MemberState,
                                              MemberSubscriptionRecord, Subscription, SubscriptionMetadataRecord,
                                              TargetEpochRecord, TargetMemberRecord, TopicMetadata)
from klamm.coordinator.records import CoordinatorRecord
from klamm.protocol.schema import MessageSpec, packaged_spec

_VERSION = struct.Struct(">h")
VALUE_VERSION = 0
KEY_VERSIONS = {GroupEpochRecord: 3, SubscriptionMetadataRecord: 4, MemberSubscriptionRecord: 5,
                TargetEpochRecord: 6, TargetMemberRecord: 7, CurrentAssignmentRecord: 8}
_NAMES = {3: "ConsumerGroupMetadata", 4: "ConsumerGroupPartitionMetadata", 5: "ConsumerGroupMemberMetadata",
          6: "ConsumerGroupTargetAssignmentMetadata", 7: "ConsumerGroupTargetAssignmentMember",
          8: "ConsumerGroupCurrentMemberAssignment"}


def is_consumer_group_key(key: bytes) -> bool:
    return _VERSION.unpack_from(key)[0] in _NAMES


def _spec(name: str) -> MessageSpec:
    return packaged_spec("group-coordinator", name)


def _topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": topic, "partitions": sorted(parts)}
            for topic, parts in sorted(assignment.items(), key=lambda item: str(item[0]))]


def _assignment(entries: list[dict[str, Any]]) -> dict[uuid.UUID, frozenset[int]]:
    return {entry["topic_id"]: frozenset(entry["partitions"]) for entry in entries}


# encoding
def encode(partition: int, record: ConsumerGroupRecord) -> CoordinatorRecord:
    version = KEY_VERSIONS[type(record)]
    name = _NAMES[version]
    key = {"group_id": record.group_id}
    if isinstance(record, (MemberSubscriptionRecord, TargetMemberRecord, CurrentAssignmentRecord)):
        key["member_id"] = record.member_id
    key_bytes = _VERSION.pack(version) + _spec(f"{name}Key").encode(key, version)
    value = _value(record)
    if value is None:
        return CoordinatorRecord(partition, key_bytes, None)
    return CoordinatorRecord(partition, key_bytes,
                             _VERSION.pack(VALUE_VERSION) + _spec(f"{name}Value").encode(value, VALUE_VERSION))


def _value(record: ConsumerGroupRecord) -> dict[str, Any] | None:
    if isinstance(record, GroupEpochRecord):
        return None if record.epoch is None else {"epoch": record.epoch}
    if isinstance(record, TargetEpochRecord):
        return None if record.epoch is None else {"assignment_epoch": record.epoch}
    if isinstance(record, SubscriptionMetadataRecord):
        if record.topics is None:
            return None
        return {"topics": [{"topic_id": t.topic_id, "topic_name": t.name, "num_partitions": t.partitions,
                            "partition_metadata": []} for t in record.topics.values()]}
    if isinstance(record, MemberSubscriptionRecord):
        s = record.subscription
        if s is None:
            return None
        return {"instance_id": s.instance_id, "rack_id": s.rack_id, "client_id": s.client_id,
                "client_host": s.client_host, "subscribed_topic_names": list(s.topic_names),
                "subscribed_topic_regex": s.topic_regex, "rebalance_timeout_ms": s.rebalance_timeout_ms,
                "server_assignor": s.server_assignor, "classic_member_metadata": _classic_value(s.classic)}
    if isinstance(record, TargetMemberRecord):
        return None if record.partitions is None else {"topic_partitions": _topic_partitions(record.partitions)}
    c = record.current
    if c is None:
        return None
    return {"member_epoch": c.member_epoch, "previous_member_epoch": c.previous_member_epoch, "state": int(c.state),
            "assigned_partitions": _with_epochs(c.assigned, c),
            "partitions_pending_revocation": _with_epochs(c.pending_revocation, c)}


def _with_epochs(assignment: Assignment, current: CurrentAssignment) -> list[dict[str, Any]]:
    """TopicPartitions with each partition's assignment epoch (KIP-1251), in a tagged field older readers skip."""
    entries = _topic_partitions(assignment)
    for entry in entries:
        entry["assignment_epochs"] = [current.given_in(entry["topic_id"], p) for p in entry["partitions"]]
    return entries


def _classic_value(classic: ClassicMetadata | None) -> dict[str, Any] | None:
    if classic is None:
        return None
    return {"session_timeout_ms": classic.session_timeout_ms,
            "supported_protocols": [{"name": name, "metadata": metadata} for name, metadata in classic.protocols]}


def _classic(value: dict[str, Any] | None) -> ClassicMetadata | None:
    if value is None:
        return None
    return ClassicMetadata(value["session_timeout_ms"],
                           tuple((p["name"], bytes(p["metadata"])) for p in value["supported_protocols"]))


# decoding
def decode(record: CoordinatorRecord) -> ConsumerGroupRecord:
    (version,) = _VERSION.unpack_from(record.key)
    name = _NAMES[version]
    key = _spec(f"{name}Key").decode(record.key[2:], version)
    group_id = key["group_id"]
    value = None
    if record.value is not None:
        value = _spec(f"{name}Value").decode(record.value[2:], _VERSION.unpack_from(record.value)[0])
    if version == 3:
        return GroupEpochRecord(group_id, None if value is None else value["epoch"])
    if version == 4:
        topics = None if value is None else {t["topic_name"]: TopicMetadata(t["topic_id"], t["topic_name"],
                                                                            t["num_partitions"])
                                             for t in value["topics"]}
        return SubscriptionMetadataRecord(group_id, topics)
    if version == 6:
        return TargetEpochRecord(group_id, None if value is None else value["assignment_epoch"])
    member_id = key["member_id"]
    if version == 5:
        return MemberSubscriptionRecord(group_id, member_id, None if value is None else Subscription(
            instance_id=value["instance_id"], rack_id=value["rack_id"], client_id=value["client_id"],
            client_host=value["client_host"], topic_names=tuple(value["subscribed_topic_names"]),
            topic_regex=value["subscribed_topic_regex"], rebalance_timeout_ms=value["rebalance_timeout_ms"],
            server_assignor=value["server_assignor"], classic=_classic(value.get("classic_member_metadata"))))
    if version == 7:
        return TargetMemberRecord(group_id, member_id,
                                  None if value is None else _assignment(value["topic_partitions"]))
    if value is None:
        return CurrentAssignmentRecord(group_id, member_id, None)
    owned = value["assigned_partitions"] + value["partitions_pending_revocation"]
    return CurrentAssignmentRecord(group_id, member_id, CurrentAssignment(
        value["member_epoch"], value["previous_member_epoch"], _state(value["state"]),
        _assignment(value["assigned_partitions"]), _assignment(value["partitions_pending_revocation"]),
        _assignment_epochs(owned)))


def _assignment_epochs(entries: list[dict[str, Any]]) -> dict[uuid.UUID, dict[int, int]]:
    """The epochs a record names; a record written without them (or a broken list) leaves its partitions at the
    member epoch, the strict check."""
    result: dict[uuid.UUID, dict[int, int]] = {}
    for entry in entries:
        epochs = entry.get("assignment_epochs")
        if epochs is not None and len(epochs) == len(entry["partitions"]):
            result.setdefault(entry["topic_id"], {}).update(zip(entry["partitions"], epochs))
    return result


def _state(value: int) -> MemberState:
    try:
        return MemberState(value)
    except ValueError:
        return MemberState.UNKNOWN
