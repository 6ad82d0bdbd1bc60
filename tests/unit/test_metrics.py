"""Broker metrics: registry per broker, the HTTP endpoint's life cycle, scrape-time state, naming."""

from __future__ import annotations

import socket
import uuid
import urllib.error
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from klamm.broker.metrics import BrokerMetrics, batch_records_count, display_api_name
from klamm.controller.controller import Controller
from klamm.controller.image import MetadataImage, apply_batch, empty_image
from klamm.controller.metadata_log import InMemoryMetadataLog
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.coordinator.records import CommittedOffset
from klamm.protocol.records import NewRecord, build_batch
from klamm.testing import run_broker


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return response.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of a scrape."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


def test_api_names_follow_kafka():
    assert display_api_name(0) == "Produce"
    assert display_api_name(18) == "ApiVersions"
    assert display_api_name(8) == "OffsetCommit"
    assert display_api_name(9999) == "Unknown9999"


def test_records_count_is_read_from_the_batch_header():
    batch = build_batch([NewRecord(None, b"v%d" % i) for i in range(7)])
    assert batch_records_count(batch) == 7
    assert batch_records_count(b"short") == 0


def test_metrics_are_off_by_default():
    with run_broker() as b:
        assert b.broker.metrics_port is None
        assert b.metrics_url is None


def test_endpoint_serves_and_stops_with_the_broker():
    with run_broker(metrics_port=0) as b:
        port = b.broker.metrics_port
        text = scrape(b.metrics_url)
        assert "klamm_connections_active 0.0" in text
        assert value(text, "klamm_partitions") == 0
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=10)
        assert missing.value.code == 404
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_each_broker_has_its_own_registry():
    before = {family.name for family in REGISTRY.collect()}
    with run_broker(metrics_port=0) as first, run_broker(metrics_port=0) as second:
        assert first.broker.metrics.registry is not second.broker.metrics.registry
        assert first.broker.metrics_port != second.broker.metrics_port
        first.broker.metrics.produced("t", 100, 4)
        assert value(scrape(first.metrics_url), "klamm_topic_messages_in_total", topic="t") == 4
        assert value(scrape(second.metrics_url), "klamm_topic_messages_in_total", topic="t") is None
    assert {family.name for family in REGISTRY.collect()} == before  # nothing in the global registry


def test_requests_are_counted_and_timed_per_api():
    metrics = BrokerMetrics(SimpleNamespace())
    metrics.request_done(0, 9, 0.002)
    metrics.request_done(0, 9, 0.004)
    metrics.request_done(18, 3, 0.0001)
    text = metrics.exposition().decode()
    assert value(text, "klamm_requests_total", api="Produce", version="9") == 2
    assert value(text, "klamm_requests_total", api="ApiVersions", version="3") == 1
    assert value(text, "klamm_request_duration_seconds_count", api="Produce") == 2
    assert value(text, "klamm_request_duration_seconds_sum", api="Produce") == pytest.approx(0.006)
    assert value(text, "klamm_request_duration_seconds_bucket", api="Produce", le="0.005") == 2


def _fake_partition(topic: str, index: int, start: int, end: int, size: int, replicas: int = 1, isr: int = 1):
    return SimpleNamespace(topic=topic, index=index, log_start_offset=start, log_end_offset=end, high_watermark=end,
                           log=SimpleNamespace(size_in_bytes=lambda: size), replicas=list(range(replicas)),
                           isr=list(range(isr)), config=SimpleNamespace(min_insync_replicas=2))


def _image(*partitions: tuple[str, int, int, tuple[int, ...], tuple[int, ...]], brokers=()) -> MetadataImage:
    """An image from (topic, index, leader, replicas, isr) rows, and (node id, fenced) brokers."""
    image = empty_image("cluster", 0)
    records = [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": node_id, "incarnation_id": uuid.uuid4(), "broker_epoch": node_id, "end_points": [],
        "features": [], "rack": None, "fenced": fenced}) for node_id, fenced in brokers]
    topic_ids = {name: uuid.uuid4() for name, *_ in partitions}
    records += [MetadataRecord("TopicRecord", {"name": name, "topic_id": topic_id}) for name, topic_id in topic_ids.items()]
    records += [MetadataRecord("PartitionRecord", {
        "partition_id": index, "topic_id": topic_ids[name], "replicas": list(replicas), "isr": list(isr),
        "leader": leader, "leader_epoch": 0, "partition_epoch": 0}) for name, index, leader, replicas, isr in partitions]
    return apply_batch(image, enumerate(_replayed(records)))


