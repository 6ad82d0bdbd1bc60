"""Connection limits: idle connections are closed after connections.max.idle.ms."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest

from tests.integration.conftest import BrokerThread

pytestmark = pytest.mark.timeout(60)


def _closed_within(sock: socket.socket, seconds: float) -> float | None:
    """Seconds until the peer closed the socket, or None if it stayed open."""
    sock.settimeout(seconds)
    started = time.monotonic()
    try:
        data = sock.recv(1)
    except TimeoutError:
        return None
    assert data == b""
    return time.monotonic() - started


def test_idle_connection_is_closed(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory(**{"connections.max.idle.ms": "600"})
    idle = socket.create_connection(("127.0.0.1", broker.port))
    elapsed = _closed_within(idle, 10)
    assert elapsed is not None, "an idle connection stayed open"
    assert elapsed >= 0.5


def test_default_keeps_connection_open(broker_factory: Callable[..., BrokerThread]) -> None:
    broker = broker_factory()
    conn = socket.create_connection(("127.0.0.1", broker.port))
    assert _closed_within(conn, 1.5) is None


def test_acl_requests_answer_security_disabled(broker_factory: Callable[..., BrokerThread]) -> None:
    """Kafka without an authorizer answers ACL requests with SECURITY_DISABLED (54)."""
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, \
        AdminClient, ResourcePatternType, ResourceType
    from confluent_kafka import KafkaException

    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    acl_filter = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    # librdkafka drops DescribeAcls' top-level error and reports no bindings.
    assert admin.describe_acls(acl_filter, request_timeout=10).result(timeout=15) == []
    binding = AclBinding(ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:x", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as created:
        admin.create_acls([binding], request_timeout=10)[binding].result(timeout=15)
    assert created.value.args[0].code() == 54  # SECURITY_DISABLED
    with pytest.raises(KafkaException) as deleted:
        admin.delete_acls([acl_filter], request_timeout=10)[acl_filter].result(timeout=15)
    assert deleted.value.args[0].code() == 54


def test_elect_leaders_is_not_needed_on_preferred_leaders(broker_factory: Callable[..., BrokerThread]) -> None:
    from confluent_kafka import ElectionType, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = broker_factory()
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    admin.create_topics([NewTopic("elect", 2, 1)])["elect"].result(timeout=15)
    wanted = [TopicPartition("elect", 0), TopicPartition("elect", 1), TopicPartition("elect", 7)]
    results = admin.elect_leaders(ElectionType.PREFERRED, wanted).result(timeout=15)
    codes = {tp.partition: (error.code() if error else 0) for tp, error in results.items()}
    assert codes == {0: 84, 1: 84, 7: 3}  # ELECTION_NOT_NEEDED, UNKNOWN_TOPIC_OR_PARTITION
    assert admin.elect_leaders(ElectionType.PREFERRED, None).result(timeout=15) == {}


def test_keyless_records_in_a_compacted_topic_are_named(broker_factory: Callable[..., BrokerThread]) -> None:
    """Kafka's LogValidator reports each offending record (Produce v8+ record_errors)."""
    from klamm.protocol.records import build_batch
    from tests.integration.conftest import create_topic, fetch, produce

    broker = broker_factory()
    with broker.connect() as client:
        create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
        batch = build_batch([(b"k0", b"v"), (None, b"v"), (b"k2", b"v"), (None, b"v"), (b"k4", b"v")])
        response = produce(client, "compacted", batch, version=11)
        assert response.error_code == 87  # INVALID_RECORD
        assert [e.batch_index for e in response.record_errors] == [1, 3]
        assert "without key" in response.record_errors[0].batch_index_error_message
        assert "2 record errors" in response.error_message
        assert fetch(client, "compacted", 0).high_watermark == 0  # nothing of the batch was appended
