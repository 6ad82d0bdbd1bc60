"""FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14): group membership.

The work is the group coordinator's (klamm/coordinator); these handlers only
translate request versions into its calls and its answers into response dicts.
JoinGroup and SyncGroup answer when the rebalance gets that far: the handler
awaits a future the coordinator completes. The coordinator's records are
appended (`runtime.apply`) before the handler's first await, so requests of
one connection take effect in order. A response that follows a write (the
leader's SyncGroup storing the assignment, answering every member; a static
member rejoining a Stable group) is released once the high watermark passes
the records, as Kafka 4 completes it, or with COORDINATOR_NOT_AVAILABLE /
NOT_COORDINATOR if it does not within offsets.commit.timeout.ms or the
leadership goes. So does a LeaveGroup that wrote records (a member leaving
changes the group's stored metadata; a classic member of a consumer group
leaving writes its tombstones), and a Heartbeat would (none writes today); a
LeaveGroup whose write fails answers the group's error with no members, as
Kafka does.

Authorization (Kafka's KafkaApis): FindCoordinator needs DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED) or on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), per key; JoinGroup, SyncGroup,
Heartbeat and LeaveGroup need READ on the group. `denied` and `denied_topics`
are the checks the other group and transaction handlers share.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterable
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.acls import ResourceType
from klamm.controller.controller import changed_until
from klamm.coordinator.coordinator import JoinRequest, SyncRequest, join_error, sync_response
from klamm.coordinator.partitioning import partition_for
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import CONSUMER_OFFSETS, TRANSACTION_STATE

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

READ, WRITE, DESCRIBE, DELETE = AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.DELETE
GROUP, TOPIC, TRANSACTIONAL_ID = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
NOTHING_DENIED: frozenset[str] = frozenset()


def denied(broker: BrokerServices, request: Any, operation: AclOperation, resource_type: ResourceType,
           name: str) -> bool:
    """Whether the authorizer refuses the request's principal `operation` on the resource."""
    authorizer = broker.authorizer
    return authorizer.enabled and not authorizer.allowed(request, operation, resource_type, name)


def denied_topics(broker: BrokerServices, request: Any, operation: AclOperation,
                  names: Iterable[str]) -> frozenset[str]:
    """The topics among `names` the principal may not do `operation` on (none without an authorizer)."""
    authorizer = broker.authorizer
    if not authorizer.enabled:
        return NOTHING_DENIED
    wanted = set(names)
    return frozenset(wanted - authorizer.allowed_names(request, operation, TOPIC, wanted))


def millis(value: Any) -> int:
    """A duration field as milliseconds (kio gives timedeltas for *_ms fields)."""
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    return int(value)


def client_host(request: Any) -> str:
    # Handlers do not see the connection; Kafka reports "/<peer address>" here.
    return getattr(request, "client_host", None) or "/127.0.0.1"


def apply_quietly(broker: BrokerServices, result: Any) -> None:
    """Append a join/sync result whose failure the coordinator reports through the callbacks."""
    try:
        broker.group_coordinator.apply(result)
    except KafkaError:
        pass


def _future() -> tuple[asyncio.Future[dict[str, Any]], Any]:
    future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    def respond(response: dict[str, Any]) -> None:
        if not future.done():  # the connection may be gone (a cancelled handler)
            future.set_result(response)

    return future, respond


