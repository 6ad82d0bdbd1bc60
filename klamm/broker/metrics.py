"""Prometheus metrics of one broker: counters on the hot paths, gauges read at scrape time.

Every broker owns a `CollectorRegistry` (never prometheus_client's global one),
so a process can run several brokers. Two kinds of figures:

* counted as they happen, with the labelled child of each series cached in a
  dict so a request costs a dict lookup and an increment: requests and their
  latency per API, bytes and messages in and bytes out per topic;
* computed when Prometheus scrapes, by `BrokerStateCollector` reading broker
  state: connections, partitions and their offsets and sizes, parked fetches,
  consumer-group lag, log cleaner totals, and the replication state of the
  partitions this broker leads, read from the metadata image (Kafka's
  UnderReplicatedPartitions, UnderMinIsrPartitionCount, AtMinIsrPartitionCount,
  LeaderCount, and on the active controller OfflinePartitionsCount,
  ActiveControllerCount, ActiveBrokerCount and FencedBrokerCount), and each
  follower's lag as its leader sees it. Nothing is updated on append. The
  families of a series per partition, follower or group partition are written
  by klamm's own SeriesGauge, a slice of the loop's time a turn
  (`exposition_in_slices`): prometheus_client's writer held the loop 155 ms a
  scrape at 3,000 partitions.

ISR shrinks and expands (Kafka's IsrShrinksPerSec and IsrExpandsPerSec) are
counted by the leader when a new image commits its partition's changed ISR.

Event-loop lag (klamm's own, `klamm_event_loop_lag_seconds`): a timer asks to run
every LOOP_LAG_INTERVAL_S and records how late it ran. Everything on the loop waits
that long behind whatever held it (a request handled, a segment rolled): it is the
time a request could not even be read.

The endpoint is served on the broker's own event loop (`MetricsServer`), not in
prometheus_client's HTTP thread: the collector then reads partitions and groups
on the thread that changes them, so a scrape never sees a dict mid-update.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector

from klamm.broker.metrics_series import SeriesGauge
from klamm.controller.controller import Controller
from klamm.protocol.api import api_name
from klamm.steps import Steps, each_value, in_slices, run_steps

log = logging.getLogger("klamm.metrics")
C = TypeVar("C", bound=Collector)

# records_count of a v2 batch header (see klamm.protocol.batch): read in place, records stay encoded
_RECORDS_COUNT = struct.Struct(">i")
_RECORDS_COUNT_OFFSET = 57

# Kafka request latencies span sub-millisecond metadata calls to 500 ms long polls and beyond
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LOOP_LAG_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
LOOP_LAG_INTERVAL_S = 0.1
# A scrape writes its series a slice of the loop's time a turn (about 2 us a series), a step every SERIES_A_STEP.
EXPOSITION_SLICE_S = 0.0005
SERIES_A_STEP = 16
IMAGE_PARTITIONS_A_STEP = 64  # the replication counts: about 0.5 us a partition of the image


def display_api_name(api_key: int) -> str:
    """Kafka's name of an API key, as its JMX metrics spell it: 0 -> 'Produce', 18 -> 'ApiVersions'."""
    try:
        return "".join(part.capitalize() for part in api_name(api_key).split("_"))
    except KeyError:
        return f"Unknown{api_key}"


def batch_records_count(records: bytes | bytearray | memoryview) -> int:
    """The records_count field of the (single, validated) v2 batch a produce request carried."""
    if len(records) < _RECORDS_COUNT_OFFSET + 4:
        return 0
    return _RECORDS_COUNT.unpack_from(records, _RECORDS_COUNT_OFFSET)[0]


def _increment(counter: Any) -> Callable[[float], None]:
    """The increment of one counter series, bound once: Counter.inc checks on every call what a series made here
    never gets (a negative amount, an exemplar, an unlabelled parent); its value object's inc is the same count.
    A prometheus_client without that value object gets Counter.inc itself."""
    value = getattr(counter, "_value", None)
    return value.inc if callable(getattr(value, "inc", None)) else counter.inc


class _Observe:
    """Histogram.observe of one series, with the bucket found by bisection instead of a scan of the bounds and
    the values bound once (as _increment); `of` falls back to Histogram.observe without them."""

    __slots__ = ("_bounds", "_buckets", "_sum")

    def __init__(self, histogram: Any) -> None:
        self._bounds = list(histogram._upper_bounds)
        self._buckets = [bucket.inc for bucket in histogram._buckets]
        self._sum = histogram._sum.inc

    @classmethod
    def of(cls, histogram: Any) -> Callable[[float], None]:
        try:
            return cls(histogram)
        except (AttributeError, TypeError):
            return histogram.observe  # type: ignore[no-any-return]

    def __call__(self, amount: float) -> None:
        self._sum(amount)
        self._buckets[bisect_left(self._bounds, amount)](1)  # the first bound >= amount; the last is +Inf


