"""Who is on the other end of a connection: its session, and how a SASL listener authenticates it.

Every connection has a session naming its principal, as Kafka's KafkaPrincipal:
`User:ANONYMOUS` on PLAINTEXT and on SSL without a client certificate, the
certificate's subject on mutual TLS, the authenticated user name on SASL.

A SASL connection starts unauthenticated: only ApiVersions, SaslHandshake and
SaslAuthenticate are served, each request at most `sasl.server.max.receive.size`
bytes, and anything else closes the connection (Kafka's SaslServerAuthenticator).
SaslHandshake picks a mechanism; SaslAuthenticate feeds its tokens to the
mechanism's sans-io server (klamm.protocol.sasl, klamm.protocol.oauthbearer)
until it completes. The session ends after `connections.max.reauth.ms` (also
listener.name.<l>[.<mechanism>].connections.max.reauth.ms) or when the
credential expires (an OAUTHBEARER token's `exp`), whichever is first, as Kafka's
SaslServerAuthenticator decides: the client must authenticate again on the same
connection, as the same principal (KIP-368), or the next request closes the
connection.

OAUTHBEARER validates tokens as the listener's
listener.name.<l>.oauthbearer.sasl.server.callback.handler.class says: none
(Kafka's default) checks unsigned development tokens with the unsecuredValidator*
options of listener.name.<l>.oauthbearer.sasl.jaas.config; Kafka's
OAuthBearerValidatorCallbackHandler checks signed JWTs against the JWKS at
sasl.oauthbearer.jwks.endpoint.url. The JWKS is read at start-up (a file) or
fetched in a thread (http/https), and fetched again, in a thread, every
sasl.oauthbearer.jwks.endpoint.refresh.ms and when a token names an unknown key.
"""

from __future__ import annotations

import enum
import hmac
import http.client
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from klamm.config.broker import BrokerConfig
from klamm.broker.principal_mapping import PrincipalMapper
from klamm.config.broker_keys import BROKER_CONFIG_DEF
from klamm.config.errors import ConfigError
from klamm.protocol import oauthbearer
from klamm.protocol.errors import ErrorCode
from klamm.protocol.oauthbearer import (
    JwksCache,
    OAuthBearerServer,
    SignedJwtValidator,
    TokenValidator,
    UnsecuredJwtValidator,
    VerificationKey,
    parse_jwks,
)
from klamm.protocol.sasl import (
    SCRAM_MECHANISMS,
    PlainServer,
    SaslError,
    ScramCredential,
    ScramServer,
    parse_jaas_config,
    plain_users,
)

__all__ = ["ANONYMOUS", "CONTROLLER_PEER", "SaslListener", "SaslSession", "Session", "session_of_certificate"]

log = logging.getLogger("klamm.authentication")

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, oauthbearer.MECHANISM)
OAUTHBEARER = oauthbearer.MECHANISM
# Kafka's server callback handlers for OAUTHBEARER: the JWKS validator (its 3.x name too) and the unsecured default
OAUTHBEARER_VALIDATORS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                          "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")
OAUTHBEARER_UNSECURED_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                                   "OAuthBearerUnsecuredValidatorCallbackHandler")
JWKS_FETCH_TIMEOUT_S = 10
JWKS_MAX_BYTES = 1 << 20
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PRE_AUTHENTICATION_APIS = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))
_ILLEGAL, _UNSUPPORTED = ErrorCode.illegal_sasl_state, ErrorCode.unsupported_sasl_mechanism
_AUTH_FAILED = ErrorCode.sasl_authentication_failed
INT64_MAX = 2**63 - 1

ScramLookup = Callable[[str, str], "ScramCredential | None"]


class Mechanism(Protocol):
    """A mechanism's sans-io server. One whose credential expires (OAUTHBEARER) also has `credential_expiry_ms`
    (ms since the epoch, once complete), Kafka's CREDENTIAL.LIFETIME.MS: the session ends then at the latest."""

    complete: bool
    principal: str | None

    def evaluate(self, token: bytes) -> bytes: ...


