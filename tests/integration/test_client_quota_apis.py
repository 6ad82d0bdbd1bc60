"""Client quotas through the wire: DescribeClientQuotas (48) and AlterClientQuotas (49) v0-1.

librdkafka and kafka-python have no client quota admin calls, so: raw requests (both versions), kafka-python's
own codec for the two messages sent through its client, `klamm configs --entity-type users|clients|ips`, across
a restart, with the StandardAuthorizer (DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster), and in a cluster: a
quota altered at a broker-only node (forwarded to the controller) shows at every node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from klamm.cli.main import main
from tests.integration.conftest import BrokerThread, RawClient, two_node_configs, wait_for
from tests.integration.secured import secured_broker, sasl_client

DESCRIBE, ALTER = 48, 49
SASL_HANDSHAKE, SASL_AUTHENTICATE, CREATE_ACLS = 17, 36, 30
NONE, CLUSTER_AUTHORIZATION_FAILED, NOT_CONTROLLER, UNSUPPORTED_VERSION, INVALID_REQUEST = 0, 31, 41, 35, 42
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
PRODUCE, CONSUME, REQUEST, CONNECTIONS = ("producer_byte_rate", "consumer_byte_rate", "request_percentage",
                                          "connection_creation_rate")

Entity = tuple[tuple[str, "str | None"], ...]


def alter(client: RawClient, entries: list[tuple[Entity, dict[str, float | None]]], validate_only: bool = False,
          version: int = 1) -> list[tuple[Entity, int, str | None]]:
    response = client.request(ALTER, version, {"validate_only": validate_only, "entries": [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in ops.items()]}
        for entity, ops in entries]})
    return [(tuple((e.entity_type, e.entity_name) for e in r.entity), r.error_code, r.error_message)
            for r in response.entries]


def describe_raw(client: RawClient, components: list[tuple[str, int, str | None]], strict: bool = False,
                 version: int = 1) -> Any:
    return client.request(DESCRIBE, version, {"strict": strict, "components": [
        {"entity_type": t, "match_type": m, "match": n} for t, m, n in components]})


def described(port: int, components: list[tuple[str, int, str | None]] | None = None,
              strict: bool = False) -> dict[Entity, dict[str, float]]:
    with RawClient(port) as client:
        response = describe_raw(client, components or [], strict)
    assert response.error_code == NONE, response
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def configs_tool(capsys: pytest.CaptureFixture[str], port: int, *args: str) -> tuple[int, str, str]:
    code = main(["configs", "--bootstrap-server", f"127.0.0.1:{port}", *args])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ one broker


@pytest.mark.parametrize("version", [0, 1])
def test_alter_and_describe(broker: BrokerThread, version: int) -> None:
    with broker.connect() as client:
        results = alter(client, [
            ((("user", "alice"),), {PRODUCE: 1024.0, CONSUME: 2048.0}),
            ((("user", None), ("client-id", "app")), {REQUEST: 50.0}),
            ((("ip", "10.0.0.1"),), {CONNECTIONS: 10.0}),
            ((("client-id", None),), {PRODUCE: 512.0}),
        ], version=version)
        assert results == [((("user", "alice"),), NONE, None),
                           ((("user", None), ("client-id", "app")), NONE, None),
                           ((("ip", "10.0.0.1"),), NONE, None), ((("client-id", None),), NONE, None)]
        everything = {(("user", "alice"),): {CONSUME: 2048.0, PRODUCE: 1024.0},
                      (("user", None), ("client-id", "app")): {REQUEST: 50.0},
                      (("ip", "10.0.0.1"),): {CONNECTIONS: 10.0}, (("client-id", None),): {PRODUCE: 512.0}}
        assert described(broker.port) == everything
        response = describe_raw(client, [("user", EXACT, "alice")], strict=True, version=version)
        assert response.error_code == NONE and len(response.entries) == 1
        assert [(v.key, v.value) for v in response.entries[0].values] == [(CONSUME, 2048.0), (PRODUCE, 1024.0)]
        assert described(broker.port, [("client-id", SPECIFIED, None)]) == {
            k: v for k, v in everything.items() if any(t == "client-id" for t, _ in k)}
        assert described(broker.port, [("user", DEFAULT, None)]) == {
            (("user", None), ("client-id", "app")): {REQUEST: 50.0}}
        # Remove one key, then the last key of an entity: it is gone.
        assert alter(client, [((("user", "alice"),), {PRODUCE: None}), ((("client-id", None),), {PRODUCE: None})],
                     version=version) == [((("user", "alice"),), NONE, None), ((("client-id", None),), NONE, None)]
        assert described(broker.port, [("user", EXACT, "alice")]) == {(("user", "alice"),): {CONSUME: 2048.0}}
        assert (("client-id", None),) not in described(broker.port)
    # What the broker's image gives enforcement.
    applied = broker.call(lambda: broker.broker.controller.image.applicable_client_quota("bob", "app", REQUEST))
    assert (applied.value, applied.entity, applied.metric_tags) == (50.0, (("user", None), ("client-id", "app")),
                                                                    ("bob", "app"))


def test_validation_errors_and_validate_only(broker: BrokerThread) -> None:
    with broker.connect() as client:
        results = alter(client, [
            ((("user", "u"),), {PRODUCE: 10000.5}),
            ((("user", "u2"), ("ip", "1.2.3.4")), {CONNECTIONS: 1.0}),
            ((("ip", "example.invalid"),), {CONNECTIONS: 1.0}),
            ((("user", ""),), {REQUEST: 12.34}),
            ((("other", "x"),), {REQUEST: 1.0}),
            ((), {PRODUCE: 1.0}),
            ((("client-id", "c"),), {"bad": 1.0}),
            ((("client-id", "ok"),), {REQUEST: 0.0}),
            ((("client-id", "fine"),), {REQUEST: 25.0}),
        ], validate_only=True)
        assert results == [
            ((("user", "u"),), INVALID_REQUEST, "producer_byte_rate cannot be a fractional value."),
            ((("user", "u2"), ("ip", "1.2.3.4")), INVALID_REQUEST,
             "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
            ((("ip", "example.invalid"),), INVALID_REQUEST, "example.invalid is not a valid IP or resolvable host."),
            ((("user", ""),), INVALID_REQUEST, "Empty user not supported"),
            ((("other", "x"),), INVALID_REQUEST, "Unhandled client quota entity type: other"),
            ((), INVALID_REQUEST, "Invalid empty client quota entity"),
            ((("client-id", "c"),), INVALID_REQUEST, "Invalid configuration key bad"),
            ((("client-id", "ok"),), INVALID_REQUEST, "Quota request_percentage must be greater than 0"),
            ((("client-id", "fine"),), NONE, None),
        ]
        assert described(broker.port) == {}  # validate_only wrote nothing
        assert alter(client, [((("client-id", "fine"),), {REQUEST: 25.0})]) == [((("client-id", "fine"),), NONE, None)]
        assert alter(client, [((("ip", "localhost"),), {CONNECTIONS: 3.0})]) == [((("ip", "localhost"),), NONE, None)]
        assert alter(client, []) == []

        response = describe_raw(client, [("ip", SPECIFIED, None), ("user", SPECIFIED, None)])
        assert (response.error_code, response.entries) == (INVALID_REQUEST, None)
        assert response.error_message.startswith("Invalid entity filter component combination.")
        response = describe_raw(client, [("other", EXACT, "name")])
        assert (response.error_code, response.error_message) == (UNSUPPORTED_VERSION, "Unsupported entity type other")
        response = describe_raw(client, [("user", EXACT, None)], version=0)
        assert (response.error_code, response.error_message) == (
            INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    assert described(broker.port) == {(("client-id", "fine"),): {REQUEST: 25.0},
                                      (("ip", "localhost"),): {CONNECTIONS: 3.0}}


def test_kafka_python_codec(broker: BrokerThread) -> None:
    """kafka-python's own encoding of both messages (it has no admin call for them) against the broker."""
    from kafka.admin import KafkaAdminClient
    from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.port}", request_timeout_ms=10000)
    try:
        async def send(request: Any) -> Any:
            return await admin._manager.send(request)

        response = admin._manager.run(send, AlterClientQuotasRequest(
            entries=[([("user", "kp"), ("client-id", None)], [(PRODUCE, 4096.0, False), (REQUEST, 0.0, True)])],
            validate_only=False))
        assert [(e.error_code, e.error_message) for e in response.entries] == [(NONE, None)]
        response = admin._manager.run(send, DescribeClientQuotasRequest(components=[("user", EXACT, "kp")],
                                                                        strict=False))
        assert response.error_code == NONE
        assert [([(e.entity_type, e.entity_name) for e in entry.entity], [(v.key, v.value) for v in entry.values])
                for entry in response.entries] == [([("user", "kp"), ("client-id", None)], [(PRODUCE, 4096.0)])]
    finally:
        admin.close()