class BrokerMetrics:
    """The registry of one broker and the counters its request paths increment."""

    def __init__(self, broker: Any) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._collectors: list[Any] = []  # as registered: a scrape writes each in a step of its own
        register = self._register
        self._requests = register(Counter("klamm_requests", "Requests handled, by API and version.",
                                          ["api", "version"], registry=None))
        self._duration = register(Histogram("klamm_request_duration_seconds",
                                            "Time from a request's decoding to its response (fetch long polls "
                                            "included).", ["api"], buckets=LATENCY_BUCKETS, registry=None))
        self._bytes_in = register(Counter("klamm_topic_bytes_in", "Record batch bytes produced to a topic.",
                                          ["topic"], registry=None))
        self._messages_in = register(Counter("klamm_topic_messages_in", "Records appended to a topic.",
                                             ["topic"], registry=None))
        self._bytes_out = register(Counter("klamm_topic_bytes_out", "Record batch bytes fetched from a topic.",
                                           ["topic"], registry=None))
        self._isr_shrinks = register(Counter("klamm_isr_shrinks", "ISR shrinks of partitions this broker leads.",
                                             registry=None))
        self._isr_expands = register(Counter("klamm_isr_expands", "ISR expansions of partitions this broker leads.",
                                             registry=None))
        self._loop_lag = register(Histogram("klamm_event_loop_lag_seconds",
                                            "How late the event loop ran a timer: how long everything on it waited.",
                                            buckets=LOOP_LAG_BUCKETS, registry=None))
        self._node_id = getattr(broker, "node_id", None)
        self._request_series: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._in_series: dict[str, tuple[Any, Any]] = {}
        self._out_series: dict[str, Any] = {}
        self.parked_fetches = 0  # fetches waiting in wait_for_append (Kafka's fetch purgatory)
        self._state = self._register(BrokerStateCollector(broker, self))

    def _register(self, collector: C) -> C:
        self.registry.register(collector)
        self._collectors.append(collector)
        return collector

    async def watch_loop_lag(self, interval_s: float = LOOP_LAG_INTERVAL_S) -> None:
        """Runs until cancelled: each tick's delay past its due time is one observation."""
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + interval_s
            await asyncio.sleep(interval_s)
            self._loop_lag.observe(max(0.0, loop.time() - due))

    # hot paths: a dict lookup and the increments of values found once per series (_increment, _Observe)
    def request_done(self, api_key: int, version: int, seconds: float) -> None:
        series = self._request_series.get((api_key, version))
        if series is None:
            series = self._new_request_series(api_key, version)
        series[0](1)
        series[1](seconds)

    def produced(self, topic: str, size: int, messages: int) -> None:
        series = self._in_series.get(topic)
        if series is None:
            series = self._in_series[topic] = (_increment(self._bytes_in.labels(topic)),
                                               _increment(self._messages_in.labels(topic)))
        series[0](size)
        if messages:
            series[1](messages)

    def fetched(self, topic: str, size: int) -> None:
        series = self._out_series.get(topic)
        if series is None:
            series = self._out_series[topic] = _increment(self._bytes_out.labels(topic))
        series(size)

    def forget_deleted_topics(self, old_image: Any, new_image: Any) -> None:
        """A controller listener: a deleted topic's series go, as Kafka removes its topic metrics."""
        before, after = old_image.topics_by_name, new_image.topics_by_name
        names = new_image.topics_changed(before)
        gone = before.keys() - after.keys() if names is None else [n for n in names if n in before and n not in after]
        for topic in gone:
            if self._in_series.pop(topic, None) is not None:
                self._bytes_in.remove(topic)
                self._messages_in.remove(topic)
            if self._out_series.pop(topic, None) is not None:
                self._bytes_out.remove(topic)

    def count_isr_changes(self, old_image: Any, new_image: Any) -> None:
        """A controller listener: one shrink or expansion per committed ISR change of a partition led here."""
        topics = new_image.topics_by_name
        names = new_image.topics_changed(old_image.topics_by_name)
        for topic in topics.values() if names is None else [topics[n] for n in names if n in topics]:
            before = old_image.topics_by_name.get(topic.name)
            if before is topic or before is None or before.topic_id != topic.topic_id:
                continue  # images share the topics a change did not touch
            for index, partition in topic.partitions.items():
                previous = before.partitions.get(index)
                if partition.leader != self._node_id or previous is None or previous.isr == partition.isr:
                    continue
                old, new = set(previous.isr), set(partition.isr)
                if old - new:
                    self._isr_shrinks.inc()
                if new - old:
                    self._isr_expands.inc()

    def _new_request_series(self, api_key: int, version: int) -> tuple[Any, Any]:
        name = display_api_name(api_key)
        series = (_increment(self._requests.labels(name, str(version))), _Observe.of(self._duration.labels(name)))
        self._request_series[(api_key, version)] = series
        return series

    def exposition(self) -> bytes:
        """The text a scrape returns (Prometheus text format 0.0.4), in one go."""
        return b"".join(run_steps(self._exposition()))

    async def exposition_in_slices(self) -> list[bytes]:
        """exposition()'s text in pieces, made EXPOSITION_SLICE_S of the loop's time a turn: a broker of thousands
        of partitions has tens of thousands of series to write (and joining megabytes costs milliseconds)."""
        return await in_slices(self._exposition(), EXPOSITION_SLICE_S)

    def _exposition(self) -> Steps[list[bytes]]:
        chunks = []
        for collector in self._collectors:  # the families of a few series each
            chunks.append(generate_latest(collector))
            yield
        for family in (yield from self._state.series()):
            chunks.append(family.text().encode())
            yield
        return chunks


