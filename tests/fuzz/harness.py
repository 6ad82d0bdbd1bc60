"""One fuzz input through every decoder a client's bytes reach, the way the broker drives them.

`one_input(data)` takes `data` as bytes a client sent on its connection: frames
with their 4-byte size, requests or bare SASL tokens (each file of
tests/fuzz/corpus is one such frame, captured from a real client). It runs them

(a) through the frame layer and request decoding (`ServerConnection`, every
    version klamm serves), fed whole and fed in chunks: both must give the same
    requests, or the same ProtocolError;
(b) through a SASL listener's session (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) as
    the network layer does: handshake and authenticate tokens from the decoded
    requests, bare token frames after a SaslHandshake v0, and the same bytes read
    as bare tokens right after a v0 handshake of each mechanism;
(c) every record batch of a decoded Produce request through the produce path's
    checks (message-set up-conversion for v0-2, batch headers, CRC, then
    `prepare_batches`: record validation and recompression under the decompression
    bound), under a few topic configurations, and through `decode_batch`.

Only the documented outcomes are caught: ProtocolError (the broker closes the
connection), SaslError (answered, or the connection closed), KafkaError carrying
an error code (a per-partition error in the produce response). Anything else
propagates, so the fuzzer reports it. No network, no files, no clock: the same
input always takes the same path.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from typing import Any

from klamm.broker.authentication import SaslListener, SaslSession
from klamm.broker.handlers import registry
from klamm.broker.partition import BatchRules, prepare_batches
from klamm.broker.validation import DEFAULT_MAX_MESSAGE_BYTES, RecordRules
from klamm.config.broker import BrokerConfig
from klamm.protocol import batch as batches
from klamm.protocol import message_set
from klamm.protocol.compression import Compression
from klamm.protocol.connection import NEED_DATA, ProtocolError, Request, ServerConnection
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import decode_batch, record_keys
from klamm.protocol.sasl import SaslError, scram_credential

PRODUCE, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 17, 36
SUPPORTED: dict[int, tuple[int, int]] = {key: (api.min_version, api.max_version) for key, api in registry().items()}

# The users the capture script (scripts/capture_fuzz_corpus.py) authenticates as: the captured PLAIN tokens
# authenticate here too, so the fuzzer starts from sessions that get all the way through.
PLAIN_USERS = {"admin": "admin-secret", "alice": "alice-secret"}
SCRAM_USER, SCRAM_PASSWORD = "bob", "bob-secret"
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
         + " ".join(f'user_{user}="{password}"' for user, password in PLAIN_USERS.items()) + ";")
_CONFIG = BrokerConfig.from_properties({
    "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": _JAAS})
# A fixed salt and few iterations: the credentials are made once, at import, and only their keys matter here.
_SCRAM = {m: scram_credential(m, SCRAM_PASSWORD, b"fuzz-salt-16byte", 4096) for m in SASL_MECHANISMS[1:]}
LISTENER = SaslListener(_CONFIG, "SASL_PLAINTEXT",
                        lambda user, mechanism: _SCRAM.get(mechanism) if user == SCRAM_USER else None)
MAX_REQUEST_SIZE: int = _CONFIG.socket_request_max_bytes  # once authenticated, and on a PLAINTEXT listener
MAX_SASL_RECEIVE: int = LISTENER.max_receive_size  # before a SASL client has authenticated

# A fixed "now" keeps runs reproducible; the captures' timestamps are older, which the bounded rules below
# answer with INVALID_TIMESTAMP after decoding every record (what the fuzzer is after).
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
_LONG_MAX = 2**63 - 1
_WEEK_MS, _HOUR_MS = 7 * 24 * 3600 * 1000, 3600 * 1000
# Topic configurations that take a batch down each of the produce path's roads.
RULES = (
    # Kafka's defaults: records are decoded only when the header's timestamps cannot be trusted
    BatchRules(RecordRules("fuzz-0", False, False, _LONG_MAX, _LONG_MAX), codec=None, level=None),
    # compacted, bounded CreateTime: every record's key and timestamp read; then written out uncompressed
    BatchRules(RecordRules("fuzz-0", True, False, _WEEK_MS, _HOUR_MS), codec=int(Compression.NONE), level=None),
    # LogAppendTime and compression.type=zstd: the records decompressed (bounded) and compressed again
    BatchRules(RecordRules("fuzz-0", False, True, _LONG_MAX, _LONG_MAX), codec=int(Compression.ZSTD), level=None),
)
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_CRC_OFFSET = 17  # of a v2 batch (klamm.protocol.batch); the CRC covers bytes 21 on


def one_input(data: bytes) -> None:
    """Drive every decoder with `data`; raises only when klamm does something it documents it never does."""
    requests = decode_stream(data, len(data) or 1)
    chunked = decode_stream(data, _chunk_size(data))
    if summary(requests) != summary(chunked):
        raise AssertionError(f"fed in chunks the bytes decode otherwise: {summary(requests)} != {summary(chunked)}")
    for request in requests:
        if isinstance(request, Request) and request.api_key == PRODUCE and request.types is not None:
            check_produce(request)
    authenticate(data, _chunk_size(data))
    for mechanism in SASL_MECHANISMS:
        authenticate(data, len(data) or 1, v0_mechanism=mechanism)


def _chunk_size(data: bytes) -> int:
    """A chunk size taken from the input itself (so a crash replays), 1 to 61 bytes."""
    return 1 + zlib.crc32(data) % 61


def decode_stream(data: bytes, chunk: int) -> list[Request | ProtocolError]:
    """What the frame layer makes of `data` fed `chunk` bytes at a time: its requests, then the
    ProtocolError that ends the connection if there is one."""
    connection = ServerConnection(MAX_REQUEST_SIZE, SUPPORTED)
    out: list[Request | ProtocolError] = []
    try:
        for start in range(0, len(data), chunk):
            connection.receive_data(data[start:start + chunk])
            while (request := connection.next_request()) is not NEED_DATA:
                out.append(request)  # type: ignore[arg-type]
    except ProtocolError as exc:
        out.append(exc)
    return out


def summary(requests: list[Request | ProtocolError]) -> list[Any]:
    """What must not depend on how the bytes were cut: each request's header and body, or the refusal."""
    return [(r.api_key, r.api_version, r.correlation_id, r.client_id, r.size, r.body)
            if isinstance(r, Request) else "ProtocolError" for r in requests]


