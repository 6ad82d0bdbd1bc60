"""The embedded consumer protocol of classic groups (protocol type "consumer"), for online migration.

A classic consumer's JoinGroup metadata is an int16 version and a
ConsumerProtocolSubscription; the leader's SyncGroup assignment is an int16
version and a ConsumerProtocolAssignment (both specs in
klamm/protocol/specs/clients). As Kafka does, a version newer than the spec's
is read with the newest format: later versions only add fields at the end.
Topics are named here; consumer groups keep topic ids, so the callers map.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.schema import MessageSpec, SchemaError, packaged_spec

_VERSION = struct.Struct(">h")
_NEWEST = 3
PROTOCOL_TYPE = "consumer"


@dataclass(frozen=True)
class ClassicSubscription:
    topics: tuple[str, ...]
    owned: Mapping[str, frozenset[int]]  # by topic name
    rack_id: str | None


def _spec(name: str) -> MessageSpec:
    return packaged_spec("clients", name)


def _version(data: bytes) -> int:
    (version,) = _VERSION.unpack_from(data)
    return min(max(version, 0), _NEWEST)


def metadata_version(data: bytes) -> int:
    """The version a member's subscription is in; its assignment is written in the same one."""
    try:
        return _version(data)
    except struct.error:
        return 0


def decode_subscription(data: bytes) -> ClassicSubscription:
    """A JoinGroup protocol's metadata; INCONSISTENT_GROUP_PROTOCOL when it is not a consumer subscription."""
    try:
        version = _version(data)
        value = _spec("ConsumerProtocolSubscription").decode(data[2:], version)
    except (struct.error, SchemaError, ValueError, IndexError) as exc:
        raise KafkaError(ErrorCode.inconsistent_group_protocol,
                         f"Malformed embedded consumer protocol subscription: {exc}") from None
    owned: dict[str, frozenset[int]] = {}
    for entry in value.get("owned_partitions") or []:
        owned[entry["topic"]] = owned.get(entry["topic"], frozenset()) | frozenset(entry["partitions"])
    return ClassicSubscription(tuple(value["topics"]), owned, value.get("rack_id"))


def decode_assignment(data: bytes) -> dict[str, frozenset[int]]:
    """A classic member's assignment by topic name; empty when it has none (b"") or it cannot be read."""
    if len(data) < 2:
        return {}
    try:
        value = _spec("ConsumerProtocolAssignment").decode(data[2:], _version(data))
    except (struct.error, SchemaError, ValueError, IndexError):
        return {}
    assignment: dict[str, frozenset[int]] = {}
    for entry in value["assigned_partitions"]:
        assignment[entry["topic"]] = assignment.get(entry["topic"], frozenset()) | frozenset(entry["partitions"])
    return assignment


def encode_assignment(partitions: Mapping[str, frozenset[int]], version: int) -> bytes:
    entries = [{"topic": topic, "partitions": sorted(parts)} for topic, parts in sorted(partitions.items())]
    version = min(max(version, 0), _NEWEST)
    return _VERSION.pack(version) + _spec("ConsumerProtocolAssignment").encode(
        {"assigned_partitions": entries, "user_data": None}, version)


def by_id(partitions: Mapping[str, frozenset[int]], ids: Mapping[str, uuid.UUID]) -> dict[uuid.UUID, frozenset[int]]:
    """Named partitions as a consumer group holds them; topics that no longer exist are left out."""
    return {ids[name]: parts for name, parts in partitions.items() if name in ids and parts}


def by_name(partitions: Mapping[uuid.UUID, frozenset[int]],
            names: Mapping[uuid.UUID, str]) -> dict[str, frozenset[int]]:
    return {names[topic]: parts for topic, parts in partitions.items() if topic in names}
