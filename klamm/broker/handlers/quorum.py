"""DescribeQuorum (55): the metadata quorum's leader, epoch, high watermark, voters and observers.

Served on the broker listener and on the controller listener (where
`kafka-metadata-quorum.sh --bootstrap-controller` sends it). Kafka's brokers
forward it to the controller; here the controller client answers it: a combined
node describes its own quorum, a broker-only node asks its controller.

The request must name exactly `__cluster_metadata` partition 0, else each
partition it names is answered UNKNOWN_TOPIC_OR_PARTITION (Kafka's
KafkaRaftClient). A failure to reach the controller is a top-level error, as
Kafka's forwarding reports one. v1 adds the replicas' fetch and caught-up
times, v2 their directory ids, error messages and the voters' endpoints
(`nodes`); the encoder drops what the request's version lacks.

With an authorizer it needs DESCRIBE on the cluster, else a top-level
CLUSTER_AUTHORIZATION_FAILED (Kafka's ControllerApis.handleDescribeQuorum).
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.metadata_log import METADATA_PARTITION, METADATA_TOPIC
from klamm.controller.quorum_info import QuorumInfo, ReplicaInfo
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

__all__ = ["APIS", "handle", "is_metadata_partition", "response"]

UNKNOWN_PARTITION_MESSAGE = "This server does not host this topic-partition."  # Kafka's Errors message


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    try:  # first, as Kafka's controller authorizes what its brokers forward
        broker.authorizer.require_cluster(request, AclOperation.DESCRIBE)
    except KafkaError as exc:
        return {"error_code": exc.code, "error_message": exc.message, "topics": [], "nodes": []}
    if not is_metadata_partition(body):
        return unknown_partitions(body)
    try:
        quorum = await broker.controller_client.describe_quorum()
    except KafkaError as exc:
        return {"error_code": exc.code, "error_message": exc.message, "topics": [], "nodes": []}
    return response(quorum)


def is_metadata_partition(body: Any) -> bool:
    """Exactly one topic, `__cluster_metadata`, with exactly partition 0 (Kafka's hasValidTopicPartition)."""
    return (len(body.topics) == 1 and body.topics[0].topic_name == METADATA_TOPIC
            and len(body.topics[0].partitions) == 1
            and body.topics[0].partitions[0].partition_index == METADATA_PARTITION)


def unknown_partitions(body: Any) -> dict[str, Any]:
    """Every partition named, UNKNOWN_TOPIC_OR_PARTITION; the other fields at Kafka's defaults (zeros)."""
    return {"error_code": ErrorCode.none, "error_message": None, "nodes": [], "topics": [
        {"topic_name": topic.topic_name, "partitions": [
            {"partition_index": p.partition_index, "error_code": ErrorCode.unknown_topic_or_partition,
             "error_message": UNKNOWN_PARTITION_MESSAGE, "leader_id": 0, "leader_epoch": 0, "high_watermark": 0,
             "current_voters": [], "observers": []}
            for p in topic.partitions]}
        for topic in body.topics]}


def response(quorum: QuorumInfo) -> dict[str, Any]:
    partition = {"partition_index": METADATA_PARTITION, "error_code": ErrorCode.none, "error_message": None,
                 "leader_id": quorum.leader_id, "leader_epoch": quorum.leader_epoch,
                 "high_watermark": quorum.high_watermark,
                 "current_voters": [_replica(r) for r in quorum.voters],
                 "observers": [_replica(r) for r in quorum.observers]}
    endpoints = quorum.voter_endpoints
    nodes = [{"node_id": v.replica_id, "listeners": [{"name": name, "host": host, "port": port}
                                                     for name, host, port in endpoints.get(v.replica_id, [])]}
             for v in quorum.voters]
    return {"error_code": ErrorCode.none, "error_message": None, "nodes": nodes,
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}]}


def _replica(replica: ReplicaInfo) -> dict[str, Any]:
    return {"replica_id": replica.replica_id, "replica_directory_id": replica.directory_id,
            "log_end_offset": replica.log_end_offset, "last_fetch_timestamp": replica.last_fetch_timestamp,
            "last_caught_up_timestamp": replica.last_caught_up_timestamp}


APIS = [Api(55, 0, 2, handle)]
