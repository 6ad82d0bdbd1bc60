"""Metadata snapshots (KIP-630): the image as the records that rebuild it, in one file.

A snapshot of the image at log end offset E (every record below E applied),
taken in leader epoch P, is `<E:020d>-<P:010d>.checkpoint` in the metadata log's
directory (`__cluster_metadata-0`), Kafka's name. Its content is v2 record
batches at offsets counted from 0 within the file, as Kafka's
RecordsSnapshotWriter writes them:

    control batch   SnapshotHeaderRecord (control type 3): version int16, last contained log timestamp int64
    data batches    the metadata records (null keys, framed values as in the log)
    control batch   SnapshotFooterRecord (control type 4): version int16

The control values are the flexible-version messages at version 0 (a trailing
empty tagged-field section). A snapshot is written to `<name>.part`, fsynced and
renamed, so a file with the final name is whole unless the disk corrupts it; a
reader checks every CRC, the header first, the footer last and contiguous
offsets, and raises SnapshotError otherwise (the caller falls back to an older
snapshot or the log).
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from klamm.controller.image import TOPIC_RESOURCE, Endpoint, MetadataImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.batch import InvalidBatch, split_batches
from klamm.protocol.errors import KafkaError
from klamm.protocol.records import NewRecord, Record, build_batch, decode_batch
from klamm.protocol.sasl import SCRAM_MECHANISMS

__all__ = ["SnapshotError", "SnapshotId", "image_records", "list_snapshots", "parse_snapshot", "read_snapshot",
           "remove_partial_snapshots", "snapshot_path", "write_snapshot", "write_snapshot_bytes",
           "write_snapshot_file"]

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
SNAPSHOT_HEADER, SNAPSHOT_FOOTER = 3, 4  # Kafka's ControlRecordType codes
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_HEADER_VALUE = struct.Struct(">hqB")  # version, last contained log timestamp, empty tagged fields
_FOOTER_VALUE = struct.Struct(">hB")  # version, empty tagged fields
RECORDS_PER_BATCH = 4096


class SnapshotError(ValueError):
    """A snapshot file that is not a whole, valid snapshot."""


@dataclass(frozen=True, order=True)
class SnapshotId:
    end_offset: int  # the image holds every record below this offset
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"


@dataclass(frozen=True)
class Snapshot:
    id: SnapshotId
    last_contained_ms: int
    values: list[bytes]  # the framed metadata record values, in order


def snapshot_path(directory: Path, snapshot_id: SnapshotId) -> Path:
    return directory / snapshot_id.file_name


def list_snapshots(directory: Path) -> list[SnapshotId]:
    """Ids of the snapshot files in `directory`, oldest first (by end offset, then epoch)."""
    found = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        match = _NAME.match(name)
        if match is not None:
            found.append(SnapshotId(int(match.group(1)), int(match.group(2))))
    return sorted(found)


def remove_partial_snapshots(directory: Path) -> None:
    """A `.part` file is a snapshot cut short by a crash: never valid, always removed at start-up."""
    for path in directory.glob("*" + PARTIAL_SUFFIX):
        path.unlink(missing_ok=True)


# -- the image as records ---------------------------------------------------------------


def image_records(image: MetadataImage) -> Iterator[MetadataRecord]:
    """Records that, replayed into an empty image, rebuild `image` exactly (offset aside)."""
    for name, level in sorted(image.features.items()):
        yield MetadataRecord("FeatureLevelRecord", {"name": name, "feature_level": level})
    for broker in sorted(image.brokers.values(), key=lambda b: b.node_id):
        yield MetadataRecord("RegisterBrokerRecord", {
            "broker_id": broker.node_id, "incarnation_id": broker.incarnation_id, "broker_epoch": broker.epoch,
            "end_points": [{"name": e.name, "host": e.host, "port": e.port, "security_protocol": e.security_protocol}
                           for e in broker.endpoints or [Endpoint(broker.listener, broker.host, broker.port,
                                                                  broker.security_protocol)]],
            "features": [], "rack": broker.rack, "fenced": broker.fenced,
            "in_controlled_shutdown": broker.in_controlled_shutdown,
        })
    for (resource_type, resource_name), configs in sorted(image.configs.items()):
        for name, value in sorted(configs.items()):
            yield MetadataRecord("ConfigRecord", {"resource_type": resource_type, "resource_name": resource_name,
                                                  "name": name, "value": value})
    for topic in image.topics_by_id.values():
        yield MetadataRecord("TopicRecord", {"name": topic.name, "topic_id": topic.topic_id})
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            yield MetadataRecord("PartitionRecord", {
                "partition_id": index, "topic_id": topic.topic_id, "replicas": list(p.replicas), "isr": list(p.isr),
                "removing_replicas": list(p.removing_replicas), "adding_replicas": list(p.adding_replicas),
                "leader": p.leader, "leader_epoch": p.leader_epoch, "partition_epoch": p.partition_epoch,
                "leader_recovery_state": p.leader_recovery_state,
            })
        for name, value in sorted(topic.configs.items()):
            yield MetadataRecord("ConfigRecord", {"resource_type": TOPIC_RESOURCE, "resource_name": topic.name,
                                                  "name": name, "value": value})
    if image.next_producer_id:
        yield MetadataRecord("ProducerIdsRecord", {"broker_id": image.controller_id, "broker_epoch": -1,
                                                   "next_producer_id": image.next_producer_id})
    for (user, mechanism), credential in sorted(image.scram_credentials.items(),
                                                key=lambda item: (item[0][0], SCRAM_MECHANISMS[item[0][1]])):
        yield MetadataRecord("UserScramCredentialRecord", {
            "name": user, "mechanism": SCRAM_MECHANISMS[mechanism], "salt": credential.salt,
            "stored_key": credential.stored_key, "server_key": credential.server_key,
            "iterations": credential.iterations})
    for acl_id, acl in sorted(image.acls.items(), key=lambda item: str(item[0])):
        yield MetadataRecord("AccessControlEntryRecord", {
            "id": acl_id, "resource_type": acl.resource_type, "resource_name": acl.resource_name,
            "pattern_type": acl.pattern_type, "principal": acl.principal, "host": acl.host,
            "operation": acl.operation, "permission_type": acl.permission})
    for entity, values in sorted(image.quotas_by_entity.items(), key=lambda item: _quota_sort_key(item[0])):
        for key, value in sorted(values.items()):
            yield MetadataRecord("ClientQuotaRecord", {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity], "key": key, "value": value,
                "remove": False})
    for token_id, token in sorted(image.delegation_tokens.items()):
        yield MetadataRecord("DelegationTokenRecord", {
            "owner": token.owner, "requester": token.requester, "renewers": list(token.renewers),
            "issue_timestamp": token.issue_ms, "max_timestamp": token.max_ms,
            "expiration_timestamp": token.expiry_ms, "token_id": token_id})


def _quota_sort_key(entity: tuple[tuple[str, str | None], ...]) -> list[tuple[str, bool, str]]:
    return [(entity_type, name is not None, name or "") for entity_type, name in entity]



# -- writing and reading ----------------------------------------------------------------


def write_snapshot(directory: Path, snapshot_id: SnapshotId, values: Iterable[bytes], last_contained_ms: int) -> Path:
    """Write the snapshot durably (part file, fsync, rename, directory fsync); its final path."""
    final = snapshot_path(directory, snapshot_id)
    write_snapshot_file(final, snapshot_id.epoch, values, last_contained_ms)
    return final


def write_snapshot_file(final: Path, epoch: int, values: Iterable[bytes], last_contained_ms: int) -> None:
    """Records in the snapshot format to the file `final`, durably as above (also bootstrap.checkpoint's)."""
    directory = final.parent
    partial = final.with_name(final.name + ".part")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        header = _control_batch(SNAPSHOT_HEADER, _HEADER_VALUE.pack(0, last_contained_ms, 0), 0, epoch,
                                last_contained_ms)
        _write_all(fd, header)
        offset = 1
        for chunk in _chunks(values, RECORDS_PER_BATCH):
            _write_all(fd, build_batch([NewRecord(None, value) for value in chunk], base_offset=offset,
                                       partition_leader_epoch=epoch, timestamp_ms=last_contained_ms))
            offset += len(chunk)
        _write_all(fd, _control_batch(SNAPSHOT_FOOTER, _FOOTER_VALUE.pack(0, 0), offset, epoch, last_contained_ms))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(partial, final)
    _fsync_dir(directory)


def write_snapshot_bytes(directory: Path, snapshot_id: SnapshotId, data: bytes) -> Path:
    """Store a snapshot fetched whole from the leader (FetchSnapshot), as durably as `write_snapshot`."""
    parse_snapshot(data, snapshot_id, f"the fetched snapshot {snapshot_id.file_name}")
    final = snapshot_path(directory, snapshot_id)
    partial = final.with_name(final.name + ".part")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(partial, final)
    _fsync_dir(directory)
    return final


def read_snapshot(directory: Path, snapshot_id: SnapshotId) -> Snapshot:
    """The snapshot's records; SnapshotError unless the file is a whole, valid snapshot."""
    path = snapshot_path(directory, snapshot_id)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"{path}: {exc}") from exc
    return parse_snapshot(data, snapshot_id, str(path))


