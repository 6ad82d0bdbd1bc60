"""SASL mechanisms as sans-io client state machines: how a klamm node authenticates to another.

A broker reaching another broker's (or a controller's) SASL listener sends the
mechanism's `initial()` token in its first SaslAuthenticate, then feeds each
answer to `evaluate`, which gives the next token to send, or None once the
exchange is complete. A server that does not prove itself (a SCRAM server
signature that does not match) raises `SaslError`: the connection must not be used.

PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, without channel binding, as
Kafka's clients speak them).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from typing import Protocol

from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import (MIN_ITERATIONS, SCRAM_MECHANISMS, SaslError, credential_from_salted_password,
                                 hash_of, salted_password)

__all__ = ["PlainClient", "SaslClient", "ScramClient", "sasl_client"]


class SaslClient(Protocol):
    mechanism: str

    def initial(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes | None: ...


def sasl_client(mechanism: str, username: str, password: str) -> SaslClient:
    """The client of `mechanism` for these credentials; ValueError for a mechanism klamm cannot speak."""
    if mechanism == "PLAIN":
        return PlainClient(username, password)
    if mechanism in SCRAM_MECHANISMS:
        return ScramClient(mechanism, username, password)
    raise ValueError(f"klamm authenticates to other nodes with PLAIN, {', '.join(SCRAM_MECHANISMS)}; not {mechanism}")


def _server_failed(mechanism: str, detail: str) -> SaslError:
    return SaslError(ErrorCode.sasl_authentication_failed, f"The {mechanism} server failed to authenticate: {detail}")


class PlainClient:
    """One token, `NUL username NUL password`; the server's empty answer completes it."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._token = f"\0{username}\0{password}".encode()
        self._sent = False

    def initial(self) -> bytes:
        self._sent = True
        return self._token

    def evaluate(self, challenge: bytes) -> bytes | None:
        if not self._sent:
            raise _server_failed(self.mechanism, "an answer before the client spoke")
        self._token = b""  # the password is needed no more
        return None


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """client-first -> server-first (nonce, salt, iterations) -> client-final (proof) -> server-final (signature)."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str | None = None, *,
                 token: bool = False) -> None:
        """`token`: a delegation token (username its id, password its base64 HMAC), the tokenauth extension."""
        hash_of(mechanism)  # an unknown mechanism fails now
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._first_bare = f"n={_escape_name(username)},r={self._nonce}" + (",tokenauth=true" if token else "")
        self._server_signature: bytes | None = None
        self._step = 0

    def initial(self) -> bytes:
        self._step = 1
        return f"n,,{self._first_bare}".encode("ascii")

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._step == 1:
            self._step = 2
            return self._client_final(challenge)
        if self._step == 2:
            self._step = 3
            self._check_server_final(challenge)
            return None
        raise _server_failed(self.mechanism, "a token out of turn")

    def _client_final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("ascii")
            attributes = dict(item.split("=", 1) for item in text.split(","))
            nonce, salt, iterations = attributes["r"], base64.b64decode(attributes["s"], validate=True), \
                int(attributes["i"])
        except (UnicodeDecodeError, ValueError, KeyError, binascii.Error):
            raise _server_failed(self.mechanism, f"a malformed server-first message {server_first!r}") from None
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise _server_failed(self.mechanism, "the server nonce does not extend the client's")
        if iterations < MIN_ITERATIONS:  # as Kafka's ScramSaslClient: fewer would weaken the stored key
            raise _server_failed(self.mechanism, f"{iterations} iterations, fewer than {MIN_ITERATIONS}")
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        self._password = ""
        credential = credential_from_salted_password(self.mechanism, salted, salt, iterations)
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of the gs2 header "n,,"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode("ascii")
        digest = hash_of(self.mechanism)
        client_key = hmac.new(salted, b"Client Key", digest).digest()
        client_signature = hmac.new(credential.stored_key, auth_message, digest).digest()
        proof = bytes(k ^ s for k, s in zip(client_key, client_signature))
        self._server_signature = hmac.new(credential.server_key, auth_message, digest).digest()
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}".encode("ascii")

    def _check_server_final(self, server_final: bytes) -> None:
        expected = self._server_signature
        self._server_signature = None
        if not server_final.startswith(b"v=") or expected is None:
            raise _server_failed(self.mechanism, f"no server signature in {server_final!r}")
        try:
            signature = base64.b64decode(server_final[2:], validate=True)
        except binascii.Error:
            raise _server_failed(self.mechanism, f"a malformed server signature {server_final!r}") from None
        if not hmac.compare_digest(signature, expected):
            raise _server_failed(self.mechanism, "its signature does not prove it knows the credential")
