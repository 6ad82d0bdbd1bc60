"""Controller decisions, the image they produce, and replay equivalence (in-memory log)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from klamm.controller.controller import Controller, CreatePartitionsSpec, CreateTopicSpec, Decided
from klamm.controller.image import BROKER_RESOURCE, MetadataImage, apply, apply_batch, empty_image
from klamm.controller.metadata_log import FileMetadataLog, InMemoryMetadataLog
from klamm.controller.records import MetadataRecord, MetadataRecordError, decode_record, encode_record
from klamm.controller.topics import decide_create_topics, place_replicas
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import NewRecord, batch_of_records, build_batch, value_record


def make_controller(brokers: int = 3, log: InMemoryMetadataLog | None = None) -> Controller:
    controller = Controller(log or InMemoryMetadataLog(), node_id=1, cluster_id="test-cluster-id-abcdef")
    controller.load()
    for node in range(1, brokers + 1):
        controller.register_broker(node, f"host{node}", 9090 + node)
    return controller


def create(controller: Controller, *specs: CreateTopicSpec, validate_only: bool = False, validate_config=None):
    return controller.create_topics(list(specs), validate_only=validate_only, default_partitions=2,
                                    default_replication_factor=1, validate_config=validate_config)


def reloaded(log: InMemoryMetadataLog) -> MetadataImage:
    return Controller(log, node_id=1, cluster_id="test-cluster-id-abcdef").load()


# --- records framing --------------------------------------------------------------


def test_record_framing_matches_kafka_serde() -> None:
    topic_id = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    value = encode_record(MetadataRecord("TopicRecord", {"name": "a", "topic_id": topic_id}))
    # frame version 1, api key 2, version 0, compact string "a", uuid, no tagged fields
    assert value == b"\x01\x02\x00" + b"\x02a" + topic_id.bytes + b"\x00"
    decoded = decode_record(value)
    assert decoded.type == "TopicRecord" and decoded.version == 0
    assert decoded.data == {"name": "a", "topic_id": topic_id}


def test_record_framing_rejects_bad_values() -> None:
    good = encode_record(MetadataRecord("NoOpRecord"))
    with pytest.raises(MetadataRecordError):
        decode_record(b"\x00" + good[1:])  # frame version 0 (2.8 preview)
    with pytest.raises(MetadataRecordError):
        decode_record(b"\x01\x7f\x00\x00")  # unknown api key
    with pytest.raises(MetadataRecordError):
        decode_record(good + b"\x00")  # garbage after the record


# --- bootstrap and brokers -------------------------------------------------------------


def test_load_bootstraps_metadata_version_once() -> None:
    log = InMemoryMetadataLog()
    image = Controller(log, node_id=1, cluster_id="c").load()
    assert image.features == {"metadata.version": 21}
    assert image.offset == 0
    Controller(log, node_id=1, cluster_id="c").load()
    assert log.end_offset == 1


def test_register_broker_writes_only_on_change() -> None:
    log = InMemoryMetadataLog()
    controller = Controller(log, node_id=1, cluster_id="c")
    controller.load()
    registration = controller.register_broker(1, "localhost", 9092)
    assert (registration.node_id, registration.host, registration.port, registration.listener) == (1, "localhost", 9092, "PLAINTEXT")
    assert not registration.fenced and registration.rack is None
    end = log.end_offset
    controller.register_broker(1, "localhost", 9092)
    assert log.end_offset == end
    controller.register_broker(1, "localhost", 9093, rack="r1")
    assert log.end_offset == end + 1
    assert controller.image.brokers[1].port == 9093 and controller.image.brokers[1].rack == "r1"
    assert controller.image.live_brokers() == [1]


def test_unregister_broker() -> None:
    controller = make_controller(brokers=2)
    controller.unregister_broker(2)
    assert controller.image.live_brokers() == [1]


def test_unregister_broker_leaves_every_isr_first() -> None:
    # Kafka's ReplicationControlManager.unregisterBroker: ISR and leadership changes, then the record
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    create(controller, CreateTopicSpec("t", assignments={0: [2, 1, 3]}))
    controller.unregister_broker(2)
    partition = controller.image.topics_by_name["t"].partitions[0]
    assert (partition.leader, partition.isr) == (1, (1, 3))
    assert [decode_record(v).type for _, v in log.batches[-1]] == ["PartitionChangeRecord", "UnregisterBrokerRecord"]
    assert 2 not in controller.image.brokers
    with pytest.raises(KafkaError) as refused:
        controller.unregister_broker(2)
    assert (refused.value.code, refused.value.message) == (ErrorCode.broker_id_not_registered,
                                                           "Broker ID 2 is not currently registered")


# --- create topics --------------------------------------------------------------------


def test_create_topic_assigns_round_robin_and_writes_one_batch() -> None:
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    batches_before = len(log.batches)
    [result] = create(controller, CreateTopicSpec("orders", num_partitions=3, replication_factor=2,
                                                  configs={"retention.ms": "1000"}))
    assert result.error == ErrorCode.none
    assert (result.num_partitions, result.replication_factor, dict(result.configs)) == (3, 2, {"retention.ms": "1000"})
    assert len(log.batches) == batches_before + 1
    types = [decode_record(v).type for _, v in log.batches[-1]]
    assert types == ["TopicRecord", "ConfigRecord", "PartitionRecord", "PartitionRecord", "PartitionRecord"]

    topic = controller.image.topics_by_name["orders"]
    assert controller.image.topics_by_id[result.topic_id] is topic
    assert topic.topic_id == result.topic_id and topic.configs == {"retention.ms": "1000"}
    assert sorted(topic.partitions) == [0, 1, 2]
    leaders = set()
    for index, partition in topic.partitions.items():
        assert len(partition.replicas) == 2 and len(set(partition.replicas)) == 2
        assert partition.isr == partition.replicas
        assert partition.leader == partition.replicas[0]
        assert (partition.leader_epoch, partition.partition_epoch) == (0, 0)
        leaders.add(partition.leader)
    assert leaders == {1, 2, 3}  # round-robin spreads leadership


@given(st.lists(st.integers(0, 1000), min_size=1, max_size=8, unique=True), st.integers(0, 100),
       st.integers(0, 60), st.data())
def test_replicas_are_placed_round_robin(brokers: list[int], start: int, count: int, data: st.DataObject) -> None:
    """Partition p's replicas: the broker at (p + offset) mod n and the ones after it, wrapping round."""
    rf = data.draw(st.integers(1, len(brokers)))
    offset = data.draw(st.integers(0, 50))
    n = len(brokers)
    assert place_replicas(brokers, start, count, rf, offset) == [
        [brokers[(p + offset + i) % n] for i in range(rf)] for p in range(start, start + count)]