def parse_snapshot(data: bytes, snapshot_id: SnapshotId, where: str) -> Snapshot:
    """A snapshot from its file's bytes (a file, or FetchSnapshot's answers); `where` names it in errors."""
    try:
        headers = split_batches(data)
    except InvalidBatch as exc:
        raise SnapshotError(f"{where}: {exc}") from exc
    if len(headers) < 2:
        raise SnapshotError(f"{where}: no header and footer")
    values: list[bytes] = []
    last_contained_ms = -1
    expected_offset = 0
    for n, header in enumerate(headers):
        try:
            _, records = decode_batch(data, header.position, check_crc=True)
        except KafkaError as exc:
            raise SnapshotError(f"{where}: batch at {header.position}: {exc.message}") from exc
        if header.base_offset != expected_offset or not records:
            raise SnapshotError(f"{where}: batch at offset {header.base_offset}, expected {expected_offset}")
        expected_offset = header.last_offset + 1
        if n == 0:
            last_contained_ms = _read_header(where, header.is_control, records)
        elif n == len(headers) - 1:
            _read_footer(where, header.is_control, records)
        elif header.is_control:
            raise SnapshotError(f"{where}: unexpected control batch at offset {header.base_offset}")
        else:
            for record in records:
                if record.value is None:
                    raise SnapshotError(f"{where}: null record value at offset {record.offset}")
                values.append(record.value)
    return Snapshot(snapshot_id, last_contained_ms, values)


