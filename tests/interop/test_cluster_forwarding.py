"""Admin writes sent to a broker-only node are forwarded to the controller, as Kafka's brokers forward them (KIP-590).

Clients send most admin writes to the controller Metadata names, but not all:
a broker's configs go to that broker (every client), and Java's AdminClient
sends topic config changes to any broker. Here each write goes to node 2,
which is not the controller: it must take effect cluster-wide, with the same
answers and errors as at the controller.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.conftest import BrokerProcess
from tests.integration.conftest import RawClient

from .helpers import confluent_consume, wait_for
from .test_cluster_processes import brokers_seen, nodes  # noqa: F401  (nodes: a fixture)

pytestmark = [pytest.mark.timeout(120)]

CREATE_TOPICS, DELETE_TOPICS, ALTER_CONFIGS, CREATE_PARTITIONS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = \
    19, 20, 33, 37, 43, 44
ALTER_REASSIGNMENTS, METADATA, DESCRIBE_CONFIGS, UNREGISTER_BROKER = 45, 3, 32, 64
TOPIC, BROKER = 2, 4


def metadata(port: int, topic: str) -> Any:
    with RawClient(port) as client:
        return client.request(METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False}).topics[0]


def topic_configs(port: int, topic: str) -> dict[str, str]:
    with RawClient(port) as client:
        result = client.request(DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": TOPIC, "resource_name": topic, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}).results[0]
    return {c.name: c.value for c in result.configs}


def test_admin_writes_at_a_broker_only_node_reach_the_controller(nodes: list[BrokerProcess]) -> None:  # noqa: F811
    controller, follower = nodes[0].port, nodes[1].port
    client = RawClient(follower, timeout=30)

    created = client.request(CREATE_TOPICS, 7, {"timeout": 30_000, "topics": [
        {"name": "moved", "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}]})
    assert created.topics[0].error_code == 0, created
    wait_for(lambda: metadata(follower, "moved").error_code == 0, timeout=15, what="node 2 knowing the topic")

    grown = client.request(CREATE_PARTITIONS, 3, {"timeout_ms": 30_000, "validate_only": False, "topics": [
        {"name": "moved", "count": 3, "assignments": None}]})
    assert [(r.name, r.error_code) for r in grown.results] == [("moved", 0)]
    wait_for(lambda: len(metadata(controller, "moved").partitions) == 3, timeout=15, what="three partitions")
    shrunk = client.request(CREATE_PARTITIONS, 3, {"timeout_ms": 30_000, "validate_only": False, "topics": [
        {"name": "moved", "count": 2, "assignments": None}]})
    assert shrunk.results[0].error_code == 37  # INVALID_PARTITIONS, the controller's answer passed on

    changed = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "moved", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "123456"}]}]})
    assert changed.responses[0].error_code == 0, changed
    wait_for(lambda: topic_configs(controller, "moved").get("retention.ms") == "123456", timeout=15,
             what="the topic config at the controller")
    invalid = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "moved", "configs": [
            {"name": "retention.ms", "config_operation": 0, "value": "soon"}]}]})
    assert invalid.responses[0].error_code == 40  # INVALID_CONFIG
    replaced = client.request(ALTER_CONFIGS, 2, {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "moved", "configs": [{"name": "cleanup.policy",
                                                                         "value": "compact"}]}]})
    assert replaced.responses[0].error_code == 0, replaced
    wait_for(lambda: topic_configs(follower, "moved").get("cleanup.policy") == "compact"
             and topic_configs(follower, "moved").get("retention.ms") != "123456", timeout=15,
             what="AlterConfigs replacing every override")

    elected = client.request(ELECT_LEADERS, 2, {"election_type": 0, "timeout_ms": 30_000, "topic_partitions": [
        {"topic": "moved", "partitions": [0]}]})
    assert elected.error_code == 0
    # Its preferred replica already leads: Kafka's ELECTION_NOT_NEEDED (84), as the controller answers.
    assert [p.error_code for r in elected.replica_election_results for p in r.partition_result] == [84]

    reassigned = client.request(ALTER_REASSIGNMENTS, 0, {"timeout_ms": 30_000, "topics": [
        {"name": "moved", "partitions": [{"partition_index": 0, "replicas": [3, 1, 2]}]}]})
    assert reassigned.error_code == 0
    assert reassigned.responses[0].partitions[0].error_code == 0
    wait_for(lambda: list(metadata(controller, "moved").partitions[0].replica_nodes) == [3, 1, 2], timeout=15,
             what="the new replica order")

    deleted = client.request(DELETE_TOPICS, 6, {"timeout_ms": 30_000, "topics": [
        {"name": "moved", "topic_id": None}, {"name": "never-was", "topic_id": None}]})
    assert sorted((r.name, r.error_code) for r in deleted.responses) == [("moved", 0), ("never-was", 3)]
    wait_for(lambda: metadata(controller, "moved").error_code == 3, timeout=15, what="the topic gone")
    client.close()


def test_a_brokers_own_config_through_that_broker(nodes: list[BrokerProcess]) -> None:  # noqa: F811
    """librdkafka sends a BROKER resource to that broker: node 2 takes it and the controller commits it."""
    admin = AdminClient({"bootstrap.servers": ",".join(n.bootstrap for n in nodes)})
    resource = ConfigResource(ConfigResource.Type.BROKER, "2", incremental_configs=[
        ConfigEntry("log.retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)

    def value_at(node: int) -> str | None:
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, str(node))])
        entries = next(iter(described.values())).result(15)
        return entries["log.retention.ms"].value

    wait_for(lambda: value_at(2) == "7200000", timeout=15, what="node 2's dynamic config")
    assert value_at(3) != "7200000"  # one broker's config, not the cluster default

    fixed = ConfigResource(ConfigResource.Type.BROKER, "2", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="dynamically"):
        admin.incremental_alter_configs([fixed])[fixed].result(30)


def test_every_broker_makes_the_logs_of_a_wide_topic_beside_its_event_loop(nodes: list[BrokerProcess]  # noqa: F811
                                                                          ) -> None:
    """Node 1, its own controller, makes its logs of a new topic of many partitions before the commit; nodes 2
    and 3, brokers only, before they apply the records they fetched. Each then leads or follows every one."""
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("wide", 12, 3, config={"min.insync.replicas": "3"})])["wide"].result(30)
    wait_for(lambda: len(metadata(nodes[2].port, "wide").partitions) == 12, timeout=15, what="node 3 knowing it")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition in range(12):  # min.insync.replicas=3: acknowledged once every node has appended it
        producer.produce("wide", value=f"v{partition}".encode(), partition=partition)
    assert producer.flush(30) == 0
    for partition in range(12):
        assert [m.value() for m in confluent_consume(nodes[1].bootstrap, "wide", partition, 0, 1)] == \
            [f"v{partition}".encode()]
    for node in nodes:
        assert "made the logs of 12 new partitions beside the event loop" in node.out_path.read_text(), node


def test_update_features_at_a_broker_only_node_is_decided_by_the_controller(nodes: list[BrokerProcess]  # noqa: F811
                                                                              ) -> None:
    client = RawClient(nodes[1].port, timeout=30)
    versions = client.request(18, 4, {"client_software_name": "t", "client_software_version": "1"})
    assert {f.name: f.max_version_level for f in versions.finalized_features} == {
        "metadata.version": 21, "group.version": 1}
    assert versions.finalized_features_epoch > 0  # node 2's image: past the controller's first records
    refused = client.request(57, 1, {"timeout_ms": 30_000, "validate_only": False, "feature_updates": [
        {"feature": "no.such.feature", "max_version_level": 1, "upgrade_type": 1}]})
    assert (refused.error_code, refused.error_message) == (95, (
        "The update failed for all features since the following feature had an error: Invalid update version 1 "
        "for feature no.such.feature. Local controller 1 does not support this feature."))
    made = client.request(57, 1, {"timeout_ms": 30_000, "validate_only": False, "feature_updates": [
        {"feature": "group.version", "max_version_level": 1, "upgrade_type": 1}]})
    assert (made.error_code, [(r.feature, r.error_code) for r in made.results]) == (0, [("group.version", 0)])


def test_unregister_broker_at_a_broker_only_node_reaches_the_controller(nodes: list[BrokerProcess]  # noqa: F811
                                                                        ) -> None:
    bootstrap = f"{nodes[0].bootstrap},{nodes[1].bootstrap}"
    wait_for(lambda: brokers_seen(bootstrap) == {1, 2, 3}, timeout=30, what="three brokers")
    nodes[2].stop()  # node 3 decommissioned
    client = RawClient(nodes[1].port, timeout=30)
    answer = client.request(UNREGISTER_BROKER, 0, {"broker_id": 3})
    assert (answer.error_code, answer.error_message) == (0, None)
    wait_for(lambda: brokers_seen(bootstrap) == {1, 2}, timeout=15, what="node 3 gone from the cluster")
    again = client.request(UNREGISTER_BROKER, 0, {"broker_id": 3})
    assert (again.error_code, again.error_message) == (102, "Broker ID 3 is not currently registered")
