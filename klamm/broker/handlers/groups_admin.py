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
    errors: dict[str, ErrorCode] = {}
    try:
        coordinator = broker.group_coordinator.ready()
    except KafkaError as exc:
        coordinator, errors = None, {name: exc.code for name in names}
    if coordinator is not None:
        # One write per partition of __consumer_offsets, so a failed one fails only its own groups.
        by_partition: dict[int, list[str]] = {}
        for name in dict.fromkeys(names):
            by_partition.setdefault(coordinator.partition_for(name), []).append(name)
        for group_ids in by_partition.values():
            try:
                errors.update(broker.group_coordinator.apply(coordinator.delete_groups(group_ids)))
            except KafkaError as exc:
                errors.update((name, exc.code) for name in group_ids)
    return {"results": [{"group_id": name, "error_code": errors[name]} for name in names]}


APIS = [Api(15, 0, 5, describe_groups), Api(16, 0, 5, list_groups), Api(42, 0, 2, delete_groups)]
