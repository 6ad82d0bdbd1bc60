"""DescribeCluster (60): cluster id, controller and brokers, for admin clients.

Anyone may ask; the cluster's authorized operations, when asked for, are the
principal's (0 without DESCRIBE on the cluster), as Kafka's AuthHelper answers.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.metadata import cluster_operations, controller_for_clients
from klamm.broker.services import BrokerServices
from klamm.protocol.acl import NOT_INCLUDED
from klamm.protocol.errors import ErrorCode

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


APIS = [Api(60, 0, 1, handle)]