def test_a_decision_made_ahead_is_committed_as_made_while_the_image_is_the_same() -> None:
    """Decided (a dry run while this node made the new logs): its records, encoded ahead, are what the commit
    appends, so the topic keeps the id its partitions were made for; on another image the controller decides
    again."""
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    spec = CreateTopicSpec("ahead", num_partitions=3, replication_factor=1)

    def decided_now() -> Decided:
        results, records = decide_create_topics(controller.image, [spec], default_partitions=2,
                                                default_replication_factor=1)
        return Decided(controller.image, results, records)
    decided = decided_now()
    asyncio.run(decided.encode(0.0))
    assert decided.encoded() is not None
    [result] = controller.create_topics([spec], default_partitions=2, default_replication_factor=1, decided=decided)
    assert result is decided.results[0]
    assert [v for _, v in log.batches[-1]] == decided.values
    assert controller.image.topics_by_name["ahead"].topic_id == decided.results[0].topic_id
    replayed = reloaded(log)  # the image built ahead is the one every node builds from the log
    assert controller.image.offset == replayed.offset == log.end_offset - 1
    assert dict(controller.image.topics_by_id) == dict(replayed.topics_by_id)
    assert dict(controller.image.topics_by_name) == dict(replayed.topics_by_name)
    stale = Decided(decided.image, *decide_create_topics(decided.image, [CreateTopicSpec("later", 2, 1)],
                                                         default_partitions=2, default_replication_factor=1))
    [again] = controller.create_topics([CreateTopicSpec("later", 2, 1)], default_partitions=2,
                                       default_replication_factor=1, decided=stale)  # the image moved on
    assert again.error == ErrorCode.none and again.topic_id != stale.results[0].topic_id
    assert reloaded(log).topics_by_name["later"].topic_id == again.topic_id