def authenticate(data: bytes, chunk: int, v0_mechanism: str | None = None) -> bool:
    """`data` on a SASL listener, through the session as klamm.broker.network drives it: a request the
    session does not admit, a failed authentication or a ProtocolError ends the connection. Returns
    whether the session authenticated before its end.

    With `v0_mechanism` a SaslHandshake v0 chose that mechanism first, so the frames are bare tokens."""
    connection = ServerConnection(MAX_SASL_RECEIVE, SUPPORTED)
    session = SaslSession(LISTENER)
    if v0_mechanism is not None:
        session.handshake(v0_mechanism, 0)
        connection.raw_tokens = session.raw_tokens
    try:
        for start in range(0, len(data), chunk):
            connection.receive_data(data[start:start + chunk])
            while (request := connection.next_request()) is not NEED_DATA:
                assert isinstance(request, Request)
                if not session.admits(request.api_key):
                    return session.authenticated
                try:
                    if request.api_key == SASL_HANDSHAKE and request.types is not None:
                        session.handshake(request.body.mechanism, request.api_version)
                    elif request.api_key == SASL_AUTHENTICATE and request.types is not None:
                        session.authenticate(bytes(request.body.auth_bytes))
                except SaslError as exc:
                    _check_code(exc)
                if session.failed:
                    return False
                # What the network layer does after each answer (Connection._follow_authentication).
                if session.authenticated:
                    connection.max_request_size = MAX_REQUEST_SIZE
                connection.raw_tokens = session.raw_tokens
    except ProtocolError:
        pass
    return session.authenticated