def _replayed(records: list[MetadataRecord]) -> list[MetadataRecord]:
    """Records as replay sees them: encoded and decoded, so absent fields get their defaults."""
    return [decode_record(encode_record(record)) for record in records]


def _fake_broker(cleaner=None):
    partitions = {("a", 0): _fake_partition("a", 0, 0, 100, 4096), ("a", 1): _fake_partition("a", 1, 10, 40, 512),
                  ("b", 0): _fake_partition("b", 0, 0, 0, 0, replicas=3, isr=2)}
    group = SimpleNamespace(group_id="g", members={"m1": object()},
                            offsets={("a", 0): CommittedOffset(60, -1, "", 0), ("a", 1): CommittedOffset(40, -1, "", 0),
                                     ("gone", 0): CommittedOffset(5, -1, "", 0)})
    processor = SimpleNamespace(connections={1, 2, 3}, connections_accepted=7, bytes_sent=999)
    image = _image(("a", 0, 0, (0,), (0,)), ("a", 1, 0, (0,), (0,)), ("b", 0, 0, (0, 1, 2), (0, 1)))
    broker = SimpleNamespace(replicas=SimpleNamespace(partitions=partitions), _processors=[processor], bytes_in=1234,
                             group_coordinator=SimpleNamespace(coordinator=SimpleNamespace(groups={"g": group})),
                             node_id=0, controller=SimpleNamespace(image=image))
    if cleaner is not None:
        broker.log_cleaner = cleaner
    return broker


def test_state_is_read_at_scrape_time():
    broker = _fake_broker()
    metrics = BrokerMetrics(broker)
    metrics.parked_fetches = 2
    text = metrics.exposition().decode()
    assert value(text, "klamm_partitions") == 3
    assert value(text, "klamm_topics") == 2
    assert value(text, "klamm_under_replicated_partitions") == 1
    assert value(text, "klamm_partition_log_end_offset", topic="a", partition="0") == 100
    assert value(text, "klamm_partition_log_start_offset", topic="a", partition="1") == 10
    assert value(text, "klamm_partition_size_bytes", topic="a", partition="0") == 4096
    assert value(text, "klamm_connections_active") == 3
    assert value(text, "klamm_connections_accepted_total") == 7
    assert value(text, "klamm_network_received_bytes_total") == 1234
    assert value(text, "klamm_network_sent_bytes_total") == 999
    assert value(text, "klamm_purgatory_size", operation="fetch") == 2
    assert value(text, "klamm_consumer_groups") == 1
    assert value(text, "klamm_consumer_group_members", group="g") == 1
    assert value(text, "klamm_consumer_group_lag", group="g", topic="a", partition="0") == 40
    assert value(text, "klamm_consumer_group_lag", group="g", topic="a", partition="1") == 0
    assert value(text, "klamm_consumer_group_committed_offset", group="g", topic="gone", partition="0") == 5
    assert value(text, "klamm_consumer_group_lag", group="g", topic="gone", partition="0") is None  # not hosted
    broker.replicas.partitions[("a", 0)].high_watermark = 150  # no update call: the next scrape sees it
    assert value(metrics.exposition().decode(), "klamm_consumer_group_lag", group="g", topic="a", partition="0") == 90


def test_cleaner_totals_are_read_if_present():
    text = BrokerMetrics(_fake_broker()).exposition().decode()
    assert value(text, "klamm_log_cleaner_runs_total") == 0
    assert value(text, "klamm_log_cleaner_cleaned_bytes_total") == 0
    cleaner = SimpleNamespace(runs=3, bytes_cleaned=2048, bytes_written=1000)
    text = BrokerMetrics(_fake_broker(cleaner)).exposition().decode()
    assert value(text, "klamm_log_cleaner_runs_total") == 3
    assert value(text, "klamm_log_cleaner_cleaned_bytes_total") == 2048
    assert value(text, "klamm_log_cleaner_written_bytes_total") == 1000
    several = SimpleNamespace(cleaners=[cleaner, SimpleNamespace(runs=1, bytes_cleaned=2, bytes_written=1)])
    text = BrokerMetrics(_fake_broker(several)).exposition().decode()
    assert value(text, "klamm_log_cleaner_runs_total") == 4
    assert value(text, "klamm_log_cleaner_cleaned_bytes_total") == 2050


