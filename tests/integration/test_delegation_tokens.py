"""Delegation tokens (KIP-48): created, described, renewed and expired as Kafka's brokers and controller do, and a
client authenticating with one (SCRAM with tokenauth=true) as the token's owner.

A SASL_PLAINTEXT broker: PLAIN users admin (super user), alice, bob and carol; SCRAM for the tokens.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import struct
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl_client import ScramClient

from tests.integration.conftest import BrokerThread, RawClient, two_node_configs, wait_for
from tests.integration.secured import JAAS, STANDARD_AUTHORIZER, SASL_AUTHENTICATE, SASL_HANDSHAKE, sasl_client

CREATE, RENEW, EXPIRE, DESCRIBE = 38, 39, 40, 41
CREATE_TOPICS = 19
SECRET = "the-token-secret"
HOUR_MS = 3_600_000


def token_broker(broker_factory: Any, **overrides: str) -> BrokerThread:
    return broker_factory(**{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS.replace(";", ' user_carol="carol-secret";'),
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin",
        "delegation.token.secret.key": SECRET, "delegation.token.expiry.time.ms": str(HOUR_MS), **overrides})


def create(client: RawClient, renewers: tuple[str, ...] = (), max_lifetime_ms: int = -1, owner: str | None = None,
           version: int = 3) -> Any:
    body: dict[str, Any] = {"renewers": [{"principal_type": "User", "principal_name": r} for r in renewers],
                            "max_lifetime": max_lifetime_ms}
    if version >= 3:
        body.update(owner_principal_type="User" if owner else None, owner_principal_name=owner)
    return client.request(CREATE, version, body)


class Refusal(NamedTuple):
    error_code: int
    principal_name: str
    token_requester_principal_name: str
    issue_timestamp: int


def refused_create(client: RawClient, owner: str | None = None, renewer_type: str = "User") -> Refusal:
    """A refused CreateDelegationToken v3: the error, owner, requester and issue time as the bytes have them."""
    client.send(CREATE, 3, {"renewers": [{"principal_type": renewer_type, "principal_name": "x"}],
                            "max_lifetime": -1, "owner_principal_type": "User" if owner else None,
                            "owner_principal_name": owner})
    frame = client.read_frame()
    (error,), position = struct.unpack_from(">h", frame, 5), 7  # correlation id, header tags, error code
    names = []
    for _ in range(4):  # compact strings: owner type and name, requester type and name
        length, position = frame[position] - 1, position + 1
        names.append(frame[position:position + length].decode())
        position += length
    (issued,) = struct.unpack_from(">q", frame, position)
    return Refusal(error, names[1], names[3], issued)


def grant_user_acl(broker: BrokerThread, user: str, resource_type: int, name: str, operation: int) -> None:
    """An ALLOW ACL made by the super user with CreateAcls (confluent-kafka has no USER resource type)."""
    admin = sasl_client(broker, "admin")
    made = admin.request(30, 3, {"creations": [{
        "resource_type": resource_type, "resource_name": name, "resource_pattern_type": 3,
        "principal": f"User:{user}", "host": "*", "operation": operation, "permission_type": 3}]})
    assert [r.error_code for r in made.results] == [0]


def ms(value: Any) -> int:
    return value if isinstance(value, int) else round(value.timestamp() * 1000)


def describe(client: RawClient, owners: list[str] | None = None) -> Any:
    return client.request(DESCRIBE, 3, {"owners": None if owners is None else [
        {"principal_type": "User", "principal_name": o} for o in owners]})


class ExpiryAnswer(NamedTuple):
    error_code: int
    expiry_timestamp: int


def _expiry_answer(client: RawClient, api_key: int, version: int, body: dict[str, Any]) -> ExpiryAnswer:
    """Renew's and Expire's answer: the error and the expiry as the bytes have them (kio would make a date)."""
    client.send(api_key, version, body)
    frame = client.read_frame()
    error, expiry = struct.unpack_from(">hq", frame, 4 + (1 if version >= 2 else 0))  # flexible: header tags
    return ExpiryAnswer(error, expiry)


def renew(client: RawClient, token_hmac: bytes, period_ms: int = -1, version: int = 2) -> ExpiryAnswer:
    return _expiry_answer(client, RENEW, version, {"hmac": token_hmac, "renew_period": period_ms})


def expire(client: RawClient, token_hmac: bytes, period_ms: int = -1, version: int = 2) -> ExpiryAnswer:
    return _expiry_answer(client, EXPIRE, version, {"hmac": token_hmac, "expiry_time_period": period_ms})


def token_client(broker: BrokerThread, token_id: str, token_hmac: bytes, mechanism: str = "SCRAM-SHA-256") -> Any:
    """A connection that authenticated with the token; the last SaslAuthenticate answer if it failed."""
    client = broker.connect()
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": mechanism}).error_code == 0
    scram = ScramClient(mechanism, token_id, base64.b64encode(token_hmac).decode(), token=True)
    answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.initial()})
    if answer.error_code != 0:
        return answer
    answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.evaluate(answer.auth_bytes)})
    if answer.error_code != 0:
        return answer
    scram.evaluate(answer.auth_bytes)  # checks the server's signature
    return client


def test_a_token_is_created_described_renewed_and_expired(broker_factory: Any) -> None:
    broker = token_broker(broker_factory)
    alice, bob, carol = (sasl_client(broker, user) for user in ("alice", "bob", "carol"))
    before = int(time.time() * 1000)
    made = create(alice, renewers=("bob",), max_lifetime_ms=2 * HOUR_MS)
    assert made.error_code == 0
    assert (made.principal_type, made.principal_name) == ("User", "alice")
    assert (made.token_requester_principal_type, made.token_requester_principal_name) == ("User", "alice")
    assert made.hmac == hmac.new(SECRET.encode(), made.token_id.encode(), hashlib.sha512).digest()
    issued = ms(made.issue_timestamp)
    assert before <= issued <= int(time.time() * 1000)
    assert (ms(made.expiry_timestamp), ms(made.max_timestamp)) == (issued + HOUR_MS, issued + 2 * HOUR_MS)

    [seen] = describe(alice).tokens
    assert (seen.token_id, seen.hmac, ms(seen.expiry_timestamp)) == (made.token_id, made.hmac, issued + HOUR_MS)
    assert [(r.principal_type, r.principal_name) for r in seen.renewers] == [("User", "bob")]
    assert [t.token_id for t in describe(bob).tokens] == [made.token_id]  # a renewer sees it
    assert describe(carol).tokens == ()  # neither owner nor renewer, and no DESCRIBE
    assert describe(alice, []).tokens == ()  # an empty owner list: none
    assert describe(alice, ["bob"]).tokens == describe(alice, ["alice"]).tokens  # bob renews it

    renewed = renew(bob, made.hmac, 60_000)
    assert renewed.error_code == 0
    assert ms(renewed.expiry_timestamp) - int(time.time() * 1000) in range(55_000, 60_001)
    assert renew(carol, made.hmac).error_code == ErrorCode.delegation_token_owner_mismatch
    assert renew(alice, b"not the hmac").error_code == ErrorCode.delegation_token_not_found
    assert expire(carol, made.hmac).error_code == ErrorCode.delegation_token_owner_mismatch
    assert expire(alice, made.hmac).error_code == 0  # -1: at once
    assert describe(alice).tokens == ()
    assert renew(alice, made.hmac).error_code == ErrorCode.delegation_token_not_found


def test_a_token_for_another_owner_needs_create_tokens(broker_factory: Any) -> None:
    broker = token_broker(broker_factory)
    bob = sasl_client(broker, "bob")
    assert refused_create(bob, owner="alice", renewer_type="User") == (
        ErrorCode.delegation_token_authorization_failed, "alice", "bob", 0)
    grant_user_acl(broker, "bob", 7, "User:alice", 13)  # USER resource, CREATE_TOKENS
    made = create(bob, owner="alice")
    assert made.error_code == 0 and (made.principal_name, made.token_requester_principal_name) == ("alice", "bob")
    [seen] = describe(sasl_client(broker, "alice")).tokens
    assert (seen.principal_name, seen.token_requester_principal_name) == ("alice", "bob")
    assert refused_create(bob, renewer_type="Group") == (ErrorCode.invalid_principal_type, "bob", "bob", 0)


def test_a_client_authenticates_with_a_token_as_its_owner(broker_factory: Any) -> None:
    broker = token_broker(broker_factory)
    made = create(sasl_client(broker, "alice"))
    for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
        client = token_client(broker, made.token_id, made.hmac, mechanism)
        assert not hasattr(client, "error_code"), client  # a connection, not a refusal
        # a token cannot make or renew tokens
        assert refused_create(client).error_code == ErrorCode.delegation_token_request_not_allowed
        assert renew(client, made.hmac) == (ErrorCode.delegation_token_request_not_allowed, 0)
        assert describe(client).error_code == ErrorCode.delegation_token_request_not_allowed
    # its principal is User:alice: what alice may do, it may
    topic = {"name": "by-token", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    denied = client.request(CREATE_TOPICS, 7, {"timeout": 10_000, "topics": [topic], "validate_only": True})
    assert denied.topics[0].error_code == ErrorCode.topic_authorization_failed
    grant_user_acl(broker, "alice", 4, "kafka-cluster", 5)  # CLUSTER, CREATE
    allowed = client.request(CREATE_TOPICS, 7, {"timeout": 10_000, "topics": [topic], "validate_only": True})
    assert allowed.topics[0].error_code == 0
    wrong = token_client(broker, made.token_id, b"x" * 64)
    assert wrong.error_code == ErrorCode.sasl_authentication_failed
    unknown = token_client(broker, "no-such-token", made.hmac)
    assert unknown.error_code == ErrorCode.sasl_authentication_failed
    assert expire(sasl_client(broker, "alice"), made.hmac).error_code == 0
    gone = token_client(broker, made.token_id, made.hmac)
    assert gone.error_code == ErrorCode.sasl_authentication_failed


def test_token_requests_are_refused_on_plaintext_and_without_a_secret(broker_factory: Any) -> None:
    plaintext = broker_factory(**{"delegation.token.secret.key": SECRET})
    client = plaintext.connect()
    assert refused_create(client).error_code == ErrorCode.delegation_token_request_not_allowed
    assert describe(client).error_code == ErrorCode.delegation_token_request_not_allowed
    assert renew(client, b"x") == (ErrorCode.delegation_token_request_not_allowed, 0)
    disabled = token_broker(broker_factory, **{"delegation.token.secret.key": ""})
    alice = sasl_client(disabled, "alice")
    for version in (0, 1, 2, 3):
        assert create(alice, version=version).error_code == ErrorCode.delegation_token_auth_disabled
    assert describe(alice).error_code == ErrorCode.delegation_token_auth_disabled
    assert renew(alice, b"x").error_code == ErrorCode.delegation_token_auth_disabled
    assert expire(alice, b"x").error_code == ErrorCode.delegation_token_auth_disabled


@pytest.mark.parametrize("version", [0, 1, 2])
def test_older_versions(broker_factory: Any, version: int) -> None:
    broker = token_broker(broker_factory)
    alice = sasl_client(broker, "alice")
    made = create(alice, version=version)
    assert made.error_code == 0 and made.principal_name == "alice"
    described = alice.request(DESCRIBE, version, {"owners": None})
    assert [t.token_id for t in described.tokens] == [made.token_id]
    assert renew(alice, made.hmac, version=version).error_code == 0
    assert expire(alice, made.hmac, version=version).error_code == 0


def test_the_controller_removes_expired_tokens(broker_factory: Any) -> None:
    broker = token_broker(broker_factory, **{"delegation.token.max.lifetime.ms": "400",
                                            "delegation.token.expiry.check.interval.ms": "100"})
    alice = sasl_client(broker, "alice")
    made = create(alice, max_lifetime_ms=HOUR_MS)  # the broker's maximum is smaller
    assert ms(made.max_timestamp) - ms(made.issue_timestamp) == 400
    assert ms(made.expiry_timestamp) == ms(made.max_timestamp)  # the expiry time is capped by the lifetime
    assert [t.token_id for t in describe(alice).tokens] == [made.token_id]
    deadline = time.monotonic() + 10
    while describe(alice).tokens:
        assert time.monotonic() < deadline, "the expired token was not removed"
        time.sleep(0.05)
    assert renew(alice, made.hmac).error_code == ErrorCode.delegation_token_not_found


def plain_client(port: int, user: str) -> RawClient:
    client = RawClient(port)
    assert client.request(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == 0
    answer = client.request(SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0%s\0%s-secret" % (user.encode(), user.encode())})
    assert answer.error_code == 0, answer
    return client


def test_token_writes_at_a_broker_only_node_reach_the_controller_as_the_client(
        formatted_cluster: Callable[..., list[BrokerThread]]) -> None:
    """A broker-only node forwards the writes in an Envelope with the client's principal (Kafka's forwarding):
    the controller records who asked, and checks who renews."""
    configs = two_node_configs({"delegation.token.secret.key": SECRET})
    configs[2].update({
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS.replace(";", ' user_carol="carol-secret";')})
    controller, follower = formatted_cluster(configs)
    assert follower.broker.broker_only
    port = follower.call(lambda: follower.broker.listener_ports["SASL_PLAINTEXT"])
    alice, bob, carol = (plain_client(port, user) for user in ("alice", "bob", "carol"))

    made = create(alice, owner="bob")  # no authorizer: anyone may ask for anyone
    assert made.error_code == 0, made
    assert (made.principal_name, made.token_requester_principal_name) == ("bob", "alice")
    wait_for(lambda: [t.token_id for t in describe(bob).tokens] == [made.token_id], timeout=15)
    [seen] = describe(bob).tokens
    assert (seen.principal_name, seen.token_requester_principal_name, seen.hmac) == ("bob", "alice", made.hmac)
    assert controller.call(lambda: controller.broker.controller.image.delegation_tokens[made.token_id].requester) \
        == "User:alice"

    assert renew(carol, made.hmac).error_code == ErrorCode.delegation_token_owner_mismatch  # decided as carol
    assert renew(alice, made.hmac).error_code == ErrorCode.delegation_token_owner_mismatch  # the requester is not
    assert renew(bob, made.hmac, 60_000).error_code == 0

    token_session = RawClient(port)
    assert token_session.request(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}).error_code == 0
    scram = ScramClient("SCRAM-SHA-256", made.token_id, base64.b64encode(made.hmac).decode(), token=True)
    first = token_session.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.initial()})
    final = token_session.request(SASL_AUTHENTICATE, 2, {"auth_bytes": scram.evaluate(first.auth_bytes)})
    assert final.error_code == 0, final

    assert expire(bob, made.hmac).error_code == 0
    wait_for(lambda: describe(bob).tokens == (), timeout=15)
