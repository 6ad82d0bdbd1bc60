"""FindCoordinator while a cluster creates the coordinator's topic: the answer waits for the topic.

In a cluster the first FindCoordinator asks the controller to create
__consumer_offsets (or __transaction_state) and the coordinator is unavailable
until the topic reaches this broker's metadata. Answering COORDINATOR_NOT_AVAILABLE
at once, as Kafka does, strands librdkafka's admin client: it asks twice more,
then waits for a broker connection to change state, and with every connection
up its AlterConsumerGroupOffsets times out (seen in CI, where creating the topic
took longer than librdkafka's retries). So the answer waits, up to
CREATION_WAIT_S. Here the node's requests to the controller are slowed down, so
that the creation takes longer than those retries.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from klamm.broker.handlers import groups
from klamm.protocol.errors import ErrorCode
from tests.integration.conftest import BrokerThread, create_topic, free_port, wait_for
from tests.integration.test_coordinator_failures import commit

FIND_COORDINATOR = 10
CREATION_DELAY_S = 2.0


def slow_creation(*nodes: BrokerThread) -> None:
    """The nodes' CreateTopics requests to the controller take CREATION_DELAY_S longer."""
    for node in nodes:
        node.call(lambda node=node: _slow(node))


def _slow(node: BrokerThread) -> None:
    assert node.broker is not None
    client = node.broker.controller_client
    create = client.create_topics

    async def slower(specs, *, validate_only):  # type: ignore[no-untyped-def]
        await asyncio.sleep(CREATION_DELAY_S)
        return await create(specs, validate_only=validate_only)

    client.create_topics = slower  # type: ignore[method-assign]


def find(node: BrokerThread, key_type: int, key: str) -> tuple[int, int]:
    with node.connect() as client:
        found = client.request(FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]}).coordinators[0]
    return found.error_code, found.node_id


def started(formatted_cluster: Callable[..., list[BrokerThread]]) -> list[BrokerThread]:
    """A dedicated controller and two brokers, which both create topics through it; the brokers, once both
    are registered at each."""
    controller_port = free_port()
    common = {"controller.quorum.voters": f"1@127.0.0.1:{controller_port}", "controller.listener.names": "CONTROLLER",
              "broker.heartbeat.interval.ms": "300", "broker.session.timeout.ms": "3000",
              "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1"}
    controller = {**common, "node.id": "1", "process.roles": "controller",
                  "listeners": f"CONTROLLER://127.0.0.1:{controller_port}",
                  "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"}
    brokers = formatted_cluster({1: controller, 2: {**common, "node.id": "2", "process.roles": "broker"},
                                 3: {**common, "node.id": "3", "process.roles": "broker"}})[1:]
    for node in brokers:
        wait_for(lambda node=node: node.call(lambda: len(node.broker.broker_endpoints())) == 2,  # type: ignore[union-attr]
                 timeout=15)
    return brokers


@pytest.mark.parametrize("key_type", [0, 1], ids=["group", "transaction"])
def test_find_coordinator_answers_once_the_topic_it_creates_is_there(
        formatted_cluster: Callable[..., list[BrokerThread]], key_type: int) -> None:
    node, other = started(formatted_cluster)
    slow_creation(node, other)
    error, node_id = find(node, key_type, "k")
    assert (error, node_id in (1, 2)) == (ErrorCode.none, True)


def test_the_wait_is_bounded(formatted_cluster: Callable[..., list[BrokerThread]],
                             monkeypatch: pytest.MonkeyPatch) -> None:
    node, other = started(formatted_cluster)
    slow_creation(node, other)
    monkeypatch.setattr(groups, "CREATION_WAIT_S", 0.2)
    assert find(node, 0, "k") == (ErrorCode.coordinator_not_available, -1)
    wait_for(lambda: find(node, 0, "k")[0] == ErrorCode.none, timeout=15)


