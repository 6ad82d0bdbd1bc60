"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37): topic admin.

Each goes to the controller, which decides metadata records, appends them to
the metadata log and publishes the next image; the replica manager creates or
removes partition logs from that image before the response leaves.
"""

from __future__ import annotations

import uuid
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.config.topic import TopicConfig
from klamm.controller.controller import CreatePartitionsSpec, CreateTopicSpec
from klamm.protocol.errors import ErrorCode

_ZERO_ID = uuid.UUID(int=0)


async def create_topics(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    specs, seen, duplicates = [], set(), set()
    for topic in body.topics:
        if topic.name in seen:
            duplicates.add(topic.name)
        seen.add(topic.name)
    for topic in body.topics:
        if topic.name in duplicates:
            continue
        assignments = {a.partition_index: list(a.broker_ids) for a in topic.assignments} or None
        configs = {c.name: c.value for c in topic.configs}
        specs.append(CreateTopicSpec(name=topic.name, num_partitions=topic.num_partitions,
                                     replication_factor=topic.replication_factor,
                                     assignments=assignments, configs=configs))
    validate_only = getattr(body, "validate_only", False)  # v1+
    results = await broker.controller_client.create_topics(specs, validate_only=validate_only) if specs else []
    topics = [_created(broker, result) for result in results]
    topics += [{"name": name, "error_code": ErrorCode.invalid_request,
                "error_message": f"Create topics request from client contains multiple entries for topic {name}",
                "num_partitions": -1, "replication_factor": -1} for name in sorted(duplicates)]
    return {"topics": topics}


def _created(broker: BrokerServices, result: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": result.name, "error_code": result.error, "error_message": result.message,
                             "topic_id": result.topic_id or _ZERO_ID,
                             "num_partitions": result.num_partitions, "replication_factor": result.replication_factor}
    if result.error == ErrorCode.none:
        config = TopicConfig.resolve(broker.config, result.configs)
        entry["configs"] = [
            {"name": c.name, "value": c.value, "read_only": c.read_only, "config_source": int(c.source),
             "is_sensitive": c.sensitive}
            for c in config.describe(broker.config)
        ]
    else:
        entry["num_partitions"] = -1
        entry["replication_factor"] = -1
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
    results = await broker.controller_client.delete_topics(wanted)
    return {"responses": [{"name": r.name, "topic_id": r.topic_id, "error_code": r.error, "error_message": r.message}
                          for r in results]}


async def create_partitions(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    specs = [CreatePartitionsSpec(topic=t.name, count=t.count,
                                  assignments=[list(a.broker_ids) for a in t.assignments] if t.assignments else None)
             for t in body.topics]
    results = await broker.controller_client.create_partitions(specs, validate_only=body.validate_only)
    return {"results": [{"name": r.topic, "error_code": r.error, "error_message": r.message} for r in results]}


APIS = [Api(19, 0, 7, create_topics), Api(20, 0, 6, delete_topics), Api(37, 0, 3, create_partitions)]
