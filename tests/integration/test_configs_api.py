"""Config and log-management APIs through the raw client against an in-process broker.

DescribeConfigs / AlterConfigs / IncrementalAlterConfigs answers (sources,
synonyms, errors), config changes taking effect on the running partitions
(max.message.bytes, retention), DeleteRecords, DescribeLogDirs,
OffsetForLeaderEpoch and DescribeProducers.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from klamm.protocol.records import build_batch
from tests.integration.conftest import CREATE_TOPICS, LIST_OFFSETS, create_topic, fetch, produce, wait_for

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS = 21, 23, 35, 61
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3


def describe(client: Any, resource_type: int, name: str, keys: list[str] | None = None, synonyms: bool = True,
             documentation: bool = False, version: int = 4) -> Any:
    response = client.request(DESCRIBE_CONFIGS, version, {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": synonyms, "include_documentation": documentation})
    [result] = response.results
    return result


def entries(result: Any) -> dict[str, Any]:
    assert result.error_code == 0, (result.error_code, result.error_message)
    return {c.name: c for c in result.configs}


def incremental(client: Any, resource_type: int, name: str, ops: list[tuple[str, int, str | None]],
                validate_only: bool = False) -> Any:
    response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configs": [{"name": n, "config_operation": op, "value": v} for n, op, v in ops]}],
        "validate_only": validate_only})
    [result] = response.responses
    return result


def alter(client: Any, resource_type: int, name: str, configs: dict[str, str], validate_only: bool = False) -> Any:
    response = client.request(ALTER_CONFIGS, 2, {
        "resources": [{"resource_type": resource_type, "resource_name": name,
                       "configs": [{"name": k, "value": v} for k, v in configs.items()]}],
        "validate_only": validate_only})
    [result] = response.responses
    return result


def earliest(client: Any, topic: str) -> int:
    response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}]}]})
    return response.topics[0].partitions[0].offset


def produce_batches(client: Any, topic: str, count: int, records: int = 2, timestamp: int | None = None) -> None:
    for _ in range(count):
        response = produce(client, topic, build_batch([(None, b"v" * 100)] * records, timestamp_ms=timestamp))
        assert response.error_code == 0


# -- DescribeConfigs ------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_describe_topic_shows_overrides_defaults_and_synonyms(client):
    create_topic(client, "described", configs={"retention.ms": "3600000", "cleanup.policy": "compact,delete"})
    configs = entries(describe(client, TOPIC, "described", documentation=True))
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source, retention.read_only, retention.is_sensitive) == \
        ("3600000", TOPIC_CONFIG, False, False)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [("retention.ms", "3600000", TOPIC_CONFIG)]
    assert retention.config_type == 5 and retention.documentation  # LONG
    assert configs["cleanup.policy"].value == "compact,delete" and configs["cleanup.policy"].config_type == 7
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source) == ("1073741824", DEFAULT_CONFIG)
    assert [(s.name, s.value, s.source) for s in segment.synonyms] == [("log.segment.bytes", "1073741824", DEFAULT_CONFIG)]
    assert "internal.segment.bytes" not in configs
    # Kafka drops the fallbacks before log.retention.ms itself: nothing set means no synonyms
    assert configs["segment.ms"].synonyms == () and configs["segment.ms"].config_source == DEFAULT_CONFIG


def test_each_created_topic_is_answered_with_its_own_configs(client):
    """CreateTopics describes each set of overrides once per request; every topic still gets its own."""
    overrides = {"a": {"retention.ms": "1000"}, "b": {"retention.ms": "1000"}, "c": {"retention.ms": "2000"}, "d": {}}
    response = client.request(CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1,
         "configs": [{"name": k, "value": v} for k, v in configs.items()]} for name, configs in overrides.items()],
        "timeout": 10_000})
    retention = {t.name: next((c.value, c.config_source) for c in t.configs if c.name == "retention.ms")
                 for t in response.topics}
    assert retention == {"a": ("1000", TOPIC_CONFIG), "b": ("1000", TOPIC_CONFIG), "c": ("2000", TOPIC_CONFIG),
                         "d": ("604800000", DEFAULT_CONFIG)}


@pytest.mark.timeout(60)
def test_describe_filters_keys_and_omits_synonyms_and_docs_unless_asked(client):
    create_topic(client, "filtered")
    result = describe(client, TOPIC, "filtered", keys=["retention.ms", "no.such.config"], synonyms=False)
    [only] = result.configs
    assert only.name == "retention.ms" and only.synonyms == () and only.documentation is None
    assert describe(client, TOPIC, "filtered", version=1).configs  # v1 still served


def test_describe_lists_configs_in_kafkas_order(client, broker):
    """Kafka lists them as its ConfigHelper's Scala HashMap holds them (configs.in_kafka_order), whatever order
    the request names them in: kafkajs's createTopics test reads default.replication.factor as the first entry
    of these two."""
    node = str(broker.broker.node_id)
    for keys in (["num.partitions", "default.replication.factor"], ["default.replication.factor", "num.partitions"]):
        names = [c.name for c in describe(client, BROKER, node, keys=keys).configs]
        assert names == ["default.replication.factor", "num.partitions"]
    create_topic(client, "ordered")
    names = [c.name for c in describe(client, TOPIC, "ordered").configs]
    assert names.index("compression.type") < names.index("cleanup.policy") < names.index("retention.ms")


@pytest.mark.timeout(60)
def test_describe_unknown_topic_and_foreign_broker(client, broker):
    result = describe(client, TOPIC, "no-such-topic")
    assert result.error_code == 3 and result.configs == ()
    result = describe(client, BROKER, "42")
    assert result.error_code == 42
    assert result.error_message == f"Unexpected broker id, expected {broker.broker.node_id} or empty string, but received 42"
    result = describe(client, BROKER, "abc")
    assert (result.error_code, result.error_message) == (42, "Broker id must be an integer, but it is: abc")


@pytest.mark.timeout(60)
def test_describe_broker_static_and_default_sources(broker_factory):
    broker = broker_factory(**{"log.retention.ms": "86400000", "offset.metadata.max.bytes": "1000"})
    with broker.connect() as client:
        configs = entries(describe(client, BROKER, str(broker.broker.node_id)))
        meta = configs["offset.metadata.max.bytes"]
        assert (meta.value, meta.config_source, meta.read_only) == ("1000", STATIC_BROKER_CONFIG, True)
        assert [(s.name, s.value, s.source) for s in meta.synonyms] == [
            ("offset.metadata.max.bytes", "1000", STATIC_BROKER_CONFIG),
            ("offset.metadata.max.bytes", "4096", DEFAULT_CONFIG)]
        retention = configs["log.retention.ms"]
        assert (retention.value, retention.config_source, retention.read_only) == ("86400000", STATIC_BROKER_CONFIG, False)
        assert [(s.name, s.source) for s in retention.synonyms] == [
            ("log.retention.ms", STATIC_BROKER_CONFIG), ("log.retention.hours", DEFAULT_CONFIG)]
        create_topic(client, "inherits")
        topic = entries(describe(client, TOPIC, "inherits"))["retention.ms"]
        assert (topic.value, topic.config_source) == ("86400000", STATIC_BROKER_CONFIG)


# -- altering topic configs --------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_incremental_set_delete_append_subtract(client, broker):
    create_topic(client, "incr", configs={"retention.ms": "1000"})
    result = incremental(client, TOPIC, "incr", [("cleanup.policy", APPEND, "compact"), ("retention.ms", DELETE, None),
                                                 ("max.message.bytes", SET, "5000")])
    assert result.error_code == 0, result.error_message
    configs = entries(describe(client, TOPIC, "incr"))
    assert configs["cleanup.policy"].value == "delete,compact"  # appended to the default
    assert configs["retention.ms"].config_source == DEFAULT_CONFIG and configs["retention.ms"].value == "604800000"
    partition = broker.call(lambda: broker.broker.replicas.get("incr", 0))
    assert partition.config.max_message_bytes == 5000 and partition.config.compact
    assert incremental(client, TOPIC, "incr", [("cleanup.policy", SUBTRACT, "delete")]).error_code == 0
    assert entries(describe(client, TOPIC, "incr"))["cleanup.policy"].value == "compact"
    assert broker.call(lambda: broker.broker.replicas.get("incr", 0)).config.delete is False


@pytest.mark.timeout(60)
def test_incremental_errors_are_kafkas(client):
    create_topic(client, "bad")
    result = incremental(client, TOPIC, "bad", [("retention.ms", APPEND, "5")])
    assert (result.error_code, result.error_message) == (40, "Can't APPEND to key retention.ms because its type is not LIST.")
    result = incremental(client, TOPIC, "bad", [("retention.ms", SET, "soon")])
    assert result.error_code == 40
    assert result.error_message == "Invalid value soon for configuration retention.ms: Not a number of type LONG"
    result = incremental(client, TOPIC, "bad", [("no.such.config", SET, "1")])
    assert (result.error_code, result.error_message) == (40, "Unknown topic config name: no.such.config")
    result = incremental(client, TOPIC, "bad", [("retention.ms", SET, None)])
    assert (result.error_code, result.error_message) == (42, "Null value not supported for : retention.ms")
    result = incremental(client, TOPIC, "missing-topic", [("retention.ms", SET, "5")])
    assert result.error_code == 3
    response = client.request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": TOPIC, "resource_name": "bad", "configs": [{"name": "retention.ms", "config_operation": 0,
                                                                      "value": "5"}]}] * 2})
    assert [(r.error_code, r.error_message) for r in response.responses] == \
        [(42, "Each resource must appear at most once.")] * 2
    assert entries(describe(client, TOPIC, "bad"))["retention.ms"].config_source == DEFAULT_CONFIG


@pytest.mark.timeout(60)
def test_validate_only_changes_nothing(client):
    create_topic(client, "dry")
    assert incremental(client, TOPIC, "dry", [("retention.ms", SET, "5")], validate_only=True).error_code == 0
    assert alter(client, TOPIC, "dry", {"retention.ms": "5"}, validate_only=True).error_code == 0
    assert entries(describe(client, TOPIC, "dry"))["retention.ms"].config_source == DEFAULT_CONFIG


@pytest.mark.timeout(60)
def test_legacy_alter_replaces_every_override(client):
    create_topic(client, "legacy", configs={"retention.ms": "1000", "segment.ms": "100000"})
    assert alter(client, TOPIC, "legacy", {"max.message.bytes": "2000"}).error_code == 0
    configs = entries(describe(client, TOPIC, "legacy"))
    assert {n for n, c in configs.items() if c.config_source == TOPIC_CONFIG} == {"max.message.bytes"}
    result = alter(client, TOPIC, "legacy", {"segment.bytes": "10"})
    assert (result.error_code, result.error_message) == (
        40, "Invalid value 10 for configuration segment.bytes: Value must be at least 1048576")


@pytest.mark.timeout(60)
def test_max_message_bytes_change_applies_to_produce(client):
    create_topic(client, "limited")
    assert produce(client, "limited", build_batch([(None, b"x" * 3000)])).error_code == 0
    assert incremental(client, TOPIC, "limited", [("max.message.bytes", SET, "1000")]).error_code == 0
    assert produce(client, "limited", build_batch([(None, b"x" * 3000)])).error_code == 10  # MESSAGE_TOO_LARGE
    assert produce(client, "limited", build_batch([(None, b"x" * 100)])).error_code == 0


# -- broker configs ---------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_dynamic_broker_default_applies_to_topics_and_survives_restart(broker_factory):
    broker = broker_factory()
    node = str(broker.broker.node_id)
    with broker.connect() as client:
        create_topic(client, "follows")
        create_topic(client, "own", configs={"retention.ms": "1000"})
        assert incremental(client, BROKER, "", [("log.retention.ms", SET, "7000")]).error_code == 0
        assert broker.call(lambda: broker.broker.replicas.get("follows", 0).config.retention_ms) == 7000
        assert broker.call(lambda: broker.broker.replicas.get("own", 0).config.retention_ms) == 1000
        topic = entries(describe(client, TOPIC, "follows"))["retention.ms"]
        assert (topic.value, topic.config_source) == ("7000", DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert incremental(client, BROKER, node, [("message.max.bytes", SET, "2000")]).error_code == 0
        configs = entries(describe(client, BROKER, node))
        assert (configs["message.max.bytes"].value, configs["message.max.bytes"].config_source) == (
            "2000", DYNAMIC_BROKER_CONFIG)
        defaults = describe(client, BROKER, "")
        assert [(c.name, c.value, c.config_source) for c in defaults.configs] == [
            ("log.retention.ms", "7000", DYNAMIC_DEFAULT_BROKER_CONFIG)]
    broker.restart()
    with broker.connect() as client:
        assert broker.call(lambda: broker.broker.replicas.get("follows", 0).config.retention_ms) == 7000
        assert broker.call(lambda: broker.broker.replicas.get("follows", 0).config.max_message_bytes) == 2000
        assert incremental(client, BROKER, node, [("message.max.bytes", DELETE, None)]).error_code == 0
        assert broker.call(lambda: broker.broker.replicas.get("follows", 0).config.max_message_bytes) == 1048588


@pytest.mark.timeout(60)
def test_broker_config_errors(client, broker):
    node = str(broker.broker.node_id)
    result = alter(client, BROKER, node, {"num.io.threads": "4"})
    assert (result.error_code, result.error_message) == (42, "Cannot update these configs dynamically: Set(num.io.threads)")
    result = incremental(client, BROKER, "7", [("log.retention.ms", SET, "5")])
    assert (result.error_code, result.error_message) == (42, f"Unexpected broker id, expected {node}, but received 7")
    result = incremental(client, BROKER, node, [("log.retention.ms", SET, "x")])
    assert result.error_code == 42 and "log.retention.ms" in result.error_message
    result = incremental(client, BROKER, node, [("log.retention.ms", APPEND, "5")])
    assert (result.error_code, result.error_message) == (
        40, "Config value append is not allowed for config key: log.retention.ms")
    assert broker.call(lambda: broker.broker.config.log_retention_ms) == 604800000


# -- retention ----------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_retention_ms_change_deletes_old_segments_in_the_background(broker_factory):
    broker = broker_factory(**{"log.retention.check.interval.ms": "100"})
    with broker.connect() as client:
        create_topic(client, "aging", configs={"internal.segment.bytes": "400", "file.delete.delay.ms": "0"})
        old = int(time.time() * 1000) - 3_600_000
        produce_batches(client, "aging", 4, timestamp=old)  # one batch of 2 records per segment: 0, 2, 4, 6
        produce_batches(client, "aging", 2)  # recent: 8, 10 (the last one in the active segment)
        log = broker.call(lambda: broker.broker.replicas.get("aging", 0).log)
        assert [s.base_offset for s in broker.call(lambda: log.segments)] == [0, 2, 4, 6, 8, 10]
        assert earliest(client, "aging") == 0
        assert incremental(client, TOPIC, "aging", [("retention.ms", SET, "600000")]).error_code == 0
        wait_for(lambda: earliest(client, "aging") == 8)
        assert [s.base_offset for s in broker.call(lambda: log.segments)] == [8, 10]
        assert fetch(client, "aging", 0).error_code == 1  # OFFSET_OUT_OF_RANGE
        wait_for(lambda: not list(log.directory.glob("*.deleted")))
        assert sorted(p.name for p in log.directory.glob("*.log")) == [
            "00000000000000000008.log", "00000000000000000010.log"]
    broker.restart()
    with broker.connect() as client:
        assert earliest(client, "aging") == 8


# -- DeleteRecords ------------------------------------------------------------------------------


def delete_records(client: Any, topic: str, offsets: dict[int, int]) -> dict[int, tuple[int, int]]:
    response = client.request(DELETE_RECORDS, 2, {"timeout": 5000, "topics": [
        {"name": topic, "partitions": [{"partition_index": p, "offset": o} for p, o in offsets.items()]}]})
    return {p.partition_index: (p.error_code, p.low_watermark) for p in response.topics[0].partitions}


@pytest.mark.timeout(60)
def test_delete_records_moves_the_low_watermark(client, broker):
    create_topic(client, "trimmed")
    produce_batches(client, "trimmed", 5)  # offsets 0..9
    assert delete_records(client, "trimmed", {0: 3}) == {0: (0, 3)}
    assert earliest(client, "trimmed") == 3
    assert fetch(client, "trimmed", 2).error_code == 1
    assert fetch(client, "trimmed", 3).error_code == 0
    assert delete_records(client, "trimmed", {0: 1}) == {0: (0, 3)}  # never backwards
    assert delete_records(client, "trimmed", {0: 11}) == {0: (1, -1)}  # beyond the high watermark
    assert delete_records(client, "trimmed", {0: -1}) == {0: (0, 10)}  # -1: the high watermark
    assert delete_records(client, "trimmed", {4: 1}) == {4: (3, -1)}
    assert delete_records(client, "no-such", {0: 1}) == {0: (3, -1)}
    broker.restart()
    with broker.connect() as again:
        assert earliest(again, "trimmed") == 10


@pytest.mark.timeout(60)
def test_delete_records_on_a_compacted_topic_is_a_policy_violation(client):
    create_topic(client, "compacted", configs={"cleanup.policy": "compact"})
    assert delete_records(client, "compacted", {0: 0}) == {0: (44, -1)}


# -- DescribeLogDirs, OffsetForLeaderEpoch, DescribeProducers ------------------------------------


@pytest.mark.timeout(60)
def test_describe_log_dirs_lists_partitions_with_sizes(client, broker):
    create_topic(client, "sized", partitions=2)
    produce_batches(client, "sized", 3)
    response = client.request(DESCRIBE_LOG_DIRS, 4, {"topics": None})
    assert response.error_code == 0
    [result] = response.results
    assert result.log_dir == str(broker.log_dir.resolve()) and result.total_bytes > 0 and result.usable_bytes > 0
    topics = {t.name: t for t in result.topics}
    assert "__cluster_metadata" not in topics
    sizes = {p.partition_index: p.partition_size for p in topics["sized"].partitions}
    expected = broker.call(lambda: broker.broker.replicas.get("sized", 0).log.size_in_bytes())
    assert sizes == {0: expected, 1: 0} and expected > 0
    assert all(p.offset_lag == 0 and not p.is_future_key for p in topics["sized"].partitions)
    response = client.request(DESCRIBE_LOG_DIRS, 1, {"topics": [{"topic": "sized", "partitions": [1]}]})
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in response.results[0].topics] == [("sized", [1])]


@pytest.mark.timeout(60)
def test_offset_for_leader_epoch_answers_consumers(client):
    create_topic(client, "epochs")
    produce_batches(client, "epochs", 2)

    def ask(epoch: int, current: int = -1, topic: str = "epochs") -> tuple[int, int, int]:
        response = client.request(OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]})
        p = response.topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    assert ask(0) == (0, 0, 4)  # the latest epoch ends at the log end
    assert ask(5) == (0, -1, -1)  # unknown epoch
    assert ask(0, current=3) == (75, -1, -1)  # UNKNOWN_LEADER_EPOCH: newer than ours
    assert ask(0, topic="nowhere") == (3, -1, -1)


@pytest.mark.timeout(60)
def test_describe_producers_lists_idempotent_producers(client):
    create_topic(client, "idem")
    batch = build_batch([(None, b"a"), (None, b"b")], producer_id=4242, producer_epoch=3, base_sequence=0,
                        timestamp_ms=1_700_000_000_000)
    assert produce(client, "idem", batch).error_code == 0
    response = client.request(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "idem", "partition_indexes": [0, 9]}]})
    found, missing = response.topics[0].partitions
    assert found.error_code == 0 and missing.error_code == 3
    [state] = found.active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.last_timestamp,
            state.coordinator_epoch, state.current_txn_start_offset) == (4242, 3, 1, 1_700_000_000_000, -1, -1)


@pytest.mark.timeout(90)
def test_the_log_cleaner_s_configs_change_live(client, broker):
    """Kafka's LogCleaner.ReconfigurableConfigs are dynamic broker configs: a change restarts the cleaners with it
    (log.cleaner.threads at most doubled or halved at a time), and compaction goes on."""
    node = str(broker.broker.node_id)
    cleaner = broker.broker.log_cleaner
    assert incremental(client, BROKER, node, [("log.cleaner.backoff.ms", SET, "100"),
                                              ("log.cleaner.dedupe.buffer.size", SET, str(64 << 20))]).error_code == 0
    configs = entries(describe(client, BROKER, node))
    assert (configs["log.cleaner.backoff.ms"].value, configs["log.cleaner.backoff.ms"].config_source) == (
        "100", DYNAMIC_BROKER_CONFIG)
    wait_for(lambda: broker.call(lambda: cleaner._restarting is not None and cleaner._restarting.done()))
    result = incremental(client, BROKER, node, [("log.cleaner.threads", SET, "3")])
    assert (result.error_code, result.error_message) == (
        42, "Log cleaner threads cannot be increased to more than double the current value 1")
    assert incremental(client, BROKER, "", [("log.cleaner.threads", SET, "2")]).error_code == 0
    wait_for(lambda: broker.call(lambda: len(cleaner.cleaners) == 2 and cleaner._restarting.done()))

    create_topic(client, "compacted", configs={"cleanup.policy": "compact", "segment.ms": "100",
                                               "min.cleanable.dirty.ratio": "0.01"})
    for round_ in range(3):
        produce(client, "compacted", build_batch([(b"k", f"v{round_}".encode())] * 20))
        time.sleep(0.2)  # a new segment each round: the older ones can be cleaned
    wait_for(lambda: broker.call(lambda: cleaner.runs) > 0, timeout=30)
