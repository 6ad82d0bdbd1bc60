"""DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1: client quotas (KIP-546).

Versions: v1 is v0 made flexible (compact strings, tagged fields); the fields
are the same.

Describe answers from this node's metadata image, as Kafka's broker answers
from its ClientQuotasImage (klamm/controller/client_quotas.py has the filter's
rules): the matching entities and their quotas; a filter Kafka refuses is
answered with the request's error code and message and null entries.

Alter goes to the controller through `controller_client` (always forwarded by a
broker-only node, as Kafka's brokers forward it), which validates it and
answers one result per entity. When the controller cannot be reached, every
entry gets that error (NOT_CONTROLLER), as Kafka's error response has it.

With an authorizer, Describe needs DESCRIBE_CONFIGS on the cluster and Alter
ALTER_CONFIGS on the cluster; otherwise CLUSTER_AUTHORIZATION_FAILED
("Cluster authorization failed."): Describe's error code, or every entry's for
Alter.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.controller.client_quotas import ClientQuotaAlteration, QuotaFilterComponent, describe_client_quotas
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

CLUSTER_DENIED = "Cluster authorization failed."


async def describe(broker: BrokerServices, request: Any) -> dict[str, Any]:
    if not broker.authorizer.allowed(request, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": ErrorCode.cluster_authorization_failed, "error_message": CLUSTER_DENIED,
                "entries": None}
    body = request.body
    components = [QuotaFilterComponent(c.entity_type, c.match_type, c.match) for c in body.components]
    try:
        matched = describe_client_quotas(broker.controller.image, components, body.strict)
    except KafkaError as exc:
        return {"error_code": exc.code, "error_message": exc.message, "entries": None}
    return {"error_code": ErrorCode.none, "error_message": None, "entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in matched]}


async def alter(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if not broker.authorizer.allowed(request, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return _every_entry(body, ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
    alterations = [ClientQuotaAlteration(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                                         tuple((op.key, None if op.remove else op.value) for op in entry.ops))
                   for entry in body.entries]
    if not alterations:
        return {"entries": []}
    try:
        results = await broker.controller_client.alter_client_quotas(alterations, validate_only=body.validate_only)
    except KafkaError as exc:
        return _every_entry(body, exc.code, exc.message)
    return {"entries": [{"error_code": r.error, "error_message": r.message,
                         "entity": [{"entity_type": t, "entity_name": n} for t, n in r.entity]} for r in results]}


def _every_entry(body: Any, error: ErrorCode, message: str | None) -> dict[str, Any]:
    """Kafka's AlterClientQuotasRequest.getErrorResponse: the error for every entry, its entity as sent."""
    return {"entries": [{"error_code": error, "error_message": message,
                         "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name}
                                    for e in entry.entity]} for entry in body.entries]}


APIS = [Api(48, 0, 1, describe), Api(49, 0, 1, alter)]