class Session:
    """An authenticated (or anonymous) connection's principal, e.g. "User:alice"."""

    __slots__ = ("principal",)
    authenticated = True  # nothing left to do before the connection may send any request
    gated = False  # every request is admitted (see SaslSession.admits)
    failed = False
    internal = False  # a request between klamm's own nodes, already authorized where it came in

    def __init__(self, principal: str) -> None:
        self.principal = principal


ANONYMOUS = Session("User:ANONYMOUS")  # shared: a PLAINTEXT connection costs no session of its own


class _InternalSession(Session):
    __slots__ = ()
    internal = True


# The controller listener's peers: klamm's brokers and voters, forwarding writes their own listeners authorized.
CONTROLLER_PEER = _InternalSession("User:ANONYMOUS")


def session_of_certificate(certificate: dict[str, Any] | None, mapper: PrincipalMapper | None = None) -> Session:
    """Mutual TLS: the principal is the subject's distinguished name in RFC 2253 form (e.g.
    "User:CN=alice,OU=eng"), mapped by ssl.principal.mapping.rules; no certificate is ANONYMOUS.
    Raises NoMatchingRule when no rule applies (the connection is refused, as in Kafka)."""
    if not certificate or not certificate.get("subject"):
        return ANONYMOUS
    rdns = ("+".join(f"{_DN_NAMES.get(name, name)}={_escape_dn(value)}" for name, value in rdn)
            for rdn in reversed(certificate["subject"]))  # RFC 2253 writes the most specific name first
    name = ",".join(rdns)
    return Session("User:" + (mapper.name(name) if mapper is not None else name))


_DN_NAMES = {"commonName": "CN", "organizationalUnitName": "OU", "organizationName": "O", "localityName": "L",
             "stateOrProvinceName": "ST", "countryName": "C", "streetAddress": "STREET", "domainComponent": "DC",
             "userId": "UID"}


def _escape_dn(value: str) -> str:
    escaped = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if escaped.startswith(("#", " ")):
        escaped = "\\" + escaped
    if escaped.endswith(" "):
        escaped = escaped[:-1] + "\\ "
    return escaped


class SaslListener:
    """What one SASL listener offers: its mechanisms and their credentials (checked at start-up)."""

    def __init__(self, config: BrokerConfig, listener_name: str, scram_lookup: ScramLookup, *,
                 clock: Callable[[], float] = time.time) -> None:
        enabled = config.listener_value(listener_name, "sasl.enabled.mechanisms")
        names = [m.strip() for m in enabled.split(",")] if enabled is not None else list(config.sasl_enabled_mechanisms)
        self.mechanisms = tuple(m for m in names if m)
        unsupported = [m for m in self.mechanisms if m not in SUPPORTED_MECHANISMS]
        if unsupported or not self.mechanisms:
            raise ConfigError("sasl.enabled.mechanisms", ",".join(self.mechanisms),
                              f"listener {listener_name} uses SASL; klamm offers {', '.join(SUPPORTED_MECHANISMS)}"
                              + (f", not {', '.join(unsupported)}" if unsupported else ""))
        self.plain_users: dict[str, str] = {}
        if "PLAIN" in self.mechanisms:
            self.plain_users = _plain_users(config, listener_name)
        self._scram_lookup = scram_lookup
        self.clock = clock  # wall time, for credentials that expire
        self.oauthbearer: TokenValidator | None = None
        if OAUTHBEARER in self.mechanisms:
            self.oauthbearer = _oauthbearer_validator(config, listener_name, clock)
        self.reauth_ms = config.connections_max_reauth_ms
        self._reauth_ms = {m: _reauth_ms(config, listener_name, m) for m in self.mechanisms}
        self.max_receive_size = config.sasl_server_max_receive_size

    def reauth_ms_of(self, mechanism: str) -> int:
        """connections.max.reauth.ms for a mechanism: listener.name.<l>.<mechanism>., listener.name.<l>., broker."""
        return self._reauth_ms.get(mechanism, self.reauth_ms)

    def mechanism(self, name: str) -> Mechanism:
        if name == "PLAIN":
            return PlainServer(self._verify_plain)
        if name == OAUTHBEARER and self.oauthbearer is not None:
            return OAuthBearerServer(self.oauthbearer)
        return ScramServer(name, lambda user: self._scram_lookup(user, name))

    def _verify_plain(self, user: str, password: str) -> bool:
        expected = self.plain_users.get(user)
        return expected is not None and _same(expected, password)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _plain_users(config: BrokerConfig, listener_name: str) -> dict[str, str]:
    """PLAIN's users: the user_<name>="<password>" options of the listener's PlainLoginModule."""
    key = f"listener.name.{listener_name.lower()}.plain.sasl.jaas.config"
    text = config.listener_value(listener_name, "sasl.jaas.config", "PLAIN")
    if text is None:
        raise ConfigError(key, "", f"PLAIN on listener {listener_name} needs its users: set {key} to "
                          f'{PLAIN_LOGIN_MODULE} required user_<name>="<password>" ...;')
    try:
        entry = parse_jaas_config(text)
    except ValueError as exc:
        raise ConfigError(key, "(hidden)", str(exc)) from exc
    if entry.login_module != PLAIN_LOGIN_MODULE:
        raise ConfigError(key, "(hidden)", f"PLAIN needs {PLAIN_LOGIN_MODULE}, not {entry.login_module}")
    return plain_users(entry)


