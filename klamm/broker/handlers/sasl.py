"""SaslHandshake (17) and SaslAuthenticate (36): a SASL connection authenticates through them.

After SaslHandshake v0 (clients before Kafka 1.0, and kafka-python up to 2.0) the client sends its SASL
tokens in bare frames, without a request header (before KIP-152); the network layer hands each to
`sasl_authenticate` as a SaslAuthenticate v0 request and sends the answer's token back in a bare frame
(a failure closes the connection: that framing has no place for an error).

The connection's session (klamm.broker.authentication) keeps the state; these handlers
turn its answers and failures into responses. A failed authentication is answered,
then the connection closes (the network layer sees the session failed). On a
listener without SASL, both answer ILLEGAL_SASL_STATE, as Kafka's request handler does.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.authentication import SaslSession
from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.protocol.api import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import SaslError

NOT_SASL = "SASL is not enabled on this listener"


async def sasl_handshake(broker: BrokerServices, request: Any) -> dict[str, Any]:
    session = request.session
    if not isinstance(session, SaslSession):
        return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    mechanisms = list(session.listener.mechanisms)
    try:
        session.handshake(request.body.mechanism, request.api_version)
    except SaslError as exc:
        return {"error_code": exc.code, "mechanisms": mechanisms}
    return {"error_code": ErrorCode.none, "mechanisms": mechanisms}


async def sasl_authenticate(broker: BrokerServices, request: Any) -> dict[str, Any]:
    session = request.session
    if not isinstance(session, SaslSession):
        return _failed(ErrorCode.illegal_sasl_state, NOT_SASL)
    try:
        challenge, lifetime_ms = session.authenticate(bytes(request.body.auth_bytes))
    except SaslError as exc:
        return _failed(exc.code, exc.message)
    return {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": challenge,
            "session_lifetime": lifetime_ms}


def _failed(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"error_code": code, "error_message": message, "auth_bytes": b"", "session_lifetime": 0}


APIS = [Api(SASL_HANDSHAKE_KEY, 0, 1, sasl_handshake), Api(SASL_AUTHENTICATE_KEY, 0, 2, sasl_authenticate)]
