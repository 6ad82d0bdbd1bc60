"""ACL decisions: CreateAcls and DeleteAcls as metadata records (Kafka's AclControlManager), and DescribeAcls.

CreateAcls — one result per ACL, in request order:
- an ACL `invalid_acl` refuses (unknown resource type, pattern type other than
  LITERAL/PREFIXED, unknown or ANY operation, permission other than
  ALLOW/DENY, empty name, principal without a colon, a CLUSTER name other than
  kafka-cluster) fails INVALID_REQUEST with that message;
- an ACL identical (every field) to one the image holds, or to one earlier in
  the same request, succeeds without a record: ACLs are a set;
- every other one becomes an AccessControlEntryRecord with a new random id
  (one no ACL of the image has).
More than MAX_RECORDS_PER_USER_OP (10,000, QuorumController's) new records
fail the whole request: every ACL gets POLICY_VIOLATION "Unable to perform
excessively large batch operation.", and nothing is written.

DeleteAcls — one result per filter, in request order:
- a filter whose resource type or pattern type is unknown fails INVALID_REQUEST
  "Unknown patternFilter."; one whose operation or permission is unknown,
  "Unknown entryFilter.";
- otherwise every ACL of the image the filter matches (AclFilter.matches:
  ANY, MATCH, null fields as "any") is in its result and gets a
  RemoveAccessControlEntryRecord; an ACL two filters match is in both results
  and removed once.
A filter whose matches would bring the batch over MAX_RECORDS_PER_USER_OP
removals fails UNKNOWN_SERVER_ERROR and removes nothing (Kafka's controller
throws there and keeps the removals of that filter it had already collected in
the batch; klamm leaves them out, so a failed filter never removes anything).
All records of one request are one atomic batch.

DescribeAcls answers from an image: the ACLs the filter matches, grouped by
resource pattern (type, name, pattern type) as Kafka's
DescribeAclsResponse.aclsResources groups them. Kafka's order is its hash
map's; klamm's is the StandardAuthorizer's sort order (resource type, name
descending, pattern type, operation, principal, host, permission), so the
answer is stable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from klamm.controller.acls import Acl, AclFilter, PatternType, Permission, ResourceType, invalid_acl
from klamm.controller.image import MetadataImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode

__all__ = [
    "MAX_RECORDS_PER_USER_OP",
    "AclCreateResult",
    "AclDeleteResult",
    "acl_record",
    "decide_create_acls",
    "decide_delete_acls",
    "describe_acls",
    "filter_error",
    "sort_key",
]

MAX_RECORDS_PER_USER_OP = 10_000  # QuorumController.MAX_RECORDS_PER_USER_OP (= MAX_RECORDS_PER_BATCH)
TOO_LARGE = "Unable to perform excessively large batch operation."


@dataclass(frozen=True)
class AclCreateResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True)
class AclDeleteResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    deleted: tuple[Acl, ...] = ()


def acl_record(acl_id: uuid.UUID, acl: Acl) -> MetadataRecord:
    return MetadataRecord("AccessControlEntryRecord", {
        "id": acl_id, "resource_type": acl.resource_type, "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type, "principal": acl.principal, "host": acl.host,
        "operation": acl.operation, "permission_type": acl.permission})


def decide_create_acls(image: MetadataImage, acls: Iterable[Acl], new_id: Callable[[], uuid.UUID] = uuid.uuid4,
                       ) -> tuple[list[AclCreateResult], list[MetadataRecord]]:
    """Per-ACL results and the records of the new ACLs (see the module docstring). `new_id` is injectable."""
    existing = set(image.acls.values())
    taken = set(image.acls)
    results: list[AclCreateResult] = []
    records: list[MetadataRecord] = []
    for acl in acls:
        message = invalid_acl(acl)
        if message is not None:
            results.append(AclCreateResult(ErrorCode.invalid_request, message))
            continue
        if acl not in existing:
            existing.add(acl)
            acl_id = new_id()
            while acl_id in taken:
                acl_id = new_id()
            taken.add(acl_id)
            records.append(acl_record(acl_id, acl))
        results.append(AclCreateResult())
    if len(records) > MAX_RECORDS_PER_USER_OP:
        return [AclCreateResult(ErrorCode.policy_violation, TOO_LARGE) for _ in results], []
    return results, records


def _known(kind: type, value: int) -> bool:
    return value != 0 and value in kind._value2member_map_


def filter_error(acl_filter: AclFilter) -> str | None:
    """Kafka's AclControlManager.validateFilter: why a delete filter is refused (INVALID_REQUEST), or None."""
    if not _known(ResourceType, acl_filter.resource_type) or not _known(PatternType, acl_filter.pattern_type):
        return "Unknown patternFilter."
    if not _known(AclOperation, acl_filter.operation) or not _known(Permission, acl_filter.permission):
        return "Unknown entryFilter."
    return None


def decide_delete_acls(image: MetadataImage, filters: Iterable[AclFilter],
                       ) -> tuple[list[AclDeleteResult], list[MetadataRecord]]:
    """Per-filter results (the ACLs each matched) and the removals (see the module docstring)."""
    ordered = sorted(image.acls.items(), key=lambda item: sort_key(item[1]))
    removed: dict[uuid.UUID, MetadataRecord] = {}
    results: list[AclDeleteResult] = []
    for acl_filter in filters:
        message = filter_error(acl_filter)
        if message is not None:
            results.append(AclDeleteResult(ErrorCode.invalid_request, message))
            continue
        matched = [(acl_id, acl) for acl_id, acl in ordered if acl_filter.matches(acl)]
        new = [acl_id for acl_id, _ in matched if acl_id not in removed]
        if len(removed) + len(new) > MAX_RECORDS_PER_USER_OP:
            results.append(AclDeleteResult(ErrorCode.unknown_server_error))
            continue
        for acl_id in new:
            removed[acl_id] = MetadataRecord("RemoveAccessControlEntryRecord", {"id": acl_id})
        results.append(AclDeleteResult(deleted=tuple(acl for _, acl in matched)))
    return results, list(removed.values())


def sort_key(acl: Acl) -> tuple:
    """StandardAcl.compareTo: resource type, resource name DESCENDING, pattern type, operation, principal,
    host, permission (the name's descent as the negated code points, ended by a sentinel above them)."""
    descending_name = tuple(-ord(c) for c in acl.resource_name) + (1,)
    return (acl.resource_type, descending_name, acl.pattern_type, acl.operation, acl.principal, acl.host,
            acl.permission)


def describe_acls(acls: Mapping[object, Acl], acl_filter: AclFilter) -> list[tuple[tuple[int, str, int], list[Acl]]]:
    """The ACLs `acl_filter` matches, grouped by (resource type, name, pattern type), in sort_key order."""
    groups: dict[tuple[int, str, int], list[Acl]] = {}
    for acl in sorted((a for a in acls.values() if acl_filter.matches(a)), key=sort_key):
        groups.setdefault((acl.resource_type, acl.resource_name, acl.pattern_type), []).append(acl)
    return list(groups.items())
