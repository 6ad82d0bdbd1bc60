"""The decoding layer under mutated frames, for every served (api, version).

A valid request is generated, framed with its header, then damaged (bytes
changed, lengths turned to -1, cut short, bytes inserted). The sans-io
connection must either refuse the frame (ProtocolError: one log line and a
closed connection in the broker) or hand over a request that decoded under the
version's schema — never raise anything else, and never let a null through
where the schema forbids one.
"""

from __future__ import annotations

import io
import os
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import Records

from klamm.broker.handlers import registry
from klamm.protocol.api import message_types
from klamm.protocol.connection import ProtocolError, Request, ServerConnection
from klamm.protocol.guard import null_check

pytestmark = pytest.mark.timeout(300)

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))  # type: ignore[arg-type]
SERVED = [(key, version) for key, api in sorted(registry().items())
          for version in range(api.min_version, api.max_version + 1)]
SUPPORTED = {key: (api.min_version, api.max_version) for key, api in registry().items()}
EXAMPLES = int(os.environ.get("KLAMM_FUZZ_EXAMPLES", "10"))


def frame(key: int, version: int, body: Any) -> bytes:
    types = message_types(key, version)
    header_type = RequestHeaderV2 if types.request_header_version == 2 else RequestHeaderV1
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header_type(request_api_key=key, request_api_version=version,
                                                    correlation_id=1, client_id="fuzz"))
    entity_writer(types.request)(buffer, body)
    return buffer.getvalue()


@st.composite
def damage(draw: Any, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(8, max(len(data) - 1, 8)))  # after api key, version and correlation id
        kind = draw(st.sampled_from(["byte", "minus-one", "cut", "insert"]))
        if where >= len(data):
            data += b"\x00"
        elif kind == "byte":
            data[where] = draw(st.integers(0, 255))
        elif kind == "minus-one":  # a length of -1 (null) in both encodings
            data[where:where + 2] = b"\xff\xff" if draw(st.booleans()) else b"\x00"
        elif kind == "cut":
            del data[where:]
        else:
            data[where:where] = draw(st.binary(min_size=1, max_size=8))
    return bytes(data)


@pytest.mark.parametrize(("key", "version"), SERVED, ids=[f"{k}v{v}" for k, v in SERVED])
def test_damaged_frames_are_refused_or_decoded_within_their_schema(key: int, version: int) -> None:
    types = message_types(key, version)

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(data=st.data(), body=st.from_type(types.request))
    def fuzz(data: Any, body: Any) -> None:
        try:
            payload = frame(key, version, body)
        except (ValueError, OverflowError):
            return  # kio cannot write this generated value (an out-of-range duration): nothing to damage
        damaged = data.draw(damage(payload))
        connection = ServerConnection(1 << 20, SUPPORTED)
        connection.receive_data(struct.pack(">i", len(damaged)) + damaged)
        try:
            request = connection.next_request()
        except ProtocolError:
            return
        if isinstance(request, Request) and request.body is not None:
            null_check(type(request.body))(request.body)

    fuzz()
