"""DescribeCluster (60): cluster id, controller and brokers, for admin clients; UnregisterBroker (64).

Anyone may ask DescribeCluster; the cluster's authorized operations, when asked
for, are the principal's (0 without DESCRIBE on the cluster), as Kafka's
AuthHelper answers.

UnregisterBroker (Admin.unregisterBroker, kafka-cluster.sh unregister) removes a
broker's registration, as Kafka's controller does: the broker first leaves every
ISR (leaders move), then it is gone from the metadata. It is meant for a broker
that was decommissioned; a broker still running is no longer listed, and its
heartbeats are answered STALE_BROKER_EPOCH until it restarts. A node that is not
registered answers BROKER_ID_NOT_REGISTERED. ALTER on the cluster is needed;
broker-only nodes forward it to the controller.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.metadata import cluster_operations, controller_for_clients
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.protocol.acl import NOT_INCLUDED, AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

BROKERS_ENDPOINT = 1


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    endpoint_type = getattr(body, "endpoint_type", BROKERS_ENDPOINT)
    image = broker.controller.image
    if endpoint_type != BROKERS_ENDPOINT:
        return {"error_code": ErrorCode.unsupported_endpoint_type, "endpoint_type": endpoint_type,
                "cluster_id": image.cluster_id, "controller_id": -1, "brokers": []}
    # Kafka's AuthHelper: every supported cluster operation without an authorizer, 0 without DESCRIBE
    operations = cluster_operations(broker, request) if body.include_cluster_authorized_operations else NOT_INCLUDED
    brokers = broker.broker_endpoints(request.listener)  # in the terms of the client's listener
    return {
        "error_code": ErrorCode.none,
        "endpoint_type": endpoint_type,
        "cluster_id": image.cluster_id,
        "controller_id": controller_for_clients(broker, brokers),
        "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
                    for b in brokers],
        "cluster_authorized_operations": operations,
    }


async def unregister_broker(broker: BrokerServices, request: Any) -> dict[str, Any]:
    if not broker.authorizer.allowed(request, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None}
    try:
        await broker.controller_client.unregister_broker(request.body.broker_id)
    except KafkaError as exc:
        return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.none, "error_message": None}


APIS = [Api(60, 0, 1, handle), Api(64, 0, 0, unregister_broker)]
