"""Metadata (3): brokers, cluster id, controller, topics with their partitions.

v0 asks for all topics with an empty list; v1+ with a null list. Topics that do
not exist are created when `auto.create.topics.enable` is on and the request
allows it (v4+), with the broker's default partitions and replication factor,
and returned at once (Kafka answers LEADER_NOT_AVAILABLE first; ours is ready).
"""

from __future__ import annotations

import uuid
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.topics import CreateTopicSpec
from klamm.protocol.acl import CLUSTER_OPERATIONS, NOT_INCLUDED, TOPIC_OPERATIONS
from klamm.protocol.topics import is_internal, validate_topic_name
from klamm.protocol.errors import ErrorCode, KafkaError

async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    image = broker.controller.image
    requested = body.topics
    if request.api_version == 0 and not requested:
        requested = None
    if requested is None:
        topics = [_describe(broker, t.name, image) for t in image.topics_by_name.values()]
    else:
        allow_create = getattr(body, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        topics = [await _lookup(broker, entry, allow_create) for entry in requested]
    image = broker.controller.image
    # No authorizer: every supported operation, for those who ask (v8+), as Kafka reports it.
    if getattr(body, "include_topic_authorized_operations", False):
        for topic in topics:
            topic["topic_authorized_operations"] = TOPIC_OPERATIONS
    include_cluster = getattr(body, "include_cluster_authorized_operations", False)
    brokers = broker.broker_endpoints()
    return {
        "brokers": brokers,
        "cluster_id": image.cluster_id,
        "controller_id": controller_for_clients(broker, brokers),
        "topics": topics,
        "cluster_authorized_operations": CLUSTER_OPERATIONS if include_cluster else NOT_INCLUDED,
    }


def controller_for_clients(broker: BrokerServices, brokers: list[dict[str, Any]]) -> int:
    """Where clients send admin requests: the controller's node when it is a broker too, else this broker,
    which forwards them (a dedicated controller has no client listener; KRaft names a broker then)."""
    controller_id = broker.controller.image.controller_id
    return controller_id if any(b["node_id"] == controller_id for b in brokers) else broker.node_id


async def _lookup(broker: BrokerServices, entry: Any, allow_create: bool) -> dict[str, Any]:
    image = broker.controller.image
    name = entry.name
    topic_id = getattr(entry, "topic_id", None)
    if name is None and topic_id is not None and topic_id != uuid.UUID(int=0):
        topic = image.topics_by_id.get(topic_id)
        if topic is None:
            return {"error_code": ErrorCode.unknown_topic_id, "name": None, "topic_id": topic_id}
        name = topic.name
    if name not in image.topics_by_name:
        try:
            validate_topic_name(name)
        except KafkaError as exc:
            return {"error_code": exc.code, "name": name}
        if not allow_create or is_internal(name):
            return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name}
        try:
            await _auto_create(broker, name)
        except KafkaError as exc:  # the client retries; a controller out of reach is no reason to drop it
            retriable = exc.code in (ErrorCode.not_controller, ErrorCode.request_timed_out)
            return {"error_code": ErrorCode.leader_not_available if retriable else exc.code, "name": name}
    return _describe(broker, name, broker.controller.image)


async def _auto_create(broker: BrokerServices, name: str) -> None:
    spec = CreateTopicSpec(name=name, num_partitions=-1, replication_factor=-1, assignments=None, configs={})
    [result] = await broker.controller_client.create_topics([spec], validate_only=False)
    if result.error not in (ErrorCode.none, ErrorCode.topic_already_exists):
        raise KafkaError(result.error, result.message)


def _describe(broker: BrokerServices, name: str, image: Any) -> dict[str, Any]:
    topic = image.topics_by_name.get(name)
    if topic is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name}
    live = set(image.brokers)
    partitions = []
    for index in sorted(topic.partitions):
        partition = _partition(topic.partitions[index], index, live)
        partition["error_code"] = ErrorCode.none if partition["leader_id"] >= 0 else ErrorCode.leader_not_available
        partitions.append(partition)
    return {
        "error_code": ErrorCode.none,
        "name": name,
        "topic_id": topic.topic_id,
        "is_internal": is_internal(name),
        "partitions": partitions,
        "topic_authorized_operations": NOT_INCLUDED,
    }


def _partition(p: Any, index: int, live: set[int]) -> dict[str, Any]:
    return {
        "partition_index": index,
        "leader_id": p.leader if p.leader in live else -1,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        "offline_replicas": [r for r in p.replicas if r not in live],
    }


# DescribeTopicPartitions (KIP-966)
async def describe_topic_partitions(broker: BrokerServices, request: Any) -> dict[str, Any]:
    """Topics in name order and their partitions, at most response_partition_limit partitions (capped by
    max.request.partition.size.limit) an answer; next_cursor says where the next request starts.

    All topics for an empty list; the cursor's topic must be among those named. Named topics that do
    not exist are answered UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name).
    """
    body = request.body
    image = broker.controller.image
    cursor = body.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    every_topic = not body.topics
    names = set(image.topics_by_name) if every_topic else {t.name for t in body.topics}
    names = {name for name in names if name >= start_topic}
    if cursor is not None and (cursor.partition_index < 0 or not every_topic and cursor.topic_name not in names):
        # Kafka's error response: INVALID_REQUEST for each topic asked for
        return {"topics": [{"error_code": ErrorCode.invalid_request, "name": t.name, "is_internal": False,
                            "partitions": []} for t in body.topics], "next_cursor": None}
    remaining = max(1, min(broker.config.max_request_partition_size_limit, body.response_partition_limit))
    live = set(image.brokers)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in sorted(names):
        topic = image.topics_by_name.get(name)
        if topic is None:
            if not every_topic:
                topics.append(_unknown_topic(name))
            continue
        if remaining == 0:  # the previous topic ended the answer exactly: the next one starts the next
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(len(topic.partitions), first + remaining)
        topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id,
                       "is_internal": is_internal(name), "topic_authorized_operations": TOPIC_OPERATIONS,
                       "partitions": [{**_partition(topic.partitions[i], i, live), "eligible_leader_replicas": [],
                                       "last_known_elr": []} for i in range(first, end) if i in topic.partitions]})
        if end < len(topic.partitions):
            next_cursor = {"topic_name": name, "partition_index": end}
            break
        remaining -= max(0, end - first)
    return {"topics": topics, "next_cursor": next_cursor}


def _unknown_topic(name: str) -> dict[str, Any]:
    try:
        validate_topic_name(name)
        error = ErrorCode.unknown_topic_or_partition
    except KafkaError:
        error = ErrorCode.invalid_topic_exception
    return {"error_code": error, "name": name, "topic_id": uuid.UUID(int=0), "is_internal": is_internal(name),
            "partitions": [], "topic_authorized_operations": TOPIC_OPERATIONS}


APIS = [Api(3, 0, 12, handle), Api(75, 0, 0, describe_topic_partitions)]
