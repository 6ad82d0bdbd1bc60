"""Metadata (3): brokers, cluster id, controller, topics with their partitions.

v0 asks for all topics with an empty list; v1+ with a null list. Topics that do
not exist are created when `auto.create.topics.enable` is on and the request
allows it (v4+), with the broker's default partitions and replication factor.
The answer that creates a topic names it with LEADER_NOT_AVAILABLE and no
partitions, as Kafka's AutoTopicCreationManager does (createTopicsInZk: the topic
is created, its leaders not yet known); the client asks again and finds it ready.
A KRaft Kafka broker answers UNKNOWN_TOPIC_OR_PARTITION there, which some clients
take for "no such topic" (kafka-go's consumer groups then never rebalance), where
LEADER_NOT_AVAILABLE is retried by every client.

With an authorizer, a topic needs DESCRIBE: listing every topic leaves out the
others, a named one answers TOPIC_AUTHORIZATION_FAILED; creating one also needs
CREATE on the cluster or on the topic. Authorized operations (v8+), when asked
for, are the principal's own (all of them without an authorizer, as in Kafka).
DescribeTopicPartitions follows the same rules.

Without an authorizer, a topic's entry is kept encoded from one Metadata request to the next, until its image
or the client's view of the brokers changes (klamm.broker.metadata_entries).
"""

from __future__ import annotations

import uuid
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.metadata_entries import BrokerView
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.controller.image import TopicImage
from klamm.controller.topics import CreateTopicSpec
from klamm.protocol.acl import CLUSTER_OPERATIONS, NOT_INCLUDED, TOPIC_OPERATIONS, AclOperation
from klamm.protocol.encoder import Encoded
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import is_internal, validate_topic_name

_ZERO_ID = uuid.UUID(int=0)


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    image = broker.controller.image
    requested = body.topics
    if request.api_version == 0 and not requested:
        requested = None
    authorizer = broker.authorizer
    include_operations = getattr(body, "include_topic_authorized_operations", False)  # v8+
    # Without an authorizer every client sees a topic alike: its entry is kept encoded (metadata_entries).
    view = None if authorizer.enabled else _view(image, request.listener, include_operations)
    if requested is None:
        described = image.topics_by_name.values()
        if authorizer.enabled:  # listing every topic hides those the principal may not describe
            allowed = authorizer.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TOPIC, image.topics_by_name)
            described = [t for t in described if t.name in allowed]
        topics: list[Any] = [_topic(broker, t, request.api_version, view) for t in described]
        shown = topics if view is None else []  # an entry kept encoded has its operations written
    else:
        allow_create = getattr(body, "allow_auto_topic_creation", True) and broker.config.auto_create_topics_enable
        if authorizer.enabled:
            topics, shown = await _lookup_authorized(broker, request, requested, allow_create)
        else:
            topics = [await _lookup(broker, entry, allow_create, request.api_version, view) for entry in requested]
            shown = [t for t in topics if not isinstance(t, Encoded) and t["name"] is not None]  # not an unknown id
    image = broker.controller.image
    if view is None and request.listener:  # an entry kept encoded shows the listener's leaders already
        unreachable = _unreachable(image, request.listener)
        for topic in topics:
            _hide_off_listener(topic, unreachable)
    if include_operations:
        for topic in shown:
            topic["topic_authorized_operations"] = topic_operations(broker, request, topic["name"])
    if view is not None:
        broker.metadata_entries.forget_stale(image.topics_by_name)
    include_cluster = getattr(body, "include_cluster_authorized_operations", False)  # v8-10
    brokers = broker.broker_endpoints(request.listener)  # in the terms of the client's listener
    return {
        "brokers": brokers,
        "cluster_id": image.cluster_id,
        "controller_id": controller_for_clients(broker, brokers),
        "topics": topics,
        "cluster_authorized_operations": cluster_operations(broker, request) if include_cluster else NOT_INCLUDED,
    }


def _view(image: Any, listener: str, include_operations: bool) -> BrokerView:
    return BrokerView(frozenset(image.brokers), _unreachable(image, listener) if listener else frozenset(),
                      TOPIC_OPERATIONS if include_operations else NOT_INCLUDED)


