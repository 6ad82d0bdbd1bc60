"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51): SCRAM users (KIP-554), v0 only.

Describe answers from this node's metadata image, as Kafka's broker answers
from its ScramImage: every user with a credential when `users` is null or
empty; otherwise one result per distinct user named, RESOURCE_NOT_FOUND
("Attempt to describe a user credential that does not exist: <name>") for a
user without any, DUPLICATE_RESOURCE ("Cannot describe SCRAM credentials for
the same user twice in a single request: <name>") for a user named twice. Only
mechanisms and iterations leave the broker, never salts or keys.

Alter goes to the controller through `controller_client` (forwarded by a
broker-only node, KIP-590), which validates it and turns each salted password
into the stored and server keys (klamm/controller/scram.py); neither the
broker nor the metadata log keeps a password or salted password. When the
controller cannot be reached, every user of the request gets that error
(NOT_CONTROLLER), as Kafka's error response has it.

With an authorizer, Describe needs DESCRIBE on the cluster: otherwise the
answer is CLUSTER_AUTHORIZATION_FAILED at the top level and, as Kafka's
DescribeUserScramCredentialsRequest.getErrorResponse builds it, one result per
user named (duplicates too) carrying the error and no user name. Alter needs
ALTER on the cluster (checked by Kafka's controller, here where the request
came in): otherwise every distinct user of the request, sorted, gets
CLUSTER_AUTHORIZATION_FAILED and nothing is forwarded.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.controller.scram import ScramDeletion, ScramUpsertion
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.sasl import SCRAM_MECHANISMS

DESCRIBE_DUPLICATE_USER = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DESCRIBE_MISSING_USER = "Attempt to describe a user credential that does not exist: "


async def describe_user_scram_credentials(broker: BrokerServices, request: Any) -> dict[str, Any]:
    wanted = request.body.users
    if not broker.authorizer.allowed(request, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        denied = ErrorCode.cluster_authorization_failed
        return {"error_code": denied, "error_message": None, "results": [
            {"user": "", "error_code": denied, "error_message": None, "credential_infos": []}
            for _ in wanted or ()]}
    users = broker.controller.image.scram_users()
    names: dict[str, bool] = {}  # distinct names in request order -> named more than once
    if wanted:
        for user in wanted:
            names[user.name] = user.name in names
    else:
        names = dict.fromkeys(users, False)
    results = []
    for name, duplicate in names.items():
        result: dict[str, Any] = {"user": name, "error_code": ErrorCode.none, "error_message": None,
                                  "credential_infos": []}
        if duplicate:
            result.update(error_code=ErrorCode.duplicate_resource, error_message=DESCRIBE_DUPLICATE_USER + name)
        elif name not in users:
            result.update(error_code=ErrorCode.resource_not_found, error_message=DESCRIBE_MISSING_USER + name)
        else:
            result["credential_infos"] = [{"mechanism": SCRAM_MECHANISMS[mechanism], "iterations": iterations}
                                          for mechanism, iterations in users[name].items()]
        results.append(result)
    return {"error_code": ErrorCode.none, "error_message": None, "results": results}


async def alter_user_scram_credentials(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    deletions = [ScramDeletion(d.name, d.mechanism) for d in body.deletions]
    upsertions = [ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
                  for u in body.upsertions]
    if not deletions and not upsertions:
        return {"results": []}
    try:
        broker.authorizer.require_cluster(request, AclOperation.ALTER)
    except KafkaError as exc:
        users = sorted({d.name for d in deletions} | {u.name for u in upsertions})
        return {"results": [{"user": user, "error_code": exc.code, "error_message": exc.message} for user in users]}
    try:
        results = await broker.controller_client.alter_user_scram_credentials(deletions, upsertions)
    except KafkaError as exc:
        users = dict.fromkeys([d.name for d in deletions] + [u.name for u in upsertions])
        return {"results": [{"user": user, "error_code": exc.code, "error_message": exc.message} for user in users]}
    return {"results": [{"user": r.user, "error_code": r.error, "error_message": r.message} for r in results]}


APIS = [Api(50, 0, 0, describe_user_scram_credentials), Api(51, 0, 0, alter_user_scram_credentials)]