def test_quotas_survive_a_restart(broker: BrokerThread) -> None:
    with broker.connect() as client:
        alter(client, [((("user", "alice"), ("client-id", "app")), {PRODUCE: 1024.0, CONSUME: 2048.0}),
                       ((("ip", None),), {CONNECTIONS: 100.0})])
        alter(client, [((("user", "alice"), ("client-id", "app")), {PRODUCE: None})])
    broker.restart()
    assert described(broker.port) == {(("user", "alice"), ("client-id", "app")): {CONSUME: 2048.0},
                                      (("ip", None),): {CONNECTIONS: 100.0}}


def test_the_configs_tool(broker: BrokerThread, capsys: pytest.CaptureFixture[str]) -> None:
    port = broker.port
    code, out, err = configs_tool(capsys, port, "--alter", "--add-config",
                                  "producer_byte_rate=1024,consumer_byte_rate=2048", "--entity-type", "clients",
                                  "--entity-name", "c1")
    assert (code, out, err) == (0, "Completed updating config for client c1.\n", "")
    code, out, _ = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                                "clients", "--entity-default", "--alter", "--add-config", "request_percentage=50.5")
    assert (code, out) == (0, "Completed updating config for user alice.\n")
    code, out, _ = configs_tool(capsys, port, "--entity-type", "users", "--entity-default", "--alter",
                                "--add-config", "producer_byte_rate=10000000")
    assert (code, out) == (0, "Completed updating default config for users in the cluster.\n")
    code, out, _ = configs_tool(capsys, port, "--entity-type", "ips", "--entity-name", "10.1.2.3", "--alter",
                                "--add-config", "connection_creation_rate=5")
    assert (code, out) == (0, "Completed updating config for ip 10.1.2.3.\n")

    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "clients", "--entity-name", "c1")
    assert (code, out) == (0, "Quota configs for client-id 'c1' are consumer_byte_rate=2048.0, "
                              "producer_byte_rate=1024.0\n")
    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "users", "--entity-name", "alice",
                                "--entity-type", "clients")
    assert out == "Quota configs for user-principal 'alice', the default client-id are request_percentage=50.5\n"
    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "users")  # users alone, every one
    assert out == "Quota configs for the default user-principal are producer_byte_rate=1.0E7\n"
    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "ips")
    assert out == "Quota configs for ip '10.1.2.3' are connection_creation_rate=5.0\n"

    # Quotas and SCRAM credentials of a user, described together as kafka-configs.sh does.
    code, _, _ = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "bob", "--alter",
                              "--add-config", "SCRAM-SHA-256=[iterations=8192,password=bob-secret]")
    assert code == 0
    configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "bob", "--alter", "--add-config",
                 "consumer_byte_rate=300")
    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "users", "--entity-name", "bob")
    assert out.splitlines() == ["Quota configs for user-principal 'bob' are consumer_byte_rate=300.0",
                                "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=8192"]

    code, out, _ = configs_tool(capsys, port, "--entity-type", "clients", "--entity-name", "c1", "--alter",
                                "--delete-config", "producer_byte_rate")
    assert (code, out) == (0, "Completed updating config for client c1.\n")
    assert described(port, [("client-id", EXACT, "c1")], strict=True) == {(("client-id", "c1"),): {CONSUME: 2048.0}}

    # Failures: exit code 1 and Kafka's messages.
    code, _, err = configs_tool(capsys, port, "--entity-type", "clients", "--entity-name", "c1", "--alter",
                                "--delete-config", "producer_byte_rate")
    assert code == 1 and "Invalid config(s): producer_byte_rate" in err
    code, _, err = configs_tool(capsys, port, "--entity-type", "clients", "--entity-name", "c1", "--alter",
                                "--add-config", "producer_byte_rate=lots")
    assert code == 1 and "Cannot parse quota configuration value for producer_byte_rate: lots" in err
    code, _, err = configs_tool(capsys, port, "--entity-type", "clients", "--entity-name", "c1", "--alter",
                                "--add-config", "producer_byte_rate=1.5")
    assert code == 1 and "producer_byte_rate cannot be a fractional value." in err
    code, _, err = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "bob", "--alter",
                                "--add-config", "SCRAM-SHA-512=[password=x],request_percentage=5")
    assert code == 1 and "Cannot alter both quota and SCRAM credential configs simultaneously" in err
    code, _, err = configs_tool(capsys, port, "--entity-type", "ips", "--entity-default", "--alter",
                                "--add-config", "producer_byte_rate=5")
    assert code == 1 and "Only connection quota configs can be added for 'ips'" in err


