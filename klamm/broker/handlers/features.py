"""UpdateFeatures (57), v0-2: finalized feature levels changed through the controller (KIP-584).

The controller decides (klamm/controller/features.py): every update, or none with
the first failure's INVALID_UPDATE_VERSION, its reason after Kafka's prefix "The
update failed for all features since the following feature had an error: ". v0
has AllowDowngrade where v1 has an upgrade type (a safe downgrade when allowed);
v1 adds ValidateOnly; v0-1 answer one result per feature when all went through,
v2 only the top-level error. A broker-only node forwards it to the controller.
ALTER on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED otherwise), as
Kafka's ControllerApis asks.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.controller.features import ALL_FAILED, SAFE_DOWNGRADE, UPGRADE, FeatureUpdate
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError


async def update_features(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if not broker.authorizer.allowed(request, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return _answer(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    updates = {u.feature: FeatureUpdate(u.feature, u.max_version_level, _upgrade_type(request.api_version, u))
               for u in body.feature_updates}  # a map in Kafka's request: a name given twice counts once
    try:
        error, message = await broker.controller_client.update_features(
            list(updates.values()), validate_only=getattr(body, "validate_only", False))
    except KafkaError as exc:  # the controller could not be reached
        return _answer(exc.code, exc.message)
    if error != ErrorCode.none:
        return _answer(error, ALL_FAILED + (message or ""))
    results = [{"feature": name, "error_code": ErrorCode.none, "error_message": None} for name in updates]
    return {"throttle_time_ms": 0, "error_code": ErrorCode.none, "error_message": None,
            "results": results if request.api_version <= 1 else []}


def _upgrade_type(version: int, update: Any) -> int:
    if version == 0:
        return SAFE_DOWNGRADE if update.allow_downgrade else UPGRADE
    return update.upgrade_type


def _answer(error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message, "results": []}


APIS = [Api(57, 0, 2, update_features)]
