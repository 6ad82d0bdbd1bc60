"""format("klamm-segments"): a broker's segment files read directly, one Spark partition a segment.

    spark.read.format("klamm-segments").load("/var/lib/klamm")   # log.dirs, comma-separated

The rows are those of the `klamm` source over the same offsets, without a
broker in the way. Where a partition's readable log ends:
- a broker that shut down cleanly (`.kafka_cleanshutdown` present): its last batch
- otherwise (running, or crashed): its recovery point, below which everything is
  flushed and whole
Records below the log start offset (DeleteRecords) are left out. Reads are
read_committed unless `kafka.isolation.level` says read_uncommitted: they stop
at the first transaction still open (the last stable offset), skip transaction
markers, and skip aborted batches using the `.txnindex` files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from klamm.protocol.batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, InvalidBatch
from klamm.spark.java_regex import to_python
from klamm.spark.options import OptionError
from klamm.spark.reading import BATCH_ROWS, arrow_schema
from klamm.spark.record_columns import batch_rows
from klamm.storage.checkpoint import read_offset_checkpoint
from klamm.storage.log import parse_log_dir_name
from klamm.storage.log_manager import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from klamm.storage.segment import scan_batches
from klamm.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_BATCH_BYTES = 64 << 20  # an Arrow batch for Spark holds at most BATCH_ROWS rows, and about this many bytes


@dataclass(frozen=True)
class SegmentSlice:
    """The records of one segment file that a query reads: offsets [start, end), file bytes [0, limit)."""

    path: str
    topic: str
    partition: int
    start: int
    end: int
    limit: int
    aborted: tuple[tuple[int, int, int], ...]  # (producer id, first offset, last offset) of aborted transactions


@dataclass(frozen=True)
class SegmentOptions:
    log_dirs: tuple[str, ...]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    include_headers: bool = False
    read_committed: bool = True

    def matches(self, topic: str) -> bool:
        if self.topics:
            return topic in self.topics
        if self.pattern is not None:
            return re.fullmatch(to_python(self.pattern), topic) is not None
        return not topic.startswith("__")


def segment_options(options: Mapping[str, str]) -> SegmentOptions:
    path = options.get("path")
    if not path:
        raise OptionError("give the broker's log.dirs: spark.read.format(\"klamm-segments\").load(\"<log.dirs>\")")
    isolation = options.get("kafka.isolation.level", "read_committed").strip().lower()
    if isolation not in ("read_committed", "read_uncommitted"):
        raise OptionError(f"kafka.isolation.level must be read_committed or read_uncommitted, not {isolation!r}")
    subscribe = options.get("subscribe")
    return SegmentOptions(
        log_dirs=tuple(d.strip() for d in path.split(",") if d.strip()),
        topics=tuple(t.strip() for t in subscribe.split(",") if t.strip()) if subscribe else (),
        pattern=options.get("subscribePattern"),
        include_headers=str(options.get("includeHeaders", "false")).strip().lower() == "true",
        read_committed=isolation == "read_committed")


def _segments(directory: Path) -> list[tuple[int, Path]]:
    found = ((_SEGMENT_NAME.match(p.name), p) for p in directory.iterdir())
    return sorted((int(m.group(1)), p) for m, p in found if m)


def _aborted(segments: list[tuple[int, Path]]) -> tuple[tuple[int, int, int], ...]:
    entries = []
    for base, path in segments:
        for entry in TransactionIndex(path.with_suffix(TXN_INDEX_SUFFIX)).entries:
            entries.append((entry.producer_id, entry.first_offset, entry.last_offset))
    return tuple(entries)


def plan_partition(directory: Path, topic: str, partition: int, end_bound: int | None, log_start: int,
                   read_committed: bool) -> list[SegmentSlice]:
    """One slice per segment holding readable records (batch headers are scanned, records are not decoded)."""
    segments = _segments(directory)
    spans: list[tuple[Path, int, int, int]] = []  # path, first offset, next offset, bytes of whole batches
    open_transactions: dict[int, int] = {}  # producer id -> first offset, until its marker
    done = False
    for base, path in segments:
        fd = os.open(path, os.O_RDONLY)
        first, next_offset, limit = base, base, 0
        try:
            for header in scan_batches(fd, 0, os.fstat(fd).st_size):
                if end_bound is not None and header.next_offset > end_bound:
                    done = True
                    break
                if header.attributes & ATTR_TRANSACTIONAL:
                    if header.attributes & ATTR_CONTROL:
                        open_transactions.pop(header.producer_id, None)
                    else:
                        open_transactions.setdefault(header.producer_id, header.base_offset)
                next_offset, limit = header.next_offset, header.position + header.size
        except InvalidBatch:
            done = True  # a torn or corrupt tail: the clean end is before it
        finally:
            os.close(fd)
        spans.append((path, first, next_offset, limit))
        if done:
            break
    end = spans[-1][2] if spans else log_start
    if read_committed and open_transactions:
        end = min(end, min(open_transactions.values()))
    aborted = _aborted(segments) if read_committed else ()
    return [SegmentSlice(str(path), topic, partition, max(first, log_start), min(next_offset, end), limit,
                         tuple(a for a in aborted if a[2] >= first and a[1] < next_offset))
            for path, first, next_offset, limit in spans if min(next_offset, end) > max(first, log_start)]


def plan(options: SegmentOptions) -> list[SegmentSlice]:
    slices = []
    for log_dir in map(Path, options.log_dirs):
        if not log_dir.is_dir():
            raise OptionError(f"{log_dir} is not a directory")
        clean = (log_dir / CLEAN_SHUTDOWN_FILE).exists()
        recovery_points = read_offset_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
        log_starts = read_offset_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
        for directory in sorted(log_dir.iterdir()):
            parsed = parse_log_dir_name(directory.name) if directory.is_dir() else None
            if parsed is None or not options.matches(parsed[0]):
                continue
            end_bound = None if clean else recovery_points.get(parsed, 0)
            slices += plan_partition(directory, parsed[0], parsed[1], end_bound, log_starts.get(parsed, 0),
                                     options.read_committed)
    return slices


def _is_aborted(producer_id: int, offset: int, aborted: tuple[tuple[int, int, int], ...]) -> bool:
    return any(pid == producer_id and first <= offset <= last for pid, first, last in aborted)


def _rows(pending: list[pa.RecordBatch], include_headers: bool) -> list[pa.RecordBatch]:
    """The `pending` batches put together (as one, but for binary columns of more than 2 GiB)."""
    if len(pending) <= 1:
        return pending
    return pa.Table.from_batches(pending, arrow_schema(include_headers)).combine_chunks().to_batches()


def read_slice(s: SegmentSlice, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The records of `s` as Arrow batches, decompressed, without markers or aborted records.

    Each batch's records are decoded a column at a time (klamm.spark.record_columns).
    A batch of at least BATCH_ROWS / 2 rows (or _BATCH_BYTES / 2 bytes) goes to Spark
    as it is; smaller ones are put together up to BATCH_ROWS rows or _BATCH_BYTES.
    """
    fd = os.open(s.path, os.O_RDONLY)
    try:
        pending: list[pa.RecordBatch] = []
        rows = size = 0
        for header in scan_batches(fd, 0, s.limit):
            if header.next_offset <= s.start or header.attributes & ATTR_CONTROL:
                continue
            if header.base_offset >= s.end:
                break
            if header.attributes & ATTR_TRANSACTIONAL and _is_aborted(header.producer_id, header.base_offset,
                                                                        s.aborted):
                continue
            batch = batch_rows(os.pread(fd, header.size, header.position), s.topic, s.partition, include_headers,
                               header)
            if header.base_offset < s.start or header.last_offset >= s.end:
                offsets = batch.column("offset")
                batch = batch.filter(pc.and_(pc.greater_equal(offsets, s.start), pc.less(offsets, s.end)))
            if batch.num_rows >= BATCH_ROWS // 2 or batch.nbytes >= _BATCH_BYTES // 2:
                yield from _rows(pending, include_headers)  # big enough on its own: no second copy
                pending, rows, size = [], 0, 0
                yield batch
            elif batch.num_rows:
                pending.append(batch)
                rows += batch.num_rows
                size += batch.nbytes
                if rows >= BATCH_ROWS or size >= _BATCH_BYTES:
                    yield from _rows(pending, include_headers)
                    pending, rows, size = [], 0, 0
        yield from _rows(pending, include_headers)
    finally:
        os.close(fd)


class SlicePartition(InputPartition):
    def __init__(self, s: SegmentSlice) -> None:
        super().__init__(s)
        self.slice = s


class KlammSegmentsReader(DataSourceReader):
    def __init__(self, options: SegmentOptions) -> None:
        self.options = options
        self.slices = plan(options)

    def partitions(self) -> Sequence[InputPartition]:
        return [SlicePartition(s) for s in self.slices]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, SlicePartition):  # Spark reads one plain partition when we planned none
            return iter(())
        return read_slice(partition.slice, self.options.include_headers)


class KlammSegmentsDataSource(DataSource):
    """format("klamm-segments"): the `klamm` source's rows, read from a broker's log directories."""

    @classmethod
    def name(cls) -> str:
        return "klamm-segments"

    def schema(self) -> str:
        from klamm.spark.source import row_schema

        return row_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KlammSegmentsReader(segment_options(self.options))


class PythonSegmentsDataSource(KlammSegmentsDataSource):
    """format("klamm-segments-python"): this reader, also where the JVM reader holds "klamm-segments"."""

    @classmethod
    def name(cls) -> str:
        return "klamm-segments-python"
