"""ACLs as the metadata log keeps them, and the authorization rule Kafka's StandardAuthorizer applies.

An ACL allows or denies one principal (or `User:*`), from one host (or `*`), one operation on
the resources its pattern names: a LITERAL name (`*` is every name), or a PREFIXED one. The
rule for a request (principal, host, operation, resource):
  * super users may do anything;
  * a matching DENY wins over everything (a DENY of READ does not deny DESCRIBE);
  * else a matching ALLOW allows; an ALLOW of READ, WRITE, DELETE or ALTER also allows
    DESCRIBE, and one of ALTER_CONFIGS also DESCRIBE_CONFIGS; ALL matches every operation;
  * else, when the resource has no ACL at all, allow.everyone.if.no.acl.found decides;
    otherwise it is denied.
Describe and delete filters match as Kafka's AclBindingFilter does (ANY, MATCH, null as "any").
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from klamm.protocol.acl import AclOperation

__all__ = ["Acl", "AclFilter", "AclIndex", "PatternType", "Permission", "ResourceType", "invalid_acl"]

WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
CLUSTER_NAME = "kafka-cluster"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_IMPLIES_DESCRIBE = frozenset((AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                               AclOperation.ALTER))
_IMPLIES_DESCRIBE_CONFIGS = frozenset((AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS))


@dataclass(frozen=True, slots=True)
class Acl:
    """One access control entry (AccessControlEntryRecord without its id)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def verdict(self, principals: tuple[str, str], host: str, operation: int) -> bool | None:
        """True (allow), False (deny), or None when this ACL says nothing about the request."""
        if self.principal not in principals or (self.host != WILDCARD and self.host != host):
            return None
        if self.operation != AclOperation.ALL:
            if self.permission == Permission.ALLOW:
                if operation == AclOperation.DESCRIBE:
                    if self.operation not in _IMPLIES_DESCRIBE:
                        return None
                elif operation == AclOperation.DESCRIBE_CONFIGS:
                    if self.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                        return None
                elif operation != self.operation:
                    return None
            elif operation != self.operation:
                return None
        return self.permission == Permission.ALLOW


def invalid_acl(acl: Acl) -> str | None:
    """Why CreateAcls refuses this ACL (INVALID_REQUEST), or None (Kafka's AclControlManager checks)."""
    if acl.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or acl.resource_type not in ResourceType._value2member_map_:
        return f"Invalid resourceType {_name(ResourceType, acl.resource_type)}"
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {_name(PatternType, acl.pattern_type)}"
    if acl.operation in (AclOperation.UNKNOWN, AclOperation.ANY) or acl.operation not in AclOperation._value2member_map_:
        return f"Invalid operation {_name(AclOperation, acl.operation)}"
    if acl.permission not in (Permission.DENY, Permission.ALLOW):
        return f"Invalid permissionType {_name(Permission, acl.permission)}"
    if not acl.resource_name:
        return "Resource name should not be empty"
    if ":" not in acl.principal:
        return f"Could not parse principal from `{acl.principal}` (no colon is present separating the principal " \
               "type from the principal name)"
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    return None


def _name(kind: type[enum.IntEnum], value: int) -> str:
    member = kind._value2member_map_.get(value)
    return member.name if member is not None else "UNKNOWN"


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls filter or a DeleteAcls filter; None fields match anything."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, acl: Acl) -> bool:
        return (self._matches_resource(acl)
                and (self.principal is None or self.principal == acl.principal)
                and (self.host is None or self.host == acl.host)
                and self.operation in (AclOperation.ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))

    def _matches_resource(self, acl: Acl) -> bool:
        if self.resource_type not in (ResourceType.ANY, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, acl.pattern_type):
            return self.resource_name == acl.resource_name
        if acl.pattern_type == PatternType.LITERAL:  # MATCH: the ACLs that would apply to this name
            return acl.resource_name in (self.resource_name, WILDCARD)
        return self.resource_name.startswith(acl.resource_name)

    def invalid(self) -> str | None:
        """Why a filter cannot match anything Kafka could store (Kafka's AclBindingFilter.findIndefiniteField
        is for deletes only; unknown enum values are refused for both)."""
        for kind, value in ((ResourceType, self.resource_type), (PatternType, self.pattern_type),
                            (AclOperation, self.operation), (Permission, self.permission)):
            if value not in kind._value2member_map_ or value == 0:
                return f"Invalid {kind.__name__} {value}"
        return None


class AclIndex:
    """The ACLs of an image, arranged for authorize(): by resource type, then literal name or prefix."""

    __slots__ = ("_literal", "_prefixed", "_prefix_lengths")

    def __init__(self, acls: Iterable[Acl]) -> None:
        self._literal: dict[tuple[int, str], list[Acl]] = {}
        self._prefixed: dict[tuple[int, str], list[Acl]] = {}
        self._prefix_lengths: dict[int, list[int]] = {}
        for acl in acls:
            table = self._literal if acl.pattern_type == PatternType.LITERAL else self._prefixed
            table.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
        lengths: dict[int, set[int]] = {}
        for resource_type, prefix in self._prefixed:
            lengths.setdefault(resource_type, set()).add(len(prefix))
        self._prefix_lengths = {t: sorted(ls) for t, ls in lengths.items()}

    def __bool__(self) -> bool:
        return bool(self._literal or self._prefixed)

    def authorize(self, principal: str, host: str, operation: int, resource_type: int, name: str,
                  allow_if_no_acls: bool) -> bool:
        principals = (principal, WILDCARD_PRINCIPAL)
        allowed = found = False
        for acl in self._candidates(resource_type, name):
            found = True
            verdict = acl.verdict(principals, host, operation)
            if verdict is False:
                return False
            allowed = allowed or verdict is True
        return allowed or (not found and allow_if_no_acls)

    def _candidates(self, resource_type: int, name: str) -> Iterator[Acl]:
        yield from self._literal.get((resource_type, name), ())
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            yield from self._prefixed.get((resource_type, name[:length]), ())
        if name != WILDCARD:
            yield from self._literal.get((resource_type, WILDCARD), ())


def matching(acls: Mapping[object, Acl], acl_filter: AclFilter) -> list[tuple[object, Acl]]:
    """The (id, ACL) pairs a filter matches, in a stable order."""
    return [(acl_id, acl) for acl_id, acl in acls.items() if acl_filter.matches(acl)]
