"""Delegation token decisions (KIP-48), as Kafka's DelegationTokenControlManager makes them.

A token is issued to an owner principal by a requester (the same principal, or one allowed CREATE_TOKENS on
the owner), with renewer principals, an expiry and a maximum lifetime. Its id is a random Kafka Uuid string;
its secret, the HMAC, is HMAC-SHA512 of the id under `delegation.token.secret.key`, never stored: every node
with the same key computes it (so every node of a cluster needs the same key). A client authenticates with
SCRAM as the token id with the base64 HMAC as password, and `tokenauth=true` (klamm.protocol.sasl.ScramServer),
as its owner.

- create: DELEGATION_TOKEN_AUTH_DISABLED without a secret key, UNSUPPORTED_VERSION below metadata.version
  3.6-IV2, INVALID_PRINCIPAL_TYPE for a renewer that is not a User; the lifetime is
  `delegation.token.max.lifetime.ms` or the request's if smaller, the expiry `delegation.token.expiry.time.ms`
  from now, capped by the lifetime.
- renew: DELEGATION_TOKEN_NOT_FOUND for an HMAC of no token, DELEGATION_TOKEN_EXPIRED past its expiry or
  lifetime, DELEGATION_TOKEN_OWNER_MISMATCH unless the owner or a renewer asks; the expiry moves to now plus
  the renew period (the expiry time if larger or not positive), capped by the lifetime.
- expire: the same checks (an expired token may still be expired at once); a negative period removes it now,
  else its expiry becomes now plus the period, capped by the lifetime.
- the controller removes tokens past their expiry or lifetime every
  `delegation.token.expiry.check.interval.ms`.

Principals are Kafka's strings, "User:alice".
"""

from __future__ import annotations

import base64
import hashlib
import hmac as hmac_module
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from klamm.controller.image import DelegationToken, MetadataImage
from klamm.controller.meta_properties import random_base64_uuid
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import ScramCredential, scram_credential

__all__ = ["TOKEN_METADATA_VERSION", "TokenCredentials", "TokenResult", "TokenSettings", "decide_create_token",
           "decide_expire_token", "decide_renew_token", "decide_sweep_tokens", "token_for_hmac", "token_hmac",
           "visible_tokens"]

TOKEN_METADATA_VERSION = 14  # metadata.version 3.6-IV2: MetadataVersion.isDelegationTokenSupported
USER_TYPE = "User"
LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class TokenSettings:
    """The node's delegation.token.* configs."""

    secret_key: str | None
    max_lifetime_ms: int
    expiry_time_ms: int

    @classmethod
    def of(cls, config: Any) -> TokenSettings:
        """A BrokerConfig's delegation.token.* values."""
        secret = config.delegation_token_secret_key
        return cls(secret.get_secret_value() if secret is not None else None, config.delegation_token_max_lifetime_ms,
                   config.delegation_token_expiry_time_ms)

    @property
    def enabled(self) -> bool:
        return bool(self.secret_key)


@dataclass(frozen=True)
class TokenResult:
    """An answer: the error, and for a success the token's id, HMAC and timestamps (0 after an error, as
    Kafka's controller leaves them)."""

    error: ErrorCode = ErrorCode.none
    token_id: str = ""
    hmac: bytes = b""
    issue_ms: int = 0
    expiry_ms: int = 0
    max_ms: int = 0


def token_hmac(secret_key: str, token_id: str) -> bytes:
    return hmac_module.new(secret_key.encode(), token_id.encode(), hashlib.sha512).digest()


def token_for_hmac(image: MetadataImage, secret_key: str, hmac: bytes) -> DelegationToken | None:
    for token in image.delegation_tokens.values():
        if hmac_module.compare_digest(token_hmac(secret_key, token.token_id), hmac):
            return token
    return None


def _sum(now: int, duration: int) -> int:
    return LONG_MAX if now > LONG_MAX - duration else now + duration


def _refused(image: MetadataImage, settings: TokenSettings) -> ErrorCode | None:
    if not settings.enabled:
        return ErrorCode.delegation_token_auth_disabled
    if image.features.get("metadata.version", 0) < TOKEN_METADATA_VERSION:
        return ErrorCode.unsupported_version
    return None


def _record(token: DelegationToken, expiry_ms: int | None = None) -> MetadataRecord:
    return MetadataRecord("DelegationTokenRecord", {
        "owner": token.owner, "requester": token.requester, "renewers": list(token.renewers),
        "issue_timestamp": token.issue_ms, "max_timestamp": token.max_ms,
        "expiration_timestamp": token.expiry_ms if expiry_ms is None else expiry_ms, "token_id": token.token_id})


def decide_create_token(image: MetadataImage, settings: TokenSettings, owner: str, requester: str,
                        renewers: Sequence[tuple[str, str]], max_lifetime_ms: int, now_ms: int,
                        token_id: str | None = None) -> tuple[TokenResult, list[MetadataRecord]]:
    """A new token for `owner`, asked by `requester`; renewers are (type, name) pairs."""
    refused = _refused(image, settings)
    if refused is not None:
        return TokenResult(refused), []
    if any(kind != USER_TYPE for kind, _ in renewers):
        return TokenResult(ErrorCode.invalid_principal_type), []
    lifetime = settings.max_lifetime_ms if max_lifetime_ms <= 0 else min(settings.max_lifetime_ms, max_lifetime_ms)
    max_ms = _sum(now_ms, lifetime)
    expiry_ms = min(max_ms, _sum(now_ms, settings.expiry_time_ms))
    token = DelegationToken(token_id or random_base64_uuid(), owner, requester,
                            tuple(f"{kind}:{name}" for kind, name in renewers), now_ms, max_ms, expiry_ms)
    assert settings.secret_key is not None
    return TokenResult(ErrorCode.none, token.token_id, token_hmac(settings.secret_key, token.token_id), now_ms,
                       expiry_ms, max_ms), [_record(token)]


