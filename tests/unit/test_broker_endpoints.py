"""A broker registers one endpoint per advertised listener (RegisterBrokerRecord's end_points): the image keeps
them all, a snapshot writes them all, and a registration with different endpoints is written again."""

from __future__ import annotations

from klamm.controller.brokers import decide_register_broker
from klamm.controller.controller import Controller
from klamm.controller.image import Endpoint, ImageBuilder, empty_image
from klamm.controller.metadata_log import InMemoryMetadataLog
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.controller.snapshot import image_records

ENDPOINTS = [Endpoint("INTERNAL", "10.0.0.1", 9092, 0), Endpoint("EXTERNAL", "broker1.example", 9094, 3),
             Endpoint("SSL", "broker1.example", 9093, 1)]


def _controller() -> Controller:
    controller = Controller(InMemoryMetadataLog(), 1)
    controller.load()
    return controller


def test_the_image_keeps_every_endpoint_and_the_first_as_host_and_port() -> None:
    controller = _controller()
    registration = controller.register_broker(1, "ignored", 0, endpoints=ENDPOINTS)
    assert registration.endpoints == tuple(ENDPOINTS)
    assert (registration.listener, registration.host, registration.port, registration.security_protocol) == (
        "INTERNAL", "10.0.0.1", 9092, 0)
    assert registration.endpoint("external") == ENDPOINTS[1]
    assert registration.endpoint("SASL_PLAINTEXT") is None
    # the same endpoints again write nothing; another port for one listener is a new registration
    assert decide_register_broker(controller.image, 1, "", 0, endpoints=ENDPOINTS) == []
    moved = [*ENDPOINTS[:2], Endpoint("SSL", "broker1.example", 9095, 1)]
    [record] = decide_register_broker(controller.image, 1, "", 0, endpoints=moved)
    assert [e["port"] for e in record.data["end_points"]] == [9092, 9094, 9095]


def encode_decode(record: MetadataRecord) -> MetadataRecord:
    return decode_record(encode_record(record))


def test_a_snapshot_writes_every_endpoint() -> None:
    controller = _controller()
    controller.register_broker(1, "", 0, endpoints=ENDPOINTS)
    builder = ImageBuilder(empty_image(controller.image.cluster_id, 1))
    for record in image_records(controller.image):
        builder.apply(encode_decode(record))
    assert builder.build().brokers[1].endpoints == tuple(ENDPOINTS)


def test_one_listener_without_endpoints_as_before() -> None:
    registration = _controller().register_broker(1, "localhost", 9092, "PLAINTEXT")
    assert registration.endpoints == (Endpoint("PLAINTEXT", "localhost", 9092, 0),)
    assert registration.endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "localhost", 9092, 0)