def test_create_topic_defaults() -> None:
    controller = make_controller()
    [result] = create(controller, CreateTopicSpec("t"))
    assert (result.num_partitions, result.replication_factor) == (2, 1)


def test_create_topics_validate_only_writes_nothing() -> None:
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    end = log.end_offset
    [result] = create(controller, CreateTopicSpec("t", 4, 3), validate_only=True)
    assert result.error == ErrorCode.none and result.num_partitions == 4 and result.replication_factor == 3
    assert log.end_offset == end and "t" not in controller.image.topics_by_name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is illegal, it can't be empty"),
        (".", 'Topic name cannot be "." or ".."'),
        ("..", 'Topic name cannot be "." or ".."'),
        ("a" * 250, "Topic name is illegal, it can't be longer than 249 characters"),
        ("bad name", "contains a character other than ASCII alphanumerics"),
        ("ü", "contains a character other than ASCII alphanumerics"),
    ],
)
def test_illegal_topic_names(name: str, message: str) -> None:
    [result] = create(make_controller(), CreateTopicSpec(name))
    assert result.error == ErrorCode.invalid_topic_exception
    assert message in result.message


def test_name_of_249_chars_is_legal() -> None:
    [result] = create(make_controller(), CreateTopicSpec("a" * 249))
    assert result.error == ErrorCode.none


def test_topic_already_exists() -> None:
    controller = make_controller()
    create(controller, CreateTopicSpec("t.1"))
    [result] = create(controller, CreateTopicSpec("t.1"))
    assert result.error == ErrorCode.topic_already_exists
    assert result.message == "Topic 't.1' already exists."


def test_collision_with_existing_topic() -> None:
    controller = make_controller()
    create(controller, CreateTopicSpec("metrics.cpu"))
    [result] = create(controller, CreateTopicSpec("metrics_cpu"))
    assert result.error == ErrorCode.invalid_topic_exception
    assert result.message == "Topic 'metrics_cpu' collides with existing topic: metrics.cpu"


def test_collision_within_one_request_and_duplicates() -> None:
    controller = make_controller()
    first, second, third = create(controller, CreateTopicSpec("a.b"), CreateTopicSpec("a_b"), CreateTopicSpec("a.b"))
    assert first.error == ErrorCode.none
    assert second.error == ErrorCode.invalid_topic_exception
    assert third.error == ErrorCode.topic_already_exists
    assert list(controller.image.topics_by_name) == ["a.b"]


def test_metadata_topic_cannot_be_created() -> None:
    [result] = create(make_controller(), CreateTopicSpec("__cluster_metadata"))
    assert result.error == ErrorCode.invalid_request


@pytest.mark.parametrize("partitions", [0, -2])
def test_invalid_partitions(partitions: int) -> None:
    [result] = create(make_controller(), CreateTopicSpec("t", num_partitions=partitions))
    assert result.error == ErrorCode.invalid_partitions
    assert result.message == "Number of partitions was set to an invalid non-positive value."


