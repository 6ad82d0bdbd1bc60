"""ACL decisions (klamm/controller/acl_changes.py): Kafka's AclControlManager rules for CreateAcls and
DeleteAcls (and its AclControlManagerTest cases), DescribeAcls' grouping and order, and the controller
writing, replaying and snapshotting the records."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator

import pytest

from klamm.controller.acl_changes import (MAX_RECORDS_PER_USER_OP, AclCreateResult, AclDeleteResult,
                                          decide_create_acls, decide_delete_acls, describe_acls, filter_error,
                                          sort_key)
from klamm.controller.acls import Acl, AclFilter, PatternType, Permission, ResourceType
from klamm.controller.controller import Controller, SnapshotPolicy
from klamm.controller.image import MetadataImage, apply_batch, empty_image
from klamm.controller.metadata_log import FileMetadataLog, InMemoryMetadataLog
from klamm.controller.records import decode_record, encode_record
from klamm.controller.snapshot import image_records
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode

CLUSTER = "AAAAAAAAAAAAAAAAAAAAAA"
T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED, MATCH, ANY = PatternType.LITERAL, PatternType.PREFIXED, PatternType.MATCH, PatternType.ANY
ALLOW, DENY = Permission.ALLOW, Permission.DENY
READ, WRITE, ALTER = AclOperation.READ, AclOperation.WRITE, AclOperation.ALTER
OK = AclCreateResult()


def acl(resource_type: int = T, name: str = "foo", pattern: int = LITERAL, principal: str = "User:alice",
        host: str = "*", operation: int = READ, permission: int = ALLOW) -> Acl:
    return Acl(resource_type, name, pattern, principal, host, operation, permission)


def match(resource_type: int = ResourceType.ANY, name: str | None = None, pattern: int = ANY,
          principal: str | None = None, host: str | None = None, operation: int = AclOperation.ANY,
          permission: int = Permission.ANY) -> AclFilter:
    return AclFilter(resource_type, name, pattern, principal, host, operation, permission)


def ids() -> Iterator[uuid.UUID]:
    return (uuid.UUID(int=i) for i in itertools.count(1))


def with_acls(*acls: Acl) -> MetadataImage:
    """An image holding `acls` (created in requests of at most MAX_RECORDS_PER_USER_OP), ids 1, 2, ..."""
    counter = ids()
    image = empty_image(CLUSTER, 1)
    for start in range(0, len(acls), MAX_RECORDS_PER_USER_OP):
        _, records = decide_create_acls(image, acls[start:start + MAX_RECORDS_PER_USER_OP], lambda: next(counter))
        image = apply_batch(image, enumerate(records, start=image.offset + 1))
    return image


def controller(log: InMemoryMetadataLog | FileMetadataLog | None = None, **kwargs) -> Controller:
    c = Controller(log or InMemoryMetadataLog(), 1, CLUSTER, **kwargs)
    c.load()
    return c


# ------------------------------------------------------------------ CreateAcls


def test_create_writes_one_record_per_new_acl_with_fresh_ids() -> None:
    image = with_acls(acl(name="existing"))
    taken = next(iter(image.acls))
    proposed = iter([taken, taken, uuid.UUID(int=99), uuid.UUID(int=100)])
    results, records = decide_create_acls(image, [acl(name="a"), acl(name="b", pattern=PREFIXED)],
                                          lambda: next(proposed))
    assert results == [OK, OK]
    assert [r.type for r in records] == ["AccessControlEntryRecord"] * 2
    assert [r.data["id"] for r in records] == [uuid.UUID(int=99), uuid.UUID(int=100)]  # an id in use is drawn again
    assert records[1].data == {"id": uuid.UUID(int=100), "resource_type": T, "resource_name": "b",
                               "pattern_type": PREFIXED, "principal": "User:alice", "host": "*", "operation": READ,
                               "permission_type": ALLOW}


def test_random_ids_by_default() -> None:
    _, records = decide_create_acls(empty_image(CLUSTER, 1), [acl(name="a"), acl(name="b")])
    first, second = (r.data["id"] for r in records)
    assert first != second and first.version == 4


def test_an_identical_acl_is_not_duplicated() -> None:
    image = with_acls(acl())
    results, records = decide_create_acls(image, [acl(), acl(name="new"), acl(name="new"), acl(host="10.0.0.1")])
    assert results == [OK] * 4  # success, as Kafka answers: ACLs are a set
    assert [(r.data["resource_name"], r.data["host"]) for r in records] == [("new", "*"), ("foo", "10.0.0.1")]


@pytest.mark.parametrize(("bad", "message"), [
    (acl(resource_type=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
    (acl(resource_type=ResourceType.ANY), "Invalid resourceType ANY"),
    (acl(resource_type=42), "Invalid resourceType UNKNOWN"),
    (acl(pattern=MATCH), "Invalid patternType MATCH"),
    (acl(pattern=ANY), "Invalid patternType ANY"),
    (acl(pattern=PatternType.UNKNOWN), "Invalid patternType UNKNOWN"),
    (acl(operation=AclOperation.ANY), "Invalid operation ANY"),
    (acl(operation=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
    (acl(permission=Permission.ANY), "Invalid permissionType ANY"),
    (acl(permission=Permission.UNKNOWN), "Invalid permissionType UNKNOWN"),
    (acl(name=""), "Resource name should not be empty"),
    (acl(principal="alice"), "Could not parse principal from `alice` (no colon is present separating the "
                             "principal type from the principal name)"),
    (acl(resource_type=C, name="other"), "The only valid name for the CLUSTER resource is kafka-cluster"),
])
def test_invalid_acls(bad: Acl, message: str) -> None:
    """AclControlManagerTest.testValidateNewAcl: INVALID_REQUEST, and the valid ones of the request still go."""
    results, records = decide_create_acls(empty_image(CLUSTER, 1), [bad, acl()])
    assert results == [AclCreateResult(ErrorCode.invalid_request, message), OK]
    assert len(records) == 1


def test_too_many_new_acls_fail_the_whole_request() -> None:
    many = [acl(name=f"t{i}") for i in range(MAX_RECORDS_PER_USER_OP + 1)]
    results, records = decide_create_acls(empty_image(CLUSTER, 1), many + [acl(principal="nope")])
    assert records == []
    assert set(results) == {AclCreateResult(ErrorCode.policy_violation,
                                            "Unable to perform excessively large batch operation.")}
    assert len(results) == len(many) + 1
    results, records = decide_create_acls(empty_image(CLUSTER, 1), many[:-1])  # exactly the limit
    assert len(records) == MAX_RECORDS_PER_USER_OP and set(results) == {OK}


# ------------------------------------------------------------------ DeleteAcls


def test_delete_removes_what_each_filter_matches() -> None:
    literal, prefixed, wildcard = acl(), acl(name="fo", pattern=PREFIXED), acl(name="*")
    group = acl(G, "g", principal="User:bob", permission=DENY)
    image = with_acls(literal, prefixed, wildcard, group)
    results, records = decide_delete_acls(image, [match(T, "foo", MATCH), match(principal="User:nobody")])
    assert results == [AclDeleteResult(deleted=(literal, prefixed, wildcard)), AclDeleteResult()]
    assert {r.type for r in records} == {"RemoveAccessControlEntryRecord"}
    removed = {r.data["id"] for r in records}
    assert {image.acls[i] for i in removed} == {literal, wildcard, prefixed}
    after = apply_batch(image, enumerate(records, start=image.offset + 1))
    assert list(after.acls.values()) == [group]
    assert not after.acl_index.authorize("User:alice", "h", READ, T, "foo", False)


def test_an_acl_two_filters_match_is_removed_once_and_reported_twice() -> None:
    image = with_acls(acl(), acl(operation=WRITE))
    results, records = decide_delete_acls(image, [match(T, "foo", LITERAL), match(operation=WRITE)])
    assert [r.deleted for r in results] == [(acl(), acl(operation=WRITE)), (acl(operation=WRITE),)]
    assert len(records) == 2


def test_filter_semantics() -> None:
    """ResourcePatternFilter / AccessControlEntryFilter.matches, as AclBindingFilterTest has them."""
    literal, prefixed, wildcard = acl(), acl(name="fo", pattern=PREFIXED), acl(name="*")
    image = with_acls(literal, prefixed, wildcard, acl(G, "foo"))

    def deleted(f: AclFilter) -> set[Acl]:
        return set(decide_delete_acls(image, [f])[0][0].deleted)

    assert deleted(match(T, "foo", ANY)) == {literal}  # ANY: the exact name, any pattern type
    assert deleted(match(T, "fo", ANY)) == {prefixed}
    assert deleted(match(T, "foo", LITERAL)) == {literal}
    assert deleted(match(T, "foo", PREFIXED)) == set()
    assert deleted(match(T, "foobar", MATCH)) == {prefixed, wildcard}
    assert deleted(match(T, None, MATCH)) == {literal, prefixed, wildcard}
    assert deleted(match(T, "*", LITERAL)) == {wildcard}
    assert deleted(match(name="foo")) == {literal, acl(G, "foo")}
    assert deleted(match(host="*", operation=READ, permission=ALLOW, principal="User:alice")) == {
        literal, prefixed, wildcard, acl(G, "foo")}
    assert deleted(match(host="10.0.0.1")) == set()


@pytest.mark.parametrize(("bad", "message"), [
    (match(resource_type=ResourceType.UNKNOWN), "Unknown patternFilter."),
    (match(resource_type=42), "Unknown patternFilter."),
    (match(pattern=PatternType.UNKNOWN), "Unknown patternFilter."),
    (match(pattern=9), "Unknown patternFilter."),
    (match(operation=AclOperation.UNKNOWN), "Unknown entryFilter."),
    (match(operation=99), "Unknown entryFilter."),
    (match(permission=Permission.UNKNOWN), "Unknown entryFilter."),
    (match(permission=8), "Unknown entryFilter."),
])
def test_unknown_filters(bad: AclFilter, message: str) -> None:
    """AclControlManager.validateFilter; the other filters of the request still delete."""
    assert filter_error(bad) == message
    results, records = decide_delete_acls(with_acls(acl()), [bad, match()])
    assert results == [AclDeleteResult(ErrorCode.invalid_request, message), AclDeleteResult(deleted=(acl(),))]
    assert len(records) == 1


def test_a_filter_over_the_record_limit_fails_alone() -> None:
    """At most MAX_RECORDS_PER_USER_OP removals per request; an ACL already removed by an earlier filter of the
    request costs nothing again."""
    many = [acl(name=f"t{i}") for i in range(MAX_RECORDS_PER_USER_OP - 1)]
    image = with_acls(*many, acl(G, "g1"), acl(G, "g2"))
    results, records = decide_delete_acls(image, [match(T), match(G, "g1"), match(G, "g2"), match(T, "t1")])
    assert [(r.error, len(r.deleted)) for r in results] == [
        (ErrorCode.none, MAX_RECORDS_PER_USER_OP - 1), (ErrorCode.none, 1), (ErrorCode.unknown_server_error, 0),
        (ErrorCode.none, 1)]
    assert len(records) == MAX_RECORDS_PER_USER_OP
    assert acl(G, "g2") not in {image.acls[r.data["id"]] for r in records}


# ------------------------------------------------------------------ DescribeAcls


def test_describe_groups_by_resource_in_the_authorizers_order() -> None:
    acls = [acl(name="a"), acl(name="b", operation=WRITE), acl(name="a", operation=WRITE),
            acl(name="a", pattern=PREFIXED), acl(G, "a"), acl(name="ab"), acl(C, "kafka-cluster", operation=ALTER)]
    image = with_acls(*acls)
    groups = describe_acls(image.acls, match())
    assert [(key, [a.operation for a in members]) for key, members in groups] == [
        ((T, "b", LITERAL), [WRITE]),
        ((T, "ab", LITERAL), [READ]),
        ((T, "a", LITERAL), [READ, WRITE]),
        ((T, "a", PREFIXED), [READ]),
        ((G, "a", LITERAL), [READ]),
        ((C, "kafka-cluster", LITERAL), [ALTER])]
    assert describe_acls(image.acls, match(T, "abc", MATCH)) == [((T, "a", PREFIXED), [acl(name="a", pattern=PREFIXED)])]
    assert describe_acls(image.acls, match(resource_type=42)) == []
    assert min(acls, key=sort_key) == acl(name="b", operation=WRITE)


# ------------------------------------------------------------------ the controller


def test_the_controller_commits_replays_and_snapshots(tmp_path) -> None:
    c = controller(FileMetadataLog.open(tmp_path), snapshots=SnapshotPolicy(max_bytes_between=1 << 30,
                                                                             max_interval_ms=0))
    end = c.log.end_offset
    assert c.create_acls([acl(), acl(name="p", pattern=PREFIXED), acl(principal="bad")])[:2] == [OK, OK]
    assert c.log.end_offset == end + 2  # one batch of two records
    assert c.create_acls([acl()]) == [OK] and c.log.end_offset == end + 2  # nothing new: nothing written
    assert set(c.image.acls.values()) == {acl(), acl(name="p", pattern=PREFIXED)}
    assert c.image.acl_index.authorize("User:alice", "h", READ, T, "foo", False)
    assert c.image.acl_index.authorize("User:alice", "h", READ, T, "pizza", False)
    results = c.delete_acls([match(T, "p", PREFIXED)])
    assert results == [AclDeleteResult(deleted=(acl(name="p", pattern=PREFIXED),))]
    assert not c.image.acl_index.authorize("User:alice", "h", READ, T, "pizza", False)
    assert c.delete_acls([match(T, "nothing")]) == [AclDeleteResult()] and c.log.end_offset == end + 3
    ids = dict(c.image.acls)

    snapshot = [r for r in image_records(c.image) if r.type == "AccessControlEntryRecord"]
    assert [decode_record(encode_record(r)).data["id"] for r in snapshot] == list(ids)
    c.snapshot()
    c.close()
    again = controller(FileMetadataLog.open(tmp_path))
    assert dict(again.image.acls) == ids
    assert again.image.acl_index.authorize("User:alice", "h", READ, T, "foo", False)
    again.close()
