"""The series families of a scrape (one series per partition, follower or group partition) are written by klamm's
own SeriesGauge, a slice of the loop's time a turn.

prometheus_client's generate_latest took about 13 us a series, in one callback: 155 ms for a broker of 3,000
partitions, at every scrape. These tests pin down that SeriesGauge writes exactly the text generate_latest writes
for the same family, and that a scrape in slices hands the loop back and answers what a scrape in one go does.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_steps import counting_turns
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest

from klamm.broker import metrics as metrics_module
from klamm.broker.metrics import BrokerMetrics, MetricsServer
from klamm.broker.metrics_series import SeriesGauge
from klamm.coordinator.records import CommittedOffset

LABELS = ["topic", "partition", "group"]
numbers = st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(allow_nan=True),
                    st.booleans())


class _One:
    def __init__(self, family: GaugeMetricFamily) -> None:
        self.family = family

    def collect(self) -> list[GaugeMetricFamily]:
        return [self.family]


@given(st.lists(st.tuples(st.lists(st.text(), min_size=3, max_size=3), numbers), max_size=20),
       st.text(alphabet=st.characters(blacklist_categories=("Cs",))), st.sampled_from([LABELS, ["replica"], []]))
def test_a_series_gauge_writes_what_generate_latest_writes(series, documentation: str, labels: list[str]) -> None:
    ours = SeriesGauge("klamm_test_gauge", documentation, labels)
    theirs = GaugeMetricFamily("klamm_test_gauge", documentation, labels=labels)
    for values, number in series:
        values = values[:len(labels)]
        ours.add(values, number)
        theirs.add_metric(values, number)
    assert ours.text() == generate_latest(_One(theirs)).decode()


def partition(topic: str, index: int, end: int) -> SimpleNamespace:
    return SimpleNamespace(topic=topic, index=index, leader=None, log_end_offset=end, log_start_offset=0,
                           high_watermark=end, log=SimpleNamespace(size_in_bytes=lambda: 100 * end),
                           config=SimpleNamespace(min_insync_replicas=1))


def broker_of(partitions: int) -> SimpleNamespace:
    hosted = {(f"t{n % 7}", n): partition(f"t{n % 7}", n, n) for n in range(partitions)}
    group = SimpleNamespace(group_id='g "quoted"', members={"m": None},
                            offsets={key: CommittedOffset(5, -1, "", 0, None) for key in list(hosted)[:50]})
    return SimpleNamespace(node_id=1, replicas=SimpleNamespace(partitions=hosted),
                           group_coordinator=SimpleNamespace(coordinator=SimpleNamespace(groups={"g": group})))


@pytest.fixture
def one_step_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics_module, "EXPOSITION_SLICE_S", 0.0)


def test_a_scrape_in_slices_hands_the_loop_back_and_answers_what_one_go_does(one_step_a_slice) -> None:
    broker = broker_of(500)
    metrics = BrokerMetrics(broker)
    pieces, turns = asyncio.run(counting_turns(metrics.exposition_in_slices()))
    sliced = b"".join(pieces)
    assert sliced == metrics.exposition()
    assert turns >= 500 // metrics_module.SERIES_A_STEP
    text = sliced.decode()
    assert 'klamm_partition_log_end_offset{partition="499",topic="t2"} 499.0\n' in text
    assert 'klamm_consumer_group_lag{group="g \\"quoted\\"",partition="49",topic="t0"} 44.0\n' in text


def test_a_partition_gone_between_two_steps_is_left_out(one_step_a_slice) -> None:
    broker = broker_of(100)
    metrics = BrokerMetrics(broker)
    hosted = broker.replicas.partitions

    async def scrape() -> bytes:
        answer = asyncio.create_task(metrics.exposition_in_slices())
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        del hosted[("t1", 99)]
        return b"".join(await answer)

    text = asyncio.run(scrape()).decode()
    assert 'partition="98",topic="t0"' in text and 'partition="99"' not in text


def test_the_endpoint_sends_the_pieces_as_one_body_of_the_length_it_announces() -> None:
    metrics = BrokerMetrics(broker_of(2000))

    async def fetch() -> tuple[bytes, bytes]:
        server = MetricsServer(metrics, "127.0.0.1", 0)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
            return answer.split(b"\r\n\r\n", 1)  # type: ignore[return-value]
        finally:
            await server.stop()

    head, body = asyncio.run(fetch())
    assert body == metrics.exposition()
    assert f"Content-Length: {len(body)}\r\n".encode() in head + b"\r\n"
    assert len(body) > 500_000  # several pieces, and more than a socket buffer takes at once
