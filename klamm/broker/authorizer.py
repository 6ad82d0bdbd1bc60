"""Whether a request's principal may do an operation on a resource: Kafka's StandardAuthorizer.

`authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer` turns it on;
the ACLs are those of the metadata image (klamm.controller.acls has the rule), `super.users`
may do anything, and `allow.everyone.if.no.acl.found` decides for resources without ACLs.
Without an authorizer every request is allowed (`ALLOW_ALL`), as in Kafka.

Handlers ask with the request (its session's principal, its client's address) and raise or
answer the operation's *_AUTHORIZATION_FAILED error themselves: which error, and whether a
denied resource is hidden or reported, is each API's own rule in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from klamm.config.broker import BrokerConfig
from klamm.controller.acls import CLUSTER_NAME, WILDCARD, PatternType, Permission, ResourceType
from klamm.protocol.acl import AclOperation, bit_field
from klamm.protocol.errors import ErrorCode, KafkaError

__all__ = ["ALLOW_ALL", "AllowAll", "Authorizer", "authorizer_for"]

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID


class AllowAll:
    """No authorizer configured: everything is allowed (the ACL APIs answer SECURITY_DISABLED)."""

    enabled = False

    def allowed(self, request: Any, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        return True

    def allowed_names(self, request: Any, operation: AclOperation, resource_type: ResourceType,
                      names: Iterable[str]) -> set[str]:
        return set(names)

    def require_cluster(self, request: Any, operation: AclOperation) -> None:
        pass

    def allowed_any(self, request: Any, operation: AclOperation, resource_type: ResourceType) -> bool:
        return True

    def operations(self, request: Any, resource_type: ResourceType, name: str, candidates: Iterable[AclOperation]) -> int:
        return bit_field(candidates)


ALLOW_ALL = AllowAll()


class Authorizer(AllowAll):
    """StandardAuthorizer over the current metadata image's ACLs."""

    enabled = True

    def __init__(self, config: BrokerConfig, image: Callable[[], Any]) -> None:
        self._image = image
        self.super_users = frozenset(u.strip() for u in config.super_users.split(";") if u.strip())
        self.allow_if_no_acls = config.allow_everyone_if_no_acl_found

    def allowed(self, request: Any, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        principal = _principal(request)
        if principal is None or principal in self.super_users:
            return True
        return self._image().acl_index.authorize(principal, _host(request), operation, resource_type, name,
                                                 self.allow_if_no_acls)

    def allowed_names(self, request: Any, operation: AclOperation, resource_type: ResourceType,
                      names: Iterable[str]) -> set[str]:
        principal = _principal(request)
        if principal is None or principal in self.super_users:
            return set(names)
        index, host = self._image().acl_index, _host(request)
        return {n for n in names if index.authorize(principal, host, operation, resource_type, n,
                                                    self.allow_if_no_acls)}

    def require_cluster(self, request: Any, operation: AclOperation) -> None:
        """Raise CLUSTER_AUTHORIZATION_FAILED unless the principal may do `operation` on the cluster."""
        if not self.allowed(request, operation, CLUSTER, CLUSTER_NAME):
            raise KafkaError(ErrorCode.cluster_authorization_failed,
                             f"Cluster authorization failed: {operation.name} is not allowed")

    def allowed_any(self, request: Any, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: may the principal do `operation` on some resource of the type?

        Yes when a probe name is allowed (super users, allow.everyone.if.no.acl.found, a wildcard or a
        matching prefix), else when one of the principal's ALLOW ACLs for the operation (or ALL) names a
        resource that no DENY of it covers: a wildcard DENY denies all, a LITERAL DENY its name, a PREFIXED
        DENY every name it starts. Implied operations do not count here (Kafka's default implementation)."""
        if self.allowed(request, operation, resource_type, "hardcode"):
            return True
        principals, host = (_principal(request), "User:*"), _host(request)
        denied: dict[int, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        allowed: list[tuple[int, str]] = []
        wildcard_allowed = False
        for acl in self._image().acls.values():
            if (acl.resource_type != resource_type or acl.principal not in principals
                    or acl.host not in (WILDCARD, host) or acl.operation not in (operation, AclOperation.ALL)):
                continue
            if acl.permission == Permission.DENY:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    return False
                denied.setdefault(acl.pattern_type, set()).add(acl.resource_name)
            elif acl.permission == Permission.ALLOW:
                if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                    wildcard_allowed = True
                allowed.append((acl.pattern_type, acl.resource_name))
        if wildcard_allowed:
            return True
        prefixes = denied[PatternType.PREFIXED]
        return any(not (pattern == PatternType.LITERAL and name in denied[PatternType.LITERAL])
                   and not any(name[:n] in prefixes for n in range(1, len(name) + 1))
                   for pattern, name in allowed)

    def operations(self, request: Any, resource_type: ResourceType, name: str, candidates: Iterable[AclOperation]) -> int:
        """Kafka's authorized-operations bit field: the candidates this principal may do on the resource."""
        return bit_field(op for op in candidates if self.allowed(request, op, resource_type, name))


def authorizer_for(config: BrokerConfig, image: Callable[[], Any]) -> AllowAll:
    return Authorizer(config, image) if config.authorizer_class_name else ALLOW_ALL


def _principal(request: Any) -> str | None:
    """The request's principal; None for klamm's own requests between its nodes (no session, or the
    controller listener's), which their first node authorized."""
    session = request.session
    return None if session is None or session.internal else session.principal


def _host(request: Any) -> str:
    return request.client_host.lstrip("/")
