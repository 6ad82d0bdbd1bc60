"""Each applied config key changes what the broker does.

tests/unit/test_config_coverage.py maps every applied key to the tests that show
its effect; the keys that had no such test get one here. Most are short: the
code path that reads the key (a broker talking the wire protocol, or the small
function that turns the config into a component's settings), with the
component's own behaviour shown by its unit tests.
"""

from __future__ import annotations

import asyncio
import threading
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from klamm.broker import cleaner_tasks
from klamm.broker.cleaner_tasks import LogCleanerService, compaction_config
from klamm.broker.partition import log_config
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.coordinator.runtime import coordinator_config
from klamm.protocol.errors import ErrorCode
from klamm.protocol.records import build_batch
from klamm.storage.log_manager import RECOVERY_POINT_CHECKPOINT
from klamm.testing import EmbeddedBroker, run_broker
from tests.integration.conftest import (
    CREATE_TOPICS,
    INIT_PRODUCER_ID,
    METADATA,
    PRODUCE,
    RawClient,
    create_topic,
    fetch,
    metadata_request,
    produce,
    wait_for,
)
from tests.unit.test_group_coordinator import Harness

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"

# One broker with many keys away from their defaults; each test checks one effect.
CONFIGURED = {
    "node.id": "7",
    "cluster.id": CLUSTER_ID,
    "advertised.listeners": "PLAINTEXT://advertised.invalid:19092",
    "num.partitions": "3",
    "auto.create.topics.enable": "false",
    "default.replication.factor": "2",
    "offsets.topic.num.partitions": "2",
    "offsets.topic.segment.bytes": "2097152",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.segment.bytes": "3145728",
    "transaction.max.timeout.ms": "5000",
    "transaction.partition.verification.enable": "false",
    "log.flush.offset.checkpoint.interval.ms": "20",
}


@pytest.fixture(scope="module")
def configured() -> Iterator[EmbeddedBroker]:
    with run_broker(properties=CONFIGURED) as b:
        yield b


@pytest.fixture
def client(configured: EmbeddedBroker) -> Iterator[RawClient]:
    with RawClient(configured.port) as c:
        yield c


def on_loop(b: EmbeddedBroker, fn: Callable[[], Any]) -> Any:
    """Run `fn` on the broker's loop (its state is not thread-safe)."""

    async def call() -> Any:
        return fn()

    return asyncio.run_coroutine_threadsafe(call(), b.loop).result(10)


def image_topic(b: EmbeddedBroker, name: str) -> Any:
    return on_loop(b, lambda: b.broker.controller.image.topics_by_name.get(name))


def batch_attributes_and_max_timestamp(records: bytes) -> tuple[int, int]:
    # v2 batch header: baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2,
    # lastOffsetDelta 4, firstTimestamp 8, maxTimestamp 8
    (attributes,) = struct.unpack_from(">h", records, 21)
    (max_timestamp,) = struct.unpack_from(">q", records, 35)
    return attributes, max_timestamp


# -- identity, listeners and data directory -------------------------------------------------------


def test_node_id_cluster_id_and_advertised_listener_reach_metadata(configured, client):
    response = client.request(METADATA, 12, metadata_request())
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(7, "advertised.invalid", 19092)]
    assert (response.cluster_id, response.controller_id) == (CLUSTER_ID, 7)
    assert configured.broker.host == "127.0.0.1"  # listeners: the bound address, not the advertised one


def test_log_dirs_hold_the_data(configured, client):
    create_topic(client, "in-log-dir", partitions=1)
    data = Path(configured.log_dir)
    assert f"cluster.id={CLUSTER_ID}" in (data / "meta.properties").read_text()
    assert (data / "in-log-dir-0").is_dir()


