"""ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69): consumer-protocol groups (KIP-848).

The work is the group coordinator's (klamm/coordinator/consumer_*.py); these
handlers turn requests into its calls and its answers into response dicts.

v0 of ConsumerGroupHeartbeat lets the coordinator make the member id of a
joining member that sends none; from v1 (KIP-1082, what librdkafka sends) the
client makes it, and v1 adds the subscribed topic regex. ConsumerGroupDescribe
v1 (KIP-1099) tells each member's type: classic members are those of a classic
group upgraded online (klamm/coordinator/migration.py).

Authorization (Kafka's KafkaApis): a heartbeat needs READ on the group
(GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every topic it subscribes to by
name (TOPIC_AUTHORIZATION_FAILED, naming them). Of the topics its regex
matches, the member gets those its principal may DESCRIBE (Kafka 4's
filterTopicDescribeAuthorizedTopics): the heartbeat hands the coordinator the
principal's check, which it keeps for the member. ConsumerGroupDescribe needs
DESCRIBE on each group, and DESCRIBE on the topics its members subscribe to or
are assigned (else TOPIC_AUTHORIZATION_FAILED for that group).

A heartbeat that wrote records (a join, a new subscription, an epoch bump, a
reconciled assignment) answers once the high watermark of the group's
__consumer_offsets partition passes them, as Kafka 4 completes a write
operation; COORDINATOR_NOT_AVAILABLE if that takes longer than
offsets.commit.timeout.ms, NOT_COORDINATOR if the leadership goes meanwhile. One
that wrote nothing answers at once.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.groups import DESCRIBE, GROUP, READ, client_host, denied, denied_topics, millis
from klamm.broker.services import BrokerServices
from klamm.coordinator.consumer_coordinator import heartbeat_error
from klamm.coordinator.consumer_heartbeat import HeartbeatRequest
from klamm.coordinator.reconciliation import as_assignment
from klamm.protocol.acl import GROUP_OPERATIONS, AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

# AclEntry.supportedOperations(GROUP)
_GROUP_OPERATIONS = (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                     AclOperation.ALTER_CONFIGS)


def _member_id(request: Any) -> str:
    """The member id: v0 lets a joining member (epoch 0) leave it empty for the coordinator to make, as Kafka's
    base64 UUID; from v1 (KIP-1082) the client makes it and an empty one is refused."""
    body = request.body
    if request.api_version == 0 and body.member_epoch == 0 and not body.member_id:
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    return body.member_id


async def heartbeat(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if "consumer" not in broker.config.group_coordinator_rebalance_protocols:
        return heartbeat_error(KafkaError(ErrorCode.unsupported_version, "The consumer group protocol is disabled "
                                          "(group.coordinator.rebalance.protocols)."))
    if denied(broker, request, READ, GROUP, body.group_id):
        return heartbeat_error(KafkaError(ErrorCode.group_authorization_failed))
    names = body.subscribed_topic_names
    hidden = denied_topics(broker, request, DESCRIBE, names or ())
    if hidden:
        return heartbeat_error(KafkaError(ErrorCode.topic_authorization_failed,
                                          f"The following topics are not authorized: {', '.join(sorted(hidden))}"))
    owned = body.topic_partitions
    req = HeartbeatRequest(
        group_id=body.group_id, member_id=_member_id(request), member_epoch=body.member_epoch,
        instance_id=body.instance_id, rack_id=body.rack_id, rebalance_timeout_ms=millis(body.rebalance_timeout),
        topic_names=None if names is None else tuple(names),
        topic_regex=getattr(body, "subscribed_topic_regex", None), server_assignor=body.server_assignor,
        owned=None if owned is None else as_assignment((tp.topic_id, tp.partitions) for tp in owned),
        client_id=request.client_id or "", client_host=client_host(request),
        denied_topics=(lambda names: denied_topics(broker, request, DESCRIBE, names))
        if broker.authorizer.enabled else None)
    try:
        coordinator = broker.group_coordinator.ready()
        # answered once the HW passes what the heartbeat wrote, or else what was written before it (Kafka 4's
        # write operation)
        result = coordinator.consumer.heartbeat(req)
        response: dict[str, Any] = await broker.group_coordinator.apply_committed(result, body.group_id)
    except KafkaError as exc:
        return heartbeat_error(exc)
    return response


async def describe(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, authorizer = request.body, broker.authorizer
    described = []
    for group_id in body.group_ids:
        if denied(broker, request, DESCRIBE, GROUP, group_id):
            described.append(_error(group_id, ErrorCode.group_authorization_failed))
            continue
        try:
            group = broker.group_coordinator.committed(group_id).consumer.describe(group_id)  # as of the HW
        except KafkaError as exc:
            described.append(_error(group_id, exc.code))
            continue
        if group["error_code"] == ErrorCode.none and denied_topics(broker, request, DESCRIBE, _topics_of(group)):
            described.append(_error(group_id, ErrorCode.topic_authorization_failed))
            continue
        if group["error_code"] == ErrorCode.none and body.include_authorized_operations:
            group["authorized_operations"] = (authorizer.operations(request, GROUP, group_id, _GROUP_OPERATIONS)
                                              if authorizer.enabled else GROUP_OPERATIONS)
        described.append(group)
    return {"groups": described}


def _topics_of(group: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for member in group["members"]:
        names.update(member["subscribed_topic_names"])
        for assignment in (member["assignment"], member["target_assignment"]):
            names.update(tp["topic_name"] for tp in assignment["topic_partitions"] if tp["topic_name"])
    return names


def _error(group_id: str, error: ErrorCode) -> dict[str, Any]:
    return {"error_code": error, "error_message": None, "group_id": group_id, "group_state": "", "group_epoch": 0,
            "assignment_epoch": 0, "assignor_name": "", "members": []}


APIS = [Api(68, 0, 1, heartbeat), Api(69, 0, 1, describe)]
