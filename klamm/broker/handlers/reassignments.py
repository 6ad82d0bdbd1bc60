"""AlterPartitionReassignments (45) and ListPartitionReassignments (46): moving replicas between brokers (KIP-455).

The controller decides (klamm/controller/partition_changes.py): the target
replicas join the partition as adding replicas, fetch from its leader, and once
the ISR holds them all the removed replicas leave (their logs are deleted) and
the reassignment is complete. A null replica list cancels a reassignment in
progress. The list comes from this broker's metadata image.

With an authorizer, altering needs ALTER on the cluster and listing DESCRIBE on
it, else CLUSTER_AUTHORIZATION_FAILED (Kafka's ControllerApis).
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError


async def alter(broker: BrokerServices, request: Any) -> dict[str, Any]:
    targets: dict[str, dict[int, list[int] | None]] = {}
    for topic in request.body.topics:
        for partition in topic.partitions:
            replicas = None if partition.replicas is None else list(partition.replicas)
            targets.setdefault(topic.name, {})[partition.partition_index] = replicas
    try:
        broker.authorizer.require_cluster(request, AclOperation.ALTER)
        results = await broker.controller_client.alter_partition_reassignments(targets)
    except KafkaError as exc:  # Kafka's error response: at the top and for each partition
        return {"error_code": exc.code, "error_message": exc.message, "responses": [
            {"name": topic.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": exc.code, "error_message": exc.message}
                for p in topic.partitions]} for topic in request.body.topics]}
    return {"error_code": ErrorCode.none, "error_message": None, "responses": [
        {"name": name, "partitions": [{"partition_index": index, "error_code": code, "error_message": message}
                                      for index, (code, message) in partitions.items()]}
        for name, partitions in results.items()]}


async def list_reassignments(broker: BrokerServices, request: Any) -> dict[str, Any]:
    image = broker.controller.image
    wanted = request.body.topics
    try:
        broker.authorizer.require_cluster(request, AclOperation.DESCRIBE)
    except KafkaError as exc:  # Kafka's error response: the partitions asked for, without replicas
        return {"error_code": exc.code, "error_message": exc.message, "topics": [
            {"name": t.name, "partitions": [{"partition_index": index, "replicas": [], "adding_replicas": [],
                                             "removing_replicas": []} for index in t.partition_indexes]}
            for t in wanted or ()]}
    if wanted is None:
        names = {name: None for name in image.topics_by_name}
    else:
        names = {t.name: set(t.partition_indexes) for t in wanted}
    topics = []
    for name, indexes in names.items():
        topic = image.topics_by_name.get(name)
        if topic is None:
            continue
        moving = [{"partition_index": index, "replicas": list(p.replicas), "adding_replicas": list(p.adding_replicas),
                   "removing_replicas": list(p.removing_replicas)}
                  for index, p in sorted(topic.partitions.items())
                  if (indexes is None or index in indexes) and (p.adding_replicas or p.removing_replicas)]
        if moving:
            topics.append({"name": name, "partitions": moving})
    return {"error_code": ErrorCode.none, "error_message": None, "topics": topics}


APIS = [Api(45, 0, 0, alter), Api(46, 0, 0, list_reassignments)]