def test_num_partitions_and_default_replication_factor_apply_to_new_topics(client):
    def create(name: str, partitions: int, replication_factor: int) -> Any:
        response = client.request(CREATE_TOPICS, 7, {"timeout": 10_000, "topics": [
            {"name": name, "num_partitions": partitions, "replication_factor": replication_factor, "configs": []}]})
        return response.topics[0]

    assert create("default-partitions", -1, 1).num_partitions == 3
    # default.replication.factor=2 cannot be met by one broker
    assert create("default-replicas", 1, -1).error_code == ErrorCode.invalid_replication_factor


def test_auto_create_topics_enable_false_creates_nothing(client):
    response = client.request(METADATA, 12, metadata_request(topics=["never-created"], auto_create=True))
    assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert "never-created" not in {t.name for t in client.request(METADATA, 12, metadata_request()).topics}


def test_metrics_host_and_port_bind_the_endpoint():
    with run_broker(metrics_port=0, metrics_host="127.0.0.2") as b:
        sockets = b.broker._metrics_server._server.sockets
        assert [s.getsockname()[:2] for s in sockets] == [("127.0.0.2", b.broker.metrics_port)]


def test_recovery_points_are_checkpointed_every_interval(configured, client):
    create_topic(client, "checkpointed")
    assert produce(client, "checkpointed", build_batch([(None, b"v")])).error_code == 0
    checkpoint = Path(configured.log_dir) / RECOVERY_POINT_CHECKPOINT
    # the broker is running: only the periodic checkpoint can have written this line
    wait_for(lambda: checkpoint.exists() and "checkpointed 0 " in checkpoint.read_text())


# -- internal topics and coordinators ----------------------------------------------------------


def test_offsets_topic_partitions_and_segment_bytes(configured):
    on_loop(configured, configured.broker.group_coordinator.ensure_topic)
    topic = image_topic(configured, "__consumer_offsets")
    assert len(topic.partitions) == 2 and dict(topic.configs)["segment.bytes"] == "2097152"


def test_transaction_state_topic_partitions_and_segment_bytes(configured):
    on_loop(configured, configured.broker.transactions.ensure_topic)
    topic = image_topic(configured, "__transaction_state")
    assert len(topic.partitions) == 3 and dict(topic.configs)["segment.bytes"] == "3145728"


def init_producer(client: RawClient, transactional_id: str, timeout_ms: int) -> Any:
    return client.request(INIT_PRODUCER_ID, 4, {"transactional_id": transactional_id,
                                                "transaction_timeout": timeout_ms,
                                                "producer_id": -1, "producer_epoch": -1})


def test_transaction_max_timeout_ms_bounds_init_producer_id(client):
    assert init_producer(client, "too-long", 6000).error_code == ErrorCode.invalid_transaction_timeout
    assert init_producer(client, "short-enough", 5000).error_code == ErrorCode.none


def transactional_produce_error(client: RawClient, topic: str) -> int:
    """A transactional batch to a partition that was never added to the transaction."""
    create_topic(client, topic)
    init = init_producer(client, f"txn-{topic}", 1000)
    assert init.error_code == ErrorCode.none
    batch = build_batch([(None, b"v")], producer_id=init.producer_id, producer_epoch=init.producer_epoch,
                        base_sequence=0, transactional=True)
    response = client.request(PRODUCE, 9, {"acks": -1, "timeout": 10_000, "transactional_id": f"txn-{topic}",
                                           "topic_data": [{"name": topic, "partition_data": [
                                               {"index": 0, "records": batch}]}]})
    return response.responses[0].partition_responses[0].error_code


def test_transaction_partition_verification_enable(client):
    assert transactional_produce_error(client, "unverified") == ErrorCode.none  # verification off here
    with run_broker() as default, RawClient(default.port) as other:
        assert transactional_produce_error(other, "verified") == ErrorCode.invalid_txn_state


