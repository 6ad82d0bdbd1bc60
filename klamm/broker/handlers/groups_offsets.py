"""OffsetCommit (8), OffsetFetch (9), OffsetDelete (47): a group's committed offsets.

Every version keeps offsets in __consumer_offsets (v0 too, which Kafka once kept
in ZooKeeper); v1's per-partition commit timestamp sets when the offset expires.
A v0 request creates __consumer_offsets if it is missing, as FindCoordinator
does: a 0.8.1 client never looks for a coordinator (ZooKeeper kept its offsets,
behind any broker), and on a broker no newer client had used it would hear
NOT_COORDINATOR forever.

Commits to partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION, as
Kafka's request handler answers before the coordinator sees them.

Authorization (Kafka's KafkaApis): OffsetCommit needs READ on the group
(GROUP_AUTHORIZATION_FAILED for every partition) and READ on each topic
(TOPIC_AUTHORIZATION_FAILED, before the unknown-topic check). OffsetFetch needs
DESCRIBE on each group and on each topic: a named topic denied gets
TOPIC_AUTHORIZATION_FAILED, and fetching all offsets leaves denied topics out.
OffsetDelete needs DELETE on the group (a group-level error) and READ on each topic.

OffsetFetch reads the offsets as of the high watermark of the group's
__consumer_offsets partition: a commit becomes visible once the ISR has it (Kafka
4's read at the last committed offset), and v9 checks the member's epoch
against the group as of that HW too. With require_stable it reads the latest
offsets and answers once the HW passes everything written to that partition
(Kafka 4 runs such a fetch as a write), NOT_COORDINATOR if that does not happen
within offsets.commit.timeout.ms. OffsetDelete answers once the HW passes its
tombstones (COORDINATOR_NOT_AVAILABLE after offsets.commit.timeout.ms,
NOT_COORDINATOR if the leadership goes), as Kafka 4 completes a write.
"""

from __future__ import annotations

import asyncio
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.groups import DELETE, DESCRIBE, GROUP, NOTHING_DENIED, READ, denied, denied_topics, \
    millis
from klamm.broker.services import BrokerServices
from klamm.coordinator.coordinator import OffsetToCommit
from klamm.protocol.errors import ErrorCode, KafkaError

INVALID_OFFSET = -1
NO_EPOCH = -1


def partition_exists(broker: BrokerServices, topic: str, partition: int) -> bool:
    meta = broker.controller.image.topics_by_name.get(topic)
    return meta is not None and partition in meta.partitions


def requested_offsets(broker: BrokerServices, body: Any, denied: frozenset[str] = NOTHING_DENIED
                      ) -> tuple[list[tuple[str, int]], list[OffsetToCommit], dict[tuple[str, int], ErrorCode]]:
    """An (Txn)OffsetCommit's partitions in request order, the offsets to store, and the partitions refused
    before the coordinator: of `denied` topics (TOPIC_AUTHORIZATION_FAILED), or unknown."""
    wanted = [(t.name, p) for t in body.topics for p in t.partitions]
    refused = {(name, p.partition_index): ErrorCode.topic_authorization_failed if name in denied
               else ErrorCode.unknown_topic_or_partition
               for name, p in wanted if name in denied or not partition_exists(broker, name, p.partition_index)}
    offsets = [OffsetToCommit(name, p.partition_index, p.committed_offset,
                              getattr(p, "committed_leader_epoch", NO_EPOCH), p.committed_metadata,
                              getattr(p, "commit_timestamp", -1))  # v1 only
               for name, p in wanted if (name, p.partition_index) not in refused]
    return [(name, p.partition_index) for name, p in wanted], offsets, refused


def every_partition(body: Any, error: ErrorCode) -> list[dict[str, Any]]:
    """An (Txn)OffsetCommit's error response: `error` for every partition of the request."""
    return [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": error}
                                            for p in t.partitions]} for t in body.topics]