def _read_header(where: str, is_control: bool, records: Sequence[Record]) -> int:
    value = _control_value(where, is_control, records, SNAPSHOT_HEADER)
    if len(value) < _HEADER_VALUE.size - 1:
        raise SnapshotError(f"{where}: snapshot header too short")
    return struct.unpack_from(">q", value, 2)[0]


def _read_footer(where: str, is_control: bool, records: Sequence[Record]) -> None:
    _control_value(where, is_control, records, SNAPSHOT_FOOTER)


def _control_value(where: str, is_control: bool, records: Sequence[Record], control_type: int) -> bytes:
    what = "header" if control_type == SNAPSHOT_HEADER else "footer"
    if not is_control or len(records) != 1:
        raise SnapshotError(f"{where}: no snapshot {what}")
    record = records[0]
    if record.key is None or len(record.key) != _CONTROL_KEY.size or record.value is None:
        raise SnapshotError(f"{where}: malformed snapshot {what}")
    _, found = _CONTROL_KEY.unpack(record.key)
    if found != control_type:
        raise SnapshotError(f"{where}: control type {found} where the snapshot {what} belongs")
    return record.value


def _control_batch(control_type: int, value: bytes, offset: int, epoch: int, timestamp_ms: int) -> bytes:
    return build_batch([(_CONTROL_KEY.pack(0, control_type), value)], base_offset=offset, control=True,
                       partition_leader_epoch=epoch, timestamp_ms=timestamp_ms)


def _chunks(values: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for value in values:
        chunk.append(value)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
