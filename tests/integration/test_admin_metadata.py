"""Metadata and DescribeCluster as admin clients see them: authorized operations, racks, topic deletion."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from klamm.controller.controller import Controller
from klamm.controller.metadata_log import FileMetadataLog
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from tests.integration.conftest import DELETE_TOPICS, METADATA, BrokerThread, create_topic, topic_names

pytestmark = pytest.mark.timeout(60)

DESCRIBE_CLUSTER = 60
NOT_INCLUDED = -2147483648
# AclOperation codes (Kafka's org.apache.kafka.common.acl.AclOperation), spelled out independently of klamm.
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = \
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12
TOPIC_OPS = {READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS}
CLUSTER_OPS = {CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE}


def _bits(codes: set[int]) -> int:
    return sum(1 << code for code in codes)


def _metadata(version: int, topics: list[str], include: bool) -> object:
    body = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": include,
            "include_cluster_authorized_operations": include,
            "topics": [{"name": name, "topic_id": uuid.UUID(int=0)} for name in topics]}
    return build(message_types(METADATA, version).request, body)


@pytest.mark.parametrize("version", [8, 10, 12])
def test_metadata_reports_every_supported_operation_when_asked(broker_factory: Callable[..., BrokerThread],
                                                               version: int) -> None:
    broker = broker_factory()
    with broker.connect() as client:
        create_topic(client, "ops")
        asked = client.request(METADATA, version, _metadata(version, ["ops", "missing"], include=True))
        assert [t.topic_authorized_operations for t in asked.topics] == [_bits(TOPIC_OPS)] * 2
        if version <= 10:
            assert asked.cluster_authorized_operations == _bits(CLUSTER_OPS)
        plain = client.request(METADATA, version, _metadata(version, ["ops"], include=False))
        assert plain.topics[0].topic_authorized_operations == NOT_INCLUDED
        if version <= 10:
            assert plain.cluster_authorized_operations == NOT_INCLUDED


def test_describe_cluster_reports_cluster_operations_when_asked(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory()
    with broker.connect() as client:
        for include, expected in ((True, _bits(CLUSTER_OPS)), (False, NOT_INCLUDED)):
            response = client.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": include})
            assert response.cluster_authorized_operations == expected


def test_confluent_admin_sees_authorized_operations(broker_factory: Callable[..., BrokerThread]) -> None:
    """librdkafka's 0081 admin test asks for them through describe_topics and describe_cluster."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    with broker.connect() as client:
        create_topic(client, "described")
    topics = admin.describe_topics(TopicCollection(["described"]), include_authorized_operations=True)
    described = topics["described"].result(timeout=15)
    assert {op.value for op in described.authorized_operations} == TOPIC_OPS
    cluster = admin.describe_cluster(include_authorized_operations=True).result(timeout=15)
    assert {op.value for op in cluster.authorized_operations} == CLUSTER_OPS
    assert admin.describe_cluster().result(timeout=15).authorized_operations is None


@pytest.mark.parametrize(("version", "code"), [(2, 42), (4, 73), (6, 73)])  # INVALID_REQUEST, TOPIC_DELETION_DISABLED
def test_delete_topics_refused_when_deletion_disabled(broker_factory: Callable[..., BrokerThread],
                                                      version: int, code: int) -> None:
    broker = broker_factory(**{"delete.topic.enable": "false"})
    with broker.connect() as client:
        create_topic(client, "kept")
        if version >= 6:
            body = {"topics": [{"name": "kept", "topic_id": uuid.UUID(int=0)}], "timeout_ms": 10_000}
        else:
            body = {"topic_names": ["kept"], "timeout_ms": 10_000}
        response = client.request(DELETE_TOPICS, version, body)
        assert [(r.name, r.error_code) for r in response.responses] == [("kept", code)]
        assert "kept" in topic_names(client)


def test_delete_topics_allowed_by_default(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory()
    with broker.connect() as client:
        create_topic(client, "gone")
        response = client.request(DELETE_TOPICS, 4, {"topic_names": ["gone"], "timeout_ms": 10_000})
        assert [r.error_code for r in response.responses] == [0]
        assert "gone" not in topic_names(client)


def test_broker_rack_is_registered_and_reported(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"broker.rack": "rack-a"})
    with broker.connect() as client:
        metadata = client.request(METADATA, 12, _metadata(12, [], include=False))
        assert [b.rack for b in metadata.brokers] == ["rack-a"]
        cluster = client.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
        assert [b.rack for b in cluster.brokers] == ["rack-a"]
    # The registration record carries it: the metadata log alone, replayed, knows the rack.
    broker.stop()
    metadata_log = FileMetadataLog.open(broker.log_dir)
    try:
        image = Controller(metadata_log, node_id=1).load()
    finally:
        metadata_log.close()
    assert [b.rack for b in image.brokers.values()] == ["rack-a"]


def test_broker_snapshots_metadata_and_restarts_from_the_snapshot(broker_factory: Callable[..., BrokerThread]) -> None:
    from klamm.controller.snapshot import list_snapshots

    broker = broker_factory(**{"metadata.log.max.record.bytes.between.snapshots": "1",
                               "metadata.max.retention.bytes": "0", "metadata.log.segment.bytes": "600"})
    with broker.connect() as client:
        for n in range(12):
            create_topic(client, f"snap-{n}", partitions=2)
    broker.stop()  # waits for a snapshot being written
    directory = broker.log_dir / "__cluster_metadata-0"
    snapshots = list_snapshots(directory)
    assert snapshots, "no snapshot written"
    broker.start()
    assert broker.broker is not None
    assert broker.call(lambda: broker.broker.controller.log.log_start_offset) > 0  # the log behind was deleted
    with broker.connect() as client:
        assert {f"snap-{n}" for n in range(12)} <= topic_names(client)