# FindCoordinator
async def find_coordinator(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    key_type = getattr(body, "key_type", KEY_TYPE_GROUP)
    keys = list(body.coordinator_keys) if version >= 4 else [body.key]
    found = [_find(broker, request, key_type, key) for key in keys]
    internal_topic = _INTERNAL_TOPICS.get(key_type)
    if (internal_topic is not None and any(f["error_code"] == ErrorCode.coordinator_not_available for f in found)
            and await _created_meanwhile(broker, internal_topic, CREATION_WAIT_S)):
        # the coordinator named is this broker's on a single node: its requests find the new partitions loaded
        await _runtime_of(broker, key_type).loads_settled()
        found = [_find(broker, request, key_type, key) for key in keys]
    if version >= 4:
        return {"coordinators": found}
    return {k: v for k, v in found[0].items() if k != "key"}


_INTERNAL_TOPICS = {KEY_TYPE_GROUP: CONSUMER_OFFSETS, KEY_TYPE_TRANSACTION: TRANSACTION_STATE}
# A coordinator's topic is created through the controller (a single node's makes its logs off the loop), so the
# first FindCoordinator answers COORDINATOR_NOT_AVAILABLE (as Kafka's does) while it is created. librdkafka asks
# again twice, then waits for a broker connection to change state before asking again (rd_kafka_coord_req_fsm):
# with every connection up, its admin's group requests time out. So an answer waits up to this long for the topic
# to be published here.
CREATION_WAIT_S = 5.0


async def _created_meanwhile(broker: BrokerServices, topic: str, timeout_s: float) -> bool:
    """Wait until `topic`, missing from this broker's metadata, is published in it (at most `timeout_s`);
    whether it was. False at once if it is there already: its coordinator is unavailable for another reason."""
    if topic in broker.controller.image.topics_by_name:
        return False
    return await changed_until(broker.controller.on_change, lambda image: topic in image.topics_by_name, timeout_s)


_KEY_DENIED = {KEY_TYPE_GROUP: (GROUP, ErrorCode.group_authorization_failed, "Group authorization failed."),
               KEY_TYPE_TRANSACTION: (TRANSACTIONAL_ID, ErrorCode.transactional_id_authorization_failed,
                                      "Transactional Id authorization failed.")}


def _find(broker: BrokerServices, request: Any, key_type: int, key: str) -> dict[str, Any]:
    """The leader of the internal partition that holds the key: its coordinator (Kafka's rule)."""
    try:
        if key_type in _KEY_DENIED and denied(broker, request, DESCRIBE, _KEY_DENIED[key_type][0], key):
            _, error, message = _KEY_DENIED[key_type]
            # Kafka sends the error's own message before v4 (an error response), none in a batch
            raise KafkaError(error, message if request.api_version < 4 else None)
        if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION):
            raise KafkaError(ErrorCode.invalid_request, f"unknown key type {key_type}")
        _runtime_of(broker, key_type).ensure_topic(deferred=True)
        node_id, host, port = _coordinator_of(broker, CONSUMER_OFFSETS if key_type == KEY_TYPE_GROUP
                                              else TRANSACTION_STATE, key, request.listener)
    except KafkaError as exc:
        return {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": exc.code,
                "error_message": exc.message}
    return {"key": key, "node_id": node_id, "host": host, "port": port, "error_code": ErrorCode.none,
            "error_message": None}


def _runtime_of(broker: BrokerServices, key_type: int) -> Any:
    """The coordinator runtime a key type names: the group coordinator's, or the transaction coordinator's."""
    return broker.group_coordinator if key_type == KEY_TYPE_GROUP else broker.transactions


def _coordinator_of(broker: BrokerServices, internal_topic: str, key: str, listener: str = "") -> tuple[int, str, int]:
    """The coordinator's node and its endpoint on `listener`, the one the client asked on (Kafka: a
    coordinator without that listener is not available to the client)."""
    image = broker.controller.image
    topic = image.topics_by_name.get(internal_topic)
    if topic is None or not topic.partitions:
        raise KafkaError(ErrorCode.coordinator_not_available)
    leader = topic.partitions[partition_for(key, len(topic.partitions))].leader
    if leader == broker.node_id:
        host, port = broker.advertised.get(listener, (broker.advertised_host, broker.advertised_port))
        return leader, host, port
    registration = image.brokers.get(leader)
    endpoint = None if registration is None or registration.fenced else broker.endpoint_for(leader, listener)
    if endpoint is None:
        raise KafkaError(ErrorCode.coordinator_not_available)
    return leader, *endpoint


