"""A regex subscription gets only the topics its principal may DESCRIBE (Kafka 4's
filterTopicDescribeAuthorizedTopics), on a broker with the ACL authorizer and SASL users."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import ResourceType as Res

from tests.integration.conftest import BrokerThread, RawClient, create_topic, wait_for
from tests.integration.secured import acl, grant, sasl_client, secured_broker

pytestmark = pytest.mark.timeout(180)

FIND_COORDINATOR, HEARTBEAT, METADATA = 10, 68, 3
NONE = 0


@pytest.fixture
def broker(broker_factory: Any) -> BrokerThread:
    broker = secured_broker(broker_factory)
    with sasl_client(broker, "admin") as admin:
        wait_for(lambda: admin.request(FIND_COORDINATOR, 3, {"key": "any", "key_type": 0}).error_code == NONE)
        create_topic(admin, "orders-eu", 2)
        create_topic(admin, "orders-us", 2)
    return broker


def topic_ids(broker: BrokerThread) -> dict[Any, str]:
    image = broker.broker.controller.image
    return {topic.topic_id: name for name, topic in image.topics_by_name.items()}


def heartbeat(client: RawClient, epoch: int, owned: list[dict[str, Any]] | None = None) -> Any:
    return client.request(HEARTBEAT, 1, {"group_id": "g", "member_id": "member-1", "member_epoch": epoch,
                                         "rebalance_timeout": 30000, "subscribed_topic_regex": r"orders-\w+",
                                         "topic_partitions": owned or []})


def test_a_regex_is_resolved_to_the_topics_the_member_may_describe(broker: BrokerThread) -> None:
    grant(broker, acl("alice", Res.GROUP, "g", Op.READ))
    grant(broker, acl("alice", Res.TOPIC, "orders-eu", Op.DESCRIBE))
    names = topic_ids(broker)
    with sasl_client(broker, "alice") as alice:
        joined = heartbeat(alice, 0)
        assert joined.error_code == NONE
        assert {names[tp.topic_id] for tp in joined.assignment.topic_partitions} == {"orders-eu"}
        grant(broker, acl("alice", Res.TOPIC, "orders-us", Op.DESCRIBE))
        owned = [{"topic_id": tp.topic_id, "partitions": tp.partitions} for tp in joined.assignment.topic_partitions]
        again = heartbeat(alice, joined.member_epoch, owned)
        assert again.error_code == NONE and again.member_epoch > joined.member_epoch
        assert {names[tp.topic_id] for tp in again.assignment.topic_partitions} == {"orders-eu", "orders-us"}
