"""SASL/OAUTHBEARER (klamm.protocol.oauthbearer) and its wiring into SASL listeners (klamm.broker.authentication).

Tokens and keys are made here from RFC 7515/7517/7518 with `cryptography`, not
with the broker's code. Checked: the client's first message (Kafka's
OAuthBearerClientInitialResponse grammar), the exchange (the JSON error
challenge, the client's \\x01, Kafka's messages), the unsecured validator
(Kafka's OAuthBearerUnsecuredValidatorCallbackHandler), the signed one (Kafka's
OAuthBearerValidatorCallbackHandler over jose4j: signatures, exp/nbf/iat,
aud/iss, claims), the JWKS cache and fetching (file and http, unknown kid,
retries), listener configuration, and the session lifetime from the token's
expiry. Whatever bytes arrive, the mechanism answers or raises SaslError.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.broker.authentication import SaslListener, SaslSession
from klamm.broker.oauthbearer_validation import JwksSource
from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from klamm.protocol.errors import ErrorCode
from klamm.protocol.oauthbearer import (
    BearerToken,
    InvalidToken,
    JwksCache,
    OAuthBearerServer,
    SignedJwtValidator,
    StaticKeys,
    UnsecuredJwtValidator,
    parse_client_first,
    parse_jwks,
)
from klamm.protocol.sasl import SaslError

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = 1_700_000_000.0  # the validators' clock in these tests
INVALID_CREDENTIALS = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                       "OAUTHBEARER")
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
VALIDATOR = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
LISTENER = "SASL_PLAINTEXT"
PREFIX = "listener.name.sasl_plaintext.oauthbearer."


# ---------------------------------------------------------------------------------------------------------------
# Tokens and keys, from the RFCs (the integration tests use these too)

_HASH = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_CURVE = {"ES256": (ec.SECP256R1, 32), "ES384": (ec.SECP384R1, 48), "ES512": (ec.SECP521R1, 66)}
_CURVE_NAME = {"secp256r1": ("P-256", 32), "secp384r1": ("P-384", 48), "secp521r1": ("P-521", 66)}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def segment(value: Any) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def unsecured_token(body: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    return f"{segment(header or {'alg': 'none'})}.{segment(body)}."


def claims(sub: str = "alice", lifetime_s: float = 3600, now: float = NOW, **more: Any) -> dict[str, Any]:
    return {"sub": sub, "iat": int(now), "exp": int(now + lifetime_s), **more}


def private_key(alg: str) -> Any:
    if alg[:2] in ("RS", "PS"):
        return rsa.generate_private_key(65537, 2048)
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key(_CURVE[alg][0]())


def sign(key: Any, alg: str, data: bytes) -> bytes:
    if alg.startswith("RS"):
        return key.sign(data, padding.PKCS1v15(), _HASH[alg[2:]]())
    if alg.startswith("PS"):
        digest = _HASH[alg[2:]]()
        return key.sign(data, padding.PSS(padding.MGF1(digest), digest.digest_size), digest)
    if alg == "EdDSA":
        return key.sign(data)
    r, s = decode_dss_signature(key.sign(data, ec.ECDSA(_HASH[alg[2:]]())))
    size = _CURVE[alg][1]
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")


def signed_token(key: Any, alg: str, body: dict[str, Any], kid: Any = "k1",
                 header: dict[str, Any] | None = None) -> str:
    """A JWS signed with `alg`; `header` adds to (or overrides) the header, "alg" included."""
    head = {"alg": alg, "typ": "JWT", **({"kid": kid} if kid is not None else {}), **(header or {})}
    signing_input = f"{segment(head)}.{segment(body)}"
    return f"{signing_input}.{b64url(sign(key, alg, signing_input.encode()))}"


def _int(value: int, size: int | None = None) -> str:
    return b64url(value.to_bytes(size or (value.bit_length() + 7) // 8, "big"))


def jwk(key: Any, kid: str | None = "k1", **more: Any) -> dict[str, Any]:
    """The public JWK of a private key (RFC 7517, RFC 7518 section 6, RFC 8037)."""
    public = key.public_key()
    entry: dict[str, Any]
    if isinstance(public, rsa.RSAPublicKey):
        numbers = public.public_numbers()
        entry = {"kty": "RSA", "n": _int(numbers.n), "e": _int(numbers.e)}
    elif isinstance(public, ed25519.Ed25519PublicKey):
        entry = {"kty": "OKP", "crv": "Ed25519", "x": b64url(public.public_bytes(Encoding.Raw, PublicFormat.Raw))}
    else:
        crv, size = _CURVE_NAME[public.curve.name]
        numbers = public.public_numbers()
        entry = {"kty": "EC", "crv": crv, "x": _int(numbers.x, size), "y": _int(numbers.y, size)}
    if kid is not None:
        entry["kid"] = kid
    return {**entry, **more}


def jwks(*entries: dict[str, Any]) -> str:
    return json.dumps({"keys": list(entries)})


def client_first(token: str, authzid: str = "", **extensions: str) -> bytes:
    """The client's first message, as Kafka's OAuthBearerClientInitialResponse.toBytes writes it."""
    pairs = "".join(f"\x01{key}={value}" for key, value in extensions.items())
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}{pairs}\x01\x01".encode()


@pytest.fixture(scope="module")
def rsa_key() -> Any:
    return private_key("RS256")


def signed_validator(key: Any, **options: Any) -> SignedJwtValidator:
    keys = StaticKeys(parse_jwks(jwks(jwk(key))))
    return SignedJwtValidator(keys, clock=lambda: NOW, **options)


# ---------------------------------------------------------------------------------------------------------------
# The client's first message


def test_client_first_with_authzid_and_extensions() -> None:
    first = parse_client_first(b"n,a=alice,\x01auth=Bearer abc.def.ghi\x01traceId=x y\x01logicalCluster=lc-1\x01\x01")
    assert (first.token, first.authzid) == ("abc.def.ghi", "alice")
    assert first.extensions == {"traceId": "x y", "logicalCluster": "lc-1"}


def test_client_first_minimal_and_escaped_authzid() -> None:
    first = parse_client_first(b"n,,\x01auth=bearer tok==\x01\x01")
    assert (first.token, first.authzid, first.extensions) == ("tok==", "", {})
    assert parse_client_first(b"n,a=a=2Cb=3Dc,\x01auth=Bearer t\x01\x01").authzid == "a,b=c"


@pytest.mark.parametrize(("message", "error"), [
    (b"", "Invalid OAUTHBEARER client first message"),
    (b"y,,\x01auth=Bearer t\x01\x01", "Invalid OAUTHBEARER client first message"),
    (b"n,,\x01auth=Bearer t\x01", "Invalid OAUTHBEARER client first message"),  # no closing \x01
    (b"n,,\x01auth=Bearer t\x01bad key=v\x01\x01", "Invalid OAUTHBEARER client first message"),
    (b"n,,\x01auth=Bearer t\x01k=\xc3\xa9\x01\x01", "Invalid OAUTHBEARER client first message"),
    (b"n,,\x01k=v\x01\x01", "'auth' not specified"),
    (b"n,,\x01auth=Bearer\x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Bearer a b\x01\x01", "invalid 'auth' format"),
    (b"n,,\x01auth=Basic dXNlcg==\x01\x01", "Invalid scheme in OAUTHBEARER client first message: Basic"),
])
def test_malformed_client_first(message: bytes, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_client_first(message)


# ---------------------------------------------------------------------------------------------------------------
# The exchange


def unsecured_server(**options: Any) -> OAuthBearerServer:
    return OAuthBearerServer(UnsecuredJwtValidator(clock=lambda: NOW, **options))


def test_valid_token_completes_with_its_principal_expiry_and_extensions() -> None:
    server = unsecured_server()
    token = unsecured_token(claims("alice", 600))
    assert server.evaluate(client_first(token, "alice", traceId="t-1")) == b""
    assert server.complete and server.principal == "alice"
    assert server.credential_expiry_ms == int(NOW + 600) * 1000
    assert server.extensions == {"traceId": "t-1"}
    assert server.token is not None and server.token.value == token


def test_invalid_token_gets_kafkas_json_then_the_client_ack_fails_with_it() -> None:
    server = unsecured_server()
    challenge = server.evaluate(client_first(unsecured_token(claims(lifetime_s=-10))))
    assert challenge == b'{"status":"invalid_token"}'
    assert not server.complete
    with pytest.raises(SaslError) as failure:
        server.evaluate(b"\x01")
    assert failure.value.code is ErrorCode.sasl_authentication_failed
    assert failure.value.message == '{"status":"invalid_token"}'
    assert "Expiration Time" in failure.value.detail  # the reason, for the broker's log only
    with pytest.raises(SaslError) as again:
        server.evaluate(b"\x01")
    assert again.value.code is ErrorCode.illegal_sasl_state


def test_after_an_error_the_client_may_send_a_new_first_message() -> None:
    server = unsecured_server()
    assert server.evaluate(client_first("not-a-jwt")) == b'{"status":"invalid_token"}'
    assert server.evaluate(client_first(unsecured_token(claims("bob")))) == b""
    assert server.principal == "bob"


def test_insufficient_scope_names_the_required_scope() -> None:
    server = unsecured_server(required_scope=("produce", "consume"))
    challenge = server.evaluate(client_first(unsecured_token(claims(scope="produce"))))
    assert challenge == b'{"status":"insufficient_scope", "scope":"[produce, consume]"}'
    with pytest.raises(SaslError, match="insufficient_scope"):
        server.evaluate(b"\x01")


def test_authzid_must_be_the_principal() -> None:
    with pytest.raises(SaslError) as failure:
        unsecured_server().evaluate(client_first(unsecured_token(claims("alice")), "bob"))
    assert failure.value.message == ("Authentication failed: Client requested an authorization id (bob) that is "
                                     "different from the token's principal name (alice)")


def test_malformed_message_fails_with_the_generic_sentence() -> None:
    with pytest.raises(SaslError) as failure:
        unsecured_server().evaluate(b"n,,\x01auth=Bearer\x01\x01")
    assert failure.value.code is ErrorCode.sasl_authentication_failed
    assert failure.value.message == INVALID_CREDENTIALS
    assert "invalid 'auth' format" in failure.value.detail


def test_token_after_completion_is_illegal() -> None:
    server = unsecured_server()
    server.evaluate(client_first(unsecured_token(claims())))
    with pytest.raises(SaslError) as failure:
        server.evaluate(client_first(unsecured_token(claims())))
    assert failure.value.code is ErrorCode.illegal_sasl_state


class _PickyValidator(UnsecuredJwtValidator):
    """Accepts traceId, refuses bad, ignores anything else (an extension no one validated is dropped)."""

    def validate_extensions(self, token: BearerToken, extensions: Any) -> tuple[dict[str, str], dict[str, str]]:
        valid = {k: v for k, v in extensions.items() if k == "traceId"}
        invalid = {k: "not allowed" for k in extensions if k == "bad"}
        return valid, invalid


def test_only_validated_extensions_are_kept_and_invalid_ones_fail() -> None:
    server = OAuthBearerServer(_PickyValidator(clock=lambda: NOW))
    server.evaluate(client_first(unsecured_token(claims()), traceId="t", other="o"))
    assert server.extensions == {"traceId": "t"}
    with pytest.raises(SaslError) as failure:
        OAuthBearerServer(_PickyValidator(clock=lambda: NOW)).evaluate(
            client_first(unsecured_token(claims()), bad="x"))
    assert failure.value.message == "Authentication failed: 1 extensions are invalid! They are: bad: not allowed"


class _BrokenValidator(UnsecuredJwtValidator):
    def validate(self, token: str) -> BearerToken:
        raise RuntimeError("database down")


def test_a_broken_validator_becomes_a_sasl_error() -> None:
    with pytest.raises(SaslError) as failure:
        OAuthBearerServer(_BrokenValidator()).evaluate(client_first("t"))
    assert failure.value.message == INVALID_CREDENTIALS
    assert "internal error" in failure.value.detail


# ---------------------------------------------------------------------------------------------------------------
# Unsecured tokens (OAuthBearerUnsecuredValidatorCallbackHandler)


def unsecured(token: str, **options: Any) -> BearerToken:
    return UnsecuredJwtValidator(clock=lambda: NOW, **options).validate(token)


def test_unsecured_token_fields() -> None:
    token = unsecured(unsecured_token(claims("alice", 60, scope=["a", " b ", ""])))
    assert token.principal == "alice"
    assert token.scope == {"a", "b"}
    assert token.lifetime_ms == int(NOW + 60) * 1000
    assert token.start_ms == int(NOW) * 1000


def test_librdkafka_style_token_with_fractional_times_and_string_scope() -> None:
    body = {"sub": "alice", "iat": NOW - 0.5, "exp": NOW + 3600.25, "scope": "produce"}
    token = unsecured(unsecured_token(body))
    assert token.lifetime_ms == round((NOW + 3600.25) * 1000)
    assert token.scope == {"produce"}


def test_unsecured_principal_claim_option() -> None:
    validator = UnsecuredJwtValidator.from_jaas_options({"unsecuredValidatorPrincipalClaimName": "client_id"},
                                                        lambda: NOW)
    assert validator.validate(unsecured_token(claims(client_id="svc-1"))).principal == "svc-1"
    with pytest.raises(InvalidToken, match="No principal name in JWT claim: client_id"):
        validator.validate(unsecured_token(claims()))


def test_unsecured_clock_skew_option() -> None:
    late = unsecured_token({"sub": "alice", "exp": NOW - 1})  # expired a second ago
    with pytest.raises(InvalidToken):
        unsecured(late)
    validator = UnsecuredJwtValidator.from_jaas_options({"unsecuredValidatorAllowableClockSkewMs": "2000"},
                                                        lambda: NOW)
    assert validator.validate(late).principal == "alice"
    early = unsecured_token({"sub": "alice", "iat": NOW + 1, "exp": NOW + 60})  # issued a second from now
    with pytest.raises(InvalidToken, match="Issued At"):
        unsecured(early)
    assert validator.validate(early).principal == "alice"


@pytest.mark.parametrize(("token", "reason"), [
    (unsecured_token(claims(lifetime_s=0)), "Expiration Time"),  # exp == now is expired
    (unsecured_token({"sub": "alice"}), "No expiration time in JWT"),
    (unsecured_token({"sub": "alice", "exp": "soon"}), "'exp' claim was not of type Number: String"),
    (unsecured_token({"sub": "alice", "exp": True}), "'exp' claim was not of type Number"),
    (unsecured_token({"sub": "alice", "exp": NOW + 60, "iat": "x"}), "'iat' claim was not of type Number"),
    (unsecured_token({"sub": "alice", "exp": NOW - 10, "iat": NOW - 5}), "Expiration Time"),
    (unsecured_token({"sub": "alice", "exp": NOW + 10, "iat": NOW + 10}), "Issued At"),
    (unsecured_token({"exp": NOW + 60}), "No principal name in JWT claim: sub"),
    (unsecured_token({"sub": "  ", "exp": NOW + 60}), "No principal name"),
    (unsecured_token({"sub": 7, "exp": NOW + 60}), "'sub' claim was not of type String: Integer"),
    (unsecured_token(claims(scope={"a": 1})), "'scope' claim was not of type List"),
    (unsecured_token(claims(), {"alg": "RS256"}), "'none' for an algorithm"),
    (unsecured_token(claims(), {"typ": "JWT"}), "must have an Algorithm value"),
    (unsecured_token(claims()) + "c2ln", "must not contain a digital signature"),
    (unsecured_token(claims())[:-1], "3 dot-separated"),
    (unsecured_token(claims()) + ".", "'..'"),
    ("a.b.c.d", "3 dot-separated"),
    ("!!!." + segment(claims()) + ".", "malformed Base64"),
    (b64url(b"{not json") + "." + segment(claims()) + ".", "malformed JSON"),
    (segment([1, 2]) + "." + segment(claims()) + ".", "malformed JSON"),
    (segment({"alg": "none"}) + "." + b64url(b'{"exp": NaN}') + ".", "malformed JSON"),
])
def test_unsecured_token_refused(token: str, reason: str) -> None:
    with pytest.raises(InvalidToken, match=reason) as refused:
        unsecured(token)
    assert refused.value.status == "invalid_token"


def test_exp_exactly_at_iat_plus_something_is_after_iat() -> None:
    body = {"sub": "alice", "iat": NOW - 1, "exp": NOW + 1}
    assert unsecured(unsecured_token(body)).principal == "alice"


def test_unsecured_nbf_is_not_checked_as_in_kafka() -> None:
    assert unsecured(unsecured_token(claims(nbf=NOW + 3600))).principal == "alice"


def test_standard_base64_is_accepted_too() -> None:
    header = base64.b64encode(b'{"alg":"none"}').decode()  # Kafka's decoder reads the standard alphabet
    assert unsecured(f"{header}.{segment(claims())}.").principal == "alice"


@pytest.mark.parametrize(("options", "error"), [
    ({"unsecuredValidatorAllowableClockSkewMs": "-1"}, "must not be negative"),
    ({"unsecuredValidatorAllowableClockSkewMs": "1s"}, "not an int"),
    ({"unsecuredValidatorAllowableClockSkewMs": "99999999999"}, "not an int"),
    ({"unsecuredValidatorRequiredScope": 'read "write"'}, "Invalid scope value"),
])
def test_bad_unsecured_options(options: dict[str, str], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        UnsecuredJwtValidator.from_jaas_options(options)


# ---------------------------------------------------------------------------------------------------------------
# Signed tokens (OAuthBearerValidatorCallbackHandler)


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512",
                                 "EdDSA"])
def test_signed_token_verifies(alg: str) -> None:
    key = private_key(alg)
    validator = signed_validator(key)
    token = validator.validate(signed_token(key, alg, claims("alice", 300, scope="read write")))
    assert token.principal == "alice"
    assert token.lifetime_ms == int(NOW + 300) * 1000
    assert token.scope == {"read write"}  # a string scope is one item, as Kafka reads it


def test_signed_claims_options(rsa_key: Any) -> None:
    validator = signed_validator(rsa_key, sub_claim="azp", scope_claim="scp", expected_audiences=["kafka", "other"],
                                 expected_issuer="https://idp.example")
    body = claims(azp=" svc ", scp=["read", "write"], aud=["kafka"], iss="https://idp.example")
    token = validator.validate(signed_token(rsa_key, "RS256", body))
    assert token.principal == "svc" and token.scope == {"read", "write"}
    assert validator.validate(signed_token(rsa_key, "RS256", {**body, "aud": "other"})).principal == "svc"


def test_clock_skew(rsa_key: Any) -> None:
    late = signed_token(rsa_key, "RS256", claims(lifetime_s=80, now=NOW - 100))  # expired 20 s ago
    assert signed_validator(rsa_key).validate(late).principal == "alice"  # the default skew is 30 s
    with pytest.raises(InvalidToken, match="no longer valid"):
        signed_validator(rsa_key, clock_skew_s=10).validate(late)
    early = signed_token(rsa_key, "RS256", claims(nbf=int(NOW) + 20))
    assert signed_validator(rsa_key).validate(early).principal == "alice"
    with pytest.raises(InvalidToken, match="not yet valid"):
        signed_validator(rsa_key, clock_skew_s=10).validate(early)


def tampered(token: str) -> str:
    head, _, signature = token.split(".")
    return f"{head}.{segment(claims('mallory'))}.{signature}"


@pytest.mark.parametrize(("make", "options", "reason"), [
    (lambda k: signed_token(k, "RS256", claims(lifetime_s=69, now=NOW - 100)), {}, "no longer valid"),
    (lambda k: signed_token(k, "RS256", {"sub": "alice", "iat": int(NOW)}), {}, "No Expiration Time"),
    (lambda k: signed_token(k, "RS256", {"sub": "alice", "exp": int(NOW) + 60}), {}, "No Issued At"),
    (lambda k: signed_token(k, "RS256", claims(exp="tomorrow")), {}, "'exp' claim is not the expected type"),
    (lambda k: signed_token(k, "RS256", claims(nbf=int(NOW) + 31)), {}, "not yet valid"),
    (lambda k: signed_token(k, "RS256", {**claims(), "exp": int(NOW) + 10, "iat": int(NOW) + 20}), {},
     "cannot be before the IssuedAt"),
    (lambda k: signed_token(k, "RS256", claims(aud="other")), {"expected_audiences": ["kafka"]},
     "doesn't contain an acceptable identifier"),
    (lambda k: signed_token(k, "RS256", claims()), {"expected_audiences": ["kafka"]}, "No Audience"),
    (lambda k: signed_token(k, "RS256", claims(aud="kafka")), {}, "no expected audience value"),
    (lambda k: signed_token(k, "RS256", claims(aud=[1])), {"expected_audiences": ["kafka"]}, "'aud' claim"),
    (lambda k: signed_token(k, "RS256", claims(iss="https://evil")), {"expected_issuer": "https://idp"},
     "Issuer"),
    (lambda k: signed_token(k, "RS256", claims()), {"expected_issuer": "https://idp"}, "No Issuer"),
    (lambda k: signed_token(k, "RS256", {"iat": int(NOW), "exp": int(NOW) + 60}), {}, "sub value must be non-null"),
    (lambda k: signed_token(k, "RS256", claims(sub=" ")), {}, "sub value must not contain only whitespace"),
    (lambda k: signed_token(k, "RS256", claims(sub="")), {}, "sub value must be non-empty"),
    (lambda k: signed_token(k, "RS256", claims(sub=5)), {}, "Could not extract the 'sub' claim"),
    (lambda k: signed_token(k, "RS256", claims(scope=["a", "a"])), {}, "must not contain duplicates"),
    (lambda k: signed_token(k, "RS256", claims(scope=["a", ""])), {}, "scope value must be non-empty"),
    (lambda k: signed_token(k, "RS256", claims(iat=-5)), {}, "iat value must be null or non-negative"),
    (lambda k: tampered(signed_token(k, "RS256", claims())), {}, "signature is invalid"),
    (lambda k: signed_token(k, "RS256", claims())[:-4] + "AAAA", {}, "signature is invalid"),
    (lambda k: signed_token(k, "RS256", claims())[:-10], {}, "signature is invalid|malformed Base64"),
    (lambda k: signed_token(private_key("RS256"), "RS256", claims()), {}, "signature is invalid"),  # same kid
    (lambda k: signed_token(k, "RS256", claims(), kid="k2"), {}, "Unable to find a suitable verification key"),
    (lambda k: signed_token(k, "PS256", claims(), kid="k1")[:-2], {}, "signature is invalid|malformed Base64"),
    (lambda k: unsecured_token(claims()), {}, "Malformed JWT"),  # Java's split: an empty signature is no section
    (lambda k: unsecured_token(claims()) + "c2ln", {}, "'none' is not a permitted algorithm"),
    (lambda k: signed_token(k, "RS256", claims(), header={"alg": "HS256"}), {}, "'HS256' is not a permitted algorithm"),
    (lambda k: signed_token(k, "RS256", claims(), header={"crit": ["exp"]}), {}, "crit"),
    (lambda k: signed_token(k, "RS256", claims(), kid=7), {}, "kid header is not a string"),
    (lambda k: "", {}, "Empty JWT"),
    (lambda k: "a.b", {}, "Malformed JWT"),
    (lambda k: "a.b.c.d", {}, "Malformed JWT"),
    (lambda k: f"{b64url(b'[')}.{segment(claims())}.c2ln", {}, "malformed JSON"),
])
def test_signed_token_refused(rsa_key: Any, make: Callable[[Any], str], options: dict[str, Any],
                              reason: str) -> None:
    with pytest.raises(InvalidToken, match=reason) as refused:
        signed_validator(rsa_key, **options).validate(make(rsa_key))
    assert refused.value.status == "invalid_token" and refused.value.scope is None


def test_key_selection(rsa_key: Any) -> None:
    other = private_key("RS256")
    source = StaticKeys(parse_jwks(jwks(jwk(other, "k0"), jwk(rsa_key, "k1"), jwk(rsa_key, "enc", use="enc"),
                                        jwk(rsa_key, "ps", alg="PS256"))))
    validator = SignedJwtValidator(source, clock=lambda: NOW)
    # without a kid every suitable key is tried
    assert validator.validate(signed_token(rsa_key, "RS256", claims(), kid=None)).principal == "alice"
    with pytest.raises(InvalidToken, match="Unable to find"):  # an encryption key does not verify signatures
        validator.validate(signed_token(rsa_key, "RS256", claims(), kid="enc"))
    with pytest.raises(InvalidToken, match="Unable to find"):  # a key for PS256 only
        validator.validate(signed_token(rsa_key, "RS256", claims(), kid="ps"))
    assert validator.validate(signed_token(rsa_key, "PS256", claims(), kid="ps")).principal == "alice"
    es = private_key("ES384")
    with pytest.raises(InvalidToken, match="Unable to find"):  # ES256 needs a P-256 key
        SignedJwtValidator(StaticKeys(parse_jwks(jwks(jwk(es)))), clock=lambda: NOW).validate(
            signed_token(es, "ES384", claims(), header={"alg": "ES256"}))


def test_rsa_keys_under_2048_bits_are_not_used() -> None:
    small = rsa.generate_private_key(65537, 1024)
    with pytest.raises(InvalidToken, match="Unable to find"):
        signed_validator(small).validate(signed_token(small, "RS256", claims()))


def test_signed_validator_through_the_mechanism(rsa_key: Any) -> None:
    server = OAuthBearerServer(signed_validator(rsa_key, expected_audiences=["kafka"]))
    assert server.evaluate(client_first(signed_token(rsa_key, "RS256", claims(aud="other")))) == \
        b'{"status":"invalid_token"}'
    with pytest.raises(SaslError, match="invalid_token"):
        server.evaluate(b"\x01")
    server = OAuthBearerServer(signed_validator(rsa_key, expected_audiences=["kafka"]))
    assert server.evaluate(client_first(signed_token(rsa_key, "RS256", claims(aud="kafka")))) == b""
    assert server.principal == "alice"


# ---------------------------------------------------------------------------------------------------------------
# JWKS


def test_parse_jwks_skips_keys_it_cannot_use(rsa_key: Any) -> None:
    ec_key = private_key("ES256")
    off_curve = {**jwk(ec_key, "bad-ec"), "y": jwk(ec_key)["x"]}
    entries = [jwk(rsa_key), {"kty": "oct", "k": "c2VjcmV0"}, {"kty": "RSA", "n": "!!", "e": "AQAB"}, off_curve,
               {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}, "not an object", jwk(ec_key, "ec", kid2=1)]
    keys = parse_jwks(json.dumps({"keys": entries}))
    assert [(k.kid, k.kty) for k in keys] == [("k1", "RSA"), ("ec", "EC")]


@pytest.mark.parametrize("text", ["", "[]", '{"keys": {}}', '{"other": []}', "{"])
def test_not_a_jwks(text: str) -> None:
    with pytest.raises(ValueError):
        parse_jwks(text)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_jwks_cache_refresh_policy(rsa_key: Any) -> None:
    clock = Clock()
    cache = JwksCache(refresh_ms=60_000, clock=clock)
    assert cache.fetch_due() and not cache.loaded
    cache.fetching()
    assert not cache.fetch_due() and not cache.missing("k9")  # one fetch at a time
    cache.fetch_failed()
    assert not cache.fetch_due()  # never loaded: again after UNLOADED_RETRY_MS
    clock.now += 10
    assert cache.fetch_due()
    cache.fetching()
    cache.fetched(parse_jwks(jwks(jwk(rsa_key))))
    assert cache.loaded and [k.kid for k in cache.select({"alg": "RS256", "kid": "k1"})] == ["k1"]
    clock.now += 59
    assert not cache.fetch_due()
    clock.now += 1
    assert cache.fetch_due()


def test_jwks_cache_unknown_kid_fetches_at_most_once_a_minute_per_kid() -> None:
    clock = Clock()
    cache = JwksCache(refresh_ms=3_600_000, clock=clock)
    cache.fetching()
    cache.fetched(())
    assert cache.missing("a") and not cache.missing("a") and cache.missing("b")
    assert not cache.missing(None) and not cache.missing("x" * 1001)
    clock.now += 60
    assert cache.missing("a")
    for i in range(20):  # at most 16 kids are remembered: the oldest are forgotten
        cache.missing(f"kid-{i}")
    assert cache.missing("b")


# ---------------------------------------------------------------------------------------------------------------
# Listener configuration


def listener(props: dict[str, str], clock: Callable[[], float] = lambda: NOW) -> SaslListener:
    base = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "OAUTHBEARER",
            PREFIX + "sasl.jaas.config": f"{LOGIN_MODULE} required;"}
    return SaslListener(BrokerConfig.from_properties({**base, **props}), LISTENER, lambda user, mechanism: None,
                        clock=clock)


def authenticate(sasl: SaslListener, token: str, session: SaslSession | None = None) -> tuple[SaslSession, int]:
    session = session or SaslSession(sasl)
    session.handshake("OAUTHBEARER")
    challenge, lifetime = session.authenticate(client_first(token))
    assert challenge == b"", challenge
    return session, lifetime


@pytest.fixture
def jwks_file(tmp_path: Path, rsa_key: Any) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(jwks(jwk(rsa_key)))
    return path


def secured(url: str, **more: str) -> dict[str, str]:
    return {PREFIX + "sasl.server.callback.handler.class": VALIDATOR, "sasl.oauthbearer.jwks.endpoint.url": url,
            **more}


def test_unsecured_listener_reads_its_jaas_options() -> None:
    sasl = listener({PREFIX + "sasl.jaas.config": f'{LOGIN_MODULE} required unsecuredValidatorRequiredScope="k" '
                     'unsecuredValidatorAllowableClockSkewMs="1000";'})
    assert sasl.mechanisms == ("OAUTHBEARER",)
    session, _ = authenticate(sasl, unsecured_token({"sub": "alice", "exp": NOW - 0.5, "scope": "k"}))
    assert session.principal == "User:alice"
    session = SaslSession(sasl)
    session.handshake("OAUTHBEARER")
    assert session.authenticate(client_first(unsecured_token(claims())))[0].startswith(b'{"status":"insuff')
    with pytest.raises(SaslError):
        session.authenticate(b"\x01")
    assert session.failed


@pytest.mark.parametrize("url", ["file", "path"])
def test_secured_listener_with_a_jwks_file(jwks_file: Path, rsa_key: Any, url: str) -> None:
    location = jwks_file.as_uri() if url == "file" else str(jwks_file)
    sasl = listener(secured(location, **{"sasl.oauthbearer.expected.audience": "kafka,other",
                                         "sasl.oauthbearer.expected.issuer": "https://idp"}))
    good = claims(aud="kafka", iss="https://idp")
    assert authenticate(sasl, signed_token(rsa_key, "RS256", good))[0].principal == "User:alice"
    session = SaslSession(sasl)
    session.handshake("OAUTHBEARER")
    assert session.authenticate(client_first(signed_token(rsa_key, "RS256", {**good, "aud": "x"})))[0] == \
        b'{"status":"invalid_token"}'


def test_the_3x_handler_name_and_listener_prefixed_keys(jwks_file: Path, rsa_key: Any) -> None:
    sasl = listener({PREFIX + "sasl.server.callback.handler.class":
                     "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
                     PREFIX + "sasl.oauthbearer.jwks.endpoint.url": jwks_file.as_uri(),
                     PREFIX + "sasl.oauthbearer.sub.claim.name": "client_id",
                     "listener.name.sasl_plaintext.sasl.oauthbearer.scope.claim.name": "scp",
                     PREFIX + "sasl.oauthbearer.clock.skew.seconds": "0"})
    token = signed_token(rsa_key, "RS256", claims(client_id="svc", scp=["a"]))
    assert authenticate(sasl, token)[0].principal == "User:svc"
    assert sasl.oauthbearer.scope_claim == "scp" and sasl.oauthbearer.clock_skew_s == 0  # type: ignore[union-attr]


@pytest.mark.parametrize(("props", "key", "words"), [
    ({PREFIX + "sasl.jaas.config": ""}, PREFIX + "sasl.jaas.config", "OAuthBearerLoginModule"),
    ({PREFIX + "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required;"},
     PREFIX + "sasl.jaas.config", "OAuthBearerLoginModule"),
    ({PREFIX + "sasl.jaas.config": f'{LOGIN_MODULE} required unsecuredValidatorAllowableClockSkewMs="-5";'},
     PREFIX + "sasl.jaas.config", "negative"),
    ({PREFIX + "sasl.server.callback.handler.class": "com.example.MyValidator"},
     PREFIX + "sasl.server.callback.handler.class", "com.example.MyValidator"),
    ({PREFIX + "sasl.server.callback.handler.class": VALIDATOR}, "sasl.oauthbearer.jwks.endpoint.url",
     "must be non-null"),
    (secured("ftp://idp/jwks.json"), "sasl.oauthbearer.jwks.endpoint.url", "invalid protocol"),
    (secured("file:///no/such/jwks.json"), "sasl.oauthbearer.jwks.endpoint.url", "doesn't exist"),
    (secured("/"), "sasl.oauthbearer.jwks.endpoint.url", "directory"),
    (secured("https://idp/jwks", **{"sasl.oauthbearer.jwks.endpoint.refresh.ms": "0"}),
     "sasl.oauthbearer.jwks.endpoint.refresh.ms", "positive"),
    (secured("https://idp/jwks", **{"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "500",
                                    "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "100"}),
     "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", "less than"),
    (secured("https://idp/jwks", **{"sasl.oauthbearer.sub.claim.name": " "}), "sasl.oauthbearer.sub.claim.name",
     "non-null"),
    (secured("https://idp/jwks", **{PREFIX + "sasl.oauthbearer.clock.skew.seconds": "soon"}),
     PREFIX + "sasl.oauthbearer.clock.skew.seconds", "INT"),
    ({PREFIX + "connections.max.reauth.ms": "-1"}, PREFIX + "connections.max.reauth.ms", "at least 0"),
])
def test_what_cannot_work_is_refused(props: dict[str, str], key: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as refused:
        listener(props)
    assert refused.value.key == key


def test_a_jwks_file_that_is_not_a_jwks_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "jwks.json"
    bad.write_text("<html>")
    with pytest.raises(ConfigError, match="cannot read the JWKS"):
        listener(secured(bad.as_uri()))


def wait_for(condition: Callable[[], bool], timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_unknown_kid_reads_a_rotated_jwks_file_again(jwks_file: Path, rsa_key: Any) -> None:
    sasl = listener(secured(jwks_file.as_uri()))
    new_key = private_key("ES256")
    jwks_file.write_text(jwks(jwk(rsa_key), jwk(new_key, "k2")))
    token = signed_token(new_key, "ES256", claims(), kid="k2")
    session = SaslSession(sasl)
    session.handshake("OAUTHBEARER")
    assert session.authenticate(client_first(token))[0] == b'{"status":"invalid_token"}'  # and it reads again
    source = sasl.oauthbearer.keys  # type: ignore[union-attr]
    wait_for(lambda: any(k.kid == "k2" for k in source.keys))
    assert authenticate(sasl, token)[0].principal == "User:alice"


class JwksServer:
    """An http JWKS endpoint on 127.0.0.1 that fails its first `failures` requests with 503."""

    def __init__(self, body: str, failures: int = 0) -> None:
        self.body, self.failures, self.requests = body, failures, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                if outer.requests <= outer.failures:
                    self.send_error(503)
                    return
                data = outer.body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def jwks_server(rsa_key: Any) -> Iterator[JwksServer]:
    server = JwksServer(jwks(jwk(rsa_key)))
    yield server
    server.close()


def test_http_jwks_is_fetched_in_the_background_and_again_for_an_unknown_kid(jwks_server: JwksServer,
                                                                              rsa_key: Any) -> None:
    sasl = listener(secured(jwks_server.url))
    source = sasl.oauthbearer.keys  # type: ignore[union-attr]
    wait_for(lambda: bool(source.keys))
    assert authenticate(sasl, signed_token(rsa_key, "RS256", claims()))[0].principal == "User:alice"
    new_key = private_key("RS256")
    jwks_server.body = jwks(jwk(rsa_key), jwk(new_key, "k2"))
    token = signed_token(new_key, "RS256", claims(), kid="k2")
    session = SaslSession(sasl)
    session.handshake("OAUTHBEARER")
    assert session.authenticate(client_first(token))[0] == b'{"status":"invalid_token"}'
    wait_for(lambda: len(source.keys) == 2)
    assert authenticate(sasl, token)[0].principal == "User:alice"
    assert jwks_server.requests == 2


def test_http_jwks_fetch_retries_with_backoff(rsa_key: Any) -> None:
    server = JwksServer(jwks(jwk(rsa_key)), failures=2)
    try:
        sasl = listener(secured(server.url, **{"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "20",
                                               "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "5000"}))
        wait_for(lambda: bool(sasl.oauthbearer.keys.keys))  # type: ignore[union-attr]
        assert server.requests == 3
    finally:
        server.close()
    server = JwksServer(jwks(jwk(rsa_key)), failures=2)
    try:  # retry.backoff.max.ms=0: one attempt, then nothing until the cache allows another fetch
        sasl = listener(secured(server.url, **{"sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "0",
                                               "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms": "0"}))
        source = sasl.oauthbearer.keys  # type: ignore[union-attr]
        wait_for(lambda: source.fetches == 1 and server.requests == 1)
        time.sleep(0.2)
        assert server.requests == 1 and not source.keys
    finally:
        server.close()


def test_retry_waits_double_until_the_maximum() -> None:
    waits: list[float] = []
    clock = Clock()

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        clock.now += seconds

    def fetch() -> bytes:
        raise OSError("connection refused")

    source = JwksSource("http://idp/jwks", ("sasl.oauthbearer.jwks.endpoint.refresh.ms", 1000), 125, 1000,
                       fetch=fetch, sleep=sleep, clock=clock)
    wait_for(lambda: source.fetches == 5)
    time.sleep(0.05)
    assert waits == [0.125, 0.25, 0.5, 0.125] and source.fetches == 5 and not source.keys


# ---------------------------------------------------------------------------------------------------------------
# The session's lifetime: connections.max.reauth.ms and the token's expiry, whichever is first (Kafka's rule)


@pytest.mark.parametrize(("reauth_ms", "token_s", "expected_ms"), [
    ("0", 600, 600_000),  # Kafka ends an OAUTHBEARER session at the token's expiry even without reauth
    ("10000", 600, 10_000),
    ("60000", 5, 5_000),
])
def test_session_lifetime_is_the_earlier_of_reauth_and_token_expiry(reauth_ms: str, token_s: int,
                                                                     expected_ms: int) -> None:
    sasl = listener({"connections.max.reauth.ms": reauth_ms})
    session, lifetime = authenticate(sasl, unsecured_token(claims(lifetime_s=token_s)))
    assert lifetime == expected_ms
    assert session.may_reauthenticate()


def test_a_token_past_its_expiry_within_the_skew_ends_the_session_now() -> None:
    sasl = listener({"connections.max.reauth.ms": "60000", PREFIX + "sasl.jaas.config":
                     f'{LOGIN_MODULE} required unsecuredValidatorAllowableClockSkewMs="5000";'})
    session, lifetime = authenticate(sasl, unsecured_token({"sub": "alice", "exp": NOW - 2}))
    assert lifetime == 0
    assert not session.admits(3)  # Metadata: the session is over; only a new handshake is admitted
    assert session.admits(17)


def test_per_mechanism_reauth_ms_and_reauthentication_keeps_the_principal() -> None:
    sasl = listener({"sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER", "connections.max.reauth.ms": "0",
                     "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                     'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="pw";',
                     PREFIX + "connections.max.reauth.ms": "2000"})
    assert (sasl.reauth_ms_of("PLAIN"), sasl.reauth_ms_of("OAUTHBEARER")) == (0, 2000)
    session, lifetime = authenticate(sasl, unsecured_token(claims(lifetime_s=600)))
    assert lifetime == 2000
    session, lifetime = authenticate(sasl, unsecured_token(claims(lifetime_s=1)), session)  # re-authentication
    assert lifetime == 1000
    session.handshake("OAUTHBEARER")
    with pytest.raises(SaslError, match="Cannot change principals"):
        session.authenticate(client_first(unsecured_token(claims("mallory"))))
    plain = SaslSession(sasl)
    plain.handshake("PLAIN")
    assert plain.authenticate(b"\0bob\0pw") == (b"", 0) and not plain.may_reauthenticate()


# ---------------------------------------------------------------------------------------------------------------
# Whatever arrives, an answer or a SaslError


def _servers(rsa_key: Any) -> list[OAuthBearerServer]:
    return [unsecured_server(required_scope=("a",)), OAuthBearerServer(signed_validator(rsa_key))]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                  max_size=3), max_leaves=8)
_CLAIM_VALUES = st.one_of(_JSON, st.integers(min_value=int(NOW) - 100, max_value=int(NOW) + 100),
                          st.just(10**400), st.just(1e308))
_CLAIMS = st.dictionaries(st.sampled_from(["sub", "exp", "iat", "nbf", "aud", "iss", "scope", "x"]), _CLAIM_VALUES)
_HEADERS = st.dictionaries(st.sampled_from(["alg", "kid", "crit", "typ"]),
                           st.one_of(st.sampled_from(["none", "RS256", "ES256", "HS256", "k1"]), _JSON))


@SETTINGS
@given(data=st.binary(max_size=200))
def test_any_bytes_give_an_answer_or_a_sasl_error(rsa_key: Any, data: bytes) -> None:
    for message in (data, b"n,,\x01auth=Bearer " + data + b"\x01\x01"):
        for server in _servers(rsa_key):
            try:
                assert isinstance(server.evaluate(message), bytes)
                server.evaluate(b"\x01")
            except SaslError:
                pass


@SETTINGS
@given(header=_HEADERS, body=_CLAIMS, signature=st.sampled_from(["", "c2ln", "!"]))
def test_any_jwt_gives_an_answer_or_a_sasl_error(rsa_key: Any, header: dict[str, Any], body: dict[str, Any],
                                                 signature: str) -> None:
    try:
        token = f"{segment(header)}.{segment(body)}.{signature}"
    except ValueError:  # json cannot write some floats in strict mode: nothing to test
        return
    tokens = [token, signed_token(rsa_key, "RS256", body)]  # a good signature: the claims are checked too
    for jwt in tokens:
        for server in _servers(rsa_key):
            try:
                answer = server.evaluate(client_first(jwt))
                assert answer == b"" or answer.startswith(b'{"status":')
            except SaslError:
                pass
