"""CreateDelegationToken (38), RenewDelegationToken (39), ExpireDelegationToken (40), DescribeDelegationToken (41).

Delegation tokens (KIP-48) as Kafka's KafkaApis and controller serve them. The controller decides creations,
renewals and expiries (klamm/controller/delegation_tokens.py; a broker-only node forwards them); Describe
answers from this node's image, each token's HMAC computed with this node's `delegation.token.secret.key`.

Token requests are refused DELEGATION_TOKEN_REQUEST_NOT_ALLOWED on a PLAINTEXT listener, from an SSL client
without a certificate (User:ANONYMOUS), and on a connection that authenticated with a token: a token cannot
make or renew tokens. A token for another owner (CreateDelegationToken v3) needs CREATE_TOKENS on that user
(DELEGATION_TOKEN_AUTHORIZATION_FAILED); renewers must be Users (INVALID_PRINCIPAL_TYPE). Describe shows the
tokens a principal owns or renews, and the others it may DESCRIBE (the token) or DESCRIBE_TOKENS (its owner);
without an authorizer, every token. An empty owner list describes none, a null one all.

Every refusal carries timestamps of 0, as Kafka's controller leaves them (Kafka's broker puts -1 in the refusals
it makes itself, which no client reads, and which readers of timestamps as dates, such as kio, cannot decode).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from klamm.broker.authentication import ANONYMOUS
from klamm.broker.handlers import Api
from klamm.broker.handlers.groups import millis
from klamm.broker.services import BrokerServices
from klamm.controller.acls import ResourceType
from klamm.controller.delegation_tokens import TokenResult, TokenSettings, token_hmac, visible_tokens
from klamm.controller.image import DelegationToken
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

def split_principal(principal: str) -> tuple[str, str]:
    """"User:alice" -> ("User", "alice"), as KafkaPrincipal's type and name."""
    kind, _, name = principal.partition(":")
    return kind, name


def token_requests_allowed(broker: BrokerServices, request: Any) -> bool:
    """Kafka's KafkaApis.allowTokenRequests; a request a broker forwarded was checked there."""
    session = request.session
    if getattr(session, "token_authenticated", False):
        return False
    if session.internal:
        return True
    protocol = broker.config.security_protocol_of(request.listener) if request.listener else "PLAINTEXT"
    if protocol == "PLAINTEXT":
        return False
    return not (protocol == "SSL" and session.principal == ANONYMOUS.principal)


async def create_delegation_token(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    requester = request.session.principal
    owner_name = getattr(body, "owner_principal_name", None)
    owner = f"{body.owner_principal_type}:{owner_name}" if owner_name else requester
    renewers = [(r.principal_type, r.principal_name) for r in body.renewers]
    if not token_requests_allowed(broker, request):
        return _created(TokenResult(ErrorCode.delegation_token_request_not_allowed), owner, requester)
    if owner != requester and not broker.authorizer.allowed(request, AclOperation.CREATE_TOKENS, ResourceType.USER,
                                                            owner):
        return _created(TokenResult(ErrorCode.delegation_token_authorization_failed), owner, requester)
    if any(kind != "User" for kind, _ in renewers):
        return _created(TokenResult(ErrorCode.invalid_principal_type), owner, requester)
    try:
        result = await broker.controller_client.create_delegation_token(owner, requester, renewers,
                                                                        millis(body.max_lifetime))
    except KafkaError as exc:  # the controller could not be reached
        result = TokenResult(exc.code)
    return _created(result, owner, requester)


def _created(result: TokenResult, owner: str, requester: str) -> dict[str, Any]:
    owner_type, owner_name = split_principal(owner)
    requester_type, requester_name = split_principal(requester)
    return {"error_code": result.error, "principal_type": owner_type, "principal_name": owner_name,
            "token_requester_principal_type": requester_type, "token_requester_principal_name": requester_name,
            "issue_timestamp": result.issue_ms, "expiry_timestamp": result.expiry_ms,
            "max_timestamp": result.max_ms, "token_id": result.token_id, "hmac": result.hmac, "throttle_time": 0}


async def renew_delegation_token(broker: BrokerServices, request: Any) -> dict[str, Any]:
    return await _change_expiry(broker, request, broker.controller_client.renew_delegation_token,
                                request.body.renew_period)


async def expire_delegation_token(broker: BrokerServices, request: Any) -> dict[str, Any]:
    return await _change_expiry(broker, request, broker.controller_client.expire_delegation_token,
                                request.body.expiry_time_period)


async def _change_expiry(broker: BrokerServices, request: Any,
                         change: Callable[[str, bytes, int], Awaitable[TokenResult]], period: Any) -> dict[str, Any]:
    if not token_requests_allowed(broker, request):
        return _expiry(TokenResult(ErrorCode.delegation_token_request_not_allowed))
    try:
        result = await change(request.session.principal, bytes(request.body.hmac), millis(period))
    except KafkaError as exc:  # the controller could not be reached
        result = TokenResult(exc.code)
    return _expiry(result)


def _expiry(result: TokenResult) -> dict[str, Any]:
    return {"error_code": result.error, "expiry_timestamp": result.expiry_ms, "throttle_time": 0}


async def describe_delegation_token(broker: BrokerServices, request: Any) -> dict[str, Any]:
    if not token_requests_allowed(broker, request):
        return _described(ErrorCode.delegation_token_request_not_allowed)
    settings = TokenSettings.of(broker.config)
    if not settings.enabled:
        return _described(ErrorCode.delegation_token_auth_disabled)
    owners = request.body.owners
    if owners is not None and not owners:
        return _described(ErrorCode.none)
    authorizer = broker.authorizer

    def may_describe(token: DelegationToken) -> bool:
        return (authorizer.allowed(request, AclOperation.DESCRIBE, ResourceType.DELEGATION_TOKEN, token.token_id)
                or authorizer.allowed(request, AclOperation.DESCRIBE_TOKENS, ResourceType.USER, token.owner))

    wanted = None if owners is None else [f"{o.principal_type}:{o.principal_name}" for o in owners]
    tokens = visible_tokens(broker.controller.image.delegation_tokens.values(), request.session.principal, wanted,
                            may_describe)
    assert settings.secret_key is not None
    return _described(ErrorCode.none, [_token(token, settings.secret_key) for token in tokens])


def _token(token: DelegationToken, secret_key: str) -> dict[str, Any]:
    owner_type, owner_name = split_principal(token.owner)
    requester_type, requester_name = split_principal(token.requester)
    return {"principal_type": owner_type, "principal_name": owner_name,
            "token_requester_principal_type": requester_type, "token_requester_principal_name": requester_name,
            "issue_timestamp": token.issue_ms, "expiry_timestamp": token.expiry_ms, "max_timestamp": token.max_ms,
            "token_id": token.token_id, "hmac": token_hmac(secret_key, token.token_id),
            "renewers": [dict(zip(("principal_type", "principal_name"), split_principal(r))) for r in token.renewers]}


def _described(error: ErrorCode, tokens: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"error_code": error, "tokens": tokens or [], "throttle_time": 0}


APIS = [Api(38, 0, 3, create_delegation_token), Api(39, 0, 2, renew_delegation_token),
        Api(40, 0, 2, expire_delegation_token), Api(41, 0, 3, describe_delegation_token)]