def test_coordinator_config_follows_broker_config():
    config = BrokerConfig.from_properties({
        "group.initial.rebalance.delay.ms": "11", "group.min.session.timeout.ms": "12",
        "group.max.session.timeout.ms": "13000", "group.max.size": "14", "offsets.retention.minutes": "15",
        "offsets.retention.check.interval.ms": "16", "offset.metadata.max.bytes": "17"})
    settings = coordinator_config(config, 4)
    assert (settings.num_partitions, settings.initial_rebalance_delay_ms, settings.min_session_timeout_ms,
            settings.max_session_timeout_ms, settings.max_group_size, settings.offsets_retention_ms,
            settings.offsets_retention_check_interval_ms, settings.offset_metadata_max_bytes) == (
        4, 11, 12, 13000, 14, 15 * 60_000, 16, 17)


def test_group_max_size_and_session_timeout_bounds():
    h = Harness(max_group_size=1, min_session_timeout_ms=1000, max_session_timeout_ms=20_000)
    h.stable_member()
    first = h.join(require_known=False)
    assert first.error == ErrorCode.group_max_size_reached
    assert Harness(max_session_timeout_ms=20_000).join(session=30_000).error == ErrorCode.invalid_session_timeout


# -- topic configs on the produce path ------------------------------------------------------------


def test_message_timestamp_type_log_append_time_stamps_batches(client):
    create_topic(client, "append-time", configs={"message.timestamp.type": "LogAppendTime"})
    create_topic(client, "create-time")
    for topic in ("append-time", "create-time"):
        assert produce(client, topic, build_batch([(None, b"v")], timestamp_ms=1000)).error_code == 0
    appended = batch_attributes_and_max_timestamp(fetch(client, "append-time", 0).records)
    created = batch_attributes_and_max_timestamp(fetch(client, "create-time", 0).records)
    assert appended[0] & 0x08 and appended[1] > 1000  # timestamp type bit, broker clock
    assert created == (0, 1000)


def test_topic_compression_type_recompresses(client):
    create_topic(client, "gzipped", configs={"compression.type": "gzip"})
    assert produce(client, "gzipped", build_batch([(None, b"v" * 100)])).error_code == 0
    attributes, _ = batch_attributes_and_max_timestamp(fetch(client, "gzipped", 0).records)
    assert attributes & 0x07 == 1  # gzip


def test_min_insync_replicas_refuses_acks_all(client):
    create_topic(client, "two-insync", configs={"min.insync.replicas": "2"})
    assert produce(client, "two-insync", build_batch([(None, b"v")]), acks=-1).error_code == \
        ErrorCode.not_enough_replicas
    assert produce(client, "two-insync", build_batch([(None, b"v")]), acks=1).error_code == ErrorCode.none


# -- the small functions that hand topic and broker configs to components ------------------------


def test_log_config_carries_the_topic_storage_settings():
    broker = BrokerConfig.from_properties({})
    storage = log_config(TopicConfig.resolve(broker, {
        "segment.bytes": "2000000", "segment.ms": "1234", "index.interval.bytes": "77", "segment.index.bytes": "800",
        "retention.ms": "5678", "retention.bytes": "9999"}))
    assert (storage.segment_bytes, storage.segment_ms, storage.index_interval_bytes, storage.segment_index_bytes,
            storage.retention_ms, storage.retention_bytes) == (2000000, 1234, 77, 800, 5678, 9999)
    small = log_config(TopicConfig.resolve(broker, {"segment.bytes": "2000000", "internal.segment.bytes": "300"}))
    assert small.segment_bytes == 300  # the testing-only override wins, as in Kafka


def test_compaction_config_carries_the_topic_cleaner_settings():
    topic = TopicConfig.resolve(BrokerConfig.from_properties({}), {
        "min.cleanable.dirty.ratio": "0.25", "min.compaction.lag.ms": "10", "delete.retention.ms": "20"})
    settings = compaction_config(topic)
    assert (settings.min_cleanable_ratio, settings.min_compaction_lag_ms, settings.delete_retention_ms) == (
        0.25, 10, 20)


