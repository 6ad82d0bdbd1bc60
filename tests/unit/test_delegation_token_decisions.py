"""Delegation token decisions (klamm/controller/delegation_tokens.py) against Kafka's DelegationTokenControlManager,
and tokens through a snapshot."""

from __future__ import annotations

import base64

from klamm.controller.delegation_tokens import (TokenCredentials, TokenSettings, decide_create_token,
                                                decide_expire_token, decide_renew_token, decide_sweep_tokens,
                                                token_hmac)
from klamm.controller.image import MetadataImage, empty_image
from klamm.controller.image import apply_batch as apply_offsets
from klamm.controller.records import MetadataRecord
from klamm.controller.snapshot import image_records
from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import ScramServer
from klamm.protocol.sasl_client import ScramClient

SETTINGS = TokenSettings("secret", max_lifetime_ms=10_000, expiry_time_ms=1_000)


def apply_batch(image: MetadataImage, records: list) -> MetadataImage:
    return apply_offsets(image, [(image.offset + 1 + i, r) for i, r in enumerate(records)])
HMAC = token_hmac("secret", "t1")


def image_at(level: int = 21) -> MetadataImage:
    return apply_batch(empty_image("c", 1), [MetadataRecord("FeatureLevelRecord",
                                                            {"name": "metadata.version", "feature_level": level})])


def with_token(image: MetadataImage, now: int = 100, renewers: tuple = (("User", "bob"),)) -> MetadataImage:
    result, records = decide_create_token(image, SETTINGS, "User:alice", "User:alice", list(renewers), -1, now, "t1")
    assert result.error == ErrorCode.none
    return apply_batch(image, records)


def test_create_caps_the_lifetime_and_the_expiry() -> None:
    result, [record] = decide_create_token(image_at(), SETTINGS, "User:alice", "User:carol", [], 5_000, 100, "t1")
    assert (result.issue_ms, result.expiry_ms, result.max_ms, result.hmac) == (100, 1_100, 5_100, HMAC)
    assert record.data["requester"] == "User:carol" and record.data["owner"] == "User:alice"
    short = TokenSettings("secret", max_lifetime_ms=500, expiry_time_ms=1_000)
    assert decide_create_token(image_at(), short, "User:a", "User:a", [], -1, 100)[0].expiry_ms == 600


def test_create_is_refused_without_a_key_an_old_metadata_version_or_a_non_user_renewer() -> None:
    off = TokenSettings(None, 10, 10)
    assert decide_create_token(image_at(), off, "User:a", "User:a", [], -1, 0)[0].error == \
        ErrorCode.delegation_token_auth_disabled
    assert decide_create_token(image_at(13), SETTINGS, "User:a", "User:a", [], -1, 0)[0].error == \
        ErrorCode.unsupported_version
    assert decide_create_token(image_at(), SETTINGS, "User:a", "User:a", [("Group", "g")], -1, 0)[0].error == \
        ErrorCode.invalid_principal_type


def test_renew_and_expire() -> None:
    image = with_token(image_at())
    result, records = decide_renew_token(image, SETTINGS, "User:bob", HMAC, 500, 200)
    assert (result.error, result.expiry_ms) == (ErrorCode.none, 700)
    image = apply_batch(image, records)
    assert image.delegation_tokens["t1"].expiry_ms == 700
    assert decide_renew_token(image, SETTINGS, "User:carol", HMAC, -1, 200)[0].error == \
        ErrorCode.delegation_token_owner_mismatch
    assert decide_renew_token(image, SETTINGS, "User:bob", b"other", -1, 200)[0].error == \
        ErrorCode.delegation_token_not_found
    assert decide_renew_token(image, SETTINGS, "User:bob", HMAC, -1, 701)[0].error == \
        ErrorCode.delegation_token_expired
    # past its expiry it can still be expired at once, but not given a new expiry
    assert decide_expire_token(image, SETTINGS, "User:alice", HMAC, 100, 701)[0].error == \
        ErrorCode.delegation_token_expired
    result, records = decide_expire_token(image, SETTINGS, "User:alice", HMAC, -1, 701)
    assert (result.error, result.expiry_ms, records[0].type) == (ErrorCode.none, 701, "RemoveDelegationTokenRecord")
    assert apply_batch(image, records).delegation_tokens == {}


def test_the_sweep_removes_what_expired() -> None:
    image = with_token(image_at())
    assert decide_sweep_tokens(image, 1_100) == []
    [removal] = decide_sweep_tokens(image, 1_101)
    assert removal.data == {"token_id": "t1"}


def test_tokens_survive_a_snapshot() -> None:
    image = with_token(image_at())
    rebuilt = apply_batch(empty_image("c", 1), list(image_records(image)))
    assert rebuilt.delegation_tokens == image.delegation_tokens


def test_a_scram_exchange_with_the_token() -> None:
    image = with_token(image_at())
    credentials = TokenCredentials(lambda: image, lambda: "secret")
    password = base64.b64encode(HMAC).decode()
    server = ScramServer("SCRAM-SHA-512", lambda user: None,
                         token_lookup=lambda token_id: credentials.lookup(token_id, "SCRAM-SHA-512"))
    client = ScramClient("SCRAM-SHA-512", "t1", password, token=True)
    final = server.evaluate(client.evaluate(server.evaluate(client.initial())))
    client.evaluate(final)
    assert (server.complete, server.principal, server.token_authenticated, server.credential_expiry_ms) == (
        True, "alice", True, 1_100)
    assert credentials.lookup("t2", "SCRAM-SHA-512") is None