def test_cleaner_counters_of_the_real_cleaner_class():
    from klamm.storage.cleaner import Cleaner

    cleaner = Cleaner(1024 * 1024)
    cleaner.runs, cleaner.bytes_read, cleaner.bytes_written = 2, 500, 300
    text = BrokerMetrics(_fake_broker(cleaner)).exposition().decode()
    assert value(text, "klamm_log_cleaner_runs_total") == 2
    assert value(text, "klamm_log_cleaner_cleaned_bytes_total") == 500
    assert value(text, "klamm_log_cleaner_written_bytes_total") == 300


def test_names_follow_prometheus_conventions():
    metrics = BrokerMetrics(_fake_broker())
    metrics.request_done(1, 12, 0.1)
    metrics.produced("a", 10, 1)
    metrics.fetched("a", 10)
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        assert family.name.startswith("klamm_")
        if family.name.endswith("_created"):  # prometheus_client's creation timestamps of counters and histograms
            continue
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples), family.name
        if "bytes" in family.name:
            assert family.name.endswith(("_bytes", "_bytes_total", "_bytes_in", "_bytes_out")), family.name
        if "duration" in family.name:
            assert family.name.endswith("_seconds")


def test_a_deleted_topic_loses_its_series():
    metrics = BrokerMetrics(SimpleNamespace())
    metrics.produced("kept", 10, 1)
    metrics.produced("deleted", 10, 1)
    metrics.fetched("deleted", 10)
    old = _image(("kept", 0, 1, (1,), (1,)), ("deleted", 0, 1, (1,), (1,)))
    new = apply_batch(old, [(old.offset + 1, MetadataRecord("RemoveTopicRecord", {
        "topic_id": old.topics_by_name["deleted"].topic_id}))])
    metrics.forget_deleted_topics(old, new)
    text = metrics.exposition().decode()
    assert value(text, "klamm_topic_messages_in_total", topic="kept") == 1
    assert 'topic="deleted"' not in text
    metrics.produced("deleted", 5, 2)  # recreated: counts start again
    assert value(metrics.exposition().decode(), "klamm_topic_messages_in_total", topic="deleted") == 2


def test_replication_gauges_read_the_image_of_partitions_led_here():
    # broker 1 leads a-0 (ISR 1 of 3: under-replicated, under min ISR 2) and a-1 (ISR 2 of 3: at min ISR);
    # broker 2 leads b-0; c-0 has no leader (offline); broker 3 is fenced.
    image = _image(("a", 0, 1, (1, 2, 3), (1,)), ("a", 1, 1, (1, 2, 3), (1, 2)), ("b", 0, 2, (2, 1), (2, 1)),
                   ("c", 0, -1, (3,), (3,)), brokers=[(1, False), (2, False), (3, True)])
    hosted = {("a", 0): _fake_partition("a", 0, 0, 0, 0), ("a", 1): _fake_partition("a", 1, 0, 0, 0)}
    follower = SimpleNamespace(node_id=1, controller=SimpleNamespace(image=image),
                               replicas=SimpleNamespace(partitions=hosted))
    text = BrokerMetrics(follower).exposition().decode()
    assert value(text, "klamm_leader_partitions") == 2
    assert value(text, "klamm_under_replicated_partitions") == 2
    assert value(text, "klamm_under_min_isr_partitions") == 1
    assert value(text, "klamm_at_min_isr_partitions") == 1
    # not the active controller: the cluster-wide counts are the controller's to report
    assert value(text, "klamm_active_controller") == 0
    assert value(text, "klamm_offline_partitions") == 0
    assert value(text, "klamm_fenced_brokers") == 0

    controller = Controller(InMemoryMetadataLog(), 1)
    active = SimpleNamespace(node_id=1, controller=controller, replicas=SimpleNamespace(partitions=hosted))
    controller._published = image  # the collector reads only `.image` (the committed, published image)
    text = BrokerMetrics(active).exposition().decode()
    assert value(text, "klamm_active_controller") == 1
    assert value(text, "klamm_offline_partitions") == 1
    assert value(text, "klamm_active_brokers") == 2
    assert value(text, "klamm_fenced_brokers") == 1


