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

OAUTHBEARER validates tokens as klamm.broker.oauthbearer_validation sets it up.
"""

from __future__ import annotations

import enum
import hmac
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from klamm.broker.jaas import listener_jaas_entry
from klamm.broker.oauthbearer_validation import listener_key, oauthbearer_validator
from klamm.broker.principal_mapping import PrincipalMapper
from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from klamm.protocol import oauthbearer
from klamm.protocol.api import API_VERSIONS_KEY, SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from klamm.protocol.errors import ErrorCode
from klamm.protocol.oauthbearer import OAuthBearerServer, TokenValidator
from klamm.protocol.sasl import (
    SCRAM_MECHANISMS,
    PlainServer,
    SaslError,
    ScramCredential,
    ScramServer,
    plain_users,
)

__all__ = ["ANONYMOUS", "CONTROLLER_PEER", "SaslListener", "SaslSession", "Session", "session_of_certificate"]

log = logging.getLogger("klamm.authentication")

SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, oauthbearer.MECHANISM)
OAUTHBEARER = oauthbearer.MECHANISM
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PRE_AUTHENTICATION_APIS = frozenset((API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY))
_ILLEGAL, _UNSUPPORTED = ErrorCode.illegal_sasl_state, ErrorCode.unsupported_sasl_mechanism
_AUTH_FAILED = ErrorCode.sasl_authentication_failed
INT64_MAX = 2**63 - 1

ScramLookup = Callable[[str, str], "ScramCredential | None"]
# (token id, mechanism) -> the delegation token's credential, its owner's name and its expiry in ms, or None
TokenLookup = Callable[[str, str], "tuple[ScramCredential, str, int] | None"]


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


class ForwardedSession(_InternalSession):
    """The client's principal on a request a broker forwarded in an Envelope (klamm.protocol.envelope): that
    broker authorized it; the handler needs the principal itself (who asks for a delegation token)."""

    __slots__ = ("token_authenticated",)

    def __init__(self, principal: str, token_authenticated: bool) -> None:
        super().__init__(principal)
        self.token_authenticated = token_authenticated


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
                 clock: Callable[[], float] = time.time, token_lookup: TokenLookup | None = None) -> None:
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
        self._token_lookup = token_lookup  # delegation tokens' SCRAM credentials
        self.clock = clock  # wall time, for credentials that expire
        self.oauthbearer: TokenValidator | None = None
        if OAUTHBEARER in self.mechanisms:
            self.oauthbearer = oauthbearer_validator(config, listener_name, clock)
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
        tokens = self._token_lookup
        return ScramServer(name, lambda user: self._scram_lookup(user, name),
                           token_lookup=None if tokens is None else lambda token_id: tokens(token_id, name))

    def _verify_plain(self, user: str, password: str) -> bool:
        expected = self.plain_users.get(user)
        return expected is not None and _same(expected, password)


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def _plain_users(config: BrokerConfig, listener_name: str) -> dict[str, str]:
    """PLAIN's users: the user_<name>="<password>" options of the listener's PlainLoginModule."""
    _, entry = listener_jaas_entry(config, listener_name, "PLAIN", PLAIN_LOGIN_MODULE,
                                   f"PLAIN on listener {listener_name} needs its users", 'user_<name>="<password>" ...')
    return plain_users(entry)


def _reauth_ms(config: BrokerConfig, listener_name: str, mechanism: str) -> int:
    return listener_key(config, listener_name, "connections.max.reauth.ms", mechanism)[1]


class _State(enum.Enum):
    HANDSHAKE = "handshake"  # waiting for SaslHandshake (ApiVersions may come first)
    AUTHENTICATE = "authenticate"  # the mechanism is chosen; SaslAuthenticate tokens follow
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class SaslSession:
    """One SASL connection's authentication, driven by the SaslHandshake and SaslAuthenticate handlers."""

    __slots__ = ("listener", "principal", "token_authenticated", "_state", "_mechanism_name", "_mechanism",
                 "_expires_at", "_raw")
    gated = True
    internal = False  # a client's connection: the authorizer asks about its principal

    def __init__(self, listener: SaslListener) -> None:
        self.listener = listener
        self.principal = ""
        self.token_authenticated = False  # with a delegation token: it may not make or renew tokens
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
            return time.monotonic() < self._expires_at or api_key == SASL_HANDSHAKE_KEY
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
        self.token_authenticated = getattr(self._mechanism, "token_authenticated", False)
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


