"""The executor's side of reading: one offset range of one partition, consumed into Arrow record batches.

The range is [start, end). Offsets missing inside it are normal: compaction
removes records, and transaction markers and aborted records are never
delivered. The read is over once a record at or past `end` arrives, or once
the consumer reaches the end of the visible log at or past `end`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from klamm.confluent_headers import checked_headers, raw_headers, undecodable
from klamm.spark.offsets import DataLossError, OffsetRange

BATCH_ROWS = 10_000
_TIMESTAMP_TYPES = {1: 0, 2: 1}  # confluent-kafka's CreateTime/LogAppendTime -> Kafka's ids, as Spark shows them

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", HEADERS_TYPE))
    return pa.schema(fields)


class Columns:
    """Rows gathered column by column, handed over as one Arrow record batch."""

    def __init__(self, include_headers: bool, raw: bool = False) -> None:
        self.include_headers = include_headers
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []
        self.raw = raw  # headers from librdkafka: once a header key confluent-kafka cannot decode is met

    def add(self, key: bytes | None, value: bytes | None, offset: int, timestamp_ms: int, timestamp_type: int,
            headers: Any) -> None:
        """One row; `timestamp_type` is Kafka's id (0 CreateTime, 1 LogAppendTime)."""
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms * 1000)
        self.types.append(timestamp_type)
        if self.include_headers:
            self.headers.append([{"key": k, "value": v} for k, v in (headers or ())])

    def add_messages(self, messages: list[Any]) -> int:
        """confluent-kafka messages, a column at a time (a comprehension per column costs less than a row loop);
        how many were taken: those before the first whose headers confluent-kafka cannot decode, if any (read
        that one again with `raw` set)."""
        if self.include_headers:
            headers = self._headers_of(messages)
            if len(headers) < len(messages):
                messages = messages[:len(headers)]
            self.headers += headers
        self.keys += [m.key() for m in messages]
        self.values += [m.value() for m in messages]
        self.offsets += [m.offset() for m in messages]
        stamps = [m.timestamp() for m in messages]
        self.timestamps += [millis * 1000 for _, millis in stamps]
        self.types += [_TIMESTAMP_TYPES.get(kind, 0) for kind, _ in stamps]
        return len(messages)

    def _headers_of(self, messages: list[Any]) -> list[list[dict[str, Any]]]:
        headers: list[list[dict[str, Any]]] = []
        try:  # a message that fails here has lost its raw headers: it is read again (klamm.confluent_headers)
            for pairs in map(raw_headers if self.raw else checked_headers, messages):
                headers.append([{"key": k, "value": v} for k, v in (pairs or ())])
        except (SystemError, UnicodeDecodeError) as exc:
            if not undecodable(exc):
                raise
        return headers

    def __len__(self) -> int:
        return len(self.offsets)

    def batch(self, topic: str, partition: int) -> pa.RecordBatch:
        n = len(self.offsets)
        arrays = [pa.array(self.keys, pa.binary()), pa.array(self.values, pa.binary()),
                  pa.array([topic] * n, pa.string()), pa.array([partition] * n, pa.int32()),
                  pa.array(self.offsets, pa.int64()), pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
                  pa.array(self.types, pa.int32())]
        if self.include_headers:
            arrays.append(pa.array(self.headers, HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(self.include_headers))


def consumer_config(kafka: dict[str, str], fail_on_data_loss: bool) -> dict[str, Any]:
    return {**kafka, "group.id": f"spark-klamm-source-{uuid.uuid4()}-executor", "enable.auto.commit": False,
            "enable.partition.eof": True, "auto.offset.reset": "error" if fail_on_data_loss else "earliest"}


def _handle_event(message: Any, r: OffsetRange, position: int) -> int:
    """The position after a consumer event (end of partition), or the error it stands for."""
    error = message.error()
    if error.code() == KafkaError._PARTITION_EOF:
        return max(position, message.offset())  # the end of what is visible
    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
        raise DataLossError(f"{r.topic}-{r.partition}: offset {position} is no longer in the log "
                            f"({error.str()}); set failOnDataLoss to false to skip what was lost")
    if not error.retriable():
        raise RuntimeError(f"reading {r.topic}-{r.partition}: {error.str()}")
    return position


def read_range(kafka: dict[str, str], r: OffsetRange, include_headers: bool, fail_on_data_loss: bool,
               poll_timeout_s: float) -> Iterator[pa.RecordBatch]:
    """The records of `r` in offset order, at most BATCH_ROWS to a batch."""
    if r.size == 0:
        return
    consumer = Consumer(consumer_config(kafka, fail_on_data_loss))
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        columns = Columns(include_headers)
        position, last_progress = r.start, time.monotonic()
        while position < r.end:
            messages = consumer.consume(min(BATCH_ROWS, r.end - position), timeout=1.0)
            records = [m for m in messages if m.error() is None]
            for message in messages if len(records) < len(messages) else ():
                if message.error() is not None:
                    position = _handle_event(message, r, position)
            if records and records[-1].offset() >= r.end:
                records = [m for m in records if m.offset() < r.end]
                position = r.end
            if records:
                taken = columns.add_messages(records)
                if taken < len(records):  # a header key that is not UTF-8: read again from it, headers raw
                    position = records[taken].offset()
                    consumer.seek(TopicPartition(r.topic, r.partition, position))
                    columns.raw = True
                else:
                    position = max(position, records[-1].offset() + 1)
            if len(columns) >= BATCH_ROWS:
                yield columns.batch(r.topic, r.partition)
                columns = Columns(include_headers, columns.raw)
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > poll_timeout_s:
                raise TimeoutError(f"{r.topic}-{r.partition}: no records between offsets {position} and {r.end} "
                                   f"within {poll_timeout_s:.0f}s")
        if len(columns):
            yield columns.batch(r.topic, r.partition)
    finally:
        consumer.close()
