"""Records of __transaction_state in Kafka's formats (TransactionLog).

Key: int16 version (0) + TransactionLogKey; value: int16 version + TransactionLogValue.
Kafka writes value v0 for transaction version 1 clients (v1 carries the KIP-890
tagged fields); both are read. An Empty transaction stores null partitions, as
Kafka does. A null value is a tombstone (an expired transactional id).
"""

from __future__ import annotations

import struct

from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.transactions.metadata import TxnMetadata, TxnState
from klamm.protocol.schema import packaged_spec

_VERSION = struct.Struct(">h")
KEY_VERSION = 0
VALUE_VERSION = 0


def _spec(name: str):  # noqa: ANN202 - a compiled MessageSpec
    return packaged_spec("transaction-coordinator", name)


def txn_key(transactional_id: str) -> bytes:
    return _VERSION.pack(KEY_VERSION) + _spec("TransactionLogKey").encode(
        {"transactional_id": transactional_id}, KEY_VERSION)


def txn_record(partition: int, metadata: TxnMetadata) -> CoordinatorRecord:
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(metadata.partitions):
        by_topic.setdefault(topic, []).append(index)
    partitions = None if metadata.state == TxnState.EMPTY else [
        {"topic": topic, "partition_ids": ids} for topic, ids in by_topic.items()]
    body = _spec("TransactionLogValue").encode({
        "producer_id": metadata.producer_id, "producer_epoch": metadata.producer_epoch,
        "transaction_timeout_ms": metadata.timeout_ms, "transaction_status": metadata.state.id,
        "transaction_partitions": partitions, "transaction_last_update_timestamp_ms": metadata.update_ms,
        "transaction_start_timestamp_ms": metadata.start_ms,
    }, VALUE_VERSION)
    return CoordinatorRecord(partition, txn_key(metadata.transactional_id), _VERSION.pack(VALUE_VERSION) + body)


def txn_tombstone(partition: int, transactional_id: str) -> CoordinatorRecord:
    """The record that removes an expired transactional id."""
    return CoordinatorRecord(partition, txn_key(transactional_id), None)


def decode_txn_key(key: bytes) -> str | None:
    """The transactional id, or None for a key version this coordinator does not know."""
    (version,) = _VERSION.unpack_from(key)
    if version != KEY_VERSION:
        return None
    return _spec("TransactionLogKey").decode(key[2:], version)["transactional_id"]


def decode_txn_value(transactional_id: str, value: bytes) -> TxnMetadata:
    (version,) = _VERSION.unpack_from(value)
    fields = _spec("TransactionLogValue").decode(value[2:], version)
    partitions = frozenset((p["topic"], index) for p in fields["transaction_partitions"] or ()
                           for index in p["partition_ids"])
    return TxnMetadata(
        transactional_id, fields["producer_id"], fields["producer_epoch"], fields["transaction_timeout_ms"],
        TxnState.from_id(fields["transaction_status"]), partitions, fields["transaction_start_timestamp_ms"],
        fields["transaction_last_update_timestamp_ms"], fields.get("previous_producer_id", -1),
        fields.get("next_producer_id", -1))
