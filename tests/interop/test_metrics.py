"""Metrics after real traffic: confluent-kafka produces, consumes in a group and commits; we scrape over HTTP.

The broker runs as `klamm serve` with metrics.port set, so the CLI path is the
one under test. Also here, because they need a live broker: the Grafana
dashboard only queries series the endpoint really exposes, and the Docker
health check script passes against a running broker.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import BrokerFactory, free_port

from .helpers import create_topic, wait_for

pytestmark = pytest.mark.single_node  # one broker's metrics endpoint

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "docker" / "grafana" / "dashboards" / "klamm.json"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
TOPIC = "metrics-traffic"
GROUP = "metrics-group"
PER_PARTITION = {0: 30, 1: 20}
COMMITTED = {0: 10, 1: 20}


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def one(series: dict, name: str, **labels: str) -> float | None:
    return series.get((name, frozenset(labels.items())))


def total(series: dict, name: str, **labels: str) -> float:
    """Sum over every series of `name` whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(v for (n, lbls), v in series.items() if n == name and wanted <= lbls)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """A broker with metrics on, after a known produce / group consume / commit; yields (broker, consumer)."""
    factory = BrokerFactory(tmp_path_factory.mktemp("metrics"))
    metrics_port = free_port()
    broker = factory({"metrics.port": metrics_port, "group.initial.rebalance.delay.ms": 0})
    broker.metrics_port = metrics_port
    create_topic(broker.bootstrap, TOPIC, partitions=2)
    produced = 0
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for partition, count in PER_PARTITION.items():
        for i in range(count):
            value = b"value-%d-%03d" % (partition, i)
            produced += len(value)
            producer.produce(TOPIC, value=value, partition=partition)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    received = 0
    deadline = time.monotonic() + 30
    while received < sum(PER_PARTITION.values()) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received += 1
    assert received == sum(PER_PARTITION.values())
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()], asynchronous=False)
    yield broker, consumer, produced
    consumer.close()
    factory.close()


def test_topic_and_partition_figures(traffic):
    broker, _, produced = traffic
    series = scrape(broker.metrics_port)
    count = sum(PER_PARTITION.values())
    assert one(series, "klamm_topic_messages_in_total", topic=TOPIC) == count
    bytes_in = one(series, "klamm_topic_bytes_in_total", topic=TOPIC)
    assert bytes_in >= produced  # values plus batch and record overhead
    for partition, expected in PER_PARTITION.items():
        labels = {"topic": TOPIC, "partition": str(partition)}
        assert one(series, "klamm_partition_log_end_offset", **labels) == expected
        assert one(series, "klamm_partition_high_watermark", **labels) == expected
        assert one(series, "klamm_partition_log_start_offset", **labels) == 0
        assert one(series, "klamm_partition_size_bytes", **labels) > 0
    stored = total(series, "klamm_partition_size_bytes", topic=TOPIC)
    assert one(series, "klamm_topic_bytes_out_total", topic=TOPIC) >= stored  # the consumer read everything
    assert one(series, "klamm_partitions") >= 2 and one(series, "klamm_topics") >= 1
    assert one(series, "klamm_under_replicated_partitions") == 0


def test_request_figures(traffic):
    broker, _, _ = traffic
    series = scrape(broker.metrics_port)
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "JoinGroup", "SyncGroup", "OffsetCommit",
                "FindCoordinator", "CreateTopics"):
        assert total(series, "klamm_requests_total", api=api) >= 1, api
    fetches = total(series, "klamm_requests_total", api="Fetch")
    assert one(series, "klamm_request_duration_seconds_count", api="Fetch") >= fetches - 1  # one may be in flight
    assert one(series, "klamm_request_duration_seconds_bucket", api="Produce", le="+Inf") == \
        total(series, "klamm_requests_total", api="Produce")
    assert one(series, "klamm_network_received_bytes_total") > 0
    assert one(series, "klamm_network_sent_bytes_total") > 0


def test_event_loop_lag(traffic):
    broker, _, _ = traffic
    wait_for(lambda: total(scrape(broker.metrics_port), "klamm_event_loop_lag_seconds_count") >= 3,
             what="three event-loop lag observations (one each 100 ms)")
    # An idle loop runs its timer within a few milliseconds, though not always on a loaded machine (the broker
    # makes its message types in a thread after start-up): observations reach the 10 ms bucket.
    wait_for(lambda: total(scrape(broker.metrics_port), "klamm_event_loop_lag_seconds_bucket", le="0.01") >= 3,
             what="three event-loop lag observations of 10 ms or less")
    series = scrape(broker.metrics_port)
    assert total(series, "klamm_event_loop_lag_seconds_bucket", le="+Inf") == \
        total(series, "klamm_event_loop_lag_seconds_count")


def test_connections_and_parked_fetches(traffic):
    broker, _, _ = traffic
    series = scrape(broker.metrics_port)
    assert one(series, "klamm_connections_active") >= 1  # the consumer (and our scrape is not a Kafka connection)
    assert one(series, "klamm_connections_accepted_total") >= one(series, "klamm_connections_active")
    # the idle consumer long-polls: its fetch waits in the purgatory
    wait_for(lambda: one(scrape(broker.metrics_port), "klamm_purgatory_size", operation="fetch") >= 1,
             timeout=15, what="a parked fetch")


def test_consumer_group_lag(traffic):
    broker, _, _ = traffic
    series = scrape(broker.metrics_port)
    assert one(series, "klamm_consumer_group_members", group=GROUP) == 1
    for partition, offset in COMMITTED.items():
        labels = {"group": GROUP, "topic": TOPIC, "partition": str(partition)}
        assert one(series, "klamm_consumer_group_committed_offset", **labels) == offset
        assert one(series, "klamm_consumer_group_lag", **labels) == PER_PARTITION[partition] - offset
    assert one(series, "klamm_log_cleaner_runs_total") >= 0


def declared(port: int) -> set[str]:
    """Every metric family the endpoint declares (HELP and TYPE), samples or not: a single node declares the
    replication families (follower lag) with no sample, as there is no follower."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {name for family in text_string_to_metric_families(text)
            for name in (family.name, *(s.name for s in family.samples))}


def test_dashboard_queries_only_exposed_series(traffic):
    broker, _, _ = traffic
    exposed = declared(broker.metrics_port)
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [target["expr"] for panel in _panels(dashboard) for target in panel.get("targets", [])]
    assert len(expressions) >= 10
    expressions += [variable["definition"] for variable in dashboard["templating"]["list"]]
    referenced = {name for expr in expressions for name in re.findall(r"\bklamm_[a-zA-Z0-9_]+", expr)}
    assert referenced, "the dashboard queries no klamm metric"
    assert referenced <= exposed, f"not exposed: {sorted(referenced - exposed)}"


def _panels(dashboard: dict) -> list[dict]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # panels inside collapsed rows
    return panels


def test_healthcheck_script(traffic):
    broker, _, _ = traffic
    ok = subprocess.run([sys.executable, str(HEALTHCHECK), "127.0.0.1", str(broker.port)],
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    closed = subprocess.run([sys.executable, str(HEALTHCHECK), "127.0.0.1", str(free_port())],
                            capture_output=True, text=True, timeout=30)
    assert closed.returncode == 1
