"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31) through the wire, against a broker with the
StandardAuthorizer (tests/integration/secured.py: SASL PLAIN users admin, alice, bob; User:admin a super user).

With confluent-kafka's AdminClient, with raw requests for what librdkafka will not send (UNKNOWN and ANY
codes, invalid ACLs, v0), across a restart, without an authorizer (SECURITY_DISABLED), with `klamm acls`,
and in a cluster: ACLs created and deleted at a broker-only node (forwarded to the controller) show at
every node.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from klamm.cli.main import main

from tests.integration.conftest import BrokerThread, RawClient, two_node_configs, wait_for
from tests.integration.secured import acl, conf, secured_broker

pytestmark = pytest.mark.timeout(120)

DESCRIBE, CREATE, DELETE = 29, 30, 31
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
NONE, UNKNOWN_SERVER_ERROR, CLUSTER_AUTHORIZATION_FAILED, NOT_CONTROLLER, INVALID_REQUEST = 0, -1, 31, 41, 42
SECURITY_DISABLED = 54
# Kafka's codes: resource types, pattern types, operations, permissions
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ALL, READ, WRITE, CREATE_OP, ALTER, OP_DESCRIBE = 2, 3, 4, 5, 7, 8
DENY, ALLOW = 2, 3


def admin(broker: BrokerThread, user: str | None = "admin") -> AdminClient:
    """An admin client connecting as `user`, or over PLAINTEXT (User:ANONYMOUS) when None."""
    settings = conf(broker, user) if user else {"bootstrap.servers": f"127.0.0.1:{broker.port}"}
    return AdminClient({**settings, "socket.timeout.ms": "10000"})


def create(broker: BrokerThread, *bindings: AclBinding, user: str | None = "admin") -> None:
    client = admin(broker, user)  # kept until the futures are done: a destroyed client fails them
    for future in client.create_acls(list(bindings)).values():
        future.result(15)


def described(broker: BrokerThread, acl_filter: AclBindingFilter, user: str | None = "admin") -> set[AclBinding]:
    client = admin(broker, user)
    return set(client.describe_acls(acl_filter).result(15))


def any_filter(resource: ResourceType = ResourceType.ANY, name: str | None = None,
               pattern: ResourcePatternType = ResourcePatternType.ANY, principal: str | None = None,
               operation: AclOperation = AclOperation.ANY,
               permission: AclPermissionType = AclPermissionType.ANY) -> AclBindingFilter:
    return AclBindingFilter(resource, name, pattern, principal, None, operation, permission)


EVERYTHING = any_filter()


class SaslClient(RawClient):
    """A RawClient that authenticates with SASL PLAIN first (not when `user` is None: PLAINTEXT)."""

    def __init__(self, broker: BrokerThread, user: str | None) -> None:
        super().__init__(broker.port)
        if user is None:
            return
        assert self.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == NONE
        token = b"\0" + user.encode() + b"\0" + f"{user}-secret".encode()
        assert self.request(SASL_AUTHENTICATE, 2, {"auth_bytes": token}).error_code == NONE


def creation(resource_type: int = TOPIC, name: str = "orders", pattern: int = LITERAL, principal: str = "User:alice",
             host: str = "*", operation: int = READ, permission: int = ALLOW) -> dict[str, Any]:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern,
            "principal": principal, "host": host, "operation": operation, "permission_type": permission}


def delete_filter(resource_type: int = ANY, name: str | None = None, pattern: int = ANY, principal: str | None = None,
                  host: str | None = None, operation: int = ANY, permission: int = ANY) -> dict[str, Any]:
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": pattern,
            "principal_filter": principal, "host_filter": host, "operation": operation, "permission_type": permission}


def raw_create(broker: BrokerThread, *creations: dict[str, Any], user: str | None = "admin",
               version: int = 3) -> list[tuple[int, str | None]]:
    with SaslClient(broker, user) as client:
        response = client.request(CREATE, version, {"creations": list(creations)})
    return [(r.error_code, r.error_message) for r in response.results]


def raw_delete(broker: BrokerThread, *filters: dict[str, Any], user: str | None = "admin", version: int = 3) -> Any:
    with SaslClient(broker, user) as client:
        return client.request(DELETE, version, {"filters": list(filters)}).filter_results


def raw_describe(broker: BrokerThread, user: str = "admin", version: int = 3, **fields: Any) -> Any:
    with SaslClient(broker, user) as client:
        return client.request(DESCRIBE, version, {**delete_filter(), **fields})


def stored(broker: BrokerThread) -> set[tuple[int, str, int, str, str, int, int]]:
    """The ACLs of the node's image, as tuples."""
    acls = broker.call(lambda: list(broker.broker.controller.image.acls.values()))
    return {(a.resource_type, a.resource_name, a.pattern_type, a.principal, a.host, a.operation, a.permission)
            for a in acls}


