"""OffsetCommit (8), OffsetFetch (9), OffsetDelete (47): a group's committed offsets.

Every version keeps offsets in __consumer_offsets (v0 too, which Kafka once kept
in ZooKeeper); v1's per-partition commit timestamp sets when the offset expires.

Commits to partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION, as
Kafka's request handler answers before the coordinator sees them.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.broker.handlers.groups import millis
from klamm.coordinator.coordinator import OffsetToCommit
from klamm.protocol.errors import ErrorCode, KafkaError

INVALID_OFFSET = -1
NO_EPOCH = -1


def partition_exists(broker: BrokerServices, topic: str, partition: int) -> bool:
    meta = broker.controller.image.topics_by_name.get(topic)
    return meta is not None and partition in meta.partitions


def requested_offsets(broker: BrokerServices, body: Any
                      ) -> tuple[list[tuple[str, int]], list[OffsetToCommit], set[tuple[str, int]]]:
    """An (Txn)OffsetCommit's partitions in request order, the offsets to store, and the unknown partitions."""
    wanted = [(t.name, p) for t in body.topics for p in t.partitions]
    unknown = {(name, p.partition_index) for name, p in wanted if not partition_exists(broker, name, p.partition_index)}
    offsets = [OffsetToCommit(name, p.partition_index, p.committed_offset,
                              getattr(p, "committed_leader_epoch", NO_EPOCH), p.committed_metadata,
                              getattr(p, "commit_timestamp", -1))  # v1 only
               for name, p in wanted if (name, p.partition_index) not in unknown]
    return [(name, p.partition_index) for name, p in wanted], offsets, unknown


def _by_topic(errors: list[tuple[str, int, ErrorCode]]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, error in errors:
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return [{"name": name, "partitions": partitions} for name, partitions in topics.items()]


# OffsetCommit
async def offset_commit(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    requested, offsets, unknown = requested_offsets(broker, body)
    retention = getattr(body, "retention_time", -1) if 2 <= version <= 4 else -1
    try:
        coordinator = broker.group_coordinator.ready()
        # v0 has no group membership: a simple commit, as with generation -1
        result = coordinator.commit_offsets(body.group_id, getattr(body, "generation_id_or_member_epoch", -1),
                                            getattr(body, "member_id", ""), getattr(body, "group_instance_id", None),
                                            offsets, millis(retention))
        errors = broker.group_coordinator.apply(result)
        errors = await replicated_errors(broker, body.group_id, errors)
    except KafkaError as exc:
        errors = {(o.topic, o.partition): exc.code for o in offsets}
    rows = [(name, index, ErrorCode.unknown_topic_or_partition if (name, index) in unknown else errors[(name, index)])
            for name, index in requested]
    return {"topics": _by_topic(rows)}


async def replicated_errors(broker: BrokerServices, group_id: str,
                      errors: dict[tuple[str, int], ErrorCode]) -> dict[tuple[str, int], ErrorCode]:
    """The commit's answer once the ISR has it: the replication error for the offsets written."""
    error = await broker.group_coordinator.replicated(group_id)
    if error == ErrorCode.none:
        return errors
    return {tp: error if code == ErrorCode.none else code for tp, code in errors.items()}


# OffsetFetch
async def offset_fetch(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    stable = getattr(body, "require_stable", False)
    if version >= 8:
        return {"groups": [_fetch_group(broker, g.group_id, g.topics, version, stable) for g in body.groups]}
    fetched = _fetch_group(broker, body.group_id, body.topics, version, stable)
    return {"topics": fetched["topics"], "error_code": fetched["error_code"]}


def _fetch_group(broker: BrokerServices, group_id: str, topics: Any, version: int, require_stable: bool) -> dict[str, Any]:
    """require_stable (KIP-447): an offset a transaction has pending is UNSTABLE_OFFSET_COMMIT for now."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    try:
        coordinator = broker.group_coordinator.ready()
        offsets = coordinator.fetch_offsets(group_id, wanted)
    except KafkaError as exc:
        if version >= 2:
            return {"group_id": group_id, "topics": [], "error_code": exc.code}
        # v1 has no group error: every partition carries it
        rows = [(t, p, None, exc.code) for t, p in wanted or []]
        return {"group_id": group_id, "topics": _fetched_topics(rows), "error_code": exc.code}
    rows = [(topic, partition, committed, ErrorCode.none) for (topic, partition), committed in offsets.items()]
    if require_stable:
        rows = [(t, p, None, ErrorCode.unstable_offset_commit) if coordinator.has_pending_offset(group_id, t, p)
                else (t, p, c, e) for t, p, c, e in rows]
    return {"group_id": group_id, "topics": _fetched_topics(rows), "error_code": ErrorCode.none}


def _fetched_topics(rows: list[tuple[str, int, Any, ErrorCode]]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, committed, error in rows:
        topics.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": committed.offset if committed else INVALID_OFFSET,
            "committed_leader_epoch": committed.leader_epoch if committed else NO_EPOCH,
            "metadata": committed.metadata if committed else "",
            "error_code": error,
        })
    return [{"name": name, "partitions": partitions} for name, partitions in topics.items()]


# OffsetDelete
async def offset_delete(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    try:
        coordinator = broker.group_coordinator.ready()
        error, errors = broker.group_coordinator.apply(coordinator.delete_offsets(body.group_id, wanted))
    except KafkaError as exc:
        error, errors = exc.code, {}
    if error != ErrorCode.none:
        return {"error_code": error, "topics": []}
    rows = [(topic, partition, ErrorCode.unknown_topic_or_partition if not partition_exists(broker, topic, partition)
             else errors[(topic, partition)]) for topic, partition in wanted]
    return {"error_code": ErrorCode.none, "topics": _by_topic(rows)}


APIS = [Api(8, 0, 9, offset_commit), Api(9, 0, 9, offset_fetch), Api(47, 0, 0, offset_delete)]