# JoinGroup
async def join_group(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    if denied(broker, request, READ, GROUP, body.group_id):
        return _join_response(join_error(ErrorCode.group_authorization_failed), version)
    try:
        coordinator = broker.group_coordinator.ready()
    except KafkaError as exc:
        return _join_response(join_error(exc.code, body.member_id), version)
    session_ms = millis(body.session_timeout)
    rebalance = getattr(body, "rebalance_timeout", None)
    join = JoinRequest(
        group_id=body.group_id, member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.client_id or "", client_host=client_host(request),
        session_timeout_ms=session_ms, rebalance_timeout_ms=session_ms if rebalance is None else millis(rebalance),
        protocol_type=body.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in body.protocols],
        # From v4 a new dynamic member first gets its id (MEMBER_ID_REQUIRED), then joins with it.
        require_known_member_id=version >= 4 and getattr(body, "group_instance_id", None) is None)
    future, respond = _future()
    apply_quietly(broker, coordinator.join_group(join, respond))
    return _join_response(await future, version)


def _join_response(response: dict[str, Any], version: int) -> dict[str, Any]:
    if version < 7 and response["protocol_name"] is None:
        response = {**response, "protocol_name": ""}  # not nullable before v7
    return response


# SyncGroup
async def sync_group(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if request.api_version >= 5 and (body.protocol_type is None or body.protocol_name is None):
        return sync_response(ErrorCode.inconsistent_group_protocol)  # mandatory from v5, checked first in Kafka
    if denied(broker, request, READ, GROUP, body.group_id):
        return sync_response(ErrorCode.group_authorization_failed)
    try:
        coordinator = broker.group_coordinator.ready()
    except KafkaError as exc:
        return sync_response(exc.code)
    sync = SyncRequest(
        group_id=body.group_id, member_id=body.member_id, group_instance_id=getattr(body, "group_instance_id", None),
        generation=body.generation_id, protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in body.assignments})
    future, respond = _future()
    apply_quietly(broker, coordinator.sync_group(sync, respond))
    return await future


# Heartbeat
async def heartbeat(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if denied(broker, request, READ, GROUP, body.group_id):
        return {"error_code": ErrorCode.group_authorization_failed}
    try:
        coordinator = broker.group_coordinator.ready()
        result = coordinator.heartbeat(body.group_id, body.member_id, getattr(body, "group_instance_id", None),
                                       body.generation_id)
        # writes nothing: answered once the HW passes what the group's partition has already, as Kafka's write
        # operation that turned out a read
        return {"error_code": await broker.group_coordinator.apply_committed(result, body.group_id)}
    except KafkaError as exc:
        return {"error_code": exc.code}


# LeaveGroup
async def leave_group(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    if version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in body.members]
    else:
        leaving = [(body.member_id, None)]
    if denied(broker, request, READ, GROUP, body.group_id):  # Kafka's error response: no members
        return {"error_code": ErrorCode.group_authorization_failed, **({"members": []} if version >= 3 else {})}
    try:
        coordinator = broker.group_coordinator.ready()
        # answered once the HW passes the records of the members who left (Kafka 4's write operation)
        error, errors = await broker.group_coordinator.apply_committed(
            coordinator.leave_group(body.group_id, leaving), body.group_id)
    except KafkaError as exc:
        # Kafka's answer to a failed write: the group's error alone, no members
        return {"error_code": exc.code, **({"members": []} if version >= 3 else {})}
    if version < 3:
        return {"error_code": error if error != ErrorCode.none else errors[0]}
    return {"error_code": error,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
                        for (member_id, instance_id), member_error in zip(leaving, errors)]}


APIS = [Api(10, 0, 6, find_coordinator), Api(11, 0, 9, join_group), Api(12, 0, 4, heartbeat),
        Api(13, 0, 5, leave_group), Api(14, 0, 5, sync_group)]