# ------------------------------------------------------------------ authorization




def test_authorization(broker_factory: Any) -> None:
    """DESCRIBE_CONFIGS on the cluster to describe, ALTER_CONFIGS on the cluster to alter."""
    broker = secured_broker(broker_factory)
    entity = (("client-id", "c1"),)
    with sasl_client(broker, "alice") as alice, sasl_client(broker, "admin") as admin:
        response = describe_raw(alice, [])
        assert (response.error_code, response.error_message, response.entries) == (
            CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.", None)
        assert alter(alice, [(entity, {PRODUCE: 1.0}), ((("user", None),), {CONSUME: 2.0})]) == [
            (entity, CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
            ((("user", None),), CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")]
        assert alter(admin, [(entity, {PRODUCE: 1.0})]) == [(entity, NONE, None)]  # a super user

        def grant(operation: int) -> None:
            response = admin.request(CREATE_ACLS, 3, {"creations": [{
                "resource_type": 4, "resource_name": "kafka-cluster", "resource_pattern_type": 3,
                "principal": "User:alice", "host": "*", "operation": operation, "permission_type": 3}]})
            assert response.results[0].error_code == NONE

        grant(10)  # DESCRIBE_CONFIGS
        wait_for(lambda: describe_raw(alice, []).error_code == NONE)
        assert len(describe_raw(alice, []).entries) == 1
        assert alter(alice, [(entity, {PRODUCE: 2.0})])[0][1] == CLUSTER_AUTHORIZATION_FAILED
        grant(11)  # ALTER_CONFIGS (which implies DESCRIBE_CONFIGS too)
        wait_for(lambda: alter(alice, [(entity, {PRODUCE: 2.0})])[0][1] == NONE)
        assert [v.value for v in describe_raw(alice, []).entries[0].values] == [2.0]


# ------------------------------------------------------------------ a cluster


@pytest.fixture
def cluster(formatted_cluster: Callable[..., list[BrokerThread]]) -> list[BrokerThread]:
    """Node 1 broker and controller (its CONTROLLER listener on a port of its own), node 2 broker-only."""
    return formatted_cluster(two_node_configs())


def test_a_quota_altered_at_a_broker_only_node_shows_everywhere(cluster: list[BrokerThread],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    controller, follower = cluster
    assert follower.broker.broker_only
    entity = (("user", "alice"), ("client-id", "app"))
    with follower.connect() as client:
        # Forwarded by node 2 to node 1's controller: the controller's answers, errors included.
        assert alter(client, [(entity, {PRODUCE: 1024.0}), ((("ip", "1.2.3.4"),), {PRODUCE: 1.0})]) == [
            (entity, NONE, None),
            ((("ip", "1.2.3.4"),), INVALID_REQUEST, "Invalid configuration key producer_byte_rate")]
        assert alter(client, [((("user", None),), {CONSUME: 5.0})], validate_only=True) == [
            ((("user", None),), NONE, None)]
    expected = {entity: {PRODUCE: 1024.0}}
    wait_for(lambda: described(controller.port) == expected, timeout=15)
    wait_for(lambda: described(follower.port) == expected, timeout=15)
    applied = follower.call(lambda: follower.broker.controller.image.applicable_client_quota("alice", "app", PRODUCE))
    assert applied is not None and applied.value == 1024.0

    # The tool against the broker-only node.
    code, out, _ = configs_tool(capsys, follower.port, "--entity-type", "clients", "--entity-default", "--alter",
                                "--add-config", "consumer_byte_rate=4096")
    assert (code, out) == (0, "Completed updating default config for clients in the cluster.\n")
    wait_for(lambda: (("client-id", None),) in described(controller.port), timeout=15)

    # No controller to forward to: every entry gets NOT_CONTROLLER.
    controller.stop()
    with follower.connect() as client:
        results = alter(client, [(entity, {PRODUCE: None}), ((("ip", None),), {CONNECTIONS: 1.0})])
    assert [(e, code) for e, code, _ in results] == [(entity, NOT_CONTROLLER), ((("ip", None),), NOT_CONTROLLER)]