def _listener_key(config: BrokerConfig, listener_name: str, key: str, mechanism: str) -> tuple[str, Any]:
    """A broker key as Kafka's channel builder reads it for a mechanism: listener.name.<l>.<mechanism>.<key>, then
    listener.name.<l>.<key>, then the broker's own; (the name it came from, its parsed value)."""
    raw = config.listener_value(listener_name, key, mechanism)
    if raw is None:
        return key, config.value_of(key)
    prefix = f"listener.name.{listener_name.lower()}."
    name = next(n for n in (f"{prefix}{mechanism.lower()}.{key}", prefix + key) if n in config.listener_properties)
    try:
        return name, BROKER_CONFIG_DEF[key].parse(raw)
    except ConfigError as exc:
        raise ConfigError(name, raw, exc.message) from None


def _reauth_ms(config: BrokerConfig, listener_name: str, mechanism: str) -> int:
    return _listener_key(config, listener_name, "connections.max.reauth.ms", mechanism)[1]


def _oauthbearer_validator(config: BrokerConfig, listener_name: str, clock: Callable[[], float]) -> TokenValidator:
    """The listener's OAUTHBEARER validator, from its callback handler class and JAAS options (checked now)."""
    prefix = f"listener.name.{listener_name.lower()}.oauthbearer."
    jaas_key = prefix + "sasl.jaas.config"
    text = config.listener_value(listener_name, "sasl.jaas.config", OAUTHBEARER)
    if not (text or "").strip():  # Kafka will not start a SASL mechanism without its JAAS entry either
        raise ConfigError(jaas_key, "", f"OAUTHBEARER on listener {listener_name} needs its login module: set "
                          f"{jaas_key} to {oauthbearer.LOGIN_MODULE} required;")
    try:
        entry = parse_jaas_config(text)
    except ValueError as exc:
        raise ConfigError(jaas_key, "(hidden)", str(exc)) from exc
    if entry.login_module != oauthbearer.LOGIN_MODULE:
        raise ConfigError(jaas_key, "(hidden)", f"OAUTHBEARER needs {oauthbearer.LOGIN_MODULE}, "
                          f"not {entry.login_module}")
    handler_key = prefix + "sasl.server.callback.handler.class"
    handler = (config.listener_properties.get(handler_key) or "").strip()
    if handler in ("", OAUTHBEARER_UNSECURED_VALIDATOR):
        try:
            return UnsecuredJwtValidator.from_jaas_options(entry.options, clock)
        except ValueError as exc:
            raise ConfigError(jaas_key, "(hidden)", str(exc)) from exc
    if handler in OAUTHBEARER_VALIDATORS:
        return _signed_validator(config, listener_name, clock)
    raise ConfigError(handler_key, handler, "klamm validates OAUTHBEARER tokens with Kafka's "
                      f"{OAUTHBEARER_VALIDATORS[0]} (signed tokens, sasl.oauthbearer.jwks.endpoint.url) or, with no "
                      "handler set, its unsecured validator; it loads no other callback handler")


