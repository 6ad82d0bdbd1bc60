"""KIP-482: tagged fields this broker does not know (a newer client's) are skipped, at any depth."""

from __future__ import annotations

import struct
import uuid

from tests.integration.conftest import API_VERSIONS, METADATA, BrokerThread, metadata_request

UNKNOWN = bytes([1, 99, 3]) + b"abc"  # one tagged field: tag 99, 3 bytes


def reframe(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_an_unknown_tag_in_the_body_is_skipped(broker: BrokerThread) -> None:
    with broker.connect() as client:
        frame = client.encode(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}, 7)
        assert frame[-1:] == b"\x00"  # the body's empty tagged section
        client.send_raw(reframe(frame[4:-1] + UNKNOWN))
        correlation_id, response = client.receive(API_VERSIONS, 3)
    assert correlation_id == 7 and response.error_code == 0 and len(response.api_keys) > 10


def test_unknown_tags_in_nested_structs_are_skipped(broker: BrokerThread) -> None:
    with broker.connect() as client:
        request = metadata_request(12, ["tagged-topic"], auto_create=True)
        frame = client.encode(METADATA, 12, request, 8)
        name = b"\x0dtagged-topic"  # compact string: length + 1, then the name
        at = frame.index(name) + len(name)
        assert frame[at:at + 1] == b"\x00"  # the topic entry's empty tagged section
        payload = frame[4:at] + UNKNOWN + frame[at + 1:-1] + bytes([2, 98, 1]) + b"z" + bytes([97, 0])
        client.send_raw(reframe(payload))
        correlation_id, response = client.receive(METADATA, 12)
    assert correlation_id == 8
    # Created by that request (LEADER_NOT_AVAILABLE: Kafka's answer to the request that creates a topic).
    assert [(t.name, t.error_code) for t in response.topics] == [("tagged-topic", 5)]
    with broker.connect() as client:
        [topic] = client.request(METADATA, 12, metadata_request(12, ["tagged-topic"])).topics
    assert topic.error_code == 0 and topic.topic_id != uuid.UUID(int=0)


def test_unknown_tags_in_the_request_header_are_skipped(broker: BrokerThread) -> None:
    with broker.connect() as client:
        frame = client.encode(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}, 9)
        client_id = b"klamm-tests"
        at = frame.index(client_id) + len(client_id)
        assert frame[at:at + 1] == b"\x00"  # the header's empty tagged section (after the int16-length client id)
        header_tags = bytes([2, 5, 2]) + b"hi" + bytes([40, 0])  # two unknown header tags
        client.send_raw(reframe(frame[4:at] + header_tags + frame[at + 1:]))
        correlation_id, response = client.receive(API_VERSIONS, 3)
        assert correlation_id == 9 and response.error_code == 0
        # the connection is still good, and a null client id is read as none
        null_id = frame[4:12] + b"\xff\xff" + frame[at:]
        client.send_raw(reframe(null_id))
        assert client.receive(API_VERSIONS, 3)[0] == 9
