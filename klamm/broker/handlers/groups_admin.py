"""DescribeGroups (15), ListGroups (16), DeleteGroups (42): consumer group administration."""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.protocol.errors import ErrorCode, KafkaError


async def describe_groups(broker: BrokerServices, request: Any) -> dict[str, Any]:
    groups = list(request.body.groups)
    try:
        coordinator = broker.group_coordinator.ready()
    except KafkaError as exc:
        return {"groups": [{"error_code": exc.code, "group_id": g, "group_state": "", "protocol_type": "",
                            "protocol_data": "", "members": []} for g in groups]}
    return {"groups": [coordinator.describe_group(g) for g in groups]}


async def list_groups(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    coordinator = broker.group_coordinator.coordinator
    if coordinator is None:  # no __consumer_offsets yet, so no groups
        return {"error_code": ErrorCode.none, "groups": []}
    error, groups = coordinator.list_groups(getattr(body, "states_filter", None), getattr(body, "types_filter", None))
    return {"error_code": error, "groups": groups}


async def delete_groups(broker: BrokerServices, request: Any) -> dict[str, Any]:
    names = list(request.body.groups_names)
    try:
        coordinator = broker.group_coordinator.ready()
        errors = broker.group_coordinator.apply(coordinator.delete_groups(names))
    except KafkaError as exc:
        errors = {name: exc.code for name in names}
    return {"results": [{"group_id": name, "error_code": errors[name]} for name in names]}


APIS = [Api(15, 0, 5, describe_groups), Api(16, 0, 5, list_groups), Api(42, 0, 2, delete_groups)]
