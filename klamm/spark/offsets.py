"""The driver's side of reading: which partitions a query reads and the offset range of each.

Offsets are resolved with the Admin API's ListOffsets (the read-committed
"latest" is the last stable offset, so a range never waits for an open
transaction). Ranges are half-open: [start, end).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec as KafkaOffsetSpec

from klamm.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, SourceOptions

TopicPartitionKey = tuple[str, int]
TIMEOUT_S = 30.0


class DataLossError(RuntimeError):
    """Offsets a query needs are gone (deleted or truncated) and failOnDataLoss is true."""


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


class OffsetResolver:
    """Partitions and offsets for one query, asked of the cluster through one admin client."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        config = {k: v for k, v in options.kafka.items() if k not in ("isolation.level",)}
        self._admin = AdminClient(config)
        self._isolation = (IsolationLevel.READ_COMMITTED if options.kafka.get("isolation.level") == "read_committed"
                           else IsolationLevel.READ_UNCOMMITTED)

    def partitions(self) -> list[TopicPartitionKey]:
        """The partitions the query reads now (a pattern or subscription picks up new topics and partitions)."""
        if self.options.assign:
            return sorted(self.options.assign)
        metadata = self._admin.list_topics(timeout=TIMEOUT_S)
        return sorted((name, p) for name, topic in metadata.topics.items()
                      if topic.error is None and not name.startswith("__") and self.options.matches(name)
                      for p in topic.partitions)

    def list_offsets(self, specs: dict[TopicPartitionKey, KafkaOffsetSpec]) -> dict[TopicPartitionKey, int]:
        if not specs:
            return {}
        futures = self._admin.list_offsets({TopicPartition(t, p): spec for (t, p), spec in specs.items()},
                                           isolation_level=self._isolation, request_timeout=TIMEOUT_S)
        try:
            return {(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()}
        except KafkaException as exc:
            raise RuntimeError(f"could not list offsets: {exc.args[0]}") from None

    def earliest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self.list_offsets({tp: KafkaOffsetSpec.earliest() for tp in partitions})

    def latest(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self.list_offsets({tp: KafkaOffsetSpec.latest() for tp in partitions})

    def resolve(self, spec: OffsetSpec, partitions: list[TopicPartitionKey], *, ending: bool
                ) -> dict[TopicPartitionKey, int]:
        """Concrete offsets for `spec` on `partitions` (partitions the spec leaves out take the default end)."""
        if spec.kind == "earliest":
            return self.earliest(partitions)
        if spec.kind == "latest":
            return self.latest(partitions)
        if spec.kind == "offsets":
            missing = sorted(set(spec.offsets) - set(partitions))
            if missing and not ending:
                raise OptionError(f"offsets given for partitions the query does not read: {missing}")
            wanted = {tp: spec.offsets.get(tp, LATEST if ending else EARLIEST) for tp in partitions}
            earliest = self.earliest(tp for tp, o in wanted.items() if o == EARLIEST)
            latest = self.latest(tp for tp, o in wanted.items() if o == LATEST)
            return {tp: earliest.get(tp, latest.get(tp, o)) for tp, o in wanted.items()}
        return self._by_timestamp(spec, partitions, ending)

    def _by_timestamp(self, spec: OffsetSpec, partitions: list[TopicPartitionKey], ending: bool
                      ) -> dict[TopicPartitionKey, int]:
        if spec.kind == "timestamp":
            stamps = {tp: spec.timestamp for tp in partitions}
        else:
            missing = sorted(set(partitions) - set(spec.offsets))
            if missing:
                raise OptionError(f"no timestamp given for partitions {missing}")
            stamps = {tp: spec.offsets[tp] for tp in partitions}
        found = self.list_offsets({tp: KafkaOffsetSpec.for_timestamp(int(ts)) for tp, ts in stamps.items()})
        unmatched = [tp for tp, offset in found.items() if offset < 0]  # no record at or after the timestamp
        if unmatched and not ending and self.options.timestamp_strategy == "error":
            raise OptionError(f"no offset matched the starting timestamp in partitions {sorted(unmatched)}")
        latest = self.latest(unmatched)
        return {tp: latest[tp] if offset < 0 else offset for tp, offset in found.items()}


def check_ranges(ranges: list[OffsetRange], earliest: dict[TopicPartitionKey, int],
                 latest: dict[TopicPartitionKey, int], fail_on_data_loss: bool) -> list[OffsetRange]:
    """Ranges clamped to what the log holds; with failOnDataLoss, a range that lost records fails instead."""
    checked = []
    for r in ranges:
        low, high = earliest[(r.topic, r.partition)], latest[(r.topic, r.partition)]
        start, end = r.start, r.end
        if start < low or start > high or end > high:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{r.topic}-{r.partition}: offsets [{start}, {end}) are not all in the log, which holds "
                    f"[{low}, {high}): some data may have been lost (records deleted, or the topic recreated). "
                    "If you want the query to go on, set the option failOnDataLoss to false.")
            start, end = min(max(start, low), high), min(end, high)
        checked.append(OffsetRange(r.topic, r.partition, start, max(end, start)))
    return checked


def split(ranges: list[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Ranges cut into pieces, each in proportion to its size, to make about `min_partitions` of them."""
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    if not min_partitions or len(ranges) >= min_partitions or total == 0:
        return ranges
    pieces = []
    for r in ranges:
        parts = max(1, round(min_partitions * r.size / total))
        step = -(-r.size // parts)
        pieces += [OffsetRange(r.topic, r.partition, s, min(s + step, r.end)) for s in range(r.start, r.end, step)]
    return pieces