class BrokerStateCollector(Collector):
    """Gauges and totals read from the broker's state when Prometheus scrapes."""

    def __init__(self, broker: Any, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.metrics = metrics

    def collect(self) -> Iterator[Any]:
        """The families of a few series each; those of a series per partition or group are `series`."""
        yield from self._network()
        yield from self._partition_counts()
        purgatory = GaugeMetricFamily("klamm_purgatory_size", "Requests parked until data arrives or they time out.",
                                      labels=["operation"])
        purgatory.add_metric(["fetch"], self.metrics.parked_fetches)
        purgatory.add_metric(["produce"], 0)  # acks=-1 never waits: one replica is the whole ISR
        yield purgatory
        yield from self._groups()
        yield from self._cleaner()

    def _network(self) -> Iterator[Any]:
        processors = getattr(self.broker, "_processors", [])
        yield GaugeMetricFamily("klamm_connections_active", "Open client connections.",
                                value=sum(len(p.connections) for p in processors))
        yield CounterMetricFamily("klamm_connections_accepted", "Client connections accepted.",
                                  value=sum(getattr(p, "connections_accepted", 0) for p in processors))
        yield CounterMetricFamily("klamm_network_received_bytes", "Request bytes received.",
                                  value=getattr(self.broker, "bytes_in", 0))
        yield CounterMetricFamily("klamm_network_sent_bytes", "Response bytes sent.",
                                  value=sum(p.bytes_sent for p in processors))

    def _partition_counts(self) -> Iterator[Any]:
        hosted = self._hosted()
        yield GaugeMetricFamily("klamm_partitions", "Partitions hosted by this broker.", value=len(hosted))
        yield GaugeMetricFamily("klamm_topics", "Topics with a partition on this broker.",
                                value=len({topic for topic, _ in hosted}))

    def _hosted(self) -> dict[tuple[str, int], Any]:
        replicas = getattr(self.broker, "replicas", None)
        return replicas.partitions if replicas is not None else {}

    def series(self) -> Steps[list[SeriesGauge]]:
        """The families with a series per partition, follower or group partition, a step every SERIES_A_STEP
        series, and those counted over every partition of the image. A partition gone between two steps is left
        out."""
        families = yield from self._partition_series()
        families.append((yield from self._follower_lag()))
        families += yield from self._group_series()
        families += yield from self._replication()
        return families

    def _partition_series(self) -> Steps[list[SeriesGauge]]:
        labels = ["topic", "partition"]
        start = SeriesGauge("klamm_partition_log_start_offset", "First offset in the log.", labels)
        end = SeriesGauge("klamm_partition_log_end_offset", "Offset the next record will get.", labels)
        high = SeriesGauge("klamm_partition_high_watermark", "Last committed offset + 1.", labels)
        size = SeriesGauge("klamm_partition_size_bytes", "Bytes of the partition's log segments.", labels)

        def add(partition: Any) -> None:
            values = (partition.topic, str(partition.index))
            start.add(values, partition.log_start_offset)
            end.add(values, partition.log_end_offset)
            high.add(values, partition.high_watermark)
            size.add(values, partition.log.size_in_bytes())

        yield from each_value(self._hosted(), SERIES_A_STEP, add)
        return [start, end, high, size]

    def _replication(self) -> Steps[list[SeriesGauge]]:
        """What the image says of the partitions this broker leads, and, on the active controller, of all: a
        walk of every partition of the image, a step every IMAGE_PARTITIONS_A_STEP."""
        image = _image(self.broker)
        node_id = getattr(self.broker, "node_id", None)
        hosted = self._hosted()
        leaders = under_replicated = under_min_isr = at_min_isr = offline = walked = 0
        for topic in list(image.topics_by_name.values()) if image is not None else ():
            for index, partition in topic.partitions.items():
                walked += 1
                if walked % IMAGE_PARTITIONS_A_STEP == 0:
                    yield
                offline += partition.leader < 0
                if partition.leader != node_id:
                    continue
                leaders += 1
                under_replicated += len(partition.isr) < len(partition.replicas)
                local = hosted.get((topic.name, index))
                min_isr = local.config.min_insync_replicas if local is not None else 1
                under_min_isr += len(partition.isr) < min_isr
                at_min_isr += len(partition.isr) == min_isr
        controller = _is_active_controller(self.broker)
        brokers = list(image.brokers.values()) if image is not None and controller else []
        return [_single("klamm_leader_partitions", "Partitions this broker leads.", leaders),
                _single("klamm_under_replicated_partitions",
                        "Partitions led here whose ISR is smaller than their replica set.", under_replicated),
                _single("klamm_under_min_isr_partitions",
                        "Partitions led here whose ISR is smaller than min.insync.replicas.", under_min_isr),
                _single("klamm_at_min_isr_partitions",
                        "Partitions led here whose ISR is exactly min.insync.replicas.", at_min_isr),
                _single("klamm_active_controller", "1 on the active controller, else 0.", int(controller)),
                _single("klamm_offline_partitions", "Partitions without a leader (reported by the active controller).",
                        offline if controller else 0),
                _single("klamm_active_brokers", "Registered unfenced brokers (active controller).",
                        sum(not b.fenced for b in brokers)),
                _single("klamm_fenced_brokers", "Registered fenced brokers (active controller).",
                        sum(b.fenced for b in brokers))]

    def _groups(self) -> Iterator[Any]:
        yield GaugeMetricFamily("klamm_consumer_groups", "Consumer groups known to the coordinator.",
                                value=len(self._known_groups()))

    def _known_groups(self) -> dict[str, Any]:
        runtime = getattr(self.broker, "group_coordinator", None)
        coordinator = getattr(runtime, "coordinator", None)
        return coordinator.groups if coordinator is not None else {}

    def _group_series(self) -> Steps[list[SeriesGauge]]:
        hosted = self._hosted()
        labels = ["group", "topic", "partition"]
        committed = SeriesGauge("klamm_consumer_group_committed_offset", "The group's committed offset.", labels)
        lag = SeriesGauge("klamm_consumer_group_lag", "High watermark minus the committed offset.", labels)
        members = SeriesGauge("klamm_consumer_group_members", "Members of the group.", ["group"])
        written = 0
        for group in list(self._known_groups().values()):
            members.add([group.group_id], len(group.members))
            for (topic, index), offset in list(group.offsets.items()):
                written += 1
                if written % SERIES_A_STEP == 0:
                    yield
                values = (group.group_id, topic, str(index))
                committed.add(values, offset.offset)
                partition = hosted.get((topic, index))
                if partition is not None and offset.offset >= 0:
                    lag.add(values, max(0, partition.high_watermark - offset.offset))
        return [members, committed, lag]

    def _cleaner(self) -> Iterator[Any]:
        # The log cleaner's counters (klamm.storage.cleaner.Cleaner) are read if the broker has one, else 0.
        cleaners = _cleaners(self.broker)
        yield CounterMetricFamily("klamm_log_cleaner_runs", "Log cleanings completed.",
                                  value=_sum_of(cleaners, "runs"))
        yield CounterMetricFamily("klamm_log_cleaner_cleaned_bytes", "Bytes of log read by the cleaner.",
                                  value=_sum_of(cleaners, "bytes_cleaned"))
        yield CounterMetricFamily("klamm_log_cleaner_written_bytes", "Bytes of cleaned segments written.",
                                  value=_sum_of(cleaners, "bytes_written"))
        yield from self._uncleanable()

    def _uncleanable(self) -> Iterator[Any]:
        """Kafka's uncleanable-partitions-count and uncleanable-bytes, per log dir (its logDirectory tag)."""
        count = GaugeMetricFamily("klamm_log_cleaner_uncleanable_partitions",
                                  "Compacted partitions whose cleaning failed and that are no longer cleaned "
                                  "until deleted.", labels=["log_directory"])
        size = GaugeMetricFamily("klamm_log_cleaner_uncleanable_bytes",
                                 "Cleanable bytes of the uncleanable partitions.", labels=["log_directory"])
        report = getattr(getattr(self.broker, "log_cleaner", None), "uncleanable", None)
        for log_dir, partitions, nbytes in report() if callable(report) else ():
            count.add_metric([str(log_dir)], partitions)
            size.add_metric([str(log_dir)], nbytes)
        yield count
        yield size


    def _follower_lag(self) -> Steps[SeriesGauge]:
        """Per follower of a partition led here: records it lacks (leader log end - its fetch offset)."""
        lag = SeriesGauge("klamm_follower_lag_records", "Records a follower lacks, as its last fetch showed the leader.",
                          ["topic", "partition", "replica"])

        def add(partition: Any) -> None:
            state = getattr(partition, "leader", None)
            if state is None or not hasattr(state, "follower_log_end_offset"):
                return
            for replica in state.replicas:
                if replica == state.local_id:
                    continue
                end = state.follower_log_end_offset(replica)
                behind = partition.log_end_offset - end if end >= 0 else partition.log_end_offset
                lag.add((partition.topic, str(partition.index), str(replica)), max(0, behind))

        yield from each_value(self._hosted(), SERIES_A_STEP, add)
        return lag


def _single(name: str, documentation: str, value: float) -> SeriesGauge:
    gauge = SeriesGauge(name, documentation, ())
    gauge.add((), value)
    return gauge


def _image(broker: Any) -> Any:
    """The metadata image the broker serves from, or None before it has one."""
    controller = getattr(broker, "controller", None)
    return getattr(controller, "image", None)


def _is_active_controller(broker: Any) -> bool:
    """This node runs the active controller: a local Controller with its own node id, leading its quorum."""
    controller = getattr(broker, "controller", None)
    local = isinstance(controller, Controller) and controller.node_id == getattr(broker, "node_id", None)
    active = getattr(broker, "controller_active", None)
    return local and (active is None or active())


def _cleaners(broker: Any) -> list[Any]:
    """`broker.log_cleaner`: the cleaner service, with one Cleaner per thread in `.cleaners`."""
    cleaner = getattr(broker, "log_cleaner", None)
    if cleaner is None:
        return []
    several = getattr(cleaner, "cleaners", None)
    return list(several) if several is not None else [cleaner]


def _sum_of(cleaners: list[Any], name: str) -> float:
    values = (getattr(cleaner, name, 0) for cleaner in cleaners)
    return sum(v for v in values if isinstance(v, (int, float)))


class MetricsServer:
    """A minimal HTTP/1.1 endpoint for GET /metrics, served on the broker's event loop."""

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host or None, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._clients):
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.add(writer)
        try:
            while await self._answer_one(reader, writer):
                pass
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            self._clients.discard(writer)
            writer.close()

    async def _answer_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; True if the client wants to keep the connection."""
        request_line = await asyncio.wait_for(reader.readline(), 30)
        if not request_line:
            return False
        keep_alive = request_line.rstrip().endswith(b"HTTP/1.1")
        while True:  # headers: only Connection matters
            line = await asyncio.wait_for(reader.readline(), 30)
            if line in (b"\r\n", b"\n", b""):
                break
            if line.lower().startswith(b"connection:") and b"close" in line.lower():
                keep_alive = False
        parts = request_line.split()
        method, path = (parts[0], parts[1].split(b"?")[0]) if len(parts) >= 2 else (b"", b"")
        if method not in (b"GET", b"HEAD"):
            status, content_type, body = b"405 Method Not Allowed", b"text/plain", [b"only GET\n"]
        elif path in (b"/metrics", b"/"):
            status, content_type, body = b"200 OK", CONTENT_TYPE_PLAIN_0_0_4.encode(), \
                await self.metrics.exposition_in_slices()
        else:
            status, content_type, body = b"404 Not Found", b"text/plain", [b"try /metrics\n"]
        head = (b"HTTP/1.1 " + status + b"\r\nContent-Type: " + content_type
                + b"\r\nContent-Length: " + str(sum(map(len, body))).encode()
                + (b"\r\n" if keep_alive else b"\r\nConnection: close\r\n") + b"\r\n")
        writer.write(head)
        for chunk in body if method != b"HEAD" else ():
            writer.write(chunk)  # a piece a turn: megabytes at once cost milliseconds to copy
            await asyncio.sleep(0)
        await writer.drain()
        return keep_alive
