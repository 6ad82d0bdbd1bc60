"""DescribeAcls (29), CreateAcls (30), DeleteAcls (31), v0-3, as Kafka's AclApis answers them.

Versions: v1 adds the resource pattern type (v0's is LITERAL: a v0 filter
only sees LITERAL ACLs, so a v0 answer never holds a PREFIXED one), v2 is
flexible, v3 changes nothing on the wire.

Without an authorizer (no authorizer.class.name) each answers SECURITY_DISABLED:
DescribeAcls "No Authorizer is configured on the broker", the others "No
Authorizer is configured." per creation and per filter. klamm answers so before
looking at the fields; Kafka would first refuse the UNKNOWN codes below.

With the StandardAuthorizer:
- a request holding an UNKNOWN (0) resource type, pattern type, operation or
  permission fails to parse in Kafka (CreateAclsRequest, DeleteAclsRequest,
  DescribeAclsRequest.validate), which closes the connection; so does klamm;
- DescribeAcls needs DESCRIBE on the cluster (else CLUSTER_AUTHORIZATION_FAILED
  at the top level) and answers from this node's image: the ACLs the filter
  matches, grouped by resource pattern (klamm/controller/acl_changes.py);
- CreateAcls needs ALTER on the cluster, else every creation fails
  CLUSTER_AUTHORIZATION_FAILED. A creation naming ANY as resource type,
  operation or permission, or ANY/MATCH as pattern type, cannot be made into
  an AclBinding: Kafka's handler throws, and every creation of the request gets
  UNKNOWN_SERVER_ERROR. Then, per creation, a CLUSTER resource not named
  kafka-cluster is INVALID_REQUEST "The only valid name for the CLUSTER
  resource is kafka-cluster" and an empty name "Invalid empty resource name";
  the others go to the controller (the rest of the validation, duplicates, new
  ids, AccessControlEntryRecord), and each gets its answer;
- DeleteAcls needs ALTER on the cluster, else every filter fails
  CLUSTER_AUTHORIZATION_FAILED; the controller removes what each filter matches
  and returns it in matching_acls.
A broker-only node forwards CreateAcls and DeleteAcls to the controller
(RemoteControllerClient; a quorum's active controller answers once the records
are committed); when it cannot be reached, every creation or filter gets
NOT_CONTROLLER. The node that takes the forwarded request answers it with its
own handler, as Kafka's controller runs its own AclApis: a controller without
authorizer.class.name answers SECURITY_DISABLED, so every node of a cluster
needs the same authorizer settings.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.network import CloseConnection
from klamm.broker.services import BrokerServices
from klamm.controller.acl_changes import AclCreateResult, describe_acls as matching_groups
from klamm.controller.acls import CLUSTER_NAME, Acl, AclFilter, PatternType, Permission, ResourceType
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_ON_BROKER = "No Authorizer is configured on the broker"
UNKNOWN = 0
EMPTY_NAME = "Invalid empty resource name"
CLUSTER_ONLY_NAME = f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"


def _unknown(*codes: int) -> bool:
    return UNKNOWN in codes


def _pattern(entity: Any, field: str) -> int:
    """The pattern type (v1+); v0 has none: LITERAL, the schema's default."""
    return getattr(entity, field, PatternType.LITERAL)


async def describe_acls(broker: BrokerServices, request: Any) -> dict[str, Any]:
    if not broker.authorizer.enabled:
        return {"error_code": ErrorCode.security_disabled, "error_message": NO_AUTHORIZER_ON_BROKER, "resources": []}
    body = request.body
    pattern_type = _pattern(body, "pattern_type_filter")
    if _unknown(body.resource_type_filter, pattern_type, body.operation, body.permission_type):
        raise CloseConnection()
    try:
        broker.authorizer.require_cluster(request, AclOperation.DESCRIBE)
    except KafkaError as exc:
        return {"error_code": exc.code, "error_message": exc.message, "resources": []}
    acl_filter = AclFilter(body.resource_type_filter, body.resource_name_filter, pattern_type,
                           body.principal_filter, body.host_filter, body.operation, body.permission_type)
    groups = matching_groups(broker.controller.image.acls, acl_filter)
    return {"error_code": ErrorCode.none, "error_message": None, "resources": [
        {"resource_type": resource_type, "resource_name": name, "pattern_type": pattern_type,
         "acls": [{"principal": a.principal, "host": a.host, "operation": a.operation,
                   "permission_type": a.permission} for a in acls]}
        for (resource_type, name, pattern_type), acls in groups]}


