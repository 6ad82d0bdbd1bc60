"""How a listener validates OAUTHBEARER tokens, from Kafka's configs.

The listener's listener.name.<l>.oauthbearer.sasl.server.callback.handler.class
says how: none (Kafka's default) checks unsigned development tokens with the
unsecuredValidator* options of listener.name.<l>.oauthbearer.sasl.jaas.config;
Kafka's OAuthBearerValidatorCallbackHandler checks signed JWTs against the JWKS at
sasl.oauthbearer.jwks.endpoint.url. The JWKS is read at start-up (a file) or
fetched in a thread (http/https), and fetched again, in a thread, every
sasl.oauthbearer.jwks.endpoint.refresh.ms and when a token names an unknown key.
The token checks themselves are sans-io, in klamm.protocol.oauthbearer.
"""

from __future__ import annotations

import http.client
import logging
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from klamm.config.broker import BrokerConfig
from klamm.config.broker_keys import BROKER_CONFIG_DEF
from klamm.config.errors import ConfigError
from klamm.protocol import oauthbearer
from klamm.protocol.oauthbearer import (
    JwksCache,
    SignedJwtValidator,
    TokenValidator,
    UnsecuredJwtValidator,
    VerificationKey,
    parse_jwks,
)
from klamm.broker.jaas import listener_jaas_entry

__all__ = ["JwksSource", "listener_key", "oauthbearer_validator"]

log = logging.getLogger("klamm.authentication")

OAUTHBEARER = oauthbearer.MECHANISM
# Kafka's server callback handlers for OAUTHBEARER: the JWKS validator (its 3.x name too) and the unsecured default
OAUTHBEARER_VALIDATORS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
                          "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler")
OAUTHBEARER_UNSECURED_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                                   "OAuthBearerUnsecuredValidatorCallbackHandler")
JWKS_FETCH_TIMEOUT_S = 10
JWKS_MAX_BYTES = 1 << 20


def listener_key(config: BrokerConfig, listener_name: str, key: str, mechanism: str) -> tuple[str, Any]:
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


def oauthbearer_validator(config: BrokerConfig, listener_name: str, clock: Callable[[], float]) -> TokenValidator:
    """The listener's OAUTHBEARER validator, from its callback handler class and JAAS options (checked now)."""
    prefix = f"listener.name.{listener_name.lower()}.oauthbearer."
    # Kafka will not start a SASL mechanism without its JAAS entry either
    jaas_key, entry = listener_jaas_entry(config, listener_name, OAUTHBEARER, oauthbearer.LOGIN_MODULE,
                                          f"OAUTHBEARER on listener {listener_name} needs its login module")
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
        return listener_key(config, listener_name, key, OAUTHBEARER)

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
    name = listener_key(config, listener_name, "sasl.oauthbearer.jwks.endpoint.url", OAUTHBEARER)[0]
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