def _signed_validator(config: BrokerConfig, listener_name: str, clock: Callable[[], float]) -> SignedJwtValidator:
    def value(key: str) -> tuple[str, Any]:
        return _listener_key(config, listener_name, key, OAUTHBEARER)

    def required_string(key: str) -> str:  # Kafka's ConfigurationUtils.validateString
        name, text = value(key)
        if text is None or not text.strip():
            raise ConfigError(name, text or "", f"The OAuth configuration option {key} value must be non-null and "
                              "not only whitespace")
        return text.strip()

    url = required_string("sasl.oauthbearer.jwks.endpoint.url")
    refresh_ms = value("sasl.oauthbearer.jwks.endpoint.refresh.ms")
    backoff_ms = value("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms")[1]
    backoff_max_ms = value("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms")
    if backoff_max_ms[1] < backoff_ms:
        raise ConfigError(backoff_max_ms[0], backoff_max_ms[1], f"retryBackoffMaxMs value ({backoff_max_ms[1]}) is "
                          f"less than retryBackoffMs value ({backoff_ms})")
    audiences = value("sasl.oauthbearer.expected.audience")[1]
    issuer = value("sasl.oauthbearer.expected.issuer")[1]
    skew_s = value("sasl.oauthbearer.clock.skew.seconds")[1]
    sub_claim = required_string("sasl.oauthbearer.sub.claim.name")
    scope_claim = required_string("sasl.oauthbearer.scope.claim.name")
    location = _jwks_location(config, listener_name, url)
    keys = JwksSource(location, refresh_ms, backoff_ms, backoff_max_ms[1])  # the last check: it starts fetching
    return SignedJwtValidator(keys, audiences or None, (issuer or "").strip() or None, skew_s, sub_claim,
                              scope_claim, clock)


def _jwks_location(config: BrokerConfig, listener_name: str, url: str) -> str | Path:
    """A file's path or an http(s) URL; a file must be there to read now (Kafka's ConfigurationUtils.validateFile)."""
    name = _listener_key(config, listener_name, "sasl.oauthbearer.jwks.endpoint.url", OAUTHBEARER)[0]
    parsed = urllib.parse.urlsplit(url)
    scheme = parsed.scheme.lower()
    if scheme in ("http", "https"):
        return url
    if scheme == "file":
        path = Path(urllib.parse.unquote(parsed.path))
    elif not scheme or len(scheme) == 1:  # a path (klamm also takes one without file://), or a Windows drive
        path = Path(url)
    else:
        raise ConfigError(name, url, f"The OAuth configuration option contains a URL ({url}) that contains an "
                          f'invalid protocol ({scheme}); only "http", "https", and "file" protocol are supported')
    path = path.absolute()
    if not path.exists():
        raise ConfigError(name, url, f"The OAuth configuration option contains a file ({path}) that doesn't exist")
    if path.is_dir():
        raise ConfigError(name, url, f"The OAuth configuration option references a directory ({path}), not a file")
    return path


