"""Envelope (58): a client's request forwarded by a broker to the controller with the client's principal (KIP-590).

The envelope carries the inner request as its frame would be without the size (header and body), the
principal as Kafka's DefaultKafkaPrincipalBuilder serializes it (a two-byte version, then DefaultPrincipalData),
and the client's address; the answer carries the inner response the same way. klamm's brokers envelope the
requests whose principal the controller must know (delegation tokens: who asks, who renews).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader

from klamm.protocol.api import message_types
from klamm.protocol.connection import NEED_DATA, ProtocolError, Request, ServerConnection
from klamm.protocol.encoder import encode_struct
from klamm.protocol.schema import SchemaError, packaged_spec
from klamm.protocol.sendplan import FileRegion

__all__ = ["ENVELOPE_KEY", "decode_principal", "decode_request", "decode_response", "encode_principal",
           "encode_request", "encode_response"]

ENVELOPE_KEY = 58
PRINCIPAL_VERSION = 0
_SIZE = struct.Struct(">i")
_VERSION = struct.Struct(">h")


def encode_principal(principal: str, token_authenticated: bool = False) -> bytes:
    """"User:alice" as DefaultKafkaPrincipalBuilder.serialize writes it."""
    kind, _, name = principal.partition(":")
    data = packaged_spec("clients", "DefaultPrincipalData").encode(
        {"type": kind, "name": name, "token_authenticated": token_authenticated}, PRINCIPAL_VERSION)
    return _VERSION.pack(PRINCIPAL_VERSION) + data


def decode_principal(data: bytes) -> tuple[str, bool]:
    """("User:alice", token authenticated); ProtocolError for bytes that are not one."""
    try:
        (version,) = _VERSION.unpack_from(data, 0)
        if version != PRINCIPAL_VERSION:
            raise ProtocolError(f"unknown principal data version {version}")
        value = packaged_spec("clients", "DefaultPrincipalData").decode(data[_VERSION.size:], version)
    except (struct.error, SchemaError, IndexError, ValueError) as exc:
        raise ProtocolError(f"malformed principal data: {exc}") from exc
    return f"{value['type']}:{value['name']}", bool(value["token_authenticated"])


def encode_request(api_key: int, version: int, body: Mapping[str, Any], client_id: str | None,
                   correlation_id: int = 0) -> bytes:
    """A request's header and body, as its frame has them after the size."""
    types = message_types(api_key, version)
    header_type = RequestHeaderV2 if types.request_header_version == 2 else RequestHeaderV1
    # the encoder compiled per message type, as for responses: kio's writer of a built entity cost a follower
    # about 330 µs a Fetch request of 18 partitions
    header = encode_struct(header_type, {"request_api_key": api_key, "request_api_version": version,
                                         "correlation_id": correlation_id, "client_id": client_id})
    return header + encode_struct(types.request, body)


def decode_request(data: bytes, supported: dict[int, tuple[int, int]]) -> Request:
    """The inner request of an envelope, if its API and version are in `supported`; ProtocolError otherwise."""
    connection = ServerConnection(len(data) + _SIZE.size, supported)
    connection.receive_data(_SIZE.pack(len(data)) + data)
    request = connection.next_request()
    if request is NEED_DATA or request.types is None:  # type: ignore[union-attr]
        raise ProtocolError("the envelope holds no whole request")
    return request  # type: ignore[return-value]


def encode_response(request: Request, response: Any) -> bytes:
    """The inner response's header and body, for the envelope's answer (no records: no file regions)."""
    parts = ServerConnection(0, {}).encode_response(request, response)
    if any(isinstance(part, FileRegion) for part in parts):
        raise ProtocolError("an enveloped response cannot carry file regions")
    return b"".join(parts)[_SIZE.size:]  # type: ignore[arg-type]


def decode_response(api_key: int, version: int, data: bytes) -> Any:
    """The inner response (a kio entity) of an envelope's answer."""
    types = message_types(api_key, version)
    header_type = ResponseHeaderV1 if types.response_header_version == 1 else ResponseHeaderV0
    _, position = entity_reader(header_type)(memoryview(data), 0)
    response, _ = entity_reader(types.response)(memoryview(data), position)
    return response
