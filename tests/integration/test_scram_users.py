"""SCRAM users through the wire: DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) v0.

With confluent-kafka's AdminClient (librdkafka salts the password; only the
salted password travels), with raw requests for what librdkafka refuses to
send (duplicates), with `klamm configs --entity-type users`, across a restart,
and in a cluster: a credential altered at a broker-only node (forwarded to the
controller) shows at every node, and so do the users `klamm storage format
--add-scram` gave the cluster.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from klamm.cli.main import main
from klamm.protocol.sasl import credential_from_salted_password

from tests.integration.conftest import BrokerThread, RawClient, two_node_configs, wait_for

DESCRIBE, ALTER = 50, 51
SHA256, SHA512 = 1, 2
NONE, NOT_CONTROLLER, RESOURCE_NOT_FOUND, DUPLICATE_RESOURCE, UNACCEPTABLE_CREDENTIAL = 0, 41, 91, 92, 93
UNSUPPORTED_SASL_MECHANISM = 33


def admin(port: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "socket.timeout.ms": "10000"})


def describe(port: int, users: list[str] | None) -> Any:
    with RawClient(port) as client:
        body = {"users": None if users is None else [{"name": u} for u in users]}
        return client.request(DESCRIBE, 0, body)


def described(port: int) -> dict[str, dict[int, int]]:
    """{user: {mechanism: iterations}} of every user, as the node at `port` describes them."""
    response = describe(port, None)
    assert response.error_code == NONE
    return {r.user: {c.mechanism: c.iterations for c in r.credential_infos} for r in response.results}


def alter(port: int, deletions: list[tuple[str, int]], upsertions: list[tuple[str, int, int]]) -> dict[str, Any]:
    with RawClient(port) as client:
        response = client.request(ALTER, 0, {
            "deletions": [{"name": n, "mechanism": m} for n, m in deletions],
            "upsertions": [{"name": n, "mechanism": m, "iterations": i, "salt": b"salt",
                            "salted_password": b"saltedPassword"} for n, m, i in upsertions]})
    return {r.user: (r.error_code, r.error_message) for r in response.results}


def configs_tool(capsys: pytest.CaptureFixture[str], port: int, *args: str) -> tuple[int, str, str]:
    code = main(["configs", "--bootstrap-server", f"127.0.0.1:{port}", *args])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------ one broker


def test_admin_client_alters_and_describes(broker: BrokerThread) -> None:
    client = admin(broker.port)
    sha256, sha512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
    futures = client.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(sha256, 8192), b"alice-secret", b"alice-salt"),
        UserScramCredentialUpsertion("bob", ScramCredentialInfo(sha512, 4096), b"bob-secret"),
    ])
    for future in futures.values():
        future.result(15)
    everyone = client.describe_user_scram_credentials().result(15)
    assert {u: [(i.mechanism, i.iterations) for i in d.scram_credential_infos] for u, d in everyone.items()} == {
        "alice": [(sha256, 8192)], "bob": [(sha512, 4096)]}
    alice = client.describe_user_scram_credentials(["alice"])["alice"].result(15)
    assert [(i.mechanism, i.iterations) for i in alice.scram_credential_infos] == [(sha256, 8192)]
    with pytest.raises(KafkaException, match="does not exist: nobody"):
        client.describe_user_scram_credentials(["nobody"])["nobody"].result(15)

    # The broker keeps the keys of the salted password the client sent, never the password.
    credential = broker.call(lambda: broker.broker.controller.image.scram_credential("alice", "SCRAM-SHA-256"))
    salted = hashlib.pbkdf2_hmac("sha256", b"alice-secret", b"alice-salt", 8192)
    assert credential == credential_from_salted_password("SCRAM-SHA-256", salted, b"alice-salt", 8192)

    client.alter_user_scram_credentials([UserScramCredentialDeletion("bob", sha512)])["bob"].result(15)
    with pytest.raises(KafkaException, match="does not exist"):
        client.alter_user_scram_credentials([UserScramCredentialDeletion("bob", sha512)])["bob"].result(15)
    with pytest.raises(KafkaException, match="Too few iterations"):
        client.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "carol", ScramCredentialInfo(sha256, 1000), b"x")])["carol"].result(15)
    assert described(broker.port) == {"alice": {SHA256: 8192}}


def test_describe_errors_per_user(broker: BrokerThread) -> None:
    assert alter(broker.port, [], [("user1", SHA256, 4096), ("user2", SHA512, 8192)]) == {
        "user1": (NONE, None), "user2": (NONE, None)}
    response = describe(broker.port, ["user1", "user2", "user2", "unknownUser"])
    assert response.error_code == NONE
    results = {r.user: (r.error_code, r.error_message, [(c.mechanism, c.iterations) for c in r.credential_infos])
               for r in response.results}
    assert results == {
        "user1": (NONE, None, [(SHA256, 4096)]),
        "user2": (DUPLICATE_RESOURCE,
                  "Cannot describe SCRAM credentials for the same user twice in a single request: user2", []),
        "unknownUser": (RESOURCE_NOT_FOUND, "Attempt to describe a user credential that does not exist: unknownUser",
                        []),
    }
    assert len(response.results) == 3
    assert [r.user for r in describe(broker.port, []).results] == ["user1", "user2"]  # empty: every user


def test_alter_errors_per_user(broker: BrokerThread) -> None:
    assert alter(broker.port, [], []) == {}
    alter(broker.port, [], [("user1", SHA256, 4096)])  # so that its deletion is a duplicate, not a missing one
    twice = (DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
    assert alter(broker.port, [("user1", SHA256), ("user1", SHA256)],
                 [("user2", SHA256, 4096), ("user2", SHA256, 4096)]) == {"user1": twice, "user2": twice}
    assert alter(broker.port, [("", SHA256)], [("user3", 7, 4096), ("user4", SHA256, 20000)]) == {
        "": (UNACCEPTABLE_CREDENTIAL, "Username must not be empty"),
        "user3": (UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"),
        "user4": (UNACCEPTABLE_CREDENTIAL, "Too many iterations")}
    assert alter(broker.port, [("user5", SHA512)], []) == {
        "user5": (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist")}
    assert described(broker.port) == {"user1": {SHA256: 4096}}


def test_credentials_survive_a_restart(broker: BrokerThread) -> None:
    alter(broker.port, [], [("alice", SHA256, 8192), ("bob", SHA512, 4096)])
    alter(broker.port, [("bob", SHA512)], [("carol", SHA512, 16384)])
    broker.restart()
    assert described(broker.port) == {"alice": {SHA256: 8192}, "carol": {SHA512: 16384}}


def test_the_configs_tool(broker: BrokerThread, capsys: pytest.CaptureFixture[str]) -> None:
    port = broker.port
    code, out, err = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "alice", "--alter",
                                  "--add-config", ("SCRAM-SHA-256=[iterations=8192,password=alice-secret],"
                                                   "SCRAM-SHA-512=[password=alice-secret]"))
    assert (code, out, err) == (0, "Completed updating config for user alice.\n", "")
    configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "bob", "--alter",
                 "--add-config", "SCRAM-SHA-512=[iterations=4096,password=bob-secret]")
    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert code == 0
    assert out == ("SCRAM credential configs for user-principal 'alice' are "
                   "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n")
    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "users")
    assert out.splitlines() == [
        ("SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192, "
         "SCRAM-SHA-512=iterations=4096"),
        "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096"]
    code, out, _ = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "alice", "--alter",
                                "--delete-config", "SCRAM-SHA-512")
    assert (code, out) == (0, "Completed updating config for user alice.\n")
    code, out, _ = configs_tool(capsys, port, "--describe", "--entity-type", "users", "--entity-name", "alice")
    assert out == "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192\n"
    # A user without credentials describes as nothing, as kafka-configs.sh prints for an unknown user.
    assert configs_tool(capsys, port, "--describe", "--entity-type", "users", "--entity-name", "nobody")[:2] == (0, "")
    # Failures: exit code 1 and Kafka's messages.
    code, _, err = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "alice", "--alter",
                                "--delete-config", "SCRAM-SHA-512")
    assert code == 1 and "Attempt to delete a user credential that does not exist" in err
    code, _, err = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "alice", "--alter",
                                "--add-config", "SCRAM-SHA-256=[iterations=100,password=x]")
    assert code == 1 and "Iterations 100 is less than the minimum 4096 required for SCRAM-SHA-256" in err
    code, _, err = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "alice", "--alter",
                                "--add-config", "SCRAM-SHA-256=[iterations=4096,password=]")
    assert code == 1
    code, _, err = configs_tool(capsys, port, "--entity-type", "users", "--entity-name", "alice", "--alter",
                                "--add-config", "colour=red")
    assert code == 1 and "Unexpected config names: colour" in err


# ------------------------------------------------------------------ a cluster


@pytest.fixture
def cluster(formatted_cluster: Callable[..., list[BrokerThread]]) -> Callable[..., list[BrokerThread]]:
    """Node 1 broker and controller (its CONTROLLER listener on a port of its own), node 2 broker-only;
    formatted with `klamm storage format` and the given --add-scram arguments."""
    return lambda *add_scram: formatted_cluster(two_node_configs(), *add_scram)


def test_a_credential_altered_at_a_broker_only_node_shows_everywhere(
        cluster: Callable[..., list[BrokerThread]], capsys: pytest.CaptureFixture[str]) -> None:
    controller, follower = cluster()
    assert follower.broker.broker_only
    # Forwarded by node 2 to node 1's controller: the controller's answers, errors included.
    assert alter(follower.port, [], [("alice", SHA256, 8192), ("bob", SHA512, 4096)]) == {
        "alice": (NONE, None), "bob": (NONE, None)}
    assert alter(follower.port, [("nobody", SHA256)], [("carol", SHA256, 100)]) == {
        "nobody": (RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"),
        "carol": (UNACCEPTABLE_CREDENTIAL, "Too few iterations")}
    expected = {"alice": {SHA256: 8192}, "bob": {SHA512: 4096}}
    wait_for(lambda: described(controller.port) == expected, timeout=15)
    wait_for(lambda: described(follower.port) == expected, timeout=15)
    credential = follower.call(lambda: follower.broker.controller.image.scram_credential("alice", "SCRAM-SHA-256"))
    assert credential == controller.call(
        lambda: controller.broker.controller.image.scram_credential("alice", "SCRAM-SHA-256"))

    # The tool against the broker-only node.
    code, out, _ = configs_tool(capsys, follower.port, "--entity-type", "users", "--entity-name", "bob", "--alter",
                                "--delete-config", "SCRAM-SHA-512")
    assert (code, out) == (0, "Completed updating config for user bob.\n")
    wait_for(lambda: described(controller.port) == {"alice": {SHA256: 8192}}, timeout=15)
    wait_for(lambda: described(follower.port) == {"alice": {SHA256: 8192}}, timeout=15)

    # No controller to forward to: every user of the request gets NOT_CONTROLLER.
    controller.stop()
    results = alter(follower.port, [("alice", SHA256)], [("dave", SHA512, 4096)])
    assert {user: code for user, (code, _) in results.items()} == {"alice": NOT_CONTROLLER, "dave": NOT_CONTROLLER}


def test_users_from_storage_format_add_scram(cluster: Callable[..., list[BrokerThread]]) -> None:
    controller, follower = cluster("SCRAM-SHA-256=[name=admin,password=admin-secret]",
                                   "SCRAM-SHA-512=[name=admin,iterations=8192,password=admin-secret]")
    expected = {"admin": {SHA256: 4096, SHA512: 8192}}
    assert described(controller.port) == expected
    wait_for(lambda: described(follower.port) == expected, timeout=15)
    credential = follower.call(lambda: follower.broker.controller.image.scram_credential("admin", "SCRAM-SHA-512"))
    salted = hashlib.pbkdf2_hmac("sha512", b"admin-secret", credential.salt, 8192)
    assert credential == credential_from_salted_password("SCRAM-SHA-512", salted, credential.salt, 8192)
