"""Metadata records and their framing in the `__cluster_metadata` log.

A record value is framed as Kafka's AbstractApiMessageSerde does:

    frame_version  uvarint  (1; version 0 was the 2.8 preview and is rejected)
    api_key        uvarint  (the spec's apiKey: TopicRecord 2, PartitionRecord 3, ...)
    version        uvarint
    message        the record encoded with its JSON spec at that version

Metadata records carry a null key. The payload codec comes from
`klamm.protocol.schema` and the vendored `specs/metadata/*.json`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from klamm.protocol.schema import MessageSpec, SchemaError, packaged_specs, read_uvarint, write_uvarint

__all__ = [
    "FRAME_VERSION",
    "WRITE_VERSIONS",
    "MetadataRecord",
    "MetadataRecordError",
    "decode_record",
    "encode_record",
    "spec_for",
]

FRAME_VERSION = 1

# The version klamm writes for each record type. PartitionRecord/PartitionChangeRecord
# stay at v0: v1 makes the per-replica log directory list mandatory (KIP-858),
# which klamm does not track.
WRITE_VERSIONS: Mapping[str, int] = {
    "RegisterBrokerRecord": 3,
    "UnregisterBrokerRecord": 0,
    "TopicRecord": 0,
    "PartitionRecord": 0,
    "ConfigRecord": 0,
    "PartitionChangeRecord": 0,
    "FenceBrokerRecord": 0,
    "UnfenceBrokerRecord": 0,
    "RemoveTopicRecord": 0,
    "FeatureLevelRecord": 0,
    "ProducerIdsRecord": 0,
    "BrokerRegistrationChangeRecord": 2,
    "NoOpRecord": 0,
    "UserScramCredentialRecord": 0,
    "RemoveUserScramCredentialRecord": 0,
    "AccessControlEntryRecord": 0,
    "RemoveAccessControlEntryRecord": 0,
    "ClientQuotaRecord": 0,
    "DelegationTokenRecord": 0,
    "RemoveDelegationTokenRecord": 0,
}


class MetadataRecordError(ValueError):
    """A metadata record value that cannot be decoded."""


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One metadata record: its type name (e.g. "TopicRecord"), payload and version.

    `data` is a dict keyed by snake_case field names; missing fields take their
    defaults when encoded. version None means WRITE_VERSIONS[type].
    """

    type: str
    data: Mapping[str, Any] = field(default_factory=dict)
    version: int | None = None

    @property
    def write_version(self) -> int:
        return WRITE_VERSIONS[self.type] if self.version is None else self.version


@functools.cache
def _specs_by_key() -> Mapping[int, MessageSpec]:
    return {spec.api_key: spec for spec in packaged_specs("metadata").values()}


@functools.cache
def _specs_by_name() -> Mapping[str, MessageSpec]:
    return dict(packaged_specs("metadata"))


def spec_for(record_type: str) -> MessageSpec:
    try:
        return _specs_by_name()[record_type]
    except KeyError:
        raise MetadataRecordError(f"unknown metadata record type {record_type}") from None


def encode_record(record: MetadataRecord) -> bytes:
    """The framed value bytes of `record`."""
    spec = spec_for(record.type)
    version = record.write_version
    out = bytearray()
    write_uvarint(out, FRAME_VERSION)
    write_uvarint(out, spec.api_key)
    write_uvarint(out, version)
    spec.codec(version).write(out, record.data)
    return bytes(out)


def complete_record(record: MetadataRecord) -> MetadataRecord:
    """decode_record(encode_record(record)), without the bytes, for a record that encodes: what the
    controller that wrote it applies, as every other node applies what it reads back."""
    version = record.write_version
    return MetadataRecord(record.type, spec_for(record.type).codec(version).complete(record.data), version)


def decode_record(buf: bytes | bytearray | memoryview) -> MetadataRecord:
    """Parse a framed value; every field is present in the result's data."""
    try:
        frame_version, pos = read_uvarint(buf, 0)
        if frame_version != FRAME_VERSION:
            raise MetadataRecordError(f"unsupported metadata frame version {frame_version}")
        api_key, pos = read_uvarint(buf, pos)
        version, pos = read_uvarint(buf, pos)
        spec = _specs_by_key().get(api_key)
        if spec is None:
            raise MetadataRecordError(f"unknown metadata record api key {api_key}")
        if version not in spec.valid_versions:
            raise MetadataRecordError(f"{spec.name} has no version {version}")
        data, end = spec.codec(version).read(buf, pos)
    except (SchemaError, IndexError) as exc:
        raise MetadataRecordError(f"malformed metadata record: {exc}") from exc
    if end != len(buf):
        raise MetadataRecordError(f"{len(buf) - end} byte(s) of garbage after {spec.name}")
    return MetadataRecord(spec.name, data, version)
