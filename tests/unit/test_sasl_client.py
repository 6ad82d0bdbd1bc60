"""The SASL clients a node authenticates to other nodes with, against klamm's own servers (which are checked
against RFC 5802/7677 and Kafka's behaviour in test_sasl.py), and against servers that lie."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, strategies as st

from klamm.protocol.errors import ErrorCode
from klamm.protocol.sasl import PlainServer, SaslError, ScramServer, plain_verifier, scram_credential
from klamm.protocol.sasl_client import PlainClient, ScramClient, sasl_client

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def run(client: object, server: object) -> str | None:
    """The exchange as BrokerConnection drives it; the server's principal."""
    token = client.initial()  # type: ignore[attr-defined]
    while token is not None:
        token = client.evaluate(server.evaluate(token))  # type: ignore[attr-defined]
    assert server.complete  # type: ignore[attr-defined]
    return server.principal  # type: ignore[attr-defined]


def test_plain() -> None:
    server = PlainServer(plain_verifier({"broker": "s3cret"}))
    assert run(sasl_client("PLAIN", "broker", "s3cret"), server) == "broker"
    with pytest.raises(SaslError, match="Invalid username or password"):
        run(PlainClient("broker", "wrong"), PlainServer(plain_verifier({"broker": "s3cret"})))


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user", ["broker", "odd,name=x"])
def test_scram(mechanism: str, user: str) -> None:
    credentials = {user: scram_credential(mechanism, "pässword", iterations=4096)}
    assert run(sasl_client(mechanism, user, "pässword"), ScramServer(mechanism, credentials.get)) == user
    with pytest.raises(SaslError) as refused:
        run(ScramClient(mechanism, user, "wrong"), ScramServer(mechanism, credentials.get))
    assert refused.value.code is ErrorCode.sasl_authentication_failed


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_server_that_does_not_know_the_credential_is_found_out(mechanism: str) -> None:
    """The server signature proves the server holds the credential: an impostor's is refused."""
    client = ScramClient(mechanism, "broker", "s3cret")
    server = ScramServer(mechanism, {"broker": scram_credential(mechanism, "s3cret")}.get)
    final = client.evaluate(server.evaluate(client.initial()))
    assert final is not None
    genuine = server.evaluate(final)
    forged = b"v=" + base64.b64encode(bytes(len(base64.b64decode(genuine[2:]))))
    with pytest.raises(SaslError, match="signature does not prove"):
        client.evaluate(forged)


@pytest.mark.parametrize("server_first", [b"r=other-nonce,s=c2FsdA==,i=4096", b"i=4096", b"r=%s,s=!!,i=4096",
                                          b"r=%s,s=c2FsdA==,i=1000", b"r=%s,s=c2FsdA==,i=x", b"\xff"])
def test_a_malformed_or_weak_server_first_message_is_refused(server_first: bytes) -> None:
    client = ScramClient("SCRAM-SHA-256", "broker", "s3cret", nonce="abc")
    client.initial()
    with pytest.raises(SaslError):
        client.evaluate(server_first.replace(b"%s", b"abcdef"))


@given(st.binary(max_size=200), st.binary(max_size=200))
def test_any_server_answers_give_a_token_or_a_sasl_error(first: bytes, final: bytes) -> None:
    client = ScramClient("SCRAM-SHA-512", "broker", "s3cret", nonce="abc")
    client.initial()
    try:
        client.evaluate(first)
        client.evaluate(final)
    except SaslError:
        pass
    with pytest.raises(SaslError):
        client.evaluate(b"")  # nothing comes after the server-final message


def test_unknown_mechanisms_are_refused() -> None:
    with pytest.raises(ValueError, match="not GSSAPI"):
        sasl_client("GSSAPI", "broker", "x")