def _topic(broker: BrokerServices, topic: TopicImage, version: int, view: BrokerView | None) -> Any:
    """A topic's entry: kept encoded for `view`, or (with an authorizer) a dict for the handler to finish."""
    if view is None:
        return _describe(topic, set(broker.controller.image.brokers))
    return broker.metadata_entries.entry(topic, version, view, _describe_in_view)


def _describe_in_view(topic: TopicImage, view: BrokerView) -> dict[str, Any]:
    entry = _describe(topic, view.live)
    _hide_off_listener(entry, view.unreachable)
    entry["topic_authorized_operations"] = view.authorized_operations
    return entry


def _operations(field: int) -> tuple[AclOperation, ...]:
    return tuple(op for op in AclOperation if field >> op & 1)


_TOPIC_OPERATIONS, _CLUSTER_OPERATIONS = _operations(TOPIC_OPERATIONS), _operations(CLUSTER_OPERATIONS)


def topic_operations(broker: BrokerServices, request: Any, name: str) -> int:
    """The topic's authorized-operations bit field (Kafka's AuthHelper.authorizedOperations): every
    operation a topic supports without an authorizer, else those the principal may do."""
    if not broker.authorizer.enabled:
        return TOPIC_OPERATIONS
    return broker.authorizer.operations(request, ResourceType.TOPIC, name, _TOPIC_OPERATIONS)


def cluster_operations(broker: BrokerServices, request: Any) -> int:
    """The cluster's authorized-operations bit field for those who ask: 0 without DESCRIBE on the cluster."""
    authorizer = broker.authorizer
    if not authorizer.enabled:
        return CLUSTER_OPERATIONS
    if not authorizer.allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorizer.operations(request, ResourceType.CLUSTER, CLUSTER_NAME, _CLUSTER_OPERATIONS)