def cleaner_service(**props: str) -> LogCleanerService:
    config = BrokerConfig.from_properties(props)
    return LogCleanerService(SimpleNamespace(config=config, log_dirs=[]))


def test_cleaner_threads_buffer_and_load_factor():
    service = cleaner_service(**{"log.cleaner.threads": "2", "log.cleaner.dedupe.buffer.size": "4000000",
                                 "log.cleaner.io.buffer.load.factor": "0.5"})
    assert service.enabled and len(service.cleaners) == 2
    one = cleaner_service(**{"log.cleaner.threads": "1", "log.cleaner.dedupe.buffer.size": "4000000",
                             "log.cleaner.io.buffer.load.factor": "0.5"}).cleaners[0]
    half_memory = service.cleaners[0]
    denser = cleaner_service(**{"log.cleaner.threads": "1", "log.cleaner.dedupe.buffer.size": "4000000",
                                "log.cleaner.io.buffer.load.factor": "0.9"}).cleaners[0]
    assert half_memory.offset_map.max_entries < one.offset_map.max_entries < denser.offset_map.max_entries


def test_cleaner_enable_false_starts_no_worker(tmp_path):
    service = LogCleanerService(SimpleNamespace(config=BrokerConfig.from_properties({"log.cleaner.enable": "false"}),
                                                log_dirs=[tmp_path]))
    assert not service.enabled

    async def start() -> int:
        service.start()
        return len(service._tasks)

    assert asyncio.run(start()) == 0


def test_cleaner_backoff_ms_is_the_idle_sleep(monkeypatch):
    service = cleaner_service(**{"log.cleaner.backoff.ms": "2500"})
    slept: list[float] = []

    async def nothing_to_clean(cleaner: Any, now_ms: int | None = None) -> bool:
        return False

    real_sleep = asyncio.sleep
    test_thread = threading.current_thread()

    async def fake_sleep(seconds: float) -> None:
        # asyncio.sleep is patched module-wide: brokers of other tests, in their own threads, pass through
        if threading.current_thread() is not test_thread:
            return await real_sleep(seconds)
        slept.append(seconds)
        raise cleaner_tasks.CleaningAborted()

    monkeypatch.setattr(service, "clean_once", nothing_to_clean)
    monkeypatch.setattr(cleaner_tasks.asyncio, "sleep", fake_sleep)
    with pytest.raises(cleaner_tasks.CleaningAborted):
        asyncio.run(service._run(service.cleaners[0]))
    assert slept == [2.5]


def test_cluster_id_that_disagrees_with_the_data_stops_start_up(tmp_path, capsys):
    from klamm.cli.main import main
    from klamm.controller.meta_properties import MetaProperties, write_meta_properties

    write_meta_properties(tmp_path, MetaProperties(CLUSTER_ID, 1, "AAAAAAAAAAAAAAAAAAAAAA"))
    args = ["serve", "--override", f"log.dirs={tmp_path}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
    assert main([*args, "--override", "cluster.id=BBBBBBBBBBBBBBBBBBBBBB"]) == 2
    err = capsys.readouterr().err
    assert "configured cluster id BBBBBBBBBBBBBBBBBBBBBB does not match" in err and "Traceback" not in err


def test_the_consumer_group_protocol_is_offered_only_when_enabled() -> None:
    """group.coordinator.rebalance.protocols without `consumer`: ApiVersions leaves out ConsumerGroupHeartbeat and
    ConsumerGroupDescribe, as Kafka does, so clients keep to the classic protocol."""
    for protocols, offered in (("classic,consumer", True), ("classic", False)):
        with run_broker(properties={"group.coordinator.rebalance.protocols": protocols}) as b:
            with RawClient(b.port) as raw:
                keys = {k.api_key for k in raw.request(18, 3, {"client_software_name": "t",
                                                               "client_software_version": "1"}).api_keys}
            assert ({68, 69} <= keys) is offered and (keys & {68, 69} == set()) is not offered
