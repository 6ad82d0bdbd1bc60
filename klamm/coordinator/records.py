"""Records of __consumer_offsets in Kafka's own formats.

Key: int16 version + key struct; value: int16 version + value struct, as
Kafka's GroupMetadataManager / GroupCoordinatorRecordSerde write them. The key
version tells the record type: 0 and 1 are offset commits (Kafka writes 1), 2
is group metadata. Kafka writes OffsetCommitValue v3 (v1 when the commit
carries an explicit expire timestamp, from OffsetCommit v2-v4 retention_time)
and GroupMetadataValue v3; any version 0-4 is read. A null value is a tombstone.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from klamm.protocol.schema import packaged_spec

_VERSION = struct.Struct(">h")
OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3


@dataclass(frozen=True)
class CoordinatorRecord:
    """One record to append to partition `partition` of __consumer_offsets."""

    partition: int
    key: bytes
    value: bytes | None
    producer_id: int = -1  # >= 0: written in that producer's transaction (TxnOffsetCommit)
    producer_epoch: int = -1


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1  # -1: none (the retention policy decides)


@dataclass(frozen=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: list[MemberRecord] = field(default_factory=list)


def _spec(name: str):  # noqa: ANN202 - a compiled MessageSpec
    return packaged_spec("group-coordinator", name)


def _versioned(version: int, body: bytes) -> bytes:
    return _VERSION.pack(version) + body


# encoding

def offset_commit_record(partition: int, key: OffsetKey, value: CommittedOffset | None) -> CoordinatorRecord:
    key_bytes = _versioned(OFFSET_KEY_VERSION, _spec("OffsetCommitKey").encode(
        {"group": key.group, "topic": key.topic, "partition": key.partition}, OFFSET_KEY_VERSION))
    if value is None:
        return CoordinatorRecord(partition, key_bytes, None)
    version = OFFSET_VALUE_VERSION if value.expire_timestamp < 0 else OFFSET_VALUE_VERSION_WITH_EXPIRY
    body = _spec("OffsetCommitValue").encode({
        "offset": value.offset, "leader_epoch": value.leader_epoch, "metadata": value.metadata,
        "commit_timestamp": value.commit_timestamp, "expire_timestamp": value.expire_timestamp}, version)
    return CoordinatorRecord(partition, key_bytes, _versioned(version, body))


def group_metadata_record(partition: int, group_id: str, value: GroupRecord | None) -> CoordinatorRecord:
    key_bytes = _versioned(GROUP_KEY_VERSION, _spec("GroupMetadataKey").encode({"group": group_id}, GROUP_KEY_VERSION))
    if value is None:
        return CoordinatorRecord(partition, key_bytes, None)
    body = _spec("GroupMetadataValue").encode({
        "protocol_type": value.protocol_type, "generation": value.generation, "protocol": value.protocol,
        "leader": value.leader, "current_state_timestamp": value.current_state_timestamp,
        "members": [{
            "member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
            "client_host": m.client_host, "rebalance_timeout": m.rebalance_timeout,
            "session_timeout": m.session_timeout, "subscription": m.subscription, "assignment": m.assignment,
        } for m in value.members],
    }, GROUP_VALUE_VERSION)
    return CoordinatorRecord(partition, key_bytes, _versioned(GROUP_VALUE_VERSION, body))


# decoding

def decode_key(key: bytes) -> OffsetKey | GroupKey | None:
    """The key's type and fields; None for record types this coordinator ignores (newer protocols)."""
    (version,) = _VERSION.unpack_from(key)
    if version in (0, 1):
        fields = _spec("OffsetCommitKey").decode(key[2:], version)
        return OffsetKey(fields["group"], fields["topic"], fields["partition"])
    if version == 2:
        return GroupKey(_spec("GroupMetadataKey").decode(key[2:], version)["group"])
    return None


def decode_offset_value(value: bytes) -> CommittedOffset:
    (version,) = _VERSION.unpack_from(value)
    fields = _spec("OffsetCommitValue").decode(value[2:], version)
    return CommittedOffset(fields["offset"], fields["leader_epoch"], fields["metadata"], fields["commit_timestamp"],
                           fields["expire_timestamp"] if version == 1 else -1)


def decode_group_value(value: bytes) -> GroupRecord:
    (version,) = _VERSION.unpack_from(value)
    fields = _spec("GroupMetadataValue").decode(value[2:], version)
    members = [MemberRecord(m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                            m["rebalance_timeout"] if m["rebalance_timeout"] >= 0 else m["session_timeout"],
                            m["session_timeout"], bytes(m["subscription"]), bytes(m["assignment"]))
               for m in fields["members"]]
    return GroupRecord(fields["protocol_type"], fields["generation"], fields["protocol"], fields["leader"],
                       fields["current_state_timestamp"], members)
