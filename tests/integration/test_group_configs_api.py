"""Group configs (KIP-848) through raw requests: IncrementalAlterConfigs / AlterConfigs /
DescribeConfigs on the GROUP resource, the group's heartbeat interval in its members'
ConsumerGroupHeartbeat responses, Kafka's refusals, ListConfigResources v1, and
authorization (ALTER_CONFIGS / DESCRIBE_CONFIGS on the group)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import ResourceType as Res

from tests.integration.conftest import BrokerThread, RawClient, create_topic, two_node_configs, wait_for
from tests.integration.secured import acl, grant, sasl_client, secured_broker
from tests.integration.test_configs_api import DELETE, SET, alter, describe, entries, incremental

pytestmark = pytest.mark.timeout(180)

GROUP, FIND_COORDINATOR, HEARTBEAT, LIST_CONFIG_RESOURCES = 32, 10, 68, 74
DEFAULT_CONFIG, GROUP_CONFIG = 5, 8
INVALID_REQUEST, INVALID_CONFIG, GROUP_DENIED = 42, 40, 30
SESSION, INTERVAL = "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"


def join(client: RawClient, group: str, member_id: str = "member-1", epoch: int = 0) -> Any:
    return client.request(HEARTBEAT, 1, {"group_id": group, "member_id": member_id, "member_epoch": epoch,
                                         "rebalance_timeout": 30000, "subscribed_topic_names": ["t"],
                                         "topic_partitions": [] if epoch == 0 else None})


def interval_ms(response: Any) -> int:
    return response.heartbeat_interval // timedelta(milliseconds=1)  # kio decodes the field as a duration


def test_group_configs_set_described_and_used_by_heartbeats(client: RawClient) -> None:
    create_topic(client, "t", 1)
    wait_for(lambda: client.request(FIND_COORDINATOR, 3, {"key": "g", "key_type": 0}).error_code == 0)
    first = join(client, "g")
    assert (first.error_code, interval_ms(first)) == (0, 5000)

    configs = entries(describe(client, GROUP, "g"))
    assert list(configs) == [SESSION, INTERVAL]
    assert (configs[SESSION].value, configs[SESSION].config_source) == ("45000", DEFAULT_CONFIG)
    assert [(s.name, s.value, s.source) for s in configs[INTERVAL].synonyms] == [(INTERVAL, "5000", DEFAULT_CONFIG)]
    assert configs[INTERVAL].config_type == 3 and not configs[INTERVAL].read_only  # INT

    result = incremental(client, GROUP, "g", [(SESSION, SET, "50000"), (INTERVAL, SET, "7000")])
    assert result.error_code == 0, result.error_message
    configs = entries(describe(client, GROUP, "g"))
    assert (configs[SESSION].value, configs[SESSION].config_source) == ("50000", GROUP_CONFIG)
    assert (configs[INTERVAL].value, configs[INTERVAL].config_source) == ("7000", GROUP_CONFIG)
    assert [(s.value, s.source) for s in configs[INTERVAL].synonyms] == [("7000", GROUP_CONFIG)]

    # the member's next heartbeat carries the group's interval
    again = join(client, "g", first.member_id, first.member_epoch)
    assert (again.error_code, interval_ms(again)) == (0, 7000)
    other = join(client, "other-group")
    assert interval_ms(other) == 5000

    listed = client.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]})
    assert [(r.resource_name, r.resource_type) for r in listed.config_resources] == [("g", GROUP)]

    assert incremental(client, GROUP, "g", [(INTERVAL, DELETE, None)]).error_code == 0
    assert entries(describe(client, GROUP, "g"))[INTERVAL].config_source == DEFAULT_CONFIG
    assert interval_ms(join(client, "g", again.member_id, again.member_epoch)) == 5000
    # AlterConfigs replaces the group's whole set
    assert alter(client, GROUP, "g", {INTERVAL: "6000"}).error_code == 0
    configs = entries(describe(client, GROUP, "g"))
    assert (configs[SESSION].config_source, configs[INTERVAL].value) == (DEFAULT_CONFIG, "6000")


@pytest.mark.parametrize("ops, code, message", [
    ([(INTERVAL, SET, "4000")], INVALID_CONFIG,
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ([(SESSION, SET, "70000")], INVALID_CONFIG,
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ([("no.such.key", SET, "1")], INVALID_CONFIG, "Unknown group config name: no.such.key"),
    ([(SESSION, SET, "abc")], INVALID_CONFIG,
     "Invalid value abc for configuration consumer.session.timeout.ms: Not a number of type INT"),
])
def test_out_of_bounds_and_unknown_group_configs_are_refused(client: RawClient, ops: list[Any], code: int,
                                                             message: str) -> None:
    result = incremental(client, GROUP, "g", ops)
    assert (result.error_code, result.error_message) == (code, message)
    assert entries(describe(client, GROUP, "g"))[SESSION].config_source == DEFAULT_CONFIG  # nothing stored


def test_group_name_must_not_be_empty(client: RawClient) -> None:
    assert describe(client, GROUP, "").error_code == INVALID_REQUEST
    assert incremental(client, GROUP, "", [(INTERVAL, SET, "6000")]).error_code == INVALID_REQUEST


def test_group_configs_need_alter_and_describe_configs_on_the_group(broker_factory: Any) -> None:
    broker: BrokerThread = secured_broker(broker_factory)
    with sasl_client(broker, "alice") as alice:
        result = incremental(alice, GROUP, "g", [(INTERVAL, SET, "6000")])
        assert (result.error_code, result.error_message) == (GROUP_DENIED, "Group authorization failed.")
        assert describe(alice, GROUP, "g").error_code == GROUP_DENIED
        grant(broker, acl("alice", Res.GROUP, "g", Op.ALTER_CONFIGS), acl("alice", Res.GROUP, "g", Op.DESCRIBE_CONFIGS))
        assert incremental(alice, GROUP, "g", [(INTERVAL, SET, "6000")]).error_code == 0
        assert entries(describe(alice, GROUP, "g"))[INTERVAL].value == "6000"
        assert describe(alice, GROUP, "h").error_code == GROUP_DENIED


def test_group_configs_altered_at_a_broker_only_node_reach_the_controller(
        formatted_cluster: Callable[..., list[BrokerThread]]) -> None:
    controller, follower = formatted_cluster(two_node_configs())
    assert follower.broker.broker_only
    with follower.connect() as client:
        refused = incremental(client, GROUP, "g", [(INTERVAL, SET, "99")])
        assert (refused.error_code, refused.error_message) == (INVALID_CONFIG, (
            "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"))
        assert incremental(client, GROUP, "g", [(INTERVAL, SET, "6000")]).error_code == 0
        assert alter(client, GROUP, "h", {SESSION: "50000"}).error_code == 0
    for node in (controller, follower):
        wait_for(lambda node=node: node.call(lambda: dict(node.broker.controller.image.group_configs("g")))
                 == {INTERVAL: "6000"}, timeout=15)
        wait_for(lambda node=node: node.call(lambda: dict(node.broker.controller.image.group_configs("h")))
                 == {SESSION: "50000"}, timeout=15)
