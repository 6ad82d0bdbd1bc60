"""Each topic's entry of a Metadata response, kept encoded from one request to the next.

A Metadata request for every topic built a dict per partition and encoded it: about 7 us a partition, 80 ms of
the event loop at 10,000 partitions (bench/scale.py), each time a client refreshed every topic (a Java consumer
with a pattern subscription, kafka-python, an admin listing topics). A topic's entry is a function of its image
(one object, shared by every metadata image until a record changes the topic), the API version and what the
client sees of the brokers (`BrokerView`). So it is encoded once per such key and copied into later responses.
Only where no authorizer decides what a principal sees (the handler asks for entries only then).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from kio.serial._introspect import classify_field

from klamm.controller.image import TopicImage
from klamm.protocol.api import message_types
from klamm.protocol.encoder import Encoded, encode_struct

__all__ = ["BrokerView", "TopicEntries"]

METADATA_KEY = 3
# Entries are kept per topic name, version and view: past this many per topic of the image, those of deleted or
# changed topics are dropped.
KEPT_PER_TOPIC = 4


@dataclass(frozen=True)
class BrokerView:
    """What of the brokers a topic's entry shows: a leader not registered is -1 (`live`), one without the
    client's listener LISTENER_NOT_FOUND (`unreachable`); and the authorized operations written."""

    live: frozenset[int]
    unreachable: frozenset[int]
    authorized_operations: int


class TopicEntries:
    """Encoded topic entries of one broker's Metadata responses."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int, BrokerView], tuple[TopicImage, Encoded]] = {}

    def entry(self, topic: TopicImage, version: int, view: BrokerView,
              describe: Callable[[TopicImage, BrokerView], dict[str, Any]]) -> Encoded:
        """The topic's entry for `version` and `view`: kept, or `describe`d and encoded now."""
        key = (topic.name, version, view)
        kept = self._kept.get(key)
        if kept is not None and kept[0] is topic:
            return kept[1]
        encoded = encode_struct(_topic_type(version), describe(topic, view))
        self._kept[key] = (topic, encoded)
        return encoded

    def forget_stale(self, topics_by_name: Mapping[str, TopicImage]) -> None:
        """Drop the entries of topics deleted or changed since, once there are many more than topics."""
        if len(self._kept) <= KEPT_PER_TOPIC * len(topics_by_name) + 64:
            return
        self._kept = {key: kept for key, kept in self._kept.items() if topics_by_name.get(key[0]) is kept[0]}

    def __len__(self) -> int:
        return len(self._kept)


@cache
def _topic_type(version: int) -> type:
    """The struct of one topic in a Metadata response of `version`."""
    response = message_types(METADATA_KEY, version).response
    topics = next(field for field in fields(response) if field.name == "topics")
    return classify_field(topics).type_  # type: ignore[no-any-return,union-attr]