def check_produce(request: Request) -> None:
    """Each partition's records of a decoded Produce request through the produce path's checks."""
    for topic in request.body.topic_data:
        for data in topic.partition_data:
            if data.records is None:
                continue  # the handler answers INVALID_RECORD without looking further
            try:
                check_records(bytes(data.records), upconvert=request.api_version < 3)
            except KafkaError as exc:
                _check_code(exc)


def check_records(records: bytes, upconvert: bool) -> None:
    """klamm.broker.handlers.produce._submit and Partition._validate/submit, for one partition's records.

    A hostile client computes its CRCs right, so the harness fixes them where they are wrong: else nearly every
    mutation would stop at the CRC check and never reach the record decoders behind it."""
    if upconvert:
        records = message_set.to_batch(_fix_message_crcs(records), NOW_MS, DEFAULT_MAX_MESSAGE_BYTES)
    buf = bytearray(records)
    headers = _split(buf)
    for header in headers:
        if not batches.crc_ok(buf, header):
            header.crc = batches.compute_crc(buf, header)
            _U32.pack_into(buf, header.position + _CRC_OFFSET, header.crc)
        if header.is_control:
            raise KafkaError(ErrorCode.invalid_record, "clients may not write control batches")
    for rules in RULES:
        try:
            prepare_batches(bytearray(buf), [batches.read_batch_header(buf, h.position) for h in headers], rules,
                            NOW_MS)
        except KafkaError as exc:
            _check_code(exc)
    _check_decoders_agree(buf, headers[0])


def _split(buf: bytearray) -> list[batches.BatchHeader]:
    """Partition._validate's framing checks: exactly one complete v2 batch."""
    try:
        headers = batches.split_batches(buf)
    except batches.TruncatedBatch:
        headers = []
    except batches.UnsupportedMagic as exc:
        raise KafkaError(ErrorCode.invalid_record, str(exc)) from None
    except batches.InvalidBatch as exc:
        raise KafkaError(ErrorCode.corrupt_message, str(exc)) from None
    if len(headers) != 1:
        raise KafkaError(ErrorCode.invalid_record, "exactly one record batch per partition")
    return headers


def _check_decoders_agree(buf: bytearray, header: batches.BatchHeader) -> None:
    """record_keys promises that what it passes decode_batch decodes, with the same offsets, timestamps and keys
    (the compacted-topic check and the cleaner rely on it)."""
    try:
        keys = record_keys(buf, header, DEFAULT_MAX_MESSAGE_BYTES)
    except KafkaError as exc:
        _check_code(exc)
        keys = None
    try:
        _, records = decode_batch(buf, header.position, check_crc=True, limit=DEFAULT_MAX_MESSAGE_BYTES)
    except KafkaError as exc:
        _check_code(exc)
        if keys is not None:
            raise AssertionError(f"record_keys read the batch, decode_batch refused it: {exc!r}") from exc
        return
    if keys is not None and keys != [(r.offset, r.timestamp, r.key) for r in records]:
        raise AssertionError("record_keys and decode_batch read different records")


def _fix_message_crcs(records: bytes) -> bytes:
    """Correct the CRC of each outer message of a message set (magic 0/1), as a hostile client would."""
    buf = bytearray(records)
    position = 0
    while position + 16 <= len(buf):
        (size,) = _I32.unpack_from(buf, position + 8)
        end = position + 12 + size
        if size < 4 or end > len(buf):
            break
        _U32.pack_into(buf, position + 12, zlib.crc32(memoryview(buf)[position + 16:end]))
        position = end
    return bytes(buf)


def _check_code(exc: KafkaError) -> None:
    """A documented refusal carries a real Kafka error code; 'none' would tell the client it succeeded."""
    if not isinstance(exc.code, ErrorCode) or exc.code == ErrorCode.none:
        raise AssertionError(f"refused without an error code: {exc!r}") from exc


def frames(data: bytes) -> Iterator[bytes]:
    """The length-prefixed frames of `data` (a capture file holds one), each with its 4-byte size."""
    position = 0
    while position + 4 <= len(data):
        (size,) = _I32.unpack_from(data, position)
        if size < 0 or position + 4 + size > len(data):
            return
        yield data[position:position + 4 + size]
        position += 4 + size