@pytest.mark.parametrize("factor", [0, -2])
def test_invalid_replication_factor_value(factor: int) -> None:
    [result] = create(make_controller(), CreateTopicSpec("t", replication_factor=factor))
    assert result.error == ErrorCode.invalid_replication_factor


def test_replication_factor_above_live_brokers() -> None:
    [result] = create(make_controller(brokers=2), CreateTopicSpec("t", 1, 3))
    assert result.error == ErrorCode.invalid_replication_factor
    assert "only 2 broker(s) are registered" in result.message


def test_no_live_brokers() -> None:
    [result] = create(make_controller(brokers=0), CreateTopicSpec("t", 1, 1))
    assert result.error == ErrorCode.invalid_replication_factor


def test_config_validation() -> None:
    def validate(configs: dict[str, str]) -> None:
        if "bogus" in configs:
            raise KafkaError(ErrorCode.invalid_config, "Unknown topic config name: bogus")

    controller = make_controller()
    bad, good = create(controller, CreateTopicSpec("bad", configs={"bogus": "1"}),
                       CreateTopicSpec("good", configs={"cleanup.policy": "compact"}), validate_config=validate)
    assert bad.error == ErrorCode.invalid_config and bad.message == "Unknown topic config name: bogus"
    assert good.error == ErrorCode.none
    assert controller.image.topics_by_name["good"].configs == {"cleanup.policy": "compact"}
    [null] = create(controller, CreateTopicSpec("null", configs={"x": None}))
    assert null.error == ErrorCode.invalid_config


def test_manual_assignment() -> None:
    controller = make_controller()
    [result] = create(controller, CreateTopicSpec("m", assignments={0: [3, 1], 1: [2, 3]}))
    assert result.error == ErrorCode.none and result.replication_factor == 2
    partitions = controller.image.topics_by_name["m"].partitions
    assert partitions[0].replicas == (3, 1) and partitions[0].leader == 3
    assert partitions[1].replicas == (2, 3) and partitions[1].leader == 2


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        (CreateTopicSpec("m", num_partitions=2, assignments={0: [1]}), ErrorCode.invalid_request),
        (CreateTopicSpec("m", replication_factor=1, assignments={0: [1]}), ErrorCode.invalid_request),
        (CreateTopicSpec("m", assignments={0: [1], 2: [2]}), ErrorCode.invalid_replica_assignment),
        (CreateTopicSpec("m", assignments={0: [1, 1]}), ErrorCode.invalid_replica_assignment),
        (CreateTopicSpec("m", assignments={0: [9]}), ErrorCode.invalid_replica_assignment),
        (CreateTopicSpec("m", assignments={0: []}), ErrorCode.invalid_replica_assignment),
        (CreateTopicSpec("m", assignments={0: [1], 1: [1, 2]}), ErrorCode.invalid_replica_assignment),
    ],
)
def test_manual_assignment_errors(spec: CreateTopicSpec, error: ErrorCode) -> None:
    controller = make_controller()
    [result] = create(controller, spec)
    assert result.error == error
    assert "m" not in controller.image.topics_by_name


def test_failed_topics_do_not_block_others_in_the_batch() -> None:
    controller = make_controller()
    results = create(controller, CreateTopicSpec("ok1"), CreateTopicSpec("bad", 0), CreateTopicSpec("ok2"))
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.invalid_partitions, ErrorCode.none]
    assert set(controller.image.topics_by_name) == {"ok1", "ok2"}


# --- delete topics --------------------------------------------------------------------


def test_delete_topics_by_name_and_id() -> None:
    controller = make_controller()
    a, b = create(controller, CreateTopicSpec("a"), CreateTopicSpec("b", configs={"x": "1"}))
    missing_id = uuid.uuid4()
    results = controller.delete_topics(["a", b.topic_id, "nope", missing_id, "a"])
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.none, ErrorCode.unknown_topic_or_partition,
                                          ErrorCode.unknown_topic_id, ErrorCode.none]
    assert results[0].topic_id == a.topic_id and results[1].name == "b"
    assert controller.image.topics_by_name == {} and controller.image.topics_by_id == {}
    # Re-creating a deleted name gets a new id and no stale configs.
    [again] = create(controller, CreateTopicSpec("b"))
    assert again.topic_id != b.topic_id
    assert controller.image.topics_by_name["b"].configs == {}