def _token_to_change(image: MetadataImage, settings: TokenSettings,
                     hmac: bytes) -> tuple[ErrorCode | None, DelegationToken | None]:
    refused = _refused(image, settings)
    if refused is not None:
        return refused, None
    assert settings.secret_key is not None
    token = token_for_hmac(image, settings.secret_key, hmac)
    if token is None:
        return ErrorCode.delegation_token_not_found, None
    return None, token


def _expired(token: DelegationToken, now_ms: int) -> bool:
    return token.max_ms < now_ms or token.expiry_ms < now_ms


def decide_renew_token(image: MetadataImage, settings: TokenSettings, principal: str, hmac: bytes,
                       renew_period_ms: int, now_ms: int) -> tuple[TokenResult, list[MetadataRecord]]:
    error, token = _token_to_change(image, settings, hmac)
    if token is None:
        return TokenResult(error or ErrorCode.delegation_token_not_found), []
    if _expired(token, now_ms):
        return TokenResult(ErrorCode.delegation_token_expired), []
    if not token.owned_or_renewed_by(principal):
        return TokenResult(ErrorCode.delegation_token_owner_mismatch), []
    period = settings.expiry_time_ms if renew_period_ms <= 0 else min(settings.expiry_time_ms, renew_period_ms)
    expiry_ms = min(token.max_ms, now_ms + period)
    return TokenResult(ErrorCode.none, expiry_ms=expiry_ms), [_record(token, expiry_ms)]


def decide_expire_token(image: MetadataImage, settings: TokenSettings, principal: str, hmac: bytes,
                        expiry_period_ms: int, now_ms: int) -> tuple[TokenResult, list[MetadataRecord]]:
    error, token = _token_to_change(image, settings, hmac)
    if token is None:
        return TokenResult(error or ErrorCode.delegation_token_not_found), []
    if not token.owned_or_renewed_by(principal):
        return TokenResult(ErrorCode.delegation_token_owner_mismatch), []
    if expiry_period_ms < 0:  # at once
        return TokenResult(ErrorCode.none, expiry_ms=now_ms), [
            MetadataRecord("RemoveDelegationTokenRecord", {"token_id": token.token_id})]
    if _expired(token, now_ms):
        return TokenResult(ErrorCode.delegation_token_expired), []
    expiry_ms = min(token.max_ms, _sum(now_ms, expiry_period_ms))
    return TokenResult(ErrorCode.none, expiry_ms=expiry_ms), [_record(token, expiry_ms)]


def decide_sweep_tokens(image: MetadataImage, now_ms: int) -> list[MetadataRecord]:
    """The removal of every token past its expiry or lifetime."""
    return [MetadataRecord("RemoveDelegationTokenRecord", {"token_id": token.token_id})
            for token in image.delegation_tokens.values() if _expired(token, now_ms)]


def visible_tokens(tokens: Iterable[DelegationToken], requester: str, owners: Sequence[str] | None,
                   may_describe: Callable[[DelegationToken], bool]) -> list[DelegationToken]:
    """DescribeDelegationToken's tokens (Kafka's DelegationTokenManager.filterToken): those of the owners
    asked for (all when None), that the requester owns or renews, or may describe (`may_describe(token)`)."""
    return [token for token in tokens
            if (owners is None or any(token.owned_or_renewed_by(owner) for owner in owners))
            and (token.owned_or_renewed_by(requester) or may_describe(token))]


class TokenCredentials:
    """Delegation tokens' SCRAM credentials on a broker (Kafka's DelegationTokenCache): the password is the
    token's base64 HMAC, with the least iterations Kafka allows and a salt of this node's. Made on a token's
    first authentication per mechanism (a key derivation of a few ms), kept while the token exists."""

    def __init__(self, image: Callable[[], MetadataImage], secret_key: Callable[[], str | None]) -> None:
        self._image = image
        self._secret_key = secret_key
        self._credentials: dict[tuple[str, str], ScramCredential] = {}

    def lookup(self, token_id: str, mechanism: str) -> tuple[ScramCredential, str, int] | None:
        """(credential, owner's name, expiry ms) of the token, or None when there is no such token."""
        token = self._image().delegation_tokens.get(token_id)
        secret_key = self._secret_key()
        if token is None or not secret_key:
            self._credentials.pop((token_id, mechanism), None)
            return None
        credential = self._credentials.get((token_id, mechanism))
        if credential is None:
            password = base64.b64encode(token_hmac(secret_key, token_id)).decode("ascii")
            credential = self._credentials[(token_id, mechanism)] = scram_credential(mechanism, password)
            self._forget_removed()
        return credential, token.owner.partition(":")[2], token.expiry_ms

    def _forget_removed(self) -> None:
        tokens = self._image().delegation_tokens
        for key in [key for key in self._credentials if key[0] not in tokens]:
            del self._credentials[key]
