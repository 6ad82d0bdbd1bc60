"""The StandardAuthorizer rule (klamm.controller.acls): Kafka's documented cases, and the index agreeing with a
plain scan of every ACL for any set of ACLs and any request."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from klamm.controller.acls import Acl, AclFilter, AclIndex, PatternType, Permission, ResourceType, invalid_acl
from klamm.protocol.acl import AclOperation as Op

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(name: str, op: Op, permission: Permission = ALLOW, principal: str = "User:alice", host: str = "*",
        pattern: PatternType = LITERAL, resource: ResourceType = TOPIC) -> Acl:
    return Acl(resource, name, pattern, principal, host, op, permission)


def allowed(acls: list[Acl], op: Op, name: str, principal: str = "User:alice", host: str = "10.0.0.1",
            resource: ResourceType = TOPIC, allow_if_none: bool = False) -> bool:
    return AclIndex(acls).authorize(principal, host, op, resource, name, allow_if_none)


def test_literal_prefixed_and_wildcard_names() -> None:
    acls = [acl("orders", Op.READ), acl("pay", Op.WRITE, pattern=PREFIXED), acl("*", Op.DESCRIBE, resource=GROUP)]
    assert allowed(acls, Op.READ, "orders")
    assert not allowed(acls, Op.READ, "orders2")  # a literal name is not a prefix
    assert allowed(acls, Op.WRITE, "payments") and allowed(acls, Op.WRITE, "pay")
    assert not allowed(acls, Op.WRITE, "pa")
    assert allowed(acls, Op.DESCRIBE, "any-group", resource=GROUP)
    assert not allowed(acls, Op.READ, "any-group", resource=GROUP)


def test_deny_wins_and_does_not_imply() -> None:
    acls = [acl("t", Op.ALL), acl("t", Op.WRITE, DENY)]
    assert allowed(acls, Op.READ, "t")
    assert not allowed(acls, Op.WRITE, "t")
    # a DENY of READ leaves DESCRIBE alone; an ALLOW of READ implies it
    acls = [acl("t", Op.READ), acl("t", Op.READ, DENY, principal="User:bob")]
    assert allowed(acls, Op.DESCRIBE, "t", principal="User:bob") is False  # no ALLOW for bob, but ACLs exist
    assert allowed(acls, Op.DESCRIBE, "t")
    # a DENY anywhere in the matching patterns wins over a literal ALLOW
    assert not allowed([acl("t", Op.READ), acl("*", Op.READ, DENY)], Op.READ, "t")
    assert not allowed([acl("t", Op.READ), acl("", Op.ALL, DENY, pattern=PREFIXED)], Op.READ, "t")


def test_implied_operations_only_for_allow() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed([acl("t", op)], Op.DESCRIBE, "t")
    assert not allowed([acl("t", Op.CREATE)], Op.DESCRIBE, "t")
    assert allowed([acl("t", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS, "t")
    assert not allowed([acl("t", Op.DESCRIBE_CONFIGS)], Op.ALTER_CONFIGS, "t")


def test_principals_hosts_and_no_acls() -> None:
    acls = [acl("t", Op.READ, principal="User:*", host="10.0.0.1")]
    assert allowed(acls, Op.READ, "t", principal="User:bob")
    assert not allowed(acls, Op.READ, "t", principal="User:bob", host="10.0.0.2")
    assert not allowed([], Op.READ, "t")
    assert allowed([], Op.READ, "t", allow_if_none=True)
    # allow.everyone.if.no.acl.found only helps resources without any ACL
    assert not allowed([acl("t", Op.WRITE, principal="User:bob")], Op.READ, "t", allow_if_none=True)
    assert allowed([acl("u", Op.WRITE, principal="User:bob")], Op.READ, "t", allow_if_none=True)


def test_invalid_acls_are_named() -> None:
    assert invalid_acl(acl("t", Op.ANY)) == "Invalid operation ANY"
    assert invalid_acl(acl("t", Op.READ, Permission.ANY)) == "Invalid permissionType ANY"
    assert invalid_acl(acl("t", Op.READ, pattern=PatternType.MATCH)) == "Invalid patternType MATCH"
    assert invalid_acl(acl("", Op.READ)) == "Resource name should not be empty"
    assert "Could not parse principal" in (invalid_acl(acl("t", Op.READ, principal="alice")) or "")
    assert "kafka-cluster" in (invalid_acl(acl("c", Op.ALTER, resource=CLUSTER)) or "")
    assert invalid_acl(acl("kafka-cluster", Op.ALTER, resource=CLUSTER)) is None


def test_filters_match_as_kafka() -> None:
    literal, prefixed, wildcard = acl("orders", Op.READ), acl("ord", Op.READ, pattern=PREFIXED), acl("*", Op.READ)
    match = AclFilter(TOPIC, "orders", PatternType.MATCH, None, None, Op.ANY, Permission.ANY)
    assert all(match.matches(a) for a in (literal, prefixed, wildcard))
    exact = AclFilter(TOPIC, "orders", PatternType.ANY, None, None, Op.ANY, Permission.ANY)
    assert exact.matches(literal) and not exact.matches(prefixed) and not exact.matches(wildcard)
    only_prefixed = AclFilter(ResourceType.ANY, None, PREFIXED, "User:alice", None, Op.READ, ALLOW)
    assert only_prefixed.matches(prefixed) and not only_prefixed.matches(literal)
    assert not AclFilter(TOPIC, None, PatternType.ANY, "User:bob", None, Op.ANY, Permission.ANY).matches(literal)


NAMES = st.sampled_from(["a", "ab", "abc", "b", "*", "ba"])
ACLS = st.builds(Acl, st.sampled_from([TOPIC, GROUP]), NAMES, st.sampled_from([LITERAL, PREFIXED]),
                 st.sampled_from(["User:alice", "User:bob", "User:*"]), st.sampled_from(["*", "h1"]),
                 st.sampled_from([Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]),
                 st.sampled_from([ALLOW, DENY]))


@settings(max_examples=400, deadline=None)
@given(st.lists(ACLS, max_size=12), st.sampled_from([TOPIC, GROUP]), st.sampled_from(["a", "ab", "abc", "b", "c"]),
       st.sampled_from(["User:alice", "User:bob"]), st.sampled_from(["h1", "h2"]),
       st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]), st.booleans())
def test_the_index_agrees_with_a_scan(acls: list[Acl], resource: ResourceType, name: str, principal: str, host: str,
                                      op: Op, allow_if_none: bool) -> None:
    applying = [a for a in acls
                if AclFilter(resource, name, PatternType.MATCH, None, None, Op.ANY, Permission.ANY).matches(a)]
    verdicts = [a.verdict((principal, "User:*"), host, op) for a in applying]
    expected = False if False in verdicts else True if True in verdicts else (not applying and allow_if_none)
    assert AclIndex(acls).authorize(principal, host, op, resource, name, allow_if_none) is expected