def test_delete_frees_collision_name() -> None:
    controller = make_controller()
    create(controller, CreateTopicSpec("x.y"))
    controller.delete_topics(["x.y"])
    [result] = create(controller, CreateTopicSpec("x_y"))
    assert result.error == ErrorCode.none


# --- create partitions ------------------------------------------------------------------


def test_create_partitions() -> None:
    controller = make_controller()
    create(controller, CreateTopicSpec("t", 2, 2))
    [result] = controller.create_partitions([CreatePartitionsSpec("t", 5)])
    assert result.error == ErrorCode.none
    partitions = controller.image.topics_by_name["t"].partitions
    assert sorted(partitions) == [0, 1, 2, 3, 4]
    assert all(len(p.replicas) == 2 for p in partitions.values())


def test_create_partitions_manual_and_validate_only() -> None:
    controller = make_controller()
    create(controller, CreateTopicSpec("t", 1, 2))
    [result] = controller.create_partitions([CreatePartitionsSpec("t", 3, [[2, 3], [3, 1]])], validate_only=True)
    assert result.error == ErrorCode.none
    assert len(controller.image.topics_by_name["t"].partitions) == 1
    controller.create_partitions([CreatePartitionsSpec("t", 3, [[2, 3], [3, 1]])])
    partitions = controller.image.topics_by_name["t"].partitions
    assert partitions[1].replicas == (2, 3) and partitions[2].replicas == (3, 1)