class JwksSource:
    """A listener's JWKS (a file or an http/https URL) as a KeySource: the keys are read in a thread, never on
    the event loop (a file is read once at start-up, so that a bad one stops the broker, as in Kafka).

    When JwksCache says so (the refresh interval passed, an unknown `kid`), `select`
    and `missing` start a fetch in a daemon thread and answer with the keys at hand:
    the token that named an unknown key fails, and one sent after the fetch finds
    it. A fetch is retried with Kafka's backoff (sasl.oauthbearer.jwks.endpoint.
    retry.backoff.ms, doubling) until retry.backoff.max.ms have passed.
    """

    def __init__(self, location: str | Path, refresh: tuple[str, int], retry_backoff_ms: int,
                 retry_backoff_max_ms: int, *, fetch: Callable[[], bytes] | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> None:
        refresh_key, refresh_ms = refresh
        if isinstance(location, str) and refresh_ms <= 0:  # Kafka's RefreshingHttpsJwks refuses it
            raise ConfigError(refresh_key, refresh_ms, "the JWKS refresh interval must be positive")
        self.location = location
        self._fetch = fetch or (lambda: _read_jwks(location))
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        self._sleep = sleep
        self._clock = clock
        self._lock = threading.Lock()
        # a file with refresh.ms 0 is read once, as Kafka reads every JWKS file (and again for an unknown kid)
        self._cache = JwksCache(refresh_ms if refresh_ms > 0 else 2**62, clock)
        self.fetches = 0  # attempts, for tests and the log
        if isinstance(location, Path):
            self._cache.fetching()
            try:
                keys = parse_jwks(self._fetch())
            except (OSError, ValueError) as exc:
                raise ConfigError("sasl.oauthbearer.jwks.endpoint.url", str(location),
                                  f"cannot read the JWKS: {exc}") from exc
            self._cache.fetched(keys)
            log.info("OAUTHBEARER: %d verification keys from %s", len(keys), location)
        else:
            self._maybe_fetch(self._cache.fetch_due)

    @property
    def keys(self) -> tuple[VerificationKey, ...]:
        return self._cache.keys

    def select(self, header: Mapping[str, Any]) -> Sequence[VerificationKey]:
        self._maybe_fetch(self._cache.fetch_due)
        return self._cache.select(header)

    def missing(self, kid: str | None) -> None:
        self._maybe_fetch(lambda: self._cache.missing(kid))

    def _maybe_fetch(self, due: Callable[[], bool]) -> None:
        with self._lock:
            if not due():
                return
            self._cache.fetching()
        threading.Thread(target=self._refresh, name="klamm-jwks", daemon=True).start()

    def _refresh(self) -> None:
        try:
            keys = parse_jwks(self._retrying())
        except Exception as exc:  # noqa: BLE001 (anything: the thread must hand the cache back)
            log.warning("OAUTHBEARER: could not fetch the JWKS from %s; keeping %d keys: %s", self.location,
                        len(self._cache.keys), exc)
            with self._lock:
                self._cache.fetch_failed()
            return
        with self._lock:
            self._cache.fetched(keys)
        log.info("OAUTHBEARER: %d verification keys from %s", len(keys), self.location)

    def _retrying(self) -> bytes:
        """Kafka's Retry: attempts until one works or retry.backoff.max.ms have passed, waiting backoff * 2^n."""
        deadline = self._clock() + self._retry_backoff_max_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            self.fetches += 1
            try:
                return self._fetch()
            except (OSError, ValueError, http.client.HTTPException) as exc:
                wait = min(self._retry_backoff_ms * 2 ** (attempt - 1) / 1000, deadline - self._clock())
                if wait <= 0:
                    raise
                log.info("OAUTHBEARER: JWKS fetch %d from %s failed (%s); again in %.3f s", attempt, self.location,
                         exc, wait)
                self._sleep(wait)


def _read_jwks(location: str | Path) -> bytes:
    if isinstance(location, Path):
        return location.read_bytes()
    request = urllib.request.Request(location, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=JWKS_FETCH_TIMEOUT_S) as response:  # http or https only
        data = response.read(JWKS_MAX_BYTES + 1)
    if len(data) > JWKS_MAX_BYTES:
        raise ValueError(f"the JWKS at {location} is over {JWKS_MAX_BYTES} bytes")
    return data


class _State(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake (ApiVersions may come first)
    AUTHENTICATE = "authenticate"  # the mechanism is chosen; SaslAuthenticate tokens follow
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslSession:
    """One SASL connection's authentication, driven by the SaslHandshake and SaslAuthenticate handlers."""

    __slots__ = ("listener", "principal", "_state", "_mechanism_name", "_mechanism", "_expires_at", "_raw")
    gated = True
    internal = False  # a client's connection: the authorizer asks about its principal

    def __init__(self, listener: SaslListener) -> None:
        self.listener = listener
        self.principal = ""
        self._state = _State.HANDSHAKE
        self._mechanism_name = ""
        self._mechanism: Mechanism | None = None
        self._expires_at = float("inf")
        self._raw = False  # SaslHandshake v0 chose the mechanism: its tokens come in bare frames

    @property
    def authenticated(self) -> bool:
        return self._state is _State.AUTHENTICATED

    @property
    def failed(self) -> bool:
        return self._state is _State.FAILED

    def admits(self, api_key: int) -> bool:
        """Whether the connection may send this request now (else Kafka closes it)."""
        if self._state is _State.AUTHENTICATED:
            return time.monotonic() < self._expires_at or api_key == SASL_HANDSHAKE
        return self._state is not _State.FAILED and api_key in PRE_AUTHENTICATION_APIS

    def may_reauthenticate(self) -> bool:
        """Kafka allows re-authentication exactly when the session has an end (reauth ms or a credential expiry)."""
        return self._state is _State.AUTHENTICATED and self._expires_at != float("inf")

    @property
    def raw_tokens(self) -> bool:
        """Whether the next frames are bare SASL tokens, not requests: after SaslHandshake v0 (before KIP-152),
        until the mechanism completes."""
        return self._raw and self._state is _State.AUTHENTICATE

    def handshake(self, mechanism: str, version: int = 1) -> None:
        """SaslHandshake: choose the mechanism (again, to re-authenticate; only v1 may, as in Kafka)."""
        if self._state is _State.AUTHENTICATED:
            if version == 0:
                self._fail()
                raise SaslError(_ILLEGAL, "re-authentication needs SaslHandshake v1 (KIP-368)")
            if not self.may_reauthenticate():  # answered, as Kafka's request handler does, without closing
                raise SaslError(_ILLEGAL, "Unexpected SaslHandshake request: the connection is authenticated")
            if mechanism != self._mechanism_name:
                self._fail()
                raise SaslError(_ILLEGAL, f"re-authentication must use {self._mechanism_name}, not {mechanism}")
        elif self._state is not _State.HANDSHAKE:
            self._fail()
            raise SaslError(_ILLEGAL, "Unexpected SaslHandshake request")
        if mechanism not in self.listener.mechanisms:
            self._fail()
            raise SaslError(_UNSUPPORTED, f"Unsupported SASL mechanism {mechanism}")
        self._mechanism_name = mechanism
        self._mechanism = self.listener.mechanism(mechanism)
        self._state = _State.AUTHENTICATE
        self._raw = version == 0

    def authenticate(self, token: bytes) -> tuple[bytes, int]:
        """SaslAuthenticate: the mechanism's answer, and the session's lifetime in ms once complete (0: none)."""
        if self._state is not _State.AUTHENTICATE or self._mechanism is None:
            self._fail()
            raise SaslError(_ILLEGAL, "SaslAuthenticate before a SaslHandshake chose a mechanism")
        try:
            challenge = self._mechanism.evaluate(token)
        except SaslError as exc:
            self._fail()
            log.info("Failed %s authentication (%s): %s", self._mechanism_name,
                     "re-authentication" if self.principal else "authentication", exc.detail)
            raise
        if not self._mechanism.complete:
            return challenge, 0
        principal = f"User:{self._mechanism.principal}"
        if self.principal and principal != self.principal:  # KIP-368: re-authentication keeps the principal
            self._fail()
            raise SaslError(_AUTH_FAILED, f"Cannot change principals during re-authentication from "
                            f"{self.principal}: {principal}")
        self.principal = principal
        lifetime, ends = self._lifetime(self._mechanism)
        self._mechanism = None
        self._state = _State.AUTHENTICATED
        self._expires_at = time.monotonic() + lifetime / 1000 if ends else float("inf")
        return challenge, lifetime

    def _lifetime(self, mechanism: Mechanism) -> tuple[int, bool]:
        """The session's lifetime in ms and whether it ends at all, as Kafka's SaslServerAuthenticator computes it:
        connections.max.reauth.ms if positive, the time left before the credential expires if it does, both: the
        smaller. A credential past its expiry (within the validator's clock skew) leaves 0, which ends it now."""
        reauth_ms = self.listener.reauth_ms_of(self._mechanism_name)
        expiry_ms = getattr(mechanism, "credential_expiry_ms", None)
        if expiry_ms is None:
            return (reauth_ms, True) if reauth_ms > 0 else (0, False)
        left_ms = min(max(0, expiry_ms - int(self.listener.clock() * 1000)), INT64_MAX)
        return (min(left_ms, reauth_ms) if reauth_ms > 0 else left_ms), True

    def _fail(self) -> None:
        self._state = _State.FAILED


