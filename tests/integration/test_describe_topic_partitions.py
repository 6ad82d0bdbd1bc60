"""DescribeTopicPartitions (75, KIP-966) with its cursor pagination, and ListConfigResources (74, KIP-1142),
over the wire as Kafka answers them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.integration.conftest import BrokerThread, RawClient, create_topic

pytestmark = pytest.mark.timeout(60)

DESCRIBE_TOPIC_PARTITIONS, LIST_CONFIG_RESOURCES = 75, 74
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
INVALID_REQUEST, UNKNOWN_TOPIC, INVALID_TOPIC, UNSUPPORTED_VERSION = 42, 3, 17, 35


def describe(client: RawClient, topics: list[str], limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    return client.request(DESCRIBE_TOPIC_PARTITIONS, 0, {
        "topics": [{"name": t} for t in topics], "response_partition_limit": limit,
        "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}})


def pages(client: RawClient, topics: list[str], limit: int) -> list[list[tuple[str, int]]]:
    """Every answer of a paginated walk, as the (topic, partition) pairs each holds."""
    out, cursor = [], None
    while True:
        response = describe(client, topics, limit, cursor)
        out.append([(t.name, p.partition_index) for t in response.topics for p in t.partitions])
        if response.next_cursor is None:
            return out
        cursor = (response.next_cursor.topic_name, response.next_cursor.partition_index)


def test_partitions_come_in_pages_of_the_limit_and_the_cursor_walks_every_one(client: RawClient) -> None:
    create_topic(client, "dtp-a", partitions=3)
    create_topic(client, "dtp-b", partitions=2)
    create_topic(client, "dtp-c", partitions=4)
    every = [(t, p) for t, n in (("dtp-a", 3), ("dtp-b", 2), ("dtp-c", 4)) for p in range(n)]
    named = ["dtp-c", "dtp-a", "dtp-b"]  # answered in name order
    assert pages(client, named, 2) == [every[0:2], every[2:4], every[4:6], every[6:8], every[8:9]]
    assert pages(client, named, 5) == [every[0:5], every[5:9]]
    # a page that ends exactly at a topic's end: the cursor names the next topic's partition 0
    first = describe(client, named, 3)
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("dtp-b", 0)
    assert pages(client, named, 100) == [every]


def test_a_topic_answer_is_what_metadata_says(client: RawClient) -> None:
    create_topic(client, "dtp-one", partitions=2)
    response = describe(client, ["dtp-one", "dtp-missing", "bad/name"])
    by_name = {t.name: t for t in response.topics}
    one = by_name["dtp-one"]
    assert one.error_code == 0 and one.topic_id != uuid.UUID(int=0) and not one.is_internal
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes, p.leader_epoch)
            for p in one.partitions] == [(0, 1, (1,), (1,), 0), (1, 1, (1,), (1,), 0)]
    assert one.topic_authorized_operations != -2147483648  # no authorizer: every topic operation
    assert (by_name["dtp-missing"].error_code, by_name["dtp-missing"].partitions) == (UNKNOWN_TOPIC, ())
    assert by_name["bad/name"].error_code == INVALID_TOPIC
    assert response.next_cursor is None


def test_an_empty_list_is_every_topic_from_the_cursor_on(client: RawClient) -> None:
    for name in ("dtp-all-a", "dtp-all-b"):
        create_topic(client, name)
    names = [t.name for t in describe(client, [], cursor=("dtp-all-b", 0)).topics]
    assert names[0] == "dtp-all-b" and "dtp-all-a" not in names and names == sorted(names)
    assert "dtp-all-a" in [t.name for t in describe(client, []).topics]


def test_a_cursor_outside_the_named_topics_or_negative_is_an_invalid_request(client: RawClient) -> None:
    create_topic(client, "dtp-x")
    for cursor in (("dtp-y", 0), ("dtp-x", -1)):
        response = describe(client, ["dtp-x"], cursor=cursor)
        assert [(t.name, t.error_code) for t in response.topics] == [("dtp-x", INVALID_REQUEST)]


def test_max_request_partition_size_limit_caps_the_page(broker_factory: Any) -> None:
    broker: BrokerThread = broker_factory(**{"max.request.partition.size.limit": "2"})
    with broker.connect() as client:
        create_topic(client, "dtp-capped", partitions=5)
        assert pages(client, ["dtp-capped"], 2000) == [[("dtp-capped", 0), ("dtp-capped", 1)],
                                                       [("dtp-capped", 2), ("dtp-capped", 3)], [("dtp-capped", 4)]]


def list_resources(client: RawClient, types: list[int], version: int = 1) -> Any:
    return client.request(LIST_CONFIG_RESOURCES, version, {"resource_types": types} if version else {})


def test_list_config_resources_lists_what_describe_configs_describes(client: RawClient) -> None:
    create_topic(client, "lcr-topic")
    every = list_resources(client, [])
    listed = {(r.resource_type, r.resource_name) for r in every.config_resources}
    assert every.error_code == 0 and (TOPIC, "lcr-topic") in listed and (BROKER, "1") in listed
    topics_only = list_resources(client, [TOPIC])
    assert {r.resource_type for r in topics_only.config_resources} == {TOPIC}
    assert [(r.resource_type, r.resource_name) for r in list_resources(client, [BROKER]).config_resources] == \
        [(BROKER, "1")]
    # no client metrics subscriptions and no group configs exist: nothing to list
    assert list_resources(client, [CLIENT_METRICS, GROUP]).config_resources == ()
    assert list_resources(client, [], version=0).config_resources == ()
    # broker loggers are not served by DescribeConfigs here
    assert list_resources(client, [BROKER_LOGGER]).error_code == UNSUPPORTED_VERSION
    assert list_resources(client, [TOPIC], version=0).error_code == 0  # v0 has no types field to ask with