async def _lookup_authorized(broker: BrokerServices, request: Any, requested: Any, allow_create: bool
                             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Named topics with Kafka's checks (KafkaApis.handleTopicMetadataRequest): DESCRIBE on each, else
    TOPIC_AUTHORIZATION_FAILED without the topic's id (or, asked by id, without its name); a topic to be
    created also needs CREATE on the cluster or on the topic, else TOPIC_AUTHORIZATION_FAILED and it is
    not created. Returns (the topics, those that get authorized operations)."""
    authorizer = broker.authorizer
    image = broker.controller.image
    names = [_requested_name(image, entry) for entry in requested]
    asked = {name for name in names if name is not None}
    describable = authorizer.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TOPIC, asked)
    creatable = describable
    missing = {name for name in describable if name not in image.topics_by_name}
    if allow_create and missing and not authorizer.allowed(request, AclOperation.CREATE, ResourceType.CLUSTER,
                                                           CLUSTER_NAME):
        creatable = describable - missing | authorizer.allowed_names(request, AclOperation.CREATE,
                                                                     ResourceType.TOPIC, missing)
    topics, shown = [], []
    for entry, name in zip(requested, names):
        if name is not None and name not in describable:
            by_id = entry.name is None
            topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": None if by_id else name,
                           "topic_id": entry.topic_id if by_id else _ZERO_ID})
        elif name is not None and name not in creatable:
            topics.append({"error_code": ErrorCode.topic_authorization_failed, "name": name, "topic_id": _ZERO_ID,
                           "is_internal": is_internal(name)})
        else:
            topic = await _lookup(broker, entry, allow_create, request.api_version, None)
            topics.append(topic)
            if topic["name"] is not None:
                shown.append(topic)
    return topics, shown


def _requested_name(image: Any, entry: Any) -> str | None:
    """The topic a Metadata entry names; None for a topic id the image does not know."""
    if entry.name is None and getattr(entry, "topic_id", _ZERO_ID) != _ZERO_ID:
        topic = image.topics_by_id.get(entry.topic_id)
        return topic.name if topic is not None else None
    return entry.name


def controller_for_clients(broker: BrokerServices, brokers: list[dict[str, Any]]) -> int:
    """Where clients send admin requests: the controller's node when it is a broker too, else this broker,
    which forwards them (a dedicated controller has no client listener; KRaft names a broker then)."""
    controller_id = broker.controller.image.controller_id
    return controller_id if any(b["node_id"] == controller_id for b in brokers) else broker.node_id


def _unreachable(image: Any, listener: str) -> frozenset[int]:
    """The registered brokers without an endpoint on `listener`."""
    return frozenset(node_id for node_id, b in image.brokers.items() if b.endpoint(listener) is None)


def _hide_off_listener(topic: dict[str, Any], unreachable: frozenset[int]) -> None:
    """Kafka's metadata cache: a partition whose leader has no endpoint on the client's listener is answered
    LISTENER_NOT_FOUND, without a leader the client could not reach anyway."""
    if not unreachable:  # every broker has the listener: nothing to look at per partition
        return
    for partition in topic.get("partitions", ()):
        if partition["leader_id"] in unreachable:
            partition["leader_id"] = -1
            partition["error_code"] = ErrorCode.listener_not_found


async def _lookup(broker: BrokerServices, entry: Any, allow_create: bool, version: int,
                  view: BrokerView | None) -> Any:
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
        return {"error_code": ErrorCode.leader_not_available, "name": name}  # created: the client asks again
    return _topic(broker, broker.controller.image.topics_by_name[name], version, view)


async def _auto_create(broker: BrokerServices, name: str) -> None:
    spec = CreateTopicSpec(name=name, num_partitions=-1, replication_factor=-1, assignments=None, configs={})
    [result] = await broker.controller_client.create_topics([spec], validate_only=False)
    if result.error not in (ErrorCode.none, ErrorCode.topic_already_exists):
        raise KafkaError(result.error, result.message)


def _describe(topic: TopicImage, live: set[int] | frozenset[int]) -> dict[str, Any]:
    partitions = []
    for index in sorted(topic.partitions):
        partition = _partition(topic.partitions[index], index, live)
        partition["error_code"] = ErrorCode.none if partition["leader_id"] >= 0 else ErrorCode.leader_not_available
        partitions.append(partition)
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": is_internal(topic.name),
        "partitions": partitions,
        "topic_authorized_operations": NOT_INCLUDED,
    }


def _partition(p: Any, index: int, live: set[int] | frozenset[int]) -> dict[str, Any]:
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
    refused: list[str] = []
    if broker.authorizer.enabled:  # Kafka's DescribeTopicPartitionsRequestHandler: DESCRIBE on each topic
        allowed = broker.authorizer.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        refused = [] if every_topic else sorted(names - allowed)  # listing every topic hides them
        names = allowed
    remaining = max(1, min(broker.config.max_request_partition_size_limit, body.response_partition_limit))
    live = set(image.brokers)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in sorted(names):
        topic = image.topics_by_name.get(name)
        if topic is None:
            if not every_topic:
                topics.append(_unknown_topic(name, topic_operations(broker, request, name)))
            continue
        if remaining == 0:  # the previous topic ended the answer exactly: the next one starts the next
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(len(topic.partitions), first + remaining)
        topics.append({"error_code": ErrorCode.none, "name": name, "topic_id": topic.topic_id,
                       "is_internal": is_internal(name),
                       "topic_authorized_operations": topic_operations(broker, request, name),
                       "partitions": [{**_partition(topic.partitions[i], i, live), "eligible_leader_replicas": [],
                                       "last_known_elr": []} for i in range(first, end) if i in topic.partitions]})
        if end < len(topic.partitions):
            next_cursor = {"topic_name": name, "partition_index": end}
            break
        remaining -= max(0, end - first)
    topics += [{"error_code": ErrorCode.topic_authorization_failed, "name": name, "topic_id": _ZERO_ID,
                "is_internal": False, "partitions": []} for name in refused]
    return {"topics": topics, "next_cursor": next_cursor}


def _unknown_topic(name: str, operations: int) -> dict[str, Any]:
    try:
        validate_topic_name(name)
        error = ErrorCode.unknown_topic_or_partition
    except KafkaError:
        error = ErrorCode.invalid_topic_exception
    return {"error_code": error, "name": name, "topic_id": uuid.UUID(int=0), "is_internal": is_internal(name),
            "partitions": [], "topic_authorized_operations": operations}


APIS = [Api(3, 0, 12, handle), Api(75, 0, 0, describe_topic_partitions)]
