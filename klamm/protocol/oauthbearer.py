"""SASL/OAUTHBEARER (RFC 7628 as Kafka implements it) as a sans-io server, and the validation of its tokens.

The exchange (Kafka's OAuthBearerSaslServer):

    client-first  n,[a=<authzid>],\\x01auth=Bearer <token>\\x01[<key>=<value>\\x01]...\\x01
      -> b""                               the token is valid: complete; the principal is the token's
                                           principal claim, the credential expires at its `exp`
      -> b'{"status":"invalid_token"}'     the token is not (or "insufficient_scope" with the scope
                                           required); the client answers with a lone \\x01, and that
                                           fails the authentication with the JSON as its message

A malformed client-first message fails at once with Kafka's generic "invalid
credentials" sentence (Kafka raises a SaslException there, whose text it never
sends); an authorization id other than the principal, or an extension the
validator calls invalid, fails with Kafka's specific message. Extensions reach
`OAuthBearerServer.extensions` only when the validator accepts them; both of
Kafka's validators (and so both here) accept every well-formed one.

Two validators, as Kafka's two callback handlers:
- `UnsecuredJwtValidator` (OAuthBearerUnsecuredValidatorCallbackHandler, Kafka's
  default, for development): `alg` "none" and no signature; the principal claim,
  `exp`, `iat` and the required scope are checked with unsecuredValidator* options.
- `SignedJwtValidator` (OAuthBearerValidatorCallbackHandler, jose4j's JwtConsumer
  underneath): an RS/PS/ES/EdDSA signature by a key of the issuer's JWKS, `exp`
  and `iat` required, `exp` / `nbf` within the clock skew, `aud` and `iss` as
  expected, the subject and scope claims as configured.

Keys come from a `KeySource`; `JwksCache` is the policy of Kafka's
RefreshingHttpsJwks (when to fetch the JWKS again, at most once a minute for an
unknown `kid`) without the fetching, which the broker does off its event loop.

Whatever bytes arrive, the mechanism answers or raises SaslError, nothing else.
Time is injected (`clock`, seconds since the epoch) so tests need not sleep.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import math
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import SaslError

__all__ = [
    "LOGIN_MODULE", "MECHANISM", "SIGNATURE_ALGORITHMS", "BearerToken", "ClientFirst", "InvalidToken", "JwksCache",
    "KeySource", "OAuthBearerServer", "SignedJwtValidator", "StaticKeys", "TokenValidator", "UnsecuredJwtValidator",
    "VerificationKey", "error_challenge", "parse_client_first", "parse_jwks", "parse_scope", "select_keys",
    "verify_signature",
]

MECHANISM = "OAUTHBEARER"
LOGIN_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
INT64_MAX = 2**63 - 1
_CONTROL_A = b"\x01"
_INVALID_CREDENTIALS = ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                        + MECHANISM)


# ---------------------------------------------------------------------------------------------------------------
# The client's first message (Kafka's OAuthBearerClientInitialResponse)

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"  # RFC 5801 saslname: no bare ',' or '='
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7e \t\r\n]+"
_CLIENT_FIRST = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<pairs>(?:{_KEY}={_VALUE}\x01)*)\x01")
_AUTH = re.compile(r"(?P<scheme>[A-Za-z0-9_]+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)")
_ESCAPED = re.compile("=(2C|3D)")
AUTH_KEY = "auth"


@dataclass(frozen=True)
class ClientFirst:
    token: str
    authzid: str  # "" when the client names none
    extensions: dict[str, str]


def parse_client_first(data: bytes) -> ClientFirst:
    """Parse the client's first message; ValueError (with Kafka's text) when it is malformed."""
    text = data.decode("ascii", errors="replace")  # the grammar is ASCII: anything else fails to match
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise ValueError("Invalid OAUTHBEARER client first message")
    pairs: dict[str, str] = {}
    for pair in match["pairs"].split("\x01")[:-1]:
        key, _, value = pair.partition("=")
        pairs[key] = value  # a repeated key keeps its last value, as Kafka's Utils.parseMap
    auth = pairs.pop(AUTH_KEY, None)
    if auth is None:
        raise ValueError("Invalid OAUTHBEARER client first message: 'auth' not specified")
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise ValueError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
    if auth_match["scheme"].lower() != "bearer":
        raise ValueError(f"Invalid scheme in OAUTHBEARER client first message: {auth_match['scheme']}")
    # RFC 7628 escapes ',' and '=' in the authorization id as SCRAM does; Kafka compares it escaped, we unescape.
    authzid = _ESCAPED.sub(lambda m: "," if m.group(1) == "2C" else "=", match["authzid"] or "")
    return ClientFirst(auth_match["token"], authzid, pairs)


# ---------------------------------------------------------------------------------------------------------------
# Tokens and validators


@dataclass(frozen=True)
class BearerToken:
    """A validated token (Kafka's OAuthBearerToken)."""

    value: str
    principal: str
    scope: frozenset[str]
    lifetime_ms: int  # when it expires, in ms since the epoch (Kafka's lifetimeMs)
    start_ms: int | None = None  # when it was issued (iat), if it says
    claims: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


class InvalidToken(Exception):
    """A token the validator refuses: `status` and `scope` go to the client (RFC 7628's error), `reason` to the log."""

    def __init__(self, reason: str, status: str = "invalid_token", scope: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope


def error_challenge(error: InvalidToken) -> str:
    """The server's error message, as Kafka writes it (Kafka's jsonErrorResponse)."""
    text = f'{{"status":"{error.status}"'
    if error.scope is not None:
        text += f', "scope":"{error.scope}"'
    return text + "}"


class TokenValidator(Protocol):
    """Kafka's server callback handler for OAUTHBEARER: validates tokens, then the extensions sent with one."""

    def validate(self, token: str) -> BearerToken:
        """The validated token; InvalidToken when it is not valid."""
        ...

    def validate_extensions(self, token: BearerToken,
                            extensions: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """(valid extensions, {invalid name: why}); an extension in neither is ignored."""
        ...


def _accept_all(extensions: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    return dict(extensions), {}


def _b64url(segment: str) -> bytes:
    """Base64url with or without padding (RFC 7515); the standard alphabet is accepted too."""
    try:
        return base64.b64decode(segment + "=" * (-len(segment) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise InvalidToken("malformed Base64 URL encoded value") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _json_object(segment: str) -> dict[str, Any]:
    data = _b64url(segment)
    try:
        value = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InvalidToken("malformed JSON") from None
    if not isinstance(value, dict):
        raise InvalidToken("malformed JSON")
    return value


def _is_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or isinstance(value, float) and math.isfinite(value)


def _to_ms(seconds: float) -> int:
    return max(-INT64_MAX, min(INT64_MAX, round(seconds * 1000)))


def _type_name(value: Any) -> str:
    return {str: "String", int: "Integer", float: "Double", bool: "Boolean", list: "List", dict: "Map"}.get(
        type(value), type(value).__name__)


_SCOPE_ITEM = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # Kafka's OAuthBearerScopeUtils: no '"', '\' or space


def parse_scope(text: str) -> tuple[str, ...]:
    """A space-delimited scope (unsecuredValidatorRequiredScope); ValueError for an invalid item."""
    items = tuple(item for item in text.split(" ") if item)
    for item in items:
        if not _SCOPE_ITEM.fullmatch(item):
            raise ValueError(f"Invalid scope value: {item}")
    return items


class UnsecuredJwtValidator:
    """Kafka's OAuthBearerUnsecuredValidatorCallbackHandler: unsigned JWTs (`alg` "none"), for development only.

    Checked, in Kafka's order: three dot-separated parts with an empty signature,
    `alg` "none", the scope claim (a string or a list), `exp` present and a number,
    the principal claim a non-blank string, `iat` (if present) not after now plus
    the skew, now minus the skew before `exp`, `exp` after `iat`, the required
    scope (else "insufficient_scope"). `nbf` is not checked, as in Kafka.
    """

    def __init__(self, principal_claim: str = "sub", scope_claim: str = "scope",
                 required_scope: Sequence[str] = (), clock_skew_ms: int = 0,
                 clock: Callable[[], float] = time.time) -> None:
        if not principal_claim.strip() or not scope_claim.strip():
            raise ValueError("Must specify a non-blank principal claim name and scope claim name")
        if clock_skew_ms < 0:
            raise ValueError(f"Allowable clock skew millis must not be negative: {clock_skew_ms}")
        self.principal_claim = principal_claim.strip()
        self.scope_claim = scope_claim.strip()
        self.required_scope = tuple(required_scope)
        self.clock_skew_ms = clock_skew_ms
        self._clock = clock

    @classmethod
    def from_jaas_options(cls, options: Mapping[str, str],
                          clock: Callable[[], float] = time.time) -> UnsecuredJwtValidator:
        """From the unsecuredValidator* options of the listener's OAuthBearerLoginModule; ValueError if invalid."""
        def option(name: str, default: str) -> str:
            value = options.get(f"unsecuredValidator{name}", "")
            return value.strip() or default

        skew = option("AllowableClockSkewMs", "0")
        if not re.fullmatch(r"[+-]?[0-9]{1,10}", skew) or not -2**31 <= int(skew) < 2**31:
            raise ValueError(f"unsecuredValidatorAllowableClockSkewMs is not an int: {skew}")
        return cls(option("PrincipalClaimName", "sub"), option("ScopeClaimName", "scope"),
                   parse_scope(option("RequiredScope", "")), int(skew), clock)

    def validate(self, token: str) -> BearerToken:
        if ".." in token:
            raise InvalidToken("Malformed compact serialization contains '..'")
        parts = token.split(".")
        if len(parts) != 3:
            raise InvalidToken("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
        header, claims = _json_object(parts[0]), _json_object(parts[1])
        if "alg" not in header:
            raise InvalidToken("JWS header must have an Algorithm value")
        if header["alg"] != "none":
            raise InvalidToken("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise InvalidToken("Unsecured JWS must not contain a digital signature")
        scope = self._scope(claims)
        exp = claims.get("exp")
        if exp is None:
            raise InvalidToken("No expiration time in JWT")
        if not _is_number(exp):
            raise InvalidToken(f"The 'exp' claim was not of type Number: {_type_name(exp)}")
        principal = claims.get(self.principal_claim)
        if principal is not None and not isinstance(principal, str):
            raise InvalidToken(f"The '{self.principal_claim}' claim was not of type String: {_type_name(principal)}")
        if principal is None or not principal.strip():
            raise InvalidToken(f"No principal name in JWT claim: {self.principal_claim}")
        iat = claims.get("iat")
        if iat is not None and not _is_number(iat):
            raise InvalidToken(f"The 'iat' claim was not of type Number: {_type_name(iat)}")
        now_ms = _to_ms(self._clock())
        skew = self.clock_skew_ms
        if iat is not None and 1000 * iat > now_ms + skew:
            raise InvalidToken(f"The Issued At value ({iat} seconds) was after the indicated time ({now_ms} ms) "
                               f"plus allowable clock skew ({skew} ms)")
        if now_ms - skew >= 1000 * exp:
            raise InvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew ({skew} ms) was on or "
                               f"after the Expiration Time value ({exp} seconds)")
        if iat is not None and exp <= iat:
            raise InvalidToken(f"The Expiration Time time ({exp} seconds) was not after the Issued At time "
                               f"({iat} seconds)")
        for required in self.required_scope:
            if required not in scope:
                listed = "[" + ", ".join(self.required_scope) + "]"  # Java's List.toString, as Kafka sends it
                raise InvalidToken(f"The provided scope ({sorted(scope)}) was missing a required scope ({required}). "
                                   f"All required scope elements: {listed}", "insufficient_scope", listed)
        return BearerToken(token, principal, scope, _to_ms(exp), None if iat is None else _to_ms(iat), claims)

    def _scope(self, claims: Mapping[str, Any]) -> frozenset[str]:
        value = claims.get(self.scope_claim)
        if value is None:
            return frozenset()
        if isinstance(value, str):
            return frozenset((value.strip(),)) if value.strip() else frozenset()
        if not isinstance(value, list):
            raise InvalidToken(f"The '{self.scope_claim}' claim was not of type List: {_type_name(value)}")
        # Kafka reads list items as text; a non-string item would be its JSON text, which no scope matches anyway
        return frozenset(item.strip() for item in value if isinstance(item, str) and item.strip())

    def validate_extensions(self, token: BearerToken,
                            extensions: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        return _accept_all(extensions)


# ---------------------------------------------------------------------------------------------------------------
# Verification keys (JWK, RFC 7517) and signatures (JWS, RFC 7515 / RFC 7518 / RFC 8037)


@dataclass(frozen=True)
class VerificationKey:
    """One public key of a JWKS. `kty` is "RSA", "EC" or "OKP"; `crv` names the curve of EC and OKP keys."""

    kty: str
    key: Any = field(repr=False)  # a cryptography public key
    kid: str | None = None
    alg: str | None = None
    use: str | None = None
    crv: str | None = None


_HASHES = {"256": hashes.SHA256, "384": hashes.SHA384, "512": hashes.SHA512}
_EC_CURVES: dict[str, tuple[type[ec.EllipticCurve], int]] = {
    "P-256": (ec.SECP256R1, 32), "P-384": (ec.SECP384R1, 48), "P-521": (ec.SECP521R1, 66)}
_EC_OF_ALG = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
# JWS algorithms klamm verifies, and the key type each needs. jose4j also knows HS* (shared secrets), which an
# identity provider's JWKS does not publish; "none" is refused, as Kafka's JwtConsumer refuses it.
SIGNATURE_ALGORITHMS = {**{f"RS{n}": "RSA" for n in _HASHES}, **{f"PS{n}": "RSA" for n in _HASHES},
                        **{alg: "EC" for alg in _EC_OF_ALG}, "EdDSA": "OKP"}
MIN_RSA_BITS = 2048  # jose4j refuses smaller RSA keys


def _b64url_int(value: Any) -> int:
    if not isinstance(value, str) or not value:
        raise ValueError("missing key parameter")
    return int.from_bytes(_b64url_bytes(value), "big")


def _b64url_bytes(value: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError("missing key parameter")
    try:
        return base64.b64decode(value + "=" * (-len(value) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("key parameter is not base64url") from None


def _optional_str(jwk: Mapping[str, Any], name: str) -> str | None:
    value = jwk.get(name)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"JWK {name} is not a string")
    return value


def _jwk(jwk: Any) -> VerificationKey:
    if not isinstance(jwk, dict):
        raise ValueError("a JWK is a JSON object")
    kty = jwk.get("kty")
    crv = _optional_str(jwk, "crv")
    key: Any
    if kty == "RSA":
        key = rsa.RSAPublicNumbers(_b64url_int(jwk.get("e")), _b64url_int(jwk.get("n"))).public_key()
    elif kty == "EC" and crv in _EC_CURVES:
        curve, size = _EC_CURVES[crv]
        x, y = _b64url_bytes(jwk.get("x")), _b64url_bytes(jwk.get("y"))
        if len(x) != size or len(y) != size:
            raise ValueError(f"{crv} coordinates are {size} bytes")
        key = ec.EllipticCurvePublicNumbers(int.from_bytes(x, "big"), int.from_bytes(y, "big"), curve()).public_key()
    elif kty == "OKP" and crv == "Ed25519":
        key = ed25519.Ed25519PublicKey.from_public_bytes(_b64url_bytes(jwk.get("x")))
    elif kty == "OKP" and crv == "Ed448":
        key = ed448.Ed448PublicKey.from_public_bytes(_b64url_bytes(jwk.get("x")))
    else:
        raise ValueError(f"unsupported key type {kty!r} (curve {crv!r})")
    return VerificationKey(kty, key, _optional_str(jwk, "kid"), _optional_str(jwk, "alg"), _optional_str(jwk, "use"),
                           crv)


def parse_jwks(data: bytes | str) -> tuple[VerificationKey, ...]:
    """The public keys of a JWK Set; ValueError unless it is a JSON object with a "keys" array.

    A key klamm cannot use (an unknown `kty`, a bad parameter, a point off its
    curve) is left out, as jose4j leaves it out of a JsonWebKeySet.
    """
    try:
        document = json.loads(data, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"the JWKS is not JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError('a JWKS is a JSON object with a "keys" array')
    keys = []
    for jwk in document["keys"]:
        try:
            keys.append(_jwk(jwk))
        except (ValueError, TypeError, OverflowError):
            continue
    return tuple(keys)


def select_keys(keys: Sequence[VerificationKey], header: Mapping[str, Any]) -> list[VerificationKey]:
    """The keys that may have signed a JWS with this header (jose4j's VerificationJwkSelector): the `kid` if the
    header names one, the key type (and curve) of its `alg`, `use` "sig" or absent, the key's `alg` if it has one."""
    alg = header.get("alg")
    kty = SIGNATURE_ALGORITHMS.get(alg) if isinstance(alg, str) else None
    if kty is None:
        return []
    kid = header.get("kid")
    chosen = []
    for key in keys:
        if key.kty != kty or (kid is not None and key.kid != kid):
            continue
        if key.use not in (None, "sig") or key.alg not in (None, alg):
            continue
        if kty == "EC" and key.crv != _EC_OF_ALG[alg]:
            continue
        if kty == "RSA" and key.key.key_size < MIN_RSA_BITS:
            continue
        chosen.append(key)
    return chosen


def verify_signature(key: VerificationKey, alg: str, signing_input: bytes, signature: bytes) -> bool:
    """Whether `signature` over `signing_input` verifies with `key` under `alg` (one of SIGNATURE_ALGORITHMS)."""
    try:
        if alg.startswith("RS"):
            key.key.verify(signature, signing_input, padding.PKCS1v15(), _HASHES[alg[2:]]())
        elif alg.startswith("PS"):
            digest = _HASHES[alg[2:]]()
            key.key.verify(signature, signing_input, padding.PSS(padding.MGF1(digest), digest.digest_size), digest)
        elif alg.startswith("ES"):
            size = _EC_CURVES[_EC_OF_ALG[alg]][1]
            if len(signature) != 2 * size:  # JWS carries R || S, each the curve's size (RFC 7518 section 3.4)
                return False
            r, s = int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
            key.key.verify(encode_dss_signature(r, s), signing_input, ec.ECDSA(_HASHES[alg[2:]]()))
        else:  # EdDSA
            key.key.verify(signature, signing_input)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


class KeySource(Protocol):
    """Where a SignedJwtValidator finds keys: `select` the candidates for a JWS header, and hear of a `kid` it
    could not find (a source that fetches its JWKS may fetch it again)."""

    def select(self, header: Mapping[str, Any]) -> Sequence[VerificationKey]: ...

    def missing(self, kid: str | None) -> None: ...


class StaticKeys:
    """A fixed set of keys."""

    def __init__(self, keys: Sequence[VerificationKey]) -> None:
        self.keys = tuple(keys)

    def select(self, header: Mapping[str, Any]) -> Sequence[VerificationKey]:
        return select_keys(self.keys, header)

    def missing(self, kid: str | None) -> None:
        pass


class JwksCache:
    """The keys of a JWKS endpoint and when to fetch them again, as Kafka's RefreshingHttpsJwks decides, without I/O.

    The owner asks `fetch_due()` (the first fetch, then every `refresh_ms`; after a
    failed first fetch, again after `UNLOADED_RETRY_MS`) and `missing(kid)` (a token
    named a key the set lacks: fetch now, at most once a minute per `kid`, for at
    most 16 `kid`s of at most 1,000 characters), calls `fetching()` when it starts a
    fetch and `fetched(keys)` or `fetch_failed()` when it ends. One fetch at a time.
    `clock` is monotonic seconds.
    """

    MISSING_KID_INTERVAL_MS = 60_000
    MISSING_KID_ENTRIES = 16
    MISSING_KID_MAX_LENGTH = 1000
    UNLOADED_RETRY_MS = 10_000

    def __init__(self, refresh_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_ms = refresh_ms
        self.keys: tuple[VerificationKey, ...] = ()
        self.loaded = False
        self._clock = clock
        self._next_fetch = 0.0
        self._in_flight = False
        self._missing: OrderedDict[str, float] = OrderedDict()  # kid -> when it may cause a fetch again

    def select(self, header: Mapping[str, Any]) -> list[VerificationKey]:
        return select_keys(self.keys, header)

    def fetch_due(self) -> bool:
        return not self._in_flight and self._clock() >= self._next_fetch

    def missing(self, kid: str | None) -> bool:
        """A token named `kid` and no key matched: whether to fetch now."""
        if self._in_flight or kid is None or len(kid) > self.MISSING_KID_MAX_LENGTH:
            return False
        now = self._clock()
        if self._missing.get(kid, 0.0) > now:
            return False
        self._missing[kid] = now + self.MISSING_KID_INTERVAL_MS / 1000
        self._missing.move_to_end(kid)
        while len(self._missing) > self.MISSING_KID_ENTRIES:
            self._missing.popitem(last=False)
        return True

    def fetching(self) -> None:
        self._in_flight = True

    def fetched(self, keys: Sequence[VerificationKey]) -> None:
        self.keys = tuple(keys)
        self.loaded = True
        for key in self.keys:
            if key.kid is not None:
                self._missing.pop(key.kid, None)
        self._in_flight = False
        self._next_fetch = self._clock() + self.refresh_ms / 1000

    def fetch_failed(self) -> None:
        self._in_flight = False
        wait_ms = self.refresh_ms if self.loaded else min(self.refresh_ms, self.UNLOADED_RETRY_MS)
        self._next_fetch = self._clock() + wait_ms / 1000


def _numeric_date(claims: Mapping[str, Any], name: str) -> int | None:
    """A NumericDate claim in whole seconds, as jose4j reads it (a number, truncated)."""
    value = claims.get(name)
    if value is None:
        return None
    if not _is_number(value):
        raise InvalidToken(f"The value of the '{name}' claim is not the expected type ({value!r} - "
                           f"{_type_name(value)} cannot be cast to Number)")
    return max(-INT64_MAX // 1000, min(INT64_MAX // 1000, int(value)))


class SignedJwtValidator:
    """Kafka's OAuthBearerValidatorCallbackHandler: a JWT signed by a key from the identity provider's JWKS.

    jose4j's JwtConsumer, as Kafka builds it, checks: three parts; `alg` one of
    SIGNATURE_ALGORITHMS (never "none"); no `crit` header it does not understand;
    the signature by a key the source selects; `exp` and `iat` present; now before
    `exp` plus `clock_skew_s`; `nbf` (if present) not after now plus the skew; `exp`
    not before `iat` or `nbf`; `aud` containing one of `expected_audiences` (and no
    `aud` at all unless some are expected, as jose4j); `iss` equal to
    `expected_issuer` when one is set. Then Kafka's claim checks: the scope claim (a
    string or a list of distinct non-blank strings), the subject claim a non-blank
    string (the principal), `exp` and `iat` not negative. Every failure is
    "invalid_token".
    """

    def __init__(self, keys: KeySource, expected_audiences: Sequence[str] | None = None,
                 expected_issuer: str | None = None, clock_skew_s: int = 30, sub_claim: str = "sub",
                 scope_claim: str = "scope", clock: Callable[[], float] = time.time) -> None:
        self.keys = keys
        self.expected_audiences = frozenset(expected_audiences or ())
        self.expected_issuer = expected_issuer
        self.clock_skew_s = clock_skew_s
        self.sub_claim = sub_claim
        self.scope_claim = scope_claim
        self._clock = clock

    def validate(self, token: str) -> BearerToken:
        token = token.strip()
        if not token:
            raise InvalidToken("Empty JWT provided; expected three sections (header, payload, and signature)")
        parts = token.split(".")
        while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
            parts.pop()
        if len(parts) != 3 or not all(part.strip() for part in parts):
            raise InvalidToken(f"Malformed JWT provided; expected three sections (header, payload, and signature), "
                               f"but {len(parts)} sections provided")
        header = _json_object(parts[0])
        self._verify(header, parts)
        claims = _json_object(parts[1])
        self._check_claims(claims)
        scope = self._scope(claims)
        subject = claims.get(self.sub_claim)
        if subject is not None and not isinstance(subject, str):
            raise InvalidToken(f"Could not extract the '{self.sub_claim}' claim from the access token")
        principal = _non_blank(self.sub_claim, subject)
        exp, iat = _numeric_date(claims, "exp"), _numeric_date(claims, "iat")
        assert exp is not None and iat is not None  # required by _check_claims
        if exp < 0:
            raise InvalidToken(f'exp value must be non-negative; value given was "{exp * 1000}"')
        if iat < 0:
            raise InvalidToken(f'iat value must be null or non-negative; value given was "{iat * 1000}"')
        return BearerToken(token, principal, scope, exp * 1000, iat * 1000, claims)

    def _verify(self, header: Mapping[str, Any], parts: list[str]) -> None:
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in SIGNATURE_ALGORITHMS:
            raise InvalidToken(f"'{alg}' is not a permitted algorithm")
        if "crit" in header:
            raise InvalidToken(f"Unrecognized header parameters in the crit header: {header['crit']!r}")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("The kid header is not a string")
        candidates = self.keys.select(header)
        if not candidates:
            self.keys.missing(kid)
            raise InvalidToken(f"Unable to find a suitable verification key for JWS w/ header {json.dumps(header)}")
        signature = _b64url(parts[2])
        signing_input = f"{parts[0]}.{parts[1]}".encode("ascii", errors="replace")
        if not any(verify_signature(key, alg, signing_input, signature) for key in candidates):
            raise InvalidToken("JWS signature is invalid")

    def _check_claims(self, claims: Mapping[str, Any]) -> None:
        exp, iat, nbf = (_numeric_date(claims, name) for name in ("exp", "iat", "nbf"))
        if exp is None:
            raise InvalidToken("No Expiration Time (exp) claim present.")
        if iat is None:
            raise InvalidToken("No Issued At (iat) claim present.")
        now, skew = int(self._clock()), self.clock_skew_s
        if now >= exp + skew:
            raise InvalidToken(f"The JWT is no longer valid - the evaluation time {now} is on or after the "
                               f"Expiration Time (exp={exp}) claim value (even when providing {skew} seconds of "
                               "leeway to account for clock skew).")
        if nbf is not None and now + skew < nbf:
            raise InvalidToken(f"The JWT is not yet valid as the evaluation time {now} is before the NotBefore "
                               f"(nbf={nbf}) claim time (even when providing {skew} seconds of leeway to account "
                               "for clock skew).")
        if exp < iat:
            raise InvalidToken(f"The Expiration Time (exp={exp}) claim value cannot be before the IssuedAt "
                               f"(iat={iat}) claim value.")
        if nbf is not None and exp < nbf:
            raise InvalidToken(f"The Expiration Time (exp={exp}) claim value cannot be before the NotBefore "
                               f"(nbf={nbf}) claim value.")
        self._check_audience(claims)
        if self.expected_issuer is not None:
            issuer = claims.get("iss")
            if issuer is None:
                raise InvalidToken("No Issuer (iss) claim present.")
            if issuer != self.expected_issuer:
                raise InvalidToken(f"Issuer (iss) claim value ({issuer}) doesn't match expected value of "
                                   f"{self.expected_issuer}")

    def _check_audience(self, claims: Mapping[str, Any]) -> None:
        audience = claims.get("aud")
        if audience is None:
            if self.expected_audiences:
                raise InvalidToken("No Audience (aud) claim present.")
            return
        audiences = [audience] if isinstance(audience, str) else audience
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise InvalidToken("The value of the 'aud' claim is not a string or an array of strings")
        if not self.expected_audiences.intersection(audiences):
            expected = sorted(self.expected_audiences)
            why = ("doesn't contain an acceptable identifier" if expected
                   else "present in the JWT but no expected audience value(s) were provided to the JWT Consumer")
            raise InvalidToken(f"Audience (aud) claim {audiences} {why}. Expected {expected} as an aud value.")

    def _scope(self, claims: Mapping[str, Any]) -> frozenset[str]:
        value = claims.get(self.scope_claim)
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        scope: set[str] = set()
        for item in items:
            if item is not None and not isinstance(item, str):
                raise InvalidToken(f"Could not extract the '{self.scope_claim}' claim from the access token")
            item = _non_blank(self.scope_claim, item)
            if item in scope:
                raise InvalidToken(f"{self.scope_claim} value must not contain duplicates - {item} already present")
            scope.add(item)
        return frozenset(scope)

    def validate_extensions(self, token: BearerToken,
                            extensions: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        return _accept_all(extensions)


def _non_blank(name: str, value: str | None) -> str:
    """Kafka's ClaimValidationUtils.validateString: present, not empty, not only whitespace; trimmed."""
    if value is None:
        raise InvalidToken(f"{name} value must be non-null")
    if not value:
        raise InvalidToken(f"{name} value must be non-empty")
    if not value.strip():
        raise InvalidToken(f"{name} value must not contain only whitespace")
    return value.strip()


# ---------------------------------------------------------------------------------------------------------------
# The mechanism


class _State(enum.Enum):
    CLIENT_FIRST = "waiting for the client's first message"
    ERROR_SENT = "waiting for the client to acknowledge the server's error"
    COMPLETE = "complete"
    FAILED = "failed"


class OAuthBearerServer:
    """SASL/OAUTHBEARER, server side (Kafka's OAuthBearerSaslServer), over a TokenValidator.

    Once `complete`: `principal` is the token's principal, `credential_expiry_ms`
    its expiry (ms since the epoch; the broker ends the session then, as Kafka
    does with CREDENTIAL.LIFETIME.MS), `extensions` those the validator accepted.
    After an error challenge the client may send `\\x01` (the exchange fails with
    the challenge as its message) or, as Kafka allows, a new client-first message.
    """

    mechanism = MECHANISM

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._state = _State.CLIENT_FIRST
        self._error = ""  # the JSON error challenge sent, while the client has yet to acknowledge it
        self._error_reason = ""
        self._token: BearerToken | None = None
        self.extensions: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> str | None:
        return self._token.principal if self._token is not None and self.complete else None

    @property
    def credential_expiry_ms(self) -> int | None:
        return self._token.lifetime_ms if self._token is not None and self.complete else None

    @property
    def token(self) -> BearerToken | None:
        """The validated token, once `complete`."""
        return self._token if self.complete else None

    def evaluate(self, token: bytes) -> bytes:
        if self._state in (_State.COMPLETE, _State.FAILED):
            raise SaslError(ErrorCode.illegal_sasl_state,
                            f"Unexpected SASL token: the {MECHANISM} exchange is {self._state.value}")
        try:
            return self._evaluate(token)
        except SaslError:
            self._state = _State.FAILED
            raise
        except Exception as exc:  # a broken validator must not look like a protocol error (Kafka: internal error)
            self._state = _State.FAILED
            raise SaslError(ErrorCode.sasl_authentication_failed, _INVALID_CREDENTIALS,
                            "Authentication could not be performed due to an internal error on the server: "
                            f"{exc!r}") from exc

    def _evaluate(self, data: bytes) -> bytes:
        if self._state is _State.ERROR_SENT and data == _CONTROL_A:
            raise SaslError(ErrorCode.sasl_authentication_failed, self._error,
                            f"OAUTHBEARER token refused: {self._error_reason}")
        self._state, self._error, self._error_reason = _State.CLIENT_FIRST, "", ""
        try:
            first = parse_client_first(data)
        except ValueError as exc:
            raise SaslError(ErrorCode.sasl_authentication_failed, _INVALID_CREDENTIALS, str(exc)) from None
        try:
            token = self._validator.validate(first.token)
        except InvalidToken as exc:
            self._error, self._error_reason = error_challenge(exc), exc.reason
            self._state = _State.ERROR_SENT
            return self._error.encode()
        if first.authzid and first.authzid != token.principal:
            raise SaslError(ErrorCode.sasl_authentication_failed,
                            f"Authentication failed: Client requested an authorization id ({first.authzid}) that is "
                            f"different from the token's principal name ({token.principal})")
        valid, invalid = self._validator.validate_extensions(token, first.extensions)
        if invalid:
            listed = "; ".join(f"{name}: {why}" for name, why in invalid.items())
            raise SaslError(ErrorCode.sasl_authentication_failed,
                            f"Authentication failed: {len(invalid)} extensions are invalid! They are: {listed}")
        self.extensions = {name: value for name, value in valid.items() if first.extensions.get(name) == value}
        self._token = token
        self._state = _State.COMPLETE
        return b""
