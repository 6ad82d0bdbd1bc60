"""The `klamm` data source: Spark's Kafka source and sink, on PySpark's Python Data Source API.

The driver plans: it resolves the partitions and the offset range each Spark
partition reads (klamm/spark/offsets.py). Executors read their range
(klamm/spark/reading.py) or write their rows (klamm/spark/writing.py). Readers
and writers are pickled to the executors, so they hold only plain data; the
clients they use are made where they run.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader, InputPartition,
                                    WriterCommitMessage)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from klamm.spark.offsets import (DataLossError, OffsetRange, OffsetResolver, TopicPartitionKey, check_ranges,
                                 split)
from klamm.spark.options import OptionError, SourceOptions, source_options
from klamm.spark.reading import read_range
from klamm.spark.writing import KlammBatchWriter, KlammStreamWriter, sink_options

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "timestampType int")
HEADERS = "headers array<struct<key: string, value: binary>>"


def row_schema(options: Any) -> str:
    """Spark's Kafka row schema, with `headers` when the includeHeaders option asks for it."""
    headers = str(options.get("includeHeaders", "false")).strip().lower() == "true"
    return f"{SCHEMA}, {HEADERS}" if headers else SCHEMA


class RangePartition(InputPartition):
    def __init__(self, r: OffsetRange) -> None:
        super().__init__(r)
        self.range = r


class KlammDataSource(DataSource):
    """format("klamm"): the options and rows of Spark's Kafka source and sink."""

    @classmethod
    def name(cls) -> str:
        return "klamm"

    def schema(self) -> str:
        return row_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KlammBatchReader(source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KlammStreamReader(source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KlammBatchWriter:
        return KlammBatchWriter(sink_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KlammStreamWriter:
        return KlammStreamWriter(sink_options(self.options, schema))


def _read(options: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, RangePartition):  # Spark reads one plain partition when we planned none
        return iter(())
    return read_range(options.kafka, partition.range, options.include_headers, options.fail_on_data_loss,
                      options.poll_timeout_s)


class KlammBatchReader(DataSourceReader):
    """spark.read: one offset range a Spark partition, fixed when the query is planned."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        resolver = OffsetResolver(options)
        partitions = resolver.partitions()
        starts = resolver.resolve(options.starting, partitions, ending=False)
        ends = resolver.resolve(options.ending, partitions, ending=True)
        for tp in partitions:
            if starts[tp] > ends[tp]:
                raise OptionError(f"the start offset {starts[tp]} for {tp[0]}-{tp[1]} is greater than its end "
                                  f"offset {ends[tp]}")
        ranges = [OffsetRange(t, p, starts[(t, p)], ends[(t, p)]) for t, p in partitions]
        ranges = check_ranges(ranges, resolver.earliest(partitions), resolver.latest(partitions),
                              options.fail_on_data_loss)
        self.ranges = split(ranges, options.min_partitions)

    def partitions(self) -> Sequence[InputPartition]:
        return [RangePartition(r) for r in self.ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)


def offsets_json(offsets: dict[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """Spark's Kafka offset form: {"topic": {"0": 23}}."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def offsets_of(json_offsets: dict[str, dict[str, int]]) -> dict[TopicPartitionKey, int]:
    return {(topic, int(p)): int(o) for topic, parts in json_offsets.items() for p, o in parts.items()}


def rate_limit(start: dict[TopicPartitionKey, int], latest: dict[TopicPartitionKey, int],
               max_rows: int) -> dict[TopicPartitionKey, int]:
    """Ends that take at most about `max_rows` records, shared in proportion to what each partition has."""
    sizes = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(latest)
    ends = {}
    for tp, end in latest.items():
        share = max_rows * sizes[tp] / total
        take = int(share) if share >= 1 else (1 if sizes[tp] else 0)
        ends[tp] = min(start.get(tp, end) + take, end)
    return ends


class KlammStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """readStream: micro-batches between offsets that Spark keeps in the query's checkpoint."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._resolver: OffsetResolver | None = None
        self._target: dict[TopicPartitionKey, int] | None = None  # Trigger.AvailableNow: read up to here

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_resolver": None, "_target": None}  # the admin client stays here

    @property
    def resolver(self) -> OffsetResolver:
        if self._resolver is None:
            self._resolver = OffsetResolver(self.options)
        return self._resolver

    def initialOffset(self) -> dict:
        partitions = self.resolver.partitions()
        return offsets_json(self.resolver.resolve(self.options.starting, partitions, ending=False))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.resolver.latest(self.resolver.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_of(start)
        partitions = self.resolver.partitions() if self._target is None else sorted(self._target)
        gone = sorted(set(begin) - set(partitions))
        if gone and self.options.fail_on_data_loss:
            raise DataLossError(f"partitions {gone} are gone: some data may have been missed; set "
                                "failOnDataLoss to false to go on without them")
        latest = self.resolver.latest(partitions) if self._target is None else dict(self._target)
        new = [tp for tp in partitions if tp not in begin]  # new partitions are read from their start
        begin.update(self.resolver.earliest(new))
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return offsets_json({tp: max(latest[tp], begin[tp]) for tp in partitions})

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = offsets_of(start), offsets_of(end)
        new = [tp for tp in stop if tp not in begin]
        begin.update(self.resolver.earliest(new))
        ranges = [OffsetRange(t, p, begin[(t, p)], o) for (t, p), o in sorted(stop.items()) if o > begin[(t, p)]]
        touched = [(r.topic, r.partition) for r in ranges]
        ranges = check_ranges(ranges, self.resolver.earliest(touched), self.resolver.latest(touched),
                              self.options.fail_on_data_loss)
        return [RangePartition(r) for r in split(ranges, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not in a consumer group."""


__all__ = ["KlammDataSource", "WriterCommitMessage"]
