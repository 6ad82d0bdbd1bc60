"""ListOffsets (2): offsets by timestamp, and the special timestamps.

v0 (the old Offset API) answers up to `max_num_offsets` offsets per partition,
newest first: the log end, then the start of each segment whose file was last
modified at or before the timestamp (Kafka's fetchOffsetsBefore). For
consumers, nothing past the high watermark.

-2 earliest (log start), -1 latest (high watermark, or last stable offset for
read_committed), -3 the record with the largest timestamp (KIP-734), -4
earliest local (= earliest without tiered storage), -5 latest tiered (KIP-1005)
and -6 earliest pending upload (KIP-1023): no offset (-1) without tiered
storage; any other value finds the first record with timestamp >= it through
the time index. Offsets at or past the high watermark are not visible to
consumers, as in Kafka.

From v1 on, a partition named twice in one request answers INVALID_REQUEST at
each mention, and a negative timestamp that is no sentinel, or a sentinel older
than the request's version (-3 before v7, -4 before v8, -5 before v9, -6 before
v11), answers UNSUPPORTED_VERSION; both before the partition is looked up, as
Kafka's ReplicaManager.fetchOffset checks them.

A new leader whose high watermark has not yet reached the start of its leader
epoch (the followers have not fetched since the election) answers
OFFSET_NOT_AVAILABLE for -1 (latest), and for a timestamp whose record is past
the high watermark, rather than an offset the HW will move past; the client
retries (Kafka's Partition.fetchOffsetForTimestamp); before v5 the answer is
LEADER_NOT_AVAILABLE, as from Kafka.

The request's replica_id says who asks, as in Kafka's ReplicaManager.fetchOffset: -1
(a consumer) reads up to the high watermark, or the last stable offset for
read_committed, from the leader only; -2 (a debugging tool) may ask any replica,
the leader or a follower, and a broker's id (a follower) the leader, both reading
up to the log end offset whatever the isolation level, never told
OFFSET_NOT_AVAILABLE. v0 likewise: only -1 is capped at the high watermark, only -2
is answered by a follower. The current leader epoch is checked first, as Kafka's
Partition.getLocalLog does.

With an authorizer, each topic needs DESCRIBE, else its partitions answer
TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis.handleListOffsetRequest).
"""

from __future__ import annotations