@pytest.mark.parametrize(
    ("spec", "error", "message"),
    [
        (CreatePartitionsSpec("nope", 3), ErrorCode.unknown_topic_or_partition, None),
        (CreatePartitionsSpec("t", 2), ErrorCode.invalid_partitions, "Topic already has 2 partition(s)."),
        (CreatePartitionsSpec("t", 1), ErrorCode.invalid_partitions,
         "The topic t currently has 2 partition(s); 1 would not be an increase."),
        (CreatePartitionsSpec("t", 4, [[1, 2]]), ErrorCode.invalid_replica_assignment,
         "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        (CreatePartitionsSpec("t", 3, [[1]]), ErrorCode.invalid_replica_assignment, None),
        (CreatePartitionsSpec("t", 3, [[1, 9]]), ErrorCode.invalid_replica_assignment, None),
        (CreatePartitionsSpec("t", 3, [[1, 1]]), ErrorCode.invalid_replica_assignment, None),
    ],
)
def test_create_partitions_errors(spec: CreatePartitionsSpec, error: ErrorCode, message: str | None) -> None:
    controller = make_controller()
    create(controller, CreateTopicSpec("t", 2, 2))
    [result] = controller.create_partitions([spec])
    assert result.error == error
    if message is not None:
        assert result.message == message
    assert len(controller.image.topics_by_name["t"].partitions) == 2


def test_create_partitions_replication_factor_exceeds_live_brokers() -> None:
    controller = make_controller(brokers=2)
    create(controller, CreateTopicSpec("t", 1, 2))
    controller.unregister_broker(2)
    [result] = controller.create_partitions([CreatePartitionsSpec("t", 2)])
    assert result.error == ErrorCode.invalid_replication_factor


# --- configs ---------------------------------------------------------------------------


def test_alter_topic_configs_incremental_and_replace() -> None:
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    create(controller, CreateTopicSpec("t", configs={"a": "1", "b": "2"}))
    assert controller.alter_topic_configs("t", {"c": "3"}, ["a"]) == {"b": "2", "c": "3"}
    assert controller.image.topics_by_name["t"].configs == {"b": "2", "c": "3"}
    end = log.end_offset
    controller.alter_topic_configs("t", {"c": "3"})  # no change, no record
    assert log.end_offset == end
    controller.alter_topic_configs("t", {"d": "4"}, replace=True)
    assert controller.image.topics_by_name["t"].configs == {"d": "4"}
    assert controller.alter_topic_configs("t", {"e": "5"}, validate_only=True) == {"d": "4", "e": "5"}
    assert controller.image.topics_by_name["t"].configs == {"d": "4"}


def test_alter_topic_configs_errors() -> None:
    controller = make_controller()
    with pytest.raises(KafkaError) as err:
        controller.alter_topic_configs("nope", {"a": "1"})
    assert err.value.code == ErrorCode.unknown_topic_or_partition
    create(controller, CreateTopicSpec("t"))

    def reject(configs: dict[str, str]) -> None:
        raise KafkaError(ErrorCode.invalid_config, "no")

    with pytest.raises(KafkaError) as err:
        controller.alter_topic_configs("t", {"a": "1"}, validate_config=reject)
    assert err.value.code == ErrorCode.invalid_config
    assert controller.image.topics_by_name["t"].configs == {}


def test_broker_configs() -> None:
    controller = make_controller()
    controller.alter_broker_configs(None, {"log.retention.ms": "5"})
    controller.alter_broker_configs(2, {"x": "y"})
    assert controller.image.broker_configs(None) == {"log.retention.ms": "5"}
    assert controller.image.broker_configs(2) == {"x": "y"}
    assert controller.image.configs[(BROKER_RESOURCE, "2")] == {"x": "y"}
    controller.alter_broker_configs(2, {}, ["x"])
    assert controller.image.broker_configs(2) == {}


# --- producer ids -----------------------------------------------------------------------


def test_producer_ids_are_unique_across_restarts() -> None:
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    block = controller.allocate_producer_ids(1, 10)
    assert block == range(0, 10)
    first = controller.allocate_producer_id()
    second = controller.allocate_producer_id()
    assert first == 10 and second == 11
    restarted = Controller(log, node_id=1, cluster_id="test-cluster-id-abcdef")
    restarted.load()
    assert restarted.allocate_producer_id() >= 10 + 1000


# --- listeners and images ------------------------------------------------------------------


def test_on_change_listeners_see_old_and_new_images() -> None:
    controller = make_controller()
    seen: list[tuple[MetadataImage, MetadataImage]] = []
    unsubscribe = controller.on_change(lambda old, new: seen.append((old, new)))
    controller.on_change(lambda old, new: 1 / 0)  # a failing listener does not stop the others
    before = controller.image
    create(controller, CreateTopicSpec("t"))
    assert len(seen) == 1
    old, new = seen[0]
    assert old is before and new is controller.image
    assert "t" not in old.topics_by_name and "t" in new.topics_by_name
    unsubscribe()
    controller.delete_topics(["t"])
    assert len(seen) == 1


def test_images_are_immutable() -> None:
    controller = make_controller()
    create(controller, CreateTopicSpec("t"))
    image = controller.image
    with pytest.raises(TypeError):
        image.topics_by_name["x"] = image.topics_by_name["t"]  # type: ignore[index]
    with pytest.raises(TypeError):
        image.topics_by_name["t"].partitions[5] = image.topics_by_name["t"].partitions[0]  # type: ignore[index]
    with pytest.raises(AttributeError):
        image.offset = 5  # type: ignore[misc]


def test_offset_tracks_last_applied_record() -> None:
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    create(controller, CreateTopicSpec("t", 3))
    assert controller.image.offset == log.end_offset - 1


def test_partition_change_record_replay() -> None:
    topic_id = uuid.uuid4()
    image = apply_batch(empty_image("c", 1), [
        (0, MetadataRecord("TopicRecord", {"name": "t", "topic_id": topic_id})),
        (1, decode_record(encode_record(MetadataRecord("PartitionRecord", {
            "partition_id": 0, "topic_id": topic_id, "replicas": [1, 2], "isr": [1, 2], "leader": 1,
            "leader_epoch": 0, "partition_epoch": 0})))),
    ])
    change = decode_record(encode_record(MetadataRecord("PartitionChangeRecord", {
        "partition_id": 0, "topic_id": topic_id, "isr": [2], "leader": 2})))
    image = apply(image, change, 2)
    partition = image.topics_by_name["t"].partitions[0]
    assert (partition.leader, partition.isr, partition.leader_epoch, partition.partition_epoch) == (2, (2,), 1, 1)
    isr_only = decode_record(encode_record(MetadataRecord("PartitionChangeRecord", {
        "partition_id": 0, "topic_id": topic_id, "isr": [1, 2]})))
    partition = apply(image, isr_only, 3).topics_by_name["t"].partitions[0]
    assert (partition.leader, partition.isr, partition.leader_epoch, partition.partition_epoch) == (2, (1, 2), 1, 2)


# --- replay equivalence --------------------------------------------------------------------


def test_replay_yields_an_equal_image() -> None:
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    create(controller, CreateTopicSpec("a", 3, 2, configs={"retention.ms": "10"}), CreateTopicSpec("b.c", 1, 3))
    create(controller, CreateTopicSpec("d", assignments={0: [2], 1: [3]}))
    controller.delete_topics(["a"])
    controller.create_partitions([CreatePartitionsSpec("b.c", 4)])
    controller.alter_topic_configs("d", {"cleanup.policy": "compact"})
    controller.alter_broker_configs(None, {"num.partitions": "3"})
    controller.register_broker(3, "elsewhere", 1234, rack="r")
    controller.allocate_producer_ids(2)
    assert reloaded(log) == controller.image


def test_replay_equivalence_over_random_operations() -> None:
    import random

    rng = random.Random(7)
    log = InMemoryMetadataLog()
    controller = make_controller(log=log)
    names = [f"t{i}" for i in range(8)] + ["x.y", "x_y"]
    for _ in range(200):
        op = rng.randrange(4)
        name = rng.choice(names)
        if op == 0:
            create(controller, CreateTopicSpec(name, rng.randint(-1, 4), rng.randint(-1, 4)))
        elif op == 1:
            controller.delete_topics([name])
        elif op == 2:
            controller.create_partitions([CreatePartitionsSpec(name, rng.randint(1, 8))])
        else:
            try:
                controller.alter_topic_configs(name, {"k": str(rng.randint(0, 3))}, rng.choice([[], ["k"]]))
            except KafkaError:
                pass
    assert reloaded(log) == controller.image


def test_validator_value_error_becomes_invalid_config() -> None:
    def validate(configs: dict[str, str]) -> None:
        if configs:
            raise ValueError("Unknown topic config name: nope")

    controller = make_controller()
    [result] = create(controller, CreateTopicSpec("t", configs={"nope": "1"}), validate_config=validate)
    assert (result.error, result.message) == (ErrorCode.invalid_config, "Unknown topic config name: nope")
    create(controller, CreateTopicSpec("t"))
    with pytest.raises(KafkaError) as err:
        controller.alter_topic_configs("t", {"nope": "1"}, validate_config=validate)
    assert err.value.code == ErrorCode.invalid_config


def test_unclean_election_default_static_then_cluster_wide_then_topic() -> None:
    """A leaderless partition's out-of-sync replica leads only where unclean.leader.election.enable allows it:
    the topic's config, else the cluster-wide dynamic value, else the controller's static config (KRaft's order)."""

    def leader_after_losing_the_isr(static: bool, cluster_wide: str | None, topic: str | None) -> int:
        controller = Controller(InMemoryMetadataLog(), node_id=1, cluster_id="c", unclean_leader_election=static)
        controller.load()
        for node in (1, 2):
            controller.register_broker(node, f"host{node}", 9090 + node)
        if cluster_wide is not None:
            controller.alter_broker_configs(None, {"unclean.leader.election.enable": cluster_wide})
        configs = {} if topic is None else {"unclean.leader.election.enable": topic}
        [result] = create(controller, CreateTopicSpec("t", num_partitions=-1, replication_factor=-1, configs=configs,
                                                      assignments={0: [1, 2]}))
        assert result.error == ErrorCode.none
        controller.fence_broker(2)  # out of the ISR: only broker 1 is in sync
        controller.unfence_broker(2)
        controller.fence_broker(1)  # the last ISR member goes
        return controller.image.topics_by_name["t"].partitions[0].leader

    assert leader_after_losing_the_isr(False, None, None) == -1  # Kafka's default: no unclean election
    assert leader_after_losing_the_isr(True, None, None) == 2
    assert leader_after_losing_the_isr(True, "false", None) == -1
    assert leader_after_losing_the_isr(False, "true", None) == 2
    assert leader_after_losing_the_isr(True, None, "false") == -1
    assert leader_after_losing_the_isr(False, "false", "true") == 2


def test_enabling_unclean_election_later_elects_the_leaderless_partition() -> None:
    controller = Controller(InMemoryMetadataLog(), node_id=1, cluster_id="c")
    controller.load()
    for node in (1, 2):
        controller.register_broker(node, f"host{node}", 9090 + node)
    create(controller, CreateTopicSpec("t", num_partitions=-1, replication_factor=-1, assignments={0: [1, 2]}))
    controller.fence_broker(2)
    controller.unfence_broker(2)
    controller.fence_broker(1)
    controller.elect_leaderless()
    assert controller.image.topics_by_name["t"].partitions[0].leader == -1  # not allowed: it waits for broker 1

    controller.alter_broker_configs(1, {"unclean.leader.election.enable": "true"})  # this controller's node config
    controller.elect_leaderless()  # the controller's periodic check (leader.imbalance.check.interval.seconds)
    partition = controller.image.topics_by_name["t"].partitions[0]
    assert (partition.leader, list(partition.isr)) == (2, [2])


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=40), st.integers(0, 2**41))
def test_a_batch_of_records_encoded_ahead_is_build_batch_s(values: list[bytes], timestamp: int) -> None:
    """What a metadata commit appends from records encoded ahead (Decided.encode) is the very batch
    build_batch makes of the values."""
    body = b"".join(value_record(delta, value) for delta, value in enumerate(values))
    assert batch_of_records(body, len(values), timestamp_ms=timestamp) == build_batch(
        [NewRecord(None, value) for value in values], timestamp_ms=timestamp)


def test_a_decision_made_ahead_appends_the_batch_it_encoded(tmp_path) -> None:
    """A single voter's commit flushed later (FlushedCommits) appends the batch Decided.encode made; every node
    replays the records of it."""
    log = FileMetadataLog.open(tmp_path)
    controller = Controller(log, node_id=1, cluster_id="test-cluster-id-abcdef")
    controller.load()
    controller.register_broker(1, "host1", 9091)
    spec = CreateTopicSpec("ahead", num_partitions=40, replication_factor=1)
    results, records = decide_create_topics(controller.image, [spec], default_partitions=2,
                                            default_replication_factor=1)
    decided = Decided(controller.image, results, records)
    asyncio.run(decided.encode(0.0))
    with controller.commits_flushed_later():
        controller.create_topics([spec], default_partitions=2, default_replication_factor=1, decided=decided)
    assert [value for _, value in log.replay(log.end_offset - len(records))] == decided.values
    log.log.flush()
    log.close()
    replayed = Controller(FileMetadataLog.open(tmp_path), node_id=1, cluster_id="test-cluster-id-abcdef").load()
    assert replayed.topics_by_name["ahead"] == controller._image.topics_by_name["ahead"]