def test_a_commit_reaching_the_coordinator_before_its_topic_does_waits_for_it(
        formatted_cluster: Callable[..., list[BrokerThread]]) -> None:
    """A commit sent to each broker while __consumer_offsets is created (FindCoordinator at one of them asked
    for it): each waits until its broker has the topic and has loaded what it leads of it; then the leader's
    broker takes its commit and the other refuses it as not the coordinator. Before, both were refused."""
    brokers = started(formatted_cluster)
    with brokers[0].connect() as client:
        create_topic(client, "t")
    slow_creation(*brokers)

    def commit_at(node: BrokerThread) -> int:
        with node.connect() as client:
            return commit(client, "g", "t", 3)

    with ThreadPoolExecutor(3) as pool:
        finding = pool.submit(find, brokers[0], 0, "g")
        commits = [pool.submit(commit_at, node) for node in brokers]
        assert finding.result()[0] == ErrorCode.none
        assert sorted(c.result() for c in commits) == [ErrorCode.none, ErrorCode.not_coordinator]


def test_a_commit_arriving_while_its_partition_waits_to_be_loaded_waits_for_the_load(
        formatted_cluster: Callable[..., list[BrokerThread]]) -> None:
    """A broker that has just come to lead the group's partition loads it in a task of its own: a commit
    arriving before that ran waits for it, where it heard COORDINATOR_LOAD_IN_PROGRESS (which librdkafka's
    AlterConsumerGroupOffsets hands to its caller: seen in CI). The load is held back here for a while."""
    brokers = started(formatted_cluster)
    with brokers[0].connect() as client:
        create_topic(client, "t")
    error, node_id = find(brokers[0], 0, "g")
    assert error == ErrorCode.none
    [node] = [b for b in brokers if b.broker.node_id == node_id]  # type: ignore[union-attr]

    def lead_again() -> None:
        """As if the leadership of the group's partition had just come here: unloaded, its load begun."""
        runtime = node.broker.group_coordinator  # type: ignore[union-attr]
        loads, coordinator = runtime._loads, runtime.coordinator
        load_soon = loads._load_soon

        async def held_back(index: int) -> None:
            await asyncio.sleep(0.5)
            await load_soon(index)

        loads._load_soon = held_back
        coordinator.unload(coordinator.partition_for("g"))
        loads.follow(node.broker.controller.image, coordinator.owned)  # type: ignore[union-attr]
        assert loads.pending()

    node.call(lead_again)
    with node.connect() as client:
        assert commit(client, "g", "t", 3) == ErrorCode.none


def test_librdkafka_commits_offsets_while_the_cluster_creates_consumer_offsets(
        formatted_cluster: Callable[..., list[BrokerThread]]) -> None:
    brokers = started(formatted_cluster)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    with brokers[0].connect() as client:
        create_topic(client, topic, partitions=2)
    slow_creation(*brokers)
    assert commit_offsets(brokers, "g", topic, {0: 7, 1: 7}) == [(0, 7, None), (1, 7, None)]


def commit_offsets(brokers: list[BrokerThread], group: str, topic: str, offsets: dict[int, int]) -> Any:
    """librdkafka's AlterConsumerGroupOffsets: each partition's (index, offset, error), or the request's error.
    The admin client is gone on return, before the cluster stops (librdkafka aborts destroying a handle whose
    coordinator request waits for a broker that is stopping)."""
    admin = AdminClient({"bootstrap.servers": ",".join(f"127.0.0.1:{node.port}" for node in brokers)})
    # a connection to each broker, up before the commit: no connection changing state later makes librdkafka
    # look for the coordinator again (the case this guards)
    for node in brokers:
        resource = ConfigResource("broker", str(node.broker.node_id))  # type: ignore[union-attr]
        admin.describe_configs([resource])[resource].result(10)
    partitions = [TopicPartition(topic, index, offset) for index, offset in offsets.items()]
    [future] = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, partitions)],
                                                  request_timeout=12).values()
    try:
        return sorted((tp.partition, tp.offset, tp.error) for tp in future.result(20).topic_partitions)
    except KafkaException as exc:
        return str(exc)