import os
import time
from collections.abc import Container
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.fetch import _check_epoch
from klamm.broker.services import BrokerServices
from klamm.controller.acls import ResourceType
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -2, -1, -3, -4, -5, -6
CONSUMER_REPLICA_ID, DEBUGGING_REPLICA_ID = -1, -2  # Kafka's ListOffsetsRequest
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
# The first ListOffsets version that may carry each sentinel timestamp.
SENTINEL_SINCE = {EARLIEST: 1, LATEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9,
                  EARLIEST_PENDING_UPLOAD: 11}


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    # a consumer reads up to its isolation level's end; a follower or a debugging tool (None) to the log end
    consumer = body.replica_id == CONSUMER_REPLICA_ID
    isolation = getattr(body, "isolation_level", READ_UNCOMMITTED) if consumer else None
    leader_only = body.replica_id != DEBUGGING_REPLICA_ID
    denied: Container[str] = ()
    repeated = _repeated(body.topics) if request.api_version > 0 else set()
    if broker.authorizer.enabled:
        names = {topic.name for topic in body.topics}
        denied = names - broker.authorizer.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in body.topics:
        if topic.name in denied:
            partitions = [_refused(p.partition_index, request.api_version) for p in topic.partitions]
        elif request.api_version == 0:
            partitions = [_legacy(broker, topic.name, p, consumer, leader_only) for p in topic.partitions]
        else:
            partitions = [_checked(broker, topic.name, p, isolation, leader_only, request.api_version,
                                   (topic.name, p.partition_index) in repeated)
                          for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


def _repeated(topics: Any) -> set[tuple[str, int]]:
    """The (topic, partition) pairs named more than once in the request."""
    seen: set[tuple[str, int]] = set()
    twice: set[tuple[str, int]] = set()
    for topic in topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            (twice if key in seen else seen).add(key)
    return twice


def _checked(broker: BrokerServices, topic: str, request: Any, isolation: int | None, leader_only: bool,
             version: int, repeated: bool) -> dict[str, Any]:
    error = None
    if repeated:
        error = ErrorCode.invalid_request
    elif request.timestamp < 0 and version < SENTINEL_SINCE.get(request.timestamp, 1 << 15):
        error = ErrorCode.unsupported_version
    if error is not None:
        return {"partition_index": request.partition_index, "error_code": error, "timestamp": -1, "offset": -1,
                "leader_epoch": -1}
    return _one(broker, topic, request, isolation, leader_only, version)


def _refused(index: int, version: int) -> dict[str, Any]:
    if version == 0:
        return {"partition_index": index, "error_code": ErrorCode.topic_authorization_failed, "old_style_offsets": []}
    return {"partition_index": index, "error_code": ErrorCode.topic_authorization_failed, "timestamp": -1,
            "offset": -1, "leader_epoch": -1}


def _legacy(broker: BrokerServices, topic: str, request: Any, from_consumer: bool, leader_only: bool
            ) -> dict[str, Any]:
    index = request.partition_index
    try:
        partition = broker.replicas.get(topic, index)
        if leader_only:
            partition.check_leader()
        offsets = legacy_offsets(partition, request.timestamp, request.max_num_offsets, from_consumer)
    except KafkaError as exc:
        return {"partition_index": index, "error_code": exc.code, "old_style_offsets": []}
    return {"partition_index": index, "error_code": ErrorCode.none, "old_style_offsets": offsets}


def legacy_offsets(partition: Any, timestamp: int, max_num_offsets: int, from_consumer: bool) -> list[int]:
    """ListOffsets v0's offsets, newest first (see the module docstring)."""
    segments = partition.log.segments
    points = [(max(s.base_offset, partition.log_start_offset), int(os.stat(s.log_path).st_mtime * 1000))
              for s in segments]
    if segments and segments[-1].size > 0:
        points.append((partition.log_end_offset, int(time.time() * 1000)))
    if timestamp == LATEST:
        start = len(points) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = max((i for i, (_, modified) in enumerate(points) if modified <= timestamp), default=-1)
    offsets = sorted((points[i][0] for i in range(start, max(start - max_num_offsets, -1), -1)), reverse=True)
    if from_consumer and timestamp == LATEST and any(o > partition.high_watermark for o in offsets):
        offsets = [partition.high_watermark] + [o for o in offsets if o <= partition.high_watermark]
    return offsets[:max(max_num_offsets, 0)] if max_num_offsets >= 0 else offsets


def _one(broker: BrokerServices, topic: str, request: Any, isolation: int | None, leader_only: bool,
         version: int) -> dict[str, Any]:
    index = request.partition_index
    try:
        partition = broker.replicas.get(topic, index)
        _check_epoch(partition, getattr(request, "current_leader_epoch", -1))
        if leader_only:
            partition.check_leader()
        offset, timestamp = _find(partition, request.timestamp, isolation)
    except KafkaError as exc:
        code = exc.code
        if code == ErrorCode.offset_not_available and version < 5:  # the code came with v5 (KIP-207)
            code = ErrorCode.leader_not_available
        return {"partition_index": index, "error_code": code, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    epoch = partition.log.leader_epoch_cache.epoch_for_offset(offset) if offset >= 0 else -1
    return {"partition_index": index, "error_code": ErrorCode.none, "timestamp": timestamp, "offset": offset,
            "leader_epoch": epoch if epoch is not None else -1}


def _find(partition: Any, timestamp: int, isolation: int | None) -> tuple[int, int]:
    """(offset, timestamp) for `timestamp`, reading up to the end `isolation` sees (None: the log end)."""
    if isolation is None:
        visible = partition.log_end_offset
    elif isolation == READ_COMMITTED:
        visible = partition.last_stable_offset
    else:
        visible = partition.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return partition.log_start_offset, -1
    # only a consumer is told to wait for a new leader's HW (Kafka: the isolation level is defined)
    lagging = isolation is not None and _hw_lags_epoch_start(partition)
    if timestamp == LATEST:
        if lagging:
            raise KafkaError(ErrorCode.offset_not_available)
        return visible, -1
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1  # nothing is tiered: Kafka's answer for a log without remote storage
    if timestamp == MAX_TIMESTAMP:
        found = partition.log.max_timestamp_offset()
    else:
        found = partition.log.offset_for_timestamp(timestamp)
    if found is not None and found[0] >= visible and lagging:
        raise KafkaError(ErrorCode.offset_not_available)
    if found is None or found[0] >= visible:
        return -1, -1
    offset, found_timestamp = found
    return offset, found_timestamp


def _hw_lags_epoch_start(partition: Any) -> bool:
    """This broker leads the partition and its HW is still below where its leader epoch began."""
    leader = partition.leader
    return leader is not None and leader.leader_epoch_start_offset > partition.high_watermark


APIS = [Api(2, 0, 11, handle)]