@pytest.fixture
def secured(broker_factory: Any) -> BrokerThread:
    return secured_broker(broker_factory)


# ------------------------------------------------------------------ CreateAcls / DescribeAcls / DeleteAcls


def test_create_describe_and_delete_with_the_admin_client(secured: BrokerThread) -> None:
    literal = acl("alice", ResourceType.TOPIC, "orders", AclOperation.READ)
    prefixed = acl("alice", ResourceType.TOPIC, "pay", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED)
    wildcard = acl("bob", ResourceType.TOPIC, "*", AclOperation.DESCRIBE)
    denied = acl("bob", ResourceType.GROUP, "g1", AclOperation.READ, AclPermissionType.DENY, host="10.0.0.1")
    cluster = acl("alice", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    create(secured, literal, prefixed, wildcard, denied, cluster)
    assert described(secured, EVERYTHING) == {literal, prefixed, wildcard, denied, cluster}

    # LITERAL: the exact pattern only; MATCH: every ACL that applies to the name; ANY: any pattern of that name.
    assert described(secured, any_filter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL)) == {literal}
    assert described(secured, any_filter(ResourceType.TOPIC, "payments", ResourcePatternType.MATCH)) == {
        prefixed, wildcard}
    assert described(secured, any_filter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH)) == {
        literal, wildcard}
    assert described(secured, any_filter(ResourceType.TOPIC, "pay", ResourcePatternType.ANY)) == {prefixed}
    assert described(secured, any_filter(ResourceType.TOPIC, None, ResourcePatternType.PREFIXED)) == {prefixed}
    assert described(secured, any_filter(principal="User:bob")) == {wildcard, denied}
    assert described(secured, any_filter(operation=AclOperation.READ)) == {literal, denied}
    assert described(secured, any_filter(permission=AclPermissionType.DENY)) == {denied}
    assert described(secured, any_filter(ResourceType.GROUP, "nothing", ResourcePatternType.MATCH)) == set()

    # Delete: each filter's matches come back, and are gone.
    client = admin(secured)
    futures = client.delete_acls([any_filter(ResourceType.TOPIC, "payments", ResourcePatternType.MATCH),
                                  any_filter(principal="User:nobody")])
    results = [f.result(15) for f in futures.values()]
    assert [set(r) for r in results] == [{prefixed, wildcard}, set()]
    assert described(secured, EVERYTHING) == {literal, denied, cluster}
    assert set(client.delete_acls([EVERYTHING])[EVERYTHING].result(15)) == {literal, denied, cluster}
    assert described(secured, EVERYTHING) == set()


def test_a_duplicate_is_created_once(secured: BrokerThread) -> None:
    binding = acl("alice", ResourceType.TOPIC, "orders", AclOperation.READ)
    create(secured, binding)
    create(secured, binding)  # again: librdkafka refuses one binding twice in a call, raw requests do not
    assert raw_create(secured, creation(), creation()) == [(NONE, None), (NONE, None)]
    assert len(stored(secured)) == 1
    ids = secured.call(lambda: list(secured.broker.controller.image.acls))
    assert len(ids) == 1 and ids[0].version == 4  # a random UUID
    create(secured, acl("alice", ResourceType.TOPIC, "orders", AclOperation.READ, host="10.0.0.1"))
    assert len(stored(secured)) == 2


def test_alice_without_alter_on_the_cluster_is_refused(secured: BrokerThread) -> None:
    binding = acl("alice", ResourceType.TOPIC, "orders", AclOperation.READ)
    with pytest.raises(KafkaException) as refused:
        create(secured, binding, user="alice")
    assert refused.value.args[0].code() == CLUSTER_AUTHORIZATION_FAILED
    assert [code for code, _ in raw_create(secured, creation(), creation(name="x"), user="alice")] == [
        CLUSTER_AUTHORIZATION_FAILED] * 2
    # (librdkafka's describe_acls drops DescribeAcls' top-level error and reports no ACLs: asked raw.)
    response = raw_describe(secured, user="alice")
    assert (response.error_code, response.resources) == (CLUSTER_AUTHORIZATION_FAILED, ())
    create(secured, binding)
    alices = admin(secured, "alice")
    with pytest.raises(KafkaException) as refused:
        alices.delete_acls([EVERYTHING])[EVERYTHING].result(15)
    assert refused.value.args[0].code() == CLUSTER_AUTHORIZATION_FAILED
    assert [r.error_code for r in raw_delete(secured, delete_filter(), delete_filter(), user="alice")] == [
        CLUSTER_AUTHORIZATION_FAILED] * 2
    assert len(stored(secured)) == 1

    # ALTER on the cluster lets her create and delete, and implies DESCRIBE.
    create(secured, acl("alice", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER))
    other = acl("bob", ResourceType.GROUP, "g", AclOperation.READ)
    create(secured, other, user="alice")
    assert other in described(secured, EVERYTHING, user="alice")
    # DESCRIBE alone lets bob describe, not create.
    create(secured, acl("bob", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE))
    assert other in described(secured, EVERYTHING, user="bob")
    assert raw_create(secured, creation(), user="bob")[0][0] == CLUSTER_AUTHORIZATION_FAILED
    # A DENY wins over the ALLOW.
    create(secured, acl("alice", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER, AclPermissionType.DENY))
    assert raw_create(secured, creation(name="y"), user="alice")[0][0] == CLUSTER_AUTHORIZATION_FAILED


