"""DescribeGroups (15), ListGroups (16), DeleteGroups (42): consumer group administration.

DescribeGroups v6 (Kafka 4) adds error messages: a consumer-protocol group, or
no group, is GROUP_ID_NOT_FOUND there ("Group g is not a classic group."),
where v0-5 describe it as Dead without error.

Authorization (Kafka's KafkaApis): DescribeGroups needs DESCRIBE on each group
(GROUP_AUTHORIZATION_FAILED, answered before the described ones) and reports the
principal's operations on the group when asked (v3+); ListGroups lists every
group to a principal with DESCRIBE on the cluster, else only the groups it may
DESCRIBE; DeleteGroups needs DELETE on each group.

DeleteGroups answers once the HW of each group's __consumer_offsets partition
passes its tombstones, as Kafka 4 completes a write: a partition whose HW does
not get there within offsets.commit.timeout.ms fails its groups with
COORDINATOR_NOT_AVAILABLE (NOT_COORDINATOR if the leadership goes).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.groups import DELETE, DESCRIBE, GROUP
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.protocol.acl import GROUP_OPERATIONS, AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

# AclEntry.supportedOperations(GROUP): what authorized_operations may report
_GROUP_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                     AclOperation.ALTER_CONFIGS)


def _group_error(group_id: str, error: ErrorCode) -> dict[str, Any]:
    return {"error_code": error, "group_id": group_id, "group_state": "", "protocol_type": "", "protocol_data": "",
            "members": []}


async def describe_groups(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, authorizer = request.body, broker.authorizer
    groups = list(body.groups)
    refused: list[dict[str, Any]] = []
    if authorizer.enabled:
        allowed = authorizer.allowed_names(request, DESCRIBE, GROUP, groups)
        refused = [_group_error(g, ErrorCode.group_authorization_failed) for g in groups if g not in allowed]
        groups = [g for g in groups if g in allowed]
    try:
        coordinator = broker.group_coordinator.ready()
    except KafkaError as exc:
        return {"groups": refused + [_group_error(g, exc.code) for g in groups]}
    described = [coordinator.describe_group(g, request.api_version) for g in groups]
    if request.api_version >= 3 and body.include_authorized_operations:
        for group in described:
            if group["error_code"] == ErrorCode.none:
                group["authorized_operations"] = (
                    authorizer.operations(request, GROUP, group["group_id"], _GROUP_OPERATIONS)
                    if authorizer.enabled else GROUP_OPERATIONS)
    return {"groups": refused + described}


async def list_groups(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, authorizer = request.body, broker.authorizer
    coordinator = broker.group_coordinator.committed_all()  # consumer groups as of the HW
    if coordinator is None:  # no __consumer_offsets yet, so no groups
        return {"error_code": ErrorCode.none, "groups": []}
    error, groups = coordinator.list_groups(getattr(body, "states_filter", None), getattr(body, "types_filter", None))
    if authorizer.enabled and groups and \
            not authorizer.allowed(request, DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        allowed = authorizer.allowed_names(request, DESCRIBE, GROUP, [g["group_id"] for g in groups])
        groups = [g for g in groups if g["group_id"] in allowed]
    return {"error_code": error, "groups": groups}


async def delete_groups(broker: BrokerServices, request: Any) -> dict[str, Any]:
    names, authorizer = list(request.body.groups_names), broker.authorizer
    errors: dict[str, ErrorCode] = {}
    deletable = list(dict.fromkeys(names))
    if authorizer.enabled:
        allowed = authorizer.allowed_names(request, DELETE, GROUP, deletable)
        errors.update((name, ErrorCode.group_authorization_failed) for name in deletable if name not in allowed)
        deletable = [name for name in deletable if name in allowed]
    try:
        coordinator = broker.group_coordinator.ready()
    except KafkaError as exc:
        coordinator = None
        errors.update((name, exc.code) for name in deletable)
    if coordinator is not None:
        # One write per partition of __consumer_offsets, so a failed one fails only its own groups.
        by_partition: dict[int, list[str]] = {}
        for name in deletable:
            by_partition.setdefault(coordinator.partition_for(name), []).append(name)
        # Every partition's records are appended before the first await; each answers once its HW passes them.
        writes: list[tuple[list[str], Awaitable[dict[str, ErrorCode]]]] = []
        for group_ids in by_partition.values():
            try:
                result = coordinator.delete_groups(group_ids)
                writes.append((group_ids, broker.group_coordinator.write_committed(result, group_ids[0])))
            except KafkaError as exc:
                errors.update((name, exc.code) for name in group_ids)
        for group_ids, written in writes:
            try:
                errors.update(await written)
            except KafkaError as exc:
                errors.update((name, exc.code) for name in group_ids)
    return {"results": [{"group_id": name, "error_code": errors[name]} for name in names]}


APIS = [Api(15, 0, 6, describe_groups), Api(16, 0, 5, list_groups), Api(42, 0, 2, delete_groups)]