def _by_topic(errors: list[tuple[str, int, ErrorCode]]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, error in errors:
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return [{"name": name, "partitions": partitions} for name, partitions in topics.items()]


# OffsetCommit
async def offset_commit(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    if denied(broker, request, READ, GROUP, body.group_id):
        return {"topics": every_partition(body, ErrorCode.group_authorization_failed)}
    requested, offsets, refused = requested_offsets(
        broker, body, denied_topics(broker, request, READ, (t.name for t in body.topics)))
    retention = getattr(body, "retention_time", -1) if 2 <= version <= 4 else -1
    try:
        if version == 0:
            broker.group_coordinator.ensure_topic()
        coordinator = broker.group_coordinator.ready()
        # v0 has no group membership: a simple commit, as with generation -1
        result = coordinator.commit_offsets(body.group_id, getattr(body, "generation_id_or_member_epoch", -1),
                                            getattr(body, "member_id", ""), getattr(body, "group_instance_id", None),
                                            offsets, millis(retention), version)
        errors = broker.group_coordinator.apply(result)
        errors = await replicated_errors(broker, body.group_id, errors)
    except KafkaError as exc:
        errors = {(o.topic, o.partition): exc.code for o in offsets}
    rows = [(name, index, refused.get((name, index)) or errors[(name, index)]) for name, index in requested]
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
        return {"groups": list(await asyncio.gather(*(
            _fetch_group(broker, request, g.group_id, g.topics, version, stable, getattr(g, "member_id", None),
                         getattr(g, "member_epoch", -1)) for g in body.groups)))}
    fetched = await _fetch_group(broker, request, body.group_id, body.topics, version, stable)
    return {"topics": fetched["topics"], "error_code": fetched["error_code"]}


async def _fetch_group(broker: BrokerServices, request: Any, group_id: str, topics: Any, version: int,
                       require_stable: bool, member_id: str | None = None, member_epoch: int = -1
                       ) -> dict[str, Any]:
    """require_stable (KIP-447): an offset a transaction has pending is UNSTABLE_OFFSET_COMMIT for now, and
    the answer waits for the HW to pass what was written.

    v9 names the consumer-protocol member fetching, which must be in its current epoch (STALE_MEMBER_EPOCH).
    """
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    hidden = NOTHING_DENIED  # topics the principal may not DESCRIBE
    try:
        if denied(broker, request, DESCRIBE, GROUP, group_id):
            raise KafkaError(ErrorCode.group_authorization_failed)
        runtime = broker.group_coordinator
        if version == 0:
            runtime.ensure_topic()
        coordinator = runtime.ready() if require_stable else runtime.committed(group_id)
        if wanted is None:
            offsets = coordinator.fetch_offsets(group_id, None, member_id, member_epoch, latest=require_stable)
            hidden = denied_topics(broker, request, DESCRIBE, {topic for topic, _ in offsets})
        else:
            hidden = denied_topics(broker, request, DESCRIBE, (t.name for t in topics))
            offsets = coordinator.fetch_offsets(group_id, [tp for tp in wanted if tp[0] not in hidden] if hidden
                                                else wanted, member_id, member_epoch, latest=require_stable)
        rows = [(topic, partition, committed, ErrorCode.none) for (topic, partition), committed in offsets.items()
                if topic not in hidden]
        if require_stable:
            rows = [(t, p, None, ErrorCode.unstable_offset_commit) if coordinator.has_pending_offset(group_id, t, p)
                    else (t, p, c, e) for t, p, c, e in rows]
            error = await runtime.written_replicated(group_id)
            if error != ErrorCode.none:
                raise KafkaError(error)
    except KafkaError as exc:
        if version >= 2:
            return {"group_id": group_id, "topics": [], "error_code": exc.code}
        # v1 has no group error: every partition carries it
        rows = [(t, p, None, exc.code) for t, p in wanted or []]
        return {"group_id": group_id, "topics": _fetched_topics(rows), "error_code": exc.code}
    if hidden and wanted is not None:  # named topics denied: after the others, as Kafka answers
        rows += [(t, p, None, ErrorCode.topic_authorization_failed) for t, p in wanted if t in hidden]
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
    if denied(broker, request, DELETE, GROUP, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed, "topics": []}
    hidden = denied_topics(broker, request, READ, (t.name for t in body.topics))
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    try:
        coordinator = broker.group_coordinator.ready()
        # answered once the HW passes the tombstones (Kafka 4's write operation)
        error, errors = await broker.group_coordinator.apply_committed(coordinator.delete_offsets(
            body.group_id, [tp for tp in wanted if tp[0] not in hidden] if hidden else wanted), body.group_id)
    except KafkaError as exc:
        error, errors = exc.code, {}
    if error != ErrorCode.none:
        return {"error_code": error, "topics": []}
    rows = [(topic, partition, ErrorCode.topic_authorization_failed if topic in hidden
             else ErrorCode.unknown_topic_or_partition if not partition_exists(broker, topic, partition)
             else errors[(topic, partition)]) for topic, partition in wanted]
    return {"error_code": ErrorCode.none, "topics": _by_topic(rows)}


APIS = [Api(8, 0, 9, offset_commit), Api(9, 0, 9, offset_fetch), Api(47, 0, 0, offset_delete)]
