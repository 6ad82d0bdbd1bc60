"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): topic admin.

Each goes to the controller, which decides metadata records, appends them to
the metadata log and publishes the next image; the replica manager creates or
removes partition logs from that image before the response leaves.

With an authorizer each checks what Kafka's ControllerApis checks, here on the
broker that takes the request (klamm forwards it already authorized): creating
needs CREATE on the cluster or on the topic, and the new topic's configs are
answered only with DESCRIBE_CONFIGS on it; deleting needs DELETE on the cluster
or on the topic; adding partitions ALTER on the topic. Refusals are
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import uuid
from collections.abc import Container
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.config.topic import TopicConfig
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.controller.controller import CreatePartitionsSpec, CreateTopicSpec
from klamm.controller.topics import CreatePartitionsResult, DeleteTopicResult, TopicResult
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import METADATA_TOPIC

_ZERO_ID = uuid.UUID(int=0)


async def create_topics(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    specs, seen, duplicates = [], set(), set()
    for topic in body.topics:
        if topic.name in seen:
            duplicates.add(topic.name)
        seen.add(topic.name)
    refused: set[str] = set()
    describable = None
    authorizer = broker.authorizer
    if authorizer.enabled:  # Kafka's ControllerApis.createTopics
        names = seen - duplicates - {METADATA_TOPIC}  # the controller refuses that one: INVALID_REQUEST
        if not authorizer.allowed(request, AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
            refused = names - authorizer.allowed_names(request, AclOperation.CREATE, ResourceType.TOPIC, names)
        describable = authorizer.allowed_names(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)
    for topic in body.topics:
        if topic.name in duplicates or topic.name in refused:
            continue
        assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
        configs = {c.name: c.value for c in topic.configs}
        specs.append(CreateTopicSpec(name=topic.name, num_partitions=topic.num_partitions,
                                     replication_factor=topic.replication_factor,
                                     assignments=assignments, configs=configs))
    validate_only = getattr(body, "validate_only", False)  # v1+
    try:
        results = await broker.controller_client.create_topics(specs, validate_only=validate_only) if specs else []
    except KafkaError as exc:  # the controller could not be reached (NOT_CONTROLLER): the client asks again
        results = [TopicResult(spec.name, error=exc.code, message=exc.message) for spec in specs]
    described: dict[frozenset[tuple[str, str]], list[dict[str, Any]]] = {}
    topics = [_created(broker, result, describable, described) for result in results]
    topics += [{"name": name, "error_code": ErrorCode.invalid_request,
                "error_message": f"Create topics request from client contains multiple entries for topic {name}",
                "num_partitions": -1, "replication_factor": -1} for name in sorted(duplicates)]
    topics += [{"name": name, "error_code": ErrorCode.topic_authorization_failed,
                "error_message": "Authorization failed.", "num_partitions": -1, "replication_factor": -1}
               for name in sorted(refused)]
    return {"topics": topics}


def _created(broker: BrokerServices, result: Any, describable: Container[str] | None,
             described: dict[frozenset[tuple[str, str]], list[dict[str, Any]]]) -> dict[str, Any]:
    """One topic's answer; `described` keeps the config entries made for each set of overrides in this request
    (the topics of one request mostly share theirs: a thousand topics are described once, not a thousand times)."""
    entry: dict[str, Any] = {"name": result.name, "error_code": result.error, "error_message": result.message,
                             "topic_id": result.topic_id or _ZERO_ID,
                             "num_partitions": result.num_partitions, "replication_factor": result.replication_factor}
    if result.error != ErrorCode.none:
        entry["num_partitions"] = -1
        entry["replication_factor"] = -1
    elif describable is not None and result.name not in describable:
        # Kafka's ReplicationControlManager: the configs (and the counts) only with DESCRIBE_CONFIGS
        entry.update(num_partitions=-1, replication_factor=-1,
                     topic_config_error_code=ErrorCode.topic_authorization_failed)
    else:
        overrides = frozenset(result.configs.items())
        if overrides not in described:
            config = TopicConfig.resolve(broker.config, result.configs)
            described[overrides] = [
                {"name": c.name, "value": c.value, "read_only": c.read_only, "config_source": int(c.source),
                 "is_sensitive": c.sensitive}
                for c in config.describe(broker.config)
            ]
        entry["configs"] = described[overrides]
    return entry


async def delete_topics(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if request.api_version >= 6:
        wanted = [t.topic_id if t.name is None else t.name for t in body.topics]
    else:
        wanted = list(body.topic_names)
    if not broker.config.delete_topic_enable:
        # Kafka's ControllerApis.deleteTopics: every topic fails; v0-2 predate TOPIC_DELETION_DISABLED.
        code = ErrorCode.topic_deletion_disabled if request.api_version >= 3 else ErrorCode.invalid_request
        return {"responses": [{"name": t if isinstance(t, str) else None,
                               "topic_id": t if isinstance(t, uuid.UUID) else _ZERO_ID,
                               "error_code": code, "error_message": "Topic deletion is disabled."} for t in wanted]}
    refused: dict[str | uuid.UUID, dict[str, Any]] = {}
    if broker.authorizer.enabled:
        refused = _refused_deletions(broker, request, wanted)
    allowed = [t for t in wanted if t not in refused]
    try:
        results = iter(await broker.controller_client.delete_topics(allowed) if allowed else [])
    except KafkaError as exc:
        results = iter([DeleteTopicResult(t if isinstance(t, str) else None, t if isinstance(t, uuid.UUID)
                                          else _ZERO_ID, exc.code, exc.message) for t in allowed])
    responses = []
    for topic in wanted:  # request order
        if topic in refused:
            responses.append(refused[topic])
        else:
            r = next(results)
            responses.append({"name": r.name, "topic_id": r.topic_id, "error_code": r.error, "error_message": r.message})
    return {"responses": responses}


def _refused_deletions(broker: BrokerServices, request: Any, wanted: list[str | uuid.UUID]
                       ) -> dict[str | uuid.UUID, dict[str, Any]]:
    """Kafka's ControllerApis.deleteTopics: DELETE on the cluster allows every topic; else a topic needs
    DELETE on itself. A name the principal may not describe is refused before anyone looks for it; a
    topic named by id is refused with its name only when the principal may describe it; an unknown id
    is the controller's UNKNOWN_TOPIC_ID."""
    authorizer = broker.authorizer
    if authorizer.allowed(request, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME):
        return {}
    topics_by_id = broker.controller.image.topics_by_id
    names = {t: t if isinstance(t, str) else topics_by_id[t].name for t in wanted
             if isinstance(t, str) or t in topics_by_id}
    describable = authorizer.allowed_names(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names.values())
    deletable = authorizer.allowed_names(request, AclOperation.DELETE, ResourceType.TOPIC, names.values())
    exists = broker.controller.image.topics_by_name
    refused = {}
    for topic, name in names.items():
        if isinstance(topic, uuid.UUID):
            if name not in deletable:
                refused[topic] = _refusal(name if name in describable else None, topic)
        elif name not in describable or (name in exists and name not in deletable):
            refused[topic] = _refusal(name, _ZERO_ID)
    return refused


def _refusal(name: str | None, topic_id: uuid.UUID) -> dict[str, Any]:
    return {"name": name, "topic_id": topic_id, "error_code": ErrorCode.topic_authorization_failed,
            "error_message": "Topic authorization failed."}


async def create_partitions(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    refused: set[str] = set()
    if broker.authorizer.enabled:  # Kafka's ControllerApis.createPartitions: ALTER on each topic
        names = {t.name for t in body.topics}
        refused = names - broker.authorizer.allowed_names(request, AclOperation.ALTER, ResourceType.TOPIC, names)
    specs = [CreatePartitionsSpec(topic=t.name, count=t.count,
                                  assignments=[list(a.broker_ids) for a in t.assignments] if t.assignments else None)
             for t in body.topics if t.name not in refused]
    try:
        results = await broker.controller_client.create_partitions(specs, validate_only=body.validate_only) \
            if specs else []
    except KafkaError as exc:
        results = [CreatePartitionsResult(spec.topic, exc.code, exc.message) for spec in specs]
    return {"results": [{"name": name, "error_code": ErrorCode.topic_authorization_failed, "error_message": None}
                        for name in sorted(refused)]
            + [{"name": r.topic, "error_code": r.error, "error_message": r.message} for r in results]}


APIS = [Api(19, 0, 7, create_topics), Api(20, 0, 6, delete_topics), Api(37, 0, 3, create_partitions)]
