"""ListOffsets (2), v1+: offsets by timestamp, and the special timestamps.

-2 earliest (log start), -1 latest (high watermark, or last stable offset for
read_committed), -3 the record with the largest timestamp (KIP-734), -4
earliest local (= earliest without tiered storage); any other value finds the
first record with timestamp >= it through the time index. Offsets at or past
the high watermark are not visible to consumers, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.broker.handlers.fetch import _check_epoch
from klamm.protocol.errors import ErrorCode, KafkaError

EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -3, -4, -5


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    read_committed = getattr(body, "isolation_level", 0) == 1
    topics = []
    for topic in body.topics:
        partitions = [_one(broker, topic.name, p, read_committed) for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


def _one(broker: BrokerServices, topic: str, request: Any, read_committed: bool) -> dict[str, Any]:
    index = request.partition_index
    try:
        partition = broker.replicas.get(topic, index)
        partition.check_leader()
        _check_epoch(partition, getattr(request, "current_leader_epoch", -1))
        offset, timestamp = _find(partition, request.timestamp, read_committed)
    except KafkaError as exc:
        return {"partition_index": index, "error_code": exc.code, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    epoch = partition.log.leader_epoch_cache.epoch_for_offset(offset) if offset >= 0 else -1
    return {"partition_index": index, "error_code": ErrorCode.none, "timestamp": timestamp, "offset": offset,
            "leader_epoch": epoch if epoch is not None else -1}


def _find(partition: Any, timestamp: int, read_committed: bool) -> tuple[int, int]:
    visible = partition.last_stable_offset if read_committed else partition.high_watermark
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return partition.log_start_offset, -1
    if timestamp == LATEST:
        return visible, -1
    if timestamp == LATEST_TIERED:
        return partition.log_start_offset - 1, -1
    if timestamp == MAX_TIMESTAMP:
        found = partition.log.max_timestamp_offset()
    else:
        found = partition.log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= visible:
        return -1, -1
    offset, found_timestamp = found
    return offset, found_timestamp


APIS = [Api(2, 1, 10, handle)]
