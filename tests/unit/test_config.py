"""Tests for klamm.config: .properties parsing, Kafka defaults, precedence, validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from klamm.config import (
    BROKER_CONFIG_DEF,
    TOPIC_CONFIG_DEF,
    TOPIC_CONFIG_NAMES,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    TopicConfig,
    load_properties,
    parse_properties,
)

LONG_MAX = 2**63 - 1


# --------------------------------------------------------------------------- .properties


def test_properties_separators_and_comments() -> None:
    text = "# comment\n! bang comment\n\na=1\nb : 2\nc 3\n   d=4\ne=\nf\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "3", "d": "4", "e": "", "f": ""}


def test_properties_continuation_lines() -> None:
    text = "listeners=PLAINTEXT://a:1,\\\n    PLAINTEXT://b:2\nnext=x\n"
    assert parse_properties(text) == {"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2", "next": "x"}


def test_properties_even_backslashes_do_not_continue() -> None:
    assert parse_properties("a=x\\\\\nb=y") == {"a": "x\\", "b": "y"}


def test_properties_comment_line_backslash_does_not_continue() -> None:
    assert parse_properties("#comment \\\na=1\n") == {"a": "1"}


def test_properties_escapes() -> None:
    text = "k\\=ey\\:x=v\\tw\\nz\\\\ \\u00e9\\q\n"
    assert parse_properties(text) == {"k=ey:x": "v\tw\nz\\ \u00e9q"}


def test_properties_value_keeps_separator_chars_and_trailing_space() -> None:
    assert parse_properties("a = b=c:d \n") == {"a": "b=c:d "}


def test_properties_crlf_and_last_wins() -> None:
    assert parse_properties("a=1\r\na=2\rb=3") == {"a": "2", "b": "3"}


def test_properties_malformed_unicode() -> None:
    with pytest.raises(ValueError):
        parse_properties("a=\\u12g4")


def test_load_properties(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("node.id=7\nlog.dirs=/a, /b\n", encoding="utf-8")
    props = load_properties(path)
    config = BrokerConfig.from_properties(props)
    assert config.node_id == 7
    assert config.log_dirs == ["/a", "/b"]


# --------------------------------------------------------------------------- defaults


def test_empty_config_is_embedded_single_node() -> None:
    config = BrokerConfig.from_properties({})
    assert config.node_id == 1
    assert config.broker_id == 1
    assert config.process_roles == ["broker", "controller"]
    assert config.listeners == ["PLAINTEXT://127.0.0.1:9092"]
    assert config.advertised_listeners == config.listeners
    assert config.log_dirs == ["./klamm-data"]
    assert config.cluster_id is None
    assert config.metrics_port == -1


@pytest.mark.parametrize(
    ("attr", "expected"),
    [
        ("num_partitions", 1),
        ("default_replication_factor", 1),
        ("auto_create_topics_enable", True),
        ("delete_topic_enable", True),
        ("socket_request_max_bytes", 104857600),
        ("socket_send_buffer_bytes", 102400),
        ("socket_receive_buffer_bytes", 102400),
        ("connections_max_idle_ms", 600000),
        ("num_network_threads", 3),
        ("num_io_threads", 8),
        ("queued_max_requests", 500),
        ("message_max_bytes", 1048588),
        ("log_segment_bytes", 1073741824),
        ("log_roll_ms", 168 * 3600 * 1000),
        ("log_roll_jitter_ms", 0),
        ("log_index_interval_bytes", 4096),
        ("log_index_size_max_bytes", 10485760),
        ("log_retention_ms", 168 * 3600 * 1000),
        ("log_retention_bytes", -1),
        ("log_retention_check_interval_ms", 300000),
        ("log_flush_interval_messages", LONG_MAX),
        ("log_flush_interval_ms", LONG_MAX),
        ("log_flush_offset_checkpoint_interval_ms", 60000),
        ("log_cleanup_policy", ["delete"]),
        ("log_cleaner_enable", True),
        ("log_cleaner_threads", 1),
        ("log_cleaner_min_cleanable_ratio", 0.5),
        ("log_cleaner_delete_retention_ms", 86400000),
        ("log_cleaner_min_compaction_lag_ms", 0),
        ("log_cleaner_max_compaction_lag_ms", LONG_MAX),
        ("compression_type", "producer"),
        ("log_message_timestamp_type", "CreateTime"),
        ("log_message_timestamp_before_max_ms", LONG_MAX),
        ("log_message_timestamp_after_max_ms", 3600000),
        ("min_insync_replicas", 1),
        ("unclean_leader_election_enable", False),
        ("offsets_topic_num_partitions", 50),
        ("offsets_topic_replication_factor", 3),
        ("offsets_topic_segment_bytes", 104857600),
        ("offsets_retention_minutes", 10080),
        ("offsets_retention_check_interval_ms", 600000),
        ("offsets_commit_timeout_ms", 5000),
        ("offsets_load_buffer_size", 5242880),
        ("group_initial_rebalance_delay_ms", 3000),
        ("group_min_session_timeout_ms", 6000),
        ("group_max_session_timeout_ms", 1800000),
        ("group_max_size", 2**31 - 1),
        ("transaction_state_log_num_partitions", 50),
        ("transactional_id_expiration_ms", 604800000),
        ("transaction_max_timeout_ms", 900000),
        ("producer_id_expiration_ms", 86400000),
        ("fetch_max_bytes", 57671680),
        ("replica_fetch_max_bytes", 1048576),
        ("replica_lag_time_max_ms", 30000),
        ("controller_quorum_voters", []),
        ("controller_listener_names", None),
    ],
)
def test_broker_defaults_match_kafka(attr: str, expected: object) -> None:
    assert getattr(BrokerConfig.from_properties({}), attr) == expected


def test_klamm_specific_defaults_record_kafkas_value() -> None:
    differing = {k.name: k.kafka_default for k in BROKER_CONFIG_DEF if k.differs_from_kafka}
    assert differing == {
        "node.id": -1,
        "process.roles": [],
        "listeners": ["PLAINTEXT://:9092"],
        "log.dir": "/tmp/kafka-logs",
    }


def test_model_fields_match_table() -> None:
    for table, model in ((BROKER_CONFIG_DEF, BrokerConfig), (TOPIC_CONFIG_DEF, TopicConfig)):
        aliases = {f.alias for f in model.model_fields.values() if f.alias}
        assert aliases == table.names()


def test_broker_config_is_frozen() -> None:
    config = BrokerConfig.from_properties({})
    with pytest.raises(Exception):
        config.num_partitions = 5  # type: ignore[misc]


# --------------------------------------------------------------------------- parsing rules


def test_lists_are_comma_separated_and_trimmed() -> None:
    config = BrokerConfig.from_properties({"listeners": " PLAINTEXT://a:1 ,  CONTROLLER://b:2 ",
                                           "controller.listener.names": "CONTROLLER",
                                           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"})
    assert config.listeners == ["PLAINTEXT://a:1", "CONTROLLER://b:2"]


def test_booleans_are_case_insensitive() -> None:
    config = BrokerConfig.from_properties({"auto.create.topics.enable": " FALSE ", "log.cleaner.enable": "True"})
    assert config.auto_create_topics_enable is False
    assert config.log_cleaner_enable is True


def test_unknown_broker_keys_are_kept_and_ignored() -> None:
    config = BrokerConfig.from_properties({"zookeeper.connect": "x:2181", "num.partitions": "4"})
    assert config.unknown_properties == {"zookeeper.connect": "x:2181"}
    assert config.num_partitions == 4
    assert "zookeeper.connect" not in config.explicit_keys


# --------------------------------------------------------------------------- precedence


def test_retention_ms_over_minutes_over_hours() -> None:
    hours = BrokerConfig.from_properties({"log.retention.hours": "2"})
    assert hours.log_retention_ms == 2 * 3600 * 1000
    minutes = BrokerConfig.from_properties({"log.retention.hours": "2", "log.retention.minutes": "3"})
    assert minutes.log_retention_ms == 3 * 60 * 1000
    millis = BrokerConfig.from_properties(
        {"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "1234"}
    )
    assert millis.log_retention_ms == 1234


def test_negative_retention_means_unlimited() -> None:
    assert BrokerConfig.from_properties({"log.retention.ms": "-1"}).log_retention_ms == -1
    assert BrokerConfig.from_properties({"log.retention.hours": "-5"}).log_retention_ms == -1


def test_roll_and_flush_fallbacks() -> None:
    # log.roll.jitter.* fall back the same way but are refused unless 0 (test_config_coverage.py).
    config = BrokerConfig.from_properties({"log.roll.hours": "1", "log.flush.scheduler.interval.ms": "500"})
    assert config.log_roll_ms == 3600000
    assert config.log_flush_interval_ms == 500
    assert BrokerConfig.from_properties({"log.roll.ms": "10", "log.roll.hours": "1"}).log_roll_ms == 10


def test_log_dirs_falls_back_to_log_dir() -> None:
    assert BrokerConfig.from_properties({"log.dir": "/data"}).log_dirs == ["/data"]
    both = BrokerConfig.from_properties({"log.dir": "/data", "log.dirs": "/x,/y"})
    assert both.log_dirs == ["/x", "/y"]


def test_advertised_listeners_override() -> None:
    config = BrokerConfig.from_properties(
        {"listeners": "PLAINTEXT://0.0.0.0:9092", "advertised.listeners": "PLAINTEXT://host:9092"}
    )
    assert config.advertised_listeners == ["PLAINTEXT://host:9092"]


def test_broker_id_and_node_id() -> None:
    assert BrokerConfig.from_properties({"node.id": "4"}).broker_id == 4
    assert BrokerConfig.from_properties({"broker.id": "5"}).node_id == 5
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties({"broker.id": "5", "node.id": "6"})
    assert info.value.key == "broker.id"


# --------------------------------------------------------------------------- invalid values


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("num.partitions", "abc", "Not a number of type INT"),
        ("num.partitions", "0", "Value must be at least 1"),
        ("num.partitions", "2147483648", "Not a number of type INT"),
        ("message.max.bytes", "-1", "Value must be at least 0"),
        ("log.retention.bytes", "1.5", "Not a number of type LONG"),
        ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be no more than 1"),
        ("log.cleaner.min.cleanable.ratio", "x", "Not a number of type DOUBLE"),
        ("compression.type", "brotli", "String must be one of"),
        ("log.cleanup.policy", "delete,forever", "String must be one of"),
        ("process.roles", "broker,witness", "String must be one of"),
        ("log.segment.bytes", "1000", "Value must be at least 1048576"),
        ("metrics.port", "70000", "Value must be no more than 65535"),
    ],
)
def test_invalid_broker_values_name_the_key(key: str, value: str, reason: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties({key: value})
    assert info.value.key == key
    assert key in str(info.value)
    assert reason in str(info.value)


def test_error_message_matches_kafka_wording() -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties({"num.partitions": "abc"})
    assert str(info.value) == "Invalid value abc for configuration num.partitions: Not a number of type INT"
    assert isinstance(info.value, ValueError)


# --------------------------------------------------------------------------- topics


def test_topic_defaults_are_keyed_by_topic_name() -> None:
    broker = BrokerConfig.from_properties(
        {"log.segment.bytes": "2097152", "log.retention.minutes": "10", "log.cleanup.policy": "compact"}
    )
    defaults = broker.topic_defaults()
    assert defaults["segment.bytes"] == "2097152"
    assert defaults["retention.ms"] == "600000"
    assert defaults["cleanup.policy"] == "compact"
    assert defaults["max.message.bytes"] == "1048588"
    assert defaults["segment.ms"] == str(7 * 24 * 3600 * 1000)
    assert set(defaults) <= TOPIC_CONFIG_NAMES


def test_topic_resolution_over_broker_defaults() -> None:
    broker = BrokerConfig.from_properties({"log.retention.hours": "1", "compression.type": "lz4"})
    topic = TopicConfig.resolve(broker, {"retention.ms": "-1", "cleanup.policy": "compact, delete"})
    assert topic.retention_ms == -1
    assert topic.compression_type == "lz4"
    assert topic.cleanup_policy == ["compact", "delete"]
    assert topic.compact and topic.delete
    assert topic.segment_bytes == 1073741824
    assert topic.message_timestamp_after_max_ms == 3600000
    assert topic.overrides == {"retention.ms": "-1", "cleanup.policy": "compact, delete"}


def test_topic_without_overrides_follows_broker() -> None:
    broker = BrokerConfig.from_properties({"log.retention.ms": "5000", "min.insync.replicas": "2"})
    topic = TopicConfig.resolve(broker, {})
    assert topic.retention_ms == 5000
    assert topic.min_insync_replicas == 2
    assert topic.overrides == {}


def test_unknown_topic_config_rejected() -> None:
    broker = BrokerConfig.from_properties({})
    with pytest.raises(ConfigError) as info:
        TopicConfig.resolve(broker, {"retention.hours": "1"})
    assert info.value.unknown
    assert info.value.key == "retention.hours"
    assert str(info.value) == "Unknown topic config name: retention.hours"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "1000"),
        ("retention.ms", "-2"),
        ("min.cleanable.dirty.ratio", "2"),
        ("compression.type", "none"),
        ("message.timestamp.type", "createtime"),
        ("min.insync.replicas", "0"),
        ("compression.gzip.level", "10"),
    ],
)
def test_invalid_topic_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        TopicConfig.resolve(BrokerConfig.from_properties({}), {key: value})
    assert info.value.key == key
    assert key in str(info.value)


def test_compaction_lag_conflict() -> None:
    with pytest.raises(ConfigError) as info:
        TopicConfig.resolve(
            BrokerConfig.from_properties({}), {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}
        )
    assert info.value.key == "min.compaction.lag.ms"


def test_internal_segment_bytes_allows_small_segments() -> None:
    topic = TopicConfig.resolve(BrokerConfig.from_properties({}), {"internal.segment.bytes": "1024"})
    assert topic.segment_bytes == 1073741824
    assert topic.effective_segment_bytes == 1024
    assert "internal.segment.bytes" in TOPIC_CONFIG_NAMES
    assert "internal.segment.bytes" not in {d.name for d in topic.describe(BrokerConfig.from_properties({}))}


def test_topic_config_names() -> None:
    expected = {
        "cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms", "flush.messages",
        "flush.ms", "index.interval.bytes", "max.compaction.lag.ms", "max.message.bytes",
        "message.timestamp.type", "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
        "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
        "retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms",
        "segment.ms", "unclean.leader.election.enable",
    }
    assert expected <= TOPIC_CONFIG_NAMES


# --------------------------------------------------------------------------- describe


def test_describe_topic_sources() -> None:
    broker = BrokerConfig.from_properties({"log.retention.hours": "24"})
    topic = TopicConfig.resolve(broker, {"segment.ms": "1000"})
    entries = {d.name: d for d in topic.describe(broker)}
    assert entries["segment.ms"].source is ConfigSource.TOPIC_CONFIG
    assert entries["segment.ms"].value == "1000"
    assert entries["retention.ms"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert entries["retention.ms"].value == str(24 * 3600 * 1000)
    assert [(s.name, s.value) for s in entries["retention.ms"].synonyms] == [
        ("log.retention.hours", "24"),
        ("log.retention.hours", "168"),
    ]
    assert entries["cleanup.policy"].source is ConfigSource.DEFAULT_CONFIG
    assert entries["min.cleanable.dirty.ratio"].value == "0.5"
    assert not entries["cleanup.policy"].read_only


def test_describe_broker() -> None:
    broker = BrokerConfig.from_properties({"num.partitions": "3"})
    entries = {d.name: d for d in broker.describe()}
    assert entries["num.partitions"].value == "3"
    assert entries["num.partitions"].source is ConfigSource.STATIC_BROKER_CONFIG
    assert entries["num.io.threads"].source is ConfigSource.DEFAULT_CONFIG
    assert entries["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"
    assert "producer.id.expiration.check.interval.ms" not in entries