def _not_a_binding(creation: Any) -> bool:
    """What Kafka's ResourcePattern and AccessControlEntry constructors refuse (IllegalArgumentException)."""
    return (creation.resource_type == ResourceType.ANY
            or _pattern(creation, "resource_pattern_type") in (PatternType.ANY, PatternType.MATCH)
            or creation.operation == AclOperation.ANY or creation.permission_type == Permission.ANY)


def _early_error(acl: Acl) -> str | None:
    """AclApis.handleCreateAcls' own checks, made before the authorizer's createAcls."""
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return CLUSTER_ONLY_NAME
    if not acl.resource_name:
        return EMPTY_NAME
    return None


async def create_acls(broker: BrokerServices, request: Any) -> dict[str, Any]:
    creations = request.body.creations
    if not broker.authorizer.enabled:
        return _creation_errors(len(creations), ErrorCode.security_disabled, NO_AUTHORIZER)
    if any(_unknown(c.resource_type, _pattern(c, "resource_pattern_type"), c.operation, c.permission_type)
           for c in creations):
        raise CloseConnection()
    try:
        broker.authorizer.require_cluster(request, AclOperation.ALTER)
    except KafkaError as exc:
        return _creation_errors(len(creations), exc.code, exc.message)
    if any(_not_a_binding(c) for c in creations):
        return _creation_errors(len(creations), ErrorCode.unknown_server_error, None)
    results: list[AclCreateResult | None] = []
    valid: list[Acl] = []
    for c in creations:
        acl = Acl(c.resource_type, c.resource_name, _pattern(c, "resource_pattern_type"), c.principal, c.host,
                  c.operation, c.permission_type)
        message = _early_error(acl)
        if message is not None:
            results.append(AclCreateResult(ErrorCode.invalid_request, message))
        else:
            results.append(None)
            valid.append(acl)
    if valid:
        try:
            decided = iter(await broker.controller_client.create_acls(valid))
        except KafkaError as exc:
            decided = iter([AclCreateResult(exc.code, exc.message)] * len(valid))
        results = [r if r is not None else next(decided) for r in results]
    return {"results": [{"error_code": r.error, "error_message": r.message} for r in results if r is not None]}


def _creation_errors(count: int, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"results": [{"error_code": code, "error_message": message} for _ in range(count)]}


async def delete_acls(broker: BrokerServices, request: Any) -> dict[str, Any]:
    filters = request.body.filters
    if not broker.authorizer.enabled:
        return _filter_errors(len(filters), ErrorCode.security_disabled, NO_AUTHORIZER)
    if any(_unknown(f.resource_type_filter, _pattern(f, "pattern_type_filter"), f.operation, f.permission_type)
           for f in filters):
        raise CloseConnection()
    try:
        broker.authorizer.require_cluster(request, AclOperation.ALTER)
    except KafkaError as exc:
        return _filter_errors(len(filters), exc.code, exc.message)
    if not filters:
        return {"filter_results": []}
    acl_filters = [AclFilter(f.resource_type_filter, f.resource_name_filter, _pattern(f, "pattern_type_filter"),
                             f.principal_filter, f.host_filter, f.operation, f.permission_type) for f in filters]
    try:
        results = await broker.controller_client.delete_acls(acl_filters)
    except KafkaError as exc:
        return _filter_errors(len(filters), exc.code, exc.message)
    return {"filter_results": [{
        "error_code": r.error, "error_message": r.message, "matching_acls": [{
            "error_code": ErrorCode.none, "error_message": None, "resource_type": a.resource_type,
            "resource_name": a.resource_name, "pattern_type": a.pattern_type, "principal": a.principal,
            "host": a.host, "operation": a.operation, "permission_type": a.permission} for a in r.deleted]}
        for r in results]}


def _filter_errors(count: int, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {"filter_results": [{"error_code": code, "error_message": message, "matching_acls": []}
                               for _ in range(count)]}


APIS = [Api(29, 0, 3, describe_acls), Api(30, 0, 3, create_acls), Api(31, 0, 3, delete_acls)]