def test_allow_everyone_if_no_acl_found_lets_anyone_alter_acls(broker_factory: Any) -> None:
    """The cluster resource has no ACL: allow.everyone.if.no.acl.found=true lets alice (no super user) in."""
    broker = secured_broker(broker_factory, **{"allow.everyone.if.no.acl.found": "true"})
    binding = acl("bob", ResourceType.TOPIC, "orders", AclOperation.READ)
    create(broker, binding, user="alice")
    assert described(broker, EVERYTHING, user="bob") == {binding}
    # Once the cluster has an ACL (of someone else), the default no longer applies to it.
    create(broker, acl("bob", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER), user="alice")
    assert raw_create(broker, creation(), user="alice")[0][0] == CLUSTER_AUTHORIZATION_FAILED
    assert raw_create(broker, creation(), user="bob") == [(NONE, None)]


def test_invalid_acls_are_refused_with_kafkas_messages(secured: BrokerThread) -> None:
    assert raw_create(secured, creation(CLUSTER, "my-cluster", operation=ALTER), creation(name=""),
                      creation(TRANSACTIONAL_ID, "", PREFIXED), creation(principal="alice"),
                      creation(resource_type=42), creation(pattern=9), creation(operation=77),
                      creation(permission=8), creation(name="fine")) == [
        (INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (INVALID_REQUEST, "Invalid empty resource name"),
        (INVALID_REQUEST, "Invalid empty resource name"),
        (INVALID_REQUEST, "Could not parse principal from `alice` (no colon is present separating the principal "
                          "type from the principal name)"),
        (INVALID_REQUEST, "Invalid resourceType UNKNOWN"),
        (INVALID_REQUEST, "Invalid patternType UNKNOWN"),
        (INVALID_REQUEST, "Invalid operation UNKNOWN"),
        (INVALID_REQUEST, "Invalid permissionType UNKNOWN"),
        (NONE, None)]
    assert stored(secured) == {(TOPIC, "fine", LITERAL, "User:alice", "*", READ, ALLOW)}
    # ANY or MATCH where a binding needs a specific value: Kafka cannot build the AclBinding, and the whole
    # request fails UNKNOWN_SERVER_ERROR.
    for bad in (creation(resource_type=ANY), creation(pattern=MATCH), creation(pattern=ANY),
                creation(operation=ANY), creation(permission=ANY)):
        assert raw_create(secured, creation(name="other"), bad) == [(UNKNOWN_SERVER_ERROR, None)] * 2
    assert len(stored(secured)) == 1


def test_unknown_codes_close_the_connection(secured: BrokerThread) -> None:
    """Kafka fails to parse a request holding UNKNOWN (0) codes, and closes the connection."""
    with SaslClient(secured, "admin") as client:
        client.send(CREATE, 3, {"creations": [creation(), creation(operation=0)]})
        client.expect_disconnect()
    with SaslClient(secured, "admin") as client:
        client.send(DELETE, 3, {"filters": [delete_filter(resource_type=0)]})
        client.expect_disconnect()
    with SaslClient(secured, "admin") as client:
        client.send(DESCRIBE, 3, delete_filter(permission=0))
        client.expect_disconnect()
    assert stored(secured) == set()


def test_delete_filters(secured: BrokerThread) -> None:
    raw_create(secured, creation(), creation(name="orders", pattern=PREFIXED), creation(name="*"),
               creation(GROUP, "g", principal="User:bob", permission=DENY),
               creation(name="orders", principal="User:bob", host="10.0.0.2", operation=WRITE))
    # Unknown pattern or entry filters: INVALID_REQUEST with Kafka's messages, nothing removed.
    results = raw_delete(secured, delete_filter(resource_type=42), delete_filter(pattern=9),
                         delete_filter(operation=99), delete_filter(permission=7))
    assert [(r.error_code, r.error_message, len(r.matching_acls)) for r in results] == [
        (INVALID_REQUEST, "Unknown patternFilter.", 0), (INVALID_REQUEST, "Unknown patternFilter.", 0),
        (INVALID_REQUEST, "Unknown entryFilter.", 0), (INVALID_REQUEST, "Unknown entryFilter.", 0)]
    assert len(stored(secured)) == 5
    # Two filters matching the same ACL both report it; it is removed once.
    results = raw_delete(secured, delete_filter(TOPIC, "orders", LITERAL, host="10.0.0.2"),
                         delete_filter(principal="User:bob", operation=WRITE))
    matched = [[(m.error_code, m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                 m.permission_type) for m in r.matching_acls] for r in results]
    bobs = (NONE, TOPIC, "orders", LITERAL, "User:bob", "10.0.0.2", WRITE, ALLOW)
    assert matched == [[bobs], [bobs]]
    assert len(stored(secured)) == 4
    # MATCH: every ACL that applies to the name (literal, prefixed, wildcard), and nothing else.
    results = raw_delete(secured, delete_filter(TOPIC, "orders-eu", MATCH))
    assert {(m.resource_name, m.pattern_type) for m in results[0].matching_acls} == {("orders", PREFIXED),
                                                                                    ("*", LITERAL)}
    assert stored(secured) == {(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW),
                               (GROUP, "g", LITERAL, "User:bob", "*", READ, DENY)}
    # v0 filters see LITERAL ACLs only.
    raw_create(secured, creation(name="ord", pattern=PREFIXED))
    results = raw_delete(secured, delete_filter(TOPIC), version=0)
    assert [m.resource_name for m in results[0].matching_acls] == ["orders"]
    assert stored(secured) == {(GROUP, "g", LITERAL, "User:bob", "*", READ, DENY),
                               (TOPIC, "ord", PREFIXED, "User:alice", "*", READ, ALLOW)}


def test_describe_groups_by_resource(secured: BrokerThread) -> None:
    raw_create(secured, creation(name="a"), creation(name="b", operation=WRITE), creation(name="a", operation=WRITE),
               creation(name="a", pattern=PREFIXED), creation(GROUP, "a"), creation(CLUSTER, "kafka-cluster",
                                                                                    operation=ALTER))
    for version in (1, 2, 3):
        response = raw_describe(secured, version=version)
        assert (response.error_code, response.error_message) == (NONE, None)
        assert [(r.resource_type, r.resource_name, r.pattern_type, [(a.operation, a.principal) for a in r.acls])
                for r in response.resources] == [
            (TOPIC, "b", LITERAL, [(WRITE, "User:alice")]),
            (TOPIC, "a", LITERAL, [(READ, "User:alice"), (WRITE, "User:alice")]),
            (TOPIC, "a", PREFIXED, [(READ, "User:alice")]),
            (GROUP, "a", LITERAL, [(READ, "User:alice")]),
            (CLUSTER, "kafka-cluster", LITERAL, [(ALTER, "User:alice")])]
    # v0: LITERAL only (its filter has no pattern type).
    response = raw_describe(secured, version=0, resource_type_filter=TOPIC, resource_name_filter="a")
    assert [(r.resource_name, len(r.acls)) for r in response.resources] == [("a", 2)]
    # Unknown codes in a describe filter match nothing (no error).
    assert raw_describe(secured, resource_type_filter=42).resources == ()
    refused = raw_describe(secured, user="bob")
    assert (refused.error_code, refused.resources) == (CLUSTER_AUTHORIZATION_FAILED, ())


def test_acls_survive_a_restart(secured: BrokerThread) -> None:
    raw_create(secured, creation(), creation(name="p", pattern=PREFIXED), creation(GROUP, "g", permission=DENY))
    raw_delete(secured, delete_filter(GROUP))
    before = stored(secured)
    ids = secured.call(lambda: dict(secured.broker.controller.image.acls))
    secured.restart()
    assert stored(secured) == before == {(TOPIC, "orders", LITERAL, "User:alice", "*", READ, ALLOW),
                                         (TOPIC, "p", PREFIXED, "User:alice", "*", READ, ALLOW)}
    assert secured.call(lambda: dict(secured.broker.controller.image.acls)) == ids
    # And they are in force: alice may read "orders" only.
    assert secured.call(lambda: secured.broker.controller.image.acl_index.authorize(
        "User:alice", "127.0.0.1", READ, TOPIC, "orders", False))


def test_without_an_authorizer_security_is_disabled(broker: BrokerThread) -> None:
    with RawClient(broker.port) as client:
        for version in range(4):
            response = client.request(DESCRIBE, version, delete_filter(resource_type=TOPIC, pattern=LITERAL))
            assert (response.error_code, response.error_message) == (SECURITY_DISABLED,
                                                                     "No Authorizer is configured on the broker")
            response = client.request(CREATE, version, {"creations": [creation(), creation(operation=0)]})
            assert [(r.error_code, r.error_message) for r in response.results] == [
                (SECURITY_DISABLED, "No Authorizer is configured.")] * 2
            response = client.request(DELETE, version, {"filters": [delete_filter(TOPIC, pattern=LITERAL)]})
            assert [(r.error_code, r.error_message) for r in response.filter_results] == [
                (SECURITY_DISABLED, "No Authorizer is configured.")]
    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    binding = acl("alice", ResourceType.TOPIC, "orders", AclOperation.READ)
    with pytest.raises(KafkaException) as refused:
        client.create_acls([binding])[binding].result(15)
    assert refused.value.args[0].code() == SECURITY_DISABLED
    assert stored(broker) == set()


# ------------------------------------------------------------------ SCRAM users need the cluster


def test_scram_credentials_need_describe_and_alter_on_the_cluster(secured: BrokerThread) -> None:
    upsert = {"deletions": [{"name": "carol", "mechanism": 1}], "upsertions": [
        {"name": "dave", "mechanism": 2, "iterations": 4096, "salt": b"s", "salted_password": b"p"},
        {"name": "bob", "mechanism": 1, "iterations": 4096, "salt": b"s", "salted_password": b"p"}]}
    with SaslClient(secured, "alice") as client:
        refused = client.request(51, 0, upsert)
        assert [(r.user, r.error_code) for r in refused.results] == [
            ("bob", CLUSTER_AUTHORIZATION_FAILED), ("carol", CLUSTER_AUTHORIZATION_FAILED),
            ("dave", CLUSTER_AUTHORIZATION_FAILED)]
        # Kafka's error response: the top-level error, and one nameless result per user asked about.
        refused = client.request(50, 0, {"users": [{"name": "bob"}, {"name": "bob"}]})
        assert (refused.error_code, refused.error_message) == (CLUSTER_AUTHORIZATION_FAILED, None)
        assert [(r.user, r.error_code) for r in refused.results] == [("", CLUSTER_AUTHORIZATION_FAILED)] * 2
        assert client.request(50, 0, {"users": None}).error_code == CLUSTER_AUTHORIZATION_FAILED
    assert secured.call(lambda: secured.broker.controller.image.scram_users()) == {}
    # The super user may; and ALTER on the cluster lets alice alter and (implied) describe.
    with SaslClient(secured, "admin") as client:
        upsert_bob = {"deletions": [], "upsertions": upsert["upsertions"][1:]}
        assert [(r.user, r.error_code) for r in client.request(51, 0, upsert_bob).results] == [("bob", NONE)]
    create(secured, acl("alice", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER))
    with SaslClient(secured, "alice") as client:
        upsert_dave = {"deletions": [], "upsertions": upsert["upsertions"][:1]}
        assert [(r.user, r.error_code) for r in client.request(51, 0, upsert_dave).results] == [("dave", NONE)]
        described_users = client.request(50, 0, {"users": None})
        assert described_users.error_code == NONE
        assert sorted(r.user for r in described_users.results) == ["bob", "dave"]
    # DESCRIBE alone lets bob describe, not alter.
    create(secured, acl("bob", ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE))
    with SaslClient(secured, "bob") as client:
        assert client.request(50, 0, {"users": [{"name": "dave"}]}).results[0].error_code == NONE
        assert client.request(51, 0, upsert_dave).results[0].error_code == CLUSTER_AUTHORIZATION_FAILED


# ------------------------------------------------------------------ a cluster


@pytest.fixture
def cluster(formatted_cluster: Callable[..., list[BrokerThread]]) -> Callable[[], list[BrokerThread]]:
    """Node 1 broker and controller (its CONTROLLER listener on a port of its own), node 2 broker-only; both
    with the StandardAuthorizer, over PLAINTEXT, so every client is User:ANONYMOUS: a super user at node 1,
    nobody special at node 2."""
    from tests.integration.secured import STANDARD_AUTHORIZER
    configs = two_node_configs({"authorizer.class.name": STANDARD_AUTHORIZER}, {"super.users": "User:ANONYMOUS"})
    return lambda: formatted_cluster(configs)


def test_acls_made_at_a_broker_only_node_show_everywhere(cluster: Callable[[], list[BrokerThread]]) -> None:
    controller, follower = cluster()
    assert follower.broker.broker_only
    anonymous = None  # PLAINTEXT clients
    # Authorized at node 2, against node 2's image: User:ANONYMOUS is no super user there.
    assert raw_create(follower, creation(), user=anonymous)[0][0] == CLUSTER_AUTHORIZATION_FAILED
    cluster_alter = acl("ANONYMOUS", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    create(controller, cluster_alter, user=anonymous)
    wait_for(lambda: len(stored(follower)) == 1, timeout=15)

    literal = acl("alice", ResourceType.TOPIC, "orders", AclOperation.READ)
    prefixed = acl("bob", ResourceType.GROUP, "team-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED)
    create(follower, literal, prefixed, user=anonymous)  # forwarded by node 2 to node 1's controller
    # The controller's answers, errors included.
    assert raw_create(follower, creation(CLUSTER, "other"), creation(principal="bob"), creation(name="x"),
                      user=anonymous) == [
        (INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
        (INVALID_REQUEST, "Could not parse principal from `bob` (no colon is present separating the principal "
                          "type from the principal name)"),
        (NONE, None)]
    x = acl("alice", ResourceType.TOPIC, "x", AclOperation.READ)
    everything = {cluster_alter, literal, prefixed, x}
    wait_for(lambda: described(controller, EVERYTHING, user=anonymous) == everything, timeout=15)
    wait_for(lambda: described(follower, EVERYTHING, user=anonymous) == everything, timeout=15)
    assert stored(controller) == stored(follower)
    assert controller.call(lambda: dict(controller.broker.controller.image.acls)) == follower.call(
        lambda: dict(follower.broker.controller.image.acls))  # the same ids

    # Deletions forwarded too, with the matching ACLs the controller removed.
    results = raw_delete(follower, delete_filter(GROUP, "team-blue", MATCH), delete_filter(TOPIC), user=anonymous)
    assert [[(m.resource_name, m.principal) for m in r.matching_acls] for r in results] == [
        [("team-", "User:bob")], [("x", "User:alice"), ("orders", "User:alice")]]
    cluster_only = {(CLUSTER, "kafka-cluster", LITERAL, "User:ANONYMOUS", "*", ALTER, ALLOW)}
    wait_for(lambda: stored(controller) == cluster_only, timeout=15)
    wait_for(lambda: stored(follower) == cluster_only, timeout=15)

    # No controller to forward to: every creation and filter gets NOT_CONTROLLER.
    controller.stop()
    assert [code for code, _ in raw_create(follower, creation(), creation(name="y"), user=anonymous)] == [
        NOT_CONTROLLER] * 2
    assert [r.error_code for r in raw_delete(follower, delete_filter(), user=anonymous)] == [NOT_CONTROLLER]


# ------------------------------------------------------------------ klamm acls


def acls_tool(capsys: pytest.CaptureFixture[str], broker: BrokerThread, config: Path, *args: str,
              stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["acls", "--bootstrap-server", f"127.0.0.1:{broker.port}", "--command-config", str(config), *args])
    out, err = capsys.readouterr()
    return code, out, err


def command_config(tmp_path: Path, user: str, mechanism: str = "PLAIN") -> Path:
    """kafka-acls.sh's --command-config: Java client properties."""
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    path = tmp_path / f"{user}-{mechanism}.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                    f'sasl.jaas.config={module} required username="{user}" password="{user}-secret";\n')
    return path


def resource(kind: str, name: str, pattern: str = "LITERAL") -> str:
    return f"ResourcePattern(resourceType={kind}, name={name}, patternType={pattern})"


def entry(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return f"(principal={principal}, host={host}, operation={operation}, permissionType={permission})"


def block(header: str, *entries: str) -> str:
    """kafka-acls.sh's paragraph: the header, the entries tab-indented, a blank line."""
    return f"{header}: \n " + "\n".join("\t" + e for e in entries) + " \n\n"


def test_the_acls_tool(secured: BrokerThread, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    admin_config = command_config(tmp_path, "admin")

    def tool(*args: str, config: Path = admin_config, stdin: str | None = None) -> tuple[int, str, str]:
        return acls_tool(capsys, secured, config, *args, stdin=stdin, monkeypatch=monkeypatch)

    orders, pay = resource("TOPIC", "orders"), resource("TOPIC", "pay", "PREFIXED")
    code, out, err = tool("--add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
                          "--operation", "Read", "--operation", "DESCRIBE", "--topic", "orders")
    assert (code, err) == (0, "")
    assert out == block(f"Adding ACLs for resource `{orders}`",
                        entry("User:alice", "READ"), entry("User:alice", "DESCRIBE"),
                        entry("User:bob", "READ"), entry("User:bob", "DESCRIBE"))
    code, out, _ = tool("--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.1", "--operation",
                        "write", "--topic", "pay", "--resource-pattern-type", "prefixed")
    assert (code, out) == (0, block(f"Adding ACLs for resource `{pay}`", entry("User:bob", "WRITE", "DENY",
                                                                              "10.0.0.1")))
    code, out, _ = tool("--add", "--allow-principal", "User:alice", "--cluster", "--operation", "AlterConfigs")
    assert (code, out) == (0, block(f"Adding ACLs for resource `{resource('CLUSTER', 'kafka-cluster')}`",
                                    entry("User:alice", "ALTER_CONFIGS")))

    # --list: every ACL, or those of the resources named, with their pattern type as a filter.
    code, out, _ = tool("--list")
    assert code == 0
    assert out == (block(f"Current ACLs for resource `{pay}`", entry("User:bob", "WRITE", "DENY", "10.0.0.1"))
                   + block(f"Current ACLs for resource `{orders}`", entry("User:alice", "READ"),
                           entry("User:bob", "READ"), entry("User:alice", "DESCRIBE"), entry("User:bob", "DESCRIBE"))
                   + block(f"Current ACLs for resource `{resource('CLUSTER', 'kafka-cluster')}`",
                           entry("User:alice", "ALTER_CONFIGS")))
    assert tool("--list", "--topic", "payments")[1] == ""  # LITERAL: no ACL named "payments"
    assert tool("--list", "--topic", "payments", "--resource-pattern-type", "match")[1] == block(
        f"Current ACLs for resource `{pay}`", entry("User:bob", "WRITE", "DENY", "10.0.0.1"))
    code, out, _ = tool("--list", "--topic", "orders", "--principal", "User:bob")
    assert out == "ACLs for principal `User:bob`\n" + block(f"Current ACLs for resource `{orders}`",
                                                             entry("User:bob", "READ"), entry("User:bob", "DESCRIBE"))

    # --producer and --consumer: the ACLs kafka-acls.sh creates for them.
    code, out, _ = tool("--add", "--allow-principal", "User:carol", "--producer", "--idempotent", "--topic", "logs",
                        "--transactional-id", "tx")
    assert code == 0
    assert out == (block(f"Adding ACLs for resource `{resource('TOPIC', 'logs')}`", entry("User:carol", "WRITE"),
                         entry("User:carol", "DESCRIBE"), entry("User:carol", "CREATE"))
                   + block(f"Adding ACLs for resource `{resource('TRANSACTIONAL_ID', 'tx')}`",
                           entry("User:carol", "WRITE"), entry("User:carol", "DESCRIBE"))
                   + block(f"Adding ACLs for resource `{resource('CLUSTER', 'kafka-cluster')}`",
                           entry("User:carol", "IDEMPOTENT_WRITE")))
    code, out, _ = tool("--add", "--allow-principal", "User:dave", "--consumer", "--topic", "logs", "--group",
                        "readers")
    assert code == 0
    assert out == (block(f"Adding ACLs for resource `{resource('TOPIC', 'logs')}`", entry("User:dave", "READ"),
                         entry("User:dave", "DESCRIBE"))
                   + block(f"Adding ACLs for resource `{resource('GROUP', 'readers')}`", entry("User:dave", "READ")))
    assert len(stored(secured)) == 6 + 6 + 3

    # --remove: the ACLs named, or (no principal) every ACL of the resource filter; a question unless --force.
    code, out, _ = tool("--remove", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "orders",
                        stdin="n\n")
    assert code == 0 and out == (f"Are you sure you want to remove ACLs: \n \t{entry('User:bob', 'READ')} \n "
                                 f"from resource filter `{orders}`? (y/n)\n")
    assert len(stored(secured)) == 15
    code, out, _ = tool("--remove", "--allow-principal", "User:bob", "--operation", "Read", "--topic", "orders",
                        stdin="y\n")
    assert code == 0 and (TOPIC, "orders", LITERAL, "User:bob", "*", READ, ALLOW) not in stored(secured)
    code, out, _ = tool("--remove", "--topic", "logs", "--group", "readers", "--force")
    assert (code, out) == (0, "")
    assert not {a for a in stored(secured) if a[1] in ("logs", "readers")}
    code, out, _ = tool("--remove", "--topic", "pa", "--resource-pattern-type", "match", stdin="y\n")
    assert out == ("Are you sure you want to delete all ACLs for resource filter "
                   "`ResourcePattern(resourceType=TOPIC, name=pa, patternType=MATCH)`? (y/n)\n")
    assert (TOPIC, "pay", PREFIXED, "User:bob", "10.0.0.1", WRITE, DENY) in stored(secured)  # "pa" is not "pay*"
    tool("--remove", "--topic", "paying", "--resource-pattern-type", "match", "--force")
    assert (TOPIC, "pay", PREFIXED, "User:bob", "10.0.0.1", WRITE, DENY) not in stored(secured)

    # Failures: Kafka's messages; a refused request, and usage errors before anything is sent.
    alice = command_config(tmp_path, "alice")
    code, out, _ = tool("--add", "--allow-principal", "User:alice", "--topic", "t", config=alice)
    assert code == 1 and out.splitlines()[-1].startswith("Error while executing ACL command: ")
    assert "authorization" in out.lower()
    code, _, err = tool("--add", "--allow-principal", "User:alice", "--group", "g", "--operation", "Write")
    assert (code, err) == (1, "ResourceType GROUP only supports operations All, Read, Delete, Describe, "
                              "DescribeConfigs, AlterConfigs\n")
    code, _, err = tool("--add", "--topic", "t")
    assert (code, err) == (1, "You must specify one of: --allow-principal, --deny-principal when trying to add "
                              "ACLs.\n")
    code, _, err = tool("--add", "--allow-principal", "User:alice", "--topic", "t", "--resource-pattern-type",
                        "match")
    assert (code, err) == (1, "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls.\n")
    assert tool("--add", "--list", "--topic", "t")[2] == ("Command must include exactly one action: --list, --add, "
                                                          "--remove. \n")
    assert tool("--list", "--allow-principal", "User:alice")[2] == (
        'Option "[list]" can\'t be used with option "[allow-principal]"\n')
    assert tool("--add", "--allow-principal", "User:a")[2].startswith("You must provide at least one resource")
    assert tool("--add", "--consumer", "--topic", "t", "--allow-principal", "User:a")[2].startswith(
        "With --consumer you must specify a --topic and a --group")
    code, out, _ = tool("--add", "--allow-principal", "alice", "--topic", "t")
    assert (code, out) == (1, "Error while executing ACL command: expected a string in format "
                              "principalType:principalName but got alice\n")


def test_the_acls_tool_over_scram(broker_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--command-config with ScramLoginModule, for a SCRAM user the super user created."""
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    broker = secured_broker(broker_factory, **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    client = admin(broker)
    upsertion = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                             b"alice-secret")
    client.alter_user_scram_credentials([upsertion])["alice"].result(15)
    create(broker, acl("alice", ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER))
    scram = command_config(tmp_path, "alice", "SCRAM-SHA-256")
    code, out, err = acls_tool(capsys, broker, scram, "--add", "--allow-principal", "User:bob", "--group", "g")
    assert (code, err) == (0, "")
    assert (GROUP, "g", LITERAL, "User:bob", "*", ALL, ALLOW) in stored(broker)
    # A login module librdkafka cannot stand in for is refused with the reason.
    other = tmp_path / "kerberos.properties"
    other.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n"
                     "sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required;\n")
    code, out, err = acls_tool(capsys, broker, other, "--list")
    assert code == 1
    assert "login module com.sun.security.auth.module.Krb5LoginModule has no librdkafka counterpart" in out + err


def test_a_raft_quorum_commits_acls_before_answering(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three dedicated controllers and a broker: the broker forwards to the active controller, which answers once
    the records are committed; every voter has them, and so does a new active controller after a failover."""
    from tests.integration.secured import STANDARD_AUTHORIZER
    from tests.integration.conftest import CLUSTER_ID, free_port
    ports = {node_id: free_port() for node_id in (1, 2, 3)}
    common = {"controller.quorum.voters": ",".join(f"{n}@127.0.0.1:{p}" for n, p in ports.items()),
              "controller.listener.names": "CONTROLLER", "broker.session.timeout.ms": "4000",
              "broker.heartbeat.interval.ms": "300", "controller.quorum.election.timeout.ms": "400",
              "controller.quorum.fetch.timeout.ms": "800", "controller.quorum.election.backoff.max.ms": "400",
              "offsets.topic.num.partitions": "1", "authorizer.class.name": STANDARD_AUTHORIZER,
              "super.users": "User:ANONYMOUS"}
    nodes: dict[int, BrokerThread] = {}
    for node_id in (1, 2, 3, 4):
        config = {**common, "node.id": str(node_id), "process.roles": "broker"}
        if node_id in ports:
            config.update({"process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{ports[node_id]}",
                           "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"})
        properties = tmp_path / f"node{node_id}.properties"
        properties.write_text("".join(f"{k}={v}\n" for k, v in
                                      {**config, "log.dirs": str(tmp_path / f"node{node_id}")}.items()))
        assert main(["storage", "format", "--cluster-id", CLUSTER_ID, "--config", str(properties)]) == 0
        capsys.readouterr()
        nodes[node_id] = BrokerThread(tmp_path / f"node{node_id}", config)
    starting = [threading.Thread(target=node.start) for node in nodes.values()]  # voters wait for each other
    for thread in starting:
        thread.start()
    for thread in starting:
        thread.join(60)
    try:
        broker, controllers = nodes[4], [nodes[1], nodes[2], nodes[3]]

        def active() -> BrokerThread | None:
            return next((c for c in controllers if c.broker is not None and c.call(lambda c=c: c.broker.quorum.active)),
                        None)

        def everywhere(expected: int) -> bool:
            return all(len(stored(node)) == expected for node in nodes.values() if node.broker is not None)

        assert raw_create(broker, creation(), creation(name="x"), user=None) == [(NONE, None)] * 2
        leader = wait_for(active, timeout=15)
        assert len(stored(leader)) == 2  # committed before the answer
        wait_for(lambda: everywhere(2), timeout=15)
        assert [len(r.matching_acls) for r in raw_delete(broker, delete_filter(TOPIC, "x"), user=None)] == [1]
        wait_for(lambda: everywhere(1), timeout=15)

        leader.stop()  # another voter takes over; the broker finds it
        # The first attempts may meet no active controller yet (NOT_CONTROLLER): tried again until one takes it.
        wait_for(lambda: raw_create(broker, creation(name="after"), user=None) == [(NONE, None)], timeout=30,
                 interval=0.2)
        wait_for(lambda: everywhere(2), timeout=15)
        assert leader is not wait_for(active, timeout=15)
    finally:
        for node in nodes.values():
            node.close()