def test_isr_changes_are_counted_by_the_leader():
    before = _image(("t", 0, 1, (1, 2, 3), (1, 2, 3)), ("t", 1, 2, (2, 1), (2, 1)))
    topic = before.topics_by_name["t"]
    def changed(isr0: tuple[int, ...], isr1: tuple[int, ...]) -> MetadataImage:
        return apply_batch(before, enumerate(_replayed([
            MetadataRecord("PartitionChangeRecord", {"partition_id": 0, "topic_id": topic.topic_id, "isr": list(isr0)}),
            MetadataRecord("PartitionChangeRecord", {"partition_id": 1, "topic_id": topic.topic_id, "isr": list(isr1)}),
        ]), start=100))
    metrics = BrokerMetrics(SimpleNamespace(node_id=1))
    shrunk = changed((1, 3), (2,))  # t-0 led here shrinks; t-1 is led by broker 2: not counted here
    metrics.count_isr_changes(before, shrunk)
    metrics.count_isr_changes(shrunk, changed((1, 3, 2), (2, 1)))
    metrics.count_isr_changes(shrunk, shrunk)  # no change, no count
    text = metrics.exposition().decode()
    assert value(text, "klamm_isr_shrinks_total") == 1
    assert value(text, "klamm_isr_expands_total") == 1


def test_follower_lag_is_read_from_the_leader_state():
    from klamm.broker.replication import LeaderState
    state = LeaderState(1, 0, 0, (1, 2, 3), (1, 2, 3), 0, 100, 0, 0, 30_000)
    state.on_follower_fetch(2, 90, 100, 1)  # replica 3 has not fetched yet: it lacks everything
    partition = SimpleNamespace(topic="t", index=0, leader=state, log_end_offset=100, log_start_offset=0,
                                high_watermark=90, log=SimpleNamespace(size_in_bytes=lambda: 0), replicas=[1, 2, 3],
                                isr=[1, 2, 3], config=SimpleNamespace(min_insync_replicas=1))
    broker = SimpleNamespace(node_id=1, replicas=SimpleNamespace(partitions={("t", 0): partition}))
    text = BrokerMetrics(broker).exposition().decode()
    assert value(text, "klamm_follower_lag_records", topic="t", partition="0", replica="2") == 10
    assert value(text, "klamm_follower_lag_records", topic="t", partition="0", replica="3") == 100


def test_request_durations_fall_in_the_buckets_prometheus_client_puts_them_in():
    """request_done finds the bucket by bisection; the exposition is what Histogram.observe would have made."""
    from prometheus_client import CollectorRegistry, Histogram

    from klamm.broker.metrics import LATENCY_BUCKETS

    reference = Histogram("klamm_request_duration_seconds", "", ["api"], buckets=LATENCY_BUCKETS,
                          registry=CollectorRegistry())
    metrics = BrokerMetrics(SimpleNamespace())
    samples = [0.0, -0.001, 100.0, 30.0, 30.000001]
    for bound in LATENCY_BUCKETS:
        samples += [bound, bound * 0.999, bound * 1.001]
    for seconds in samples:
        metrics.request_done(1, 12, seconds)
        reference.labels("Fetch").observe(seconds)
    text = metrics.exposition().decode()
    expected = {sample.labels["le"]: sample.value for family in reference.collect() for sample in family.samples
                if sample.name.endswith("_bucket")}
    assert len(expected) == len(LATENCY_BUCKETS) + 1
    for le, count in expected.items():
        assert value(text, "klamm_request_duration_seconds_bucket", api="Fetch", le=le) == count
    assert value(text, "klamm_request_duration_seconds_count", api="Fetch") == len(samples)
    assert value(text, "klamm_requests_total", api="Fetch", version="12") == len(samples)
