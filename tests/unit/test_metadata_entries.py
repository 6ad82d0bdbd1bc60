"""A Metadata response's topic entries kept encoded (klamm.broker.metadata_entries): written into a response,
they give exactly the bytes the topic's dict gives, for every version served; a topic changed, another view of
the brokers or another version gets an entry of its own."""

from __future__ import annotations

import uuid

import pytest

from klamm.broker.handlers.metadata import _describe_in_view, _view
from klamm.broker.metadata_entries import KEPT_PER_TOPIC, TopicEntries
from klamm.controller.image import BrokerRegistration, Endpoint, PartitionImage, TopicImage
from klamm.protocol.acl import NOT_INCLUDED, TOPIC_OPERATIONS
from klamm.protocol.api import message_types
from klamm.protocol.encoder import encode

METADATA = 3


def topic(name: str = "t", leaders: tuple[int, ...] = (1, 2, 3, -1)) -> TopicImage:
    partitions = {i: PartitionImage(i, (1, 2, 3), (1, 2), leader, 5 + i, 7) for i, leader in enumerate(leaders)}
    return TopicImage(name, uuid.uuid4(), partitions)


class Image:
    """What _view reads of an image: broker 1 and 2 registered, 2 without the EXTERNAL listener."""

    brokers = {
        1: BrokerRegistration(1, "h1", 9092, None, "PLAINTEXT", False,
                              endpoints=(Endpoint("PLAINTEXT", "h1", 9092), Endpoint("EXTERNAL", "x1", 19092))),
        2: BrokerRegistration(2, "h2", 9092, None, "PLAINTEXT", False, endpoints=(Endpoint("PLAINTEXT", "h2", 9092),)),
    }


def response(version: int, topics: list) -> bytes:
    body = {"brokers": [], "cluster_id": "c", "controller_id": 1, "topics": topics,
            "cluster_authorized_operations": NOT_INCLUDED}
    return bytes(encode(message_types(METADATA, version).response, body)[0])


@pytest.mark.parametrize("version", range(0, 13))
@pytest.mark.parametrize(("listener", "operations"), [("", False), ("EXTERNAL", False), ("EXTERNAL", True)])
def test_a_kept_entry_writes_the_bytes_of_its_dict(version: int, listener: str, operations: bool) -> None:
    view = _view(Image, listener, operations)
    shown = topic()
    kept = TopicEntries().entry(shown, version, view, _describe_in_view)
    assert response(version, [kept, {"error_code": 3, "name": "missing"}]) == \
        response(version, [_describe_in_view(shown, view), {"error_code": 3, "name": "missing"}])


def test_an_entry_is_encoded_once_per_topic_image_version_and_view() -> None:
    entries = TopicEntries()
    described: list[str] = []

    def describe(topic_image, view):
        described.append(topic_image.name)
        return _describe_in_view(topic_image, view)

    plain, external = _view(Image, "", False), _view(Image, "EXTERNAL", False)
    shown = topic()
    first = entries.entry(shown, 12, plain, describe)
    assert entries.entry(shown, 12, _view(Image, "", False), describe) is first  # an equal view: kept
    assert entries.entry(shown, 12, external, describe) != first  # leader 2 hidden from EXTERNAL
    assert entries.entry(shown, 9, plain, describe) is not first
    changed = TopicImage("t", shown.topic_id, {0: PartitionImage(0, (1,), (1,), 1, 9, 9)})
    assert entries.entry(changed, 12, plain, describe) != first
    assert described == ["t"] * 4
    assert _view(Image, "", True).authorized_operations == TOPIC_OPERATIONS


def test_entries_of_deleted_and_changed_topics_are_dropped_once_they_outnumber_the_topics() -> None:
    entries = TopicEntries()
    view = _view(Image, "", False)
    current = {f"t{n}": topic(f"t{n}") for n in range(10)}
    versions = range(13)  # past KEPT_PER_TOPIC entries a topic, and the slack of 64
    assert len(versions) * 11 > KEPT_PER_TOPIC * 10 + 64
    for version in versions:
        for image_topic in current.values():
            entries.entry(image_topic, version, view, _describe_in_view)
        entries.entry(topic("gone"), version, view, _describe_in_view)
    before = len(entries)
    entries.forget_stale(current)
    assert before == 13 * 11 and len(entries) == 13 * 10
