"""The bytes an unauthenticated client controls, fuzzed: frames into the sans-io connection, then the SASL
session (handshake and tokens of every mechanism) of a SASL listener. Nothing may come out but a framing
ProtocolError, a SaslError answered to the client, or a request the session refuses to admit."""

from __future__ import annotations

import io
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer

from klamm.broker.authentication import SaslListener, SaslSession
from klamm.broker.handlers import registry
from klamm.config.broker import BrokerConfig
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.connection import NEED_DATA, ProtocolError, ServerConnection
from klamm.protocol.sasl import SaslError, scram_credential

MAX_RECEIVE = 4096
CONFIG = BrokerConfig.from_properties({
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config":
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_u="p";',
    "sasl.server.max.receive.size": str(MAX_RECEIVE)})
CREDENTIALS = {m: scram_credential(m, "p", b"salt" * 4) for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")}
LISTENER = SaslListener(CONFIG, "SASL_PLAINTEXT", lambda user, mechanism: CREDENTIALS[mechanism] if user == "u" else None)
SUPPORTED = {key: (api.min_version, api.max_version) for key, api in registry().items()}


def frame(api_key: int, version: int, body: dict) -> bytes:
    types = message_types(api_key, version)
    header = RequestHeaderV2 if types.request_header_version == 2 else RequestHeaderV1
    out = io.BytesIO()
    entity_writer(header)(out, header(request_api_key=api_key, request_api_version=version, correlation_id=1,
                                      client_id="fuzz"))
    entity_writer(types.request)(out, build(types.request, body))
    return struct.pack(">i", len(out.getvalue())) + out.getvalue()


TOKENS = st.one_of(
    st.binary(max_size=300),
    st.builds(lambda a, b, c: b"\0".join((a, b, c)), st.binary(max_size=20), st.binary(max_size=20),
              st.binary(max_size=20)),  # PLAIN-shaped
    st.builds(lambda gs2, rest: gs2 + rest, st.sampled_from([b"n,,", b"y,,", b"p=x,,", b"n,a=u,", b""]),
              st.text(max_size=80).map(lambda t: t.encode())),  # SCRAM-shaped
    st.just(b"n,,n=u,r=abc"), st.just(b"\0u\0p"))
MESSAGES = st.one_of(
    st.builds(lambda m: frame(17, 1, {"mechanism": m}),
              st.sampled_from(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI", ""]) | st.text(max_size=20)),
    st.builds(lambda v, t: frame(36, v, {"auth_bytes": t}), st.integers(0, 2), TOKENS),
    st.just(frame(18, 0, {})),
    st.builds(lambda k: frame(k, 1 if k != 3 else 4, {}) if k in (3, 10) else frame(18, 3, {
        "client_software_name": "f", "client_software_version": "1"}), st.sampled_from([3, 10, 18])),
    st.binary(max_size=64),  # garbage
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(MESSAGES, max_size=12), st.integers(1, 64))
def test_what_an_unauthenticated_client_sends_cannot_break_the_session(messages: list[bytes], chunk: int) -> None:
    connection = ServerConnection(MAX_RECEIVE, SUPPORTED)
    session = SaslSession(LISTENER)
    data = b"".join(messages)
    try:
        for start in range(0, len(data), chunk):
            connection.receive_data(data[start:start + chunk])
            while (request := connection.next_request()) is not NEED_DATA:
                if session.failed or not session.admits(request.api_key):  # type: ignore[union-attr]
                    return  # the network layer closes the connection here
                try:
                    if request.api_key == 17 and request.types is not None:  # type: ignore[union-attr]
                        session.handshake(request.body.mechanism)  # type: ignore[union-attr]
                    elif request.api_key == 36 and request.types is not None:  # type: ignore[union-attr]
                        session.authenticate(bytes(request.body.auth_bytes))  # type: ignore[union-attr]
                except SaslError:
                    pass  # answered with its code and message
    except ProtocolError:
        return  # a malformed frame: the connection is closed


def test_the_harness_authenticates_a_well_formed_exchange() -> None:
    """The path the fuzzer drives does authenticate a real exchange (else the fuzzing proves little)."""
    connection = ServerConnection(MAX_RECEIVE, SUPPORTED)
    session = SaslSession(LISTENER)
    connection.receive_data(frame(18, 0, {}) + frame(17, 1, {"mechanism": "PLAIN"})
                            + frame(36, 2, {"auth_bytes": b"\0u\0p"}))
    while (request := connection.next_request()) is not NEED_DATA:
        assert session.admits(request.api_key)  # type: ignore[union-attr]
        if request.api_key == 17:  # type: ignore[union-attr]
            session.handshake(request.body.mechanism)  # type: ignore[union-attr]
        elif request.api_key == 36:  # type: ignore[union-attr]
            session.authenticate(bytes(request.body.auth_bytes))  # type: ignore[union-attr]
    assert session.authenticated and session.principal == "User:u"
