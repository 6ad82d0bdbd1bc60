"""Writing rows to topics, as Spark's Kafka sink does: `key`, `value`, optional `topic`, `partition`, `headers`.

The `topic` option, when given, wins over a `topic` column. Each Spark task
produces its rows and waits for every delivery before it reports success, so a
failed delivery fails the task and Spark runs it again: at-least-once.

With `exactlyOnce=true` (streaming writes), each task writes its share of a
micro-batch in one Kafka transaction. Its transactional.id is fixed by the
query's id and the task's partition, so a retried or replayed task fences the
one before it. The same transaction commits the batch id as the offset of a
consumer group named like the transactional.id (TxnOffsetCommit, on partition 0
of the `topic` option's topic, or of the `exactlyOnceTopic` option's when the
topics come from a column): a task whose group already holds its batch id writes
nothing, so a batch that Spark replays after a crash is not written twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from klamm.spark.options import OptionError, kafka_properties

FLUSH_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class SinkOptions:
    kafka: dict[str, str]
    topic: str | None
    exactly_once: bool = False
    transactional_prefix: str = "klamm-spark"
    bookkeeping_topic: str | None = None  # exactlyOnce: partition 0 holds each task's last batch id


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    records: int


def _check_column(schema: StructType, name: str, allowed: tuple[type, ...], required: bool = False) -> None:
    field = next((f for f in schema.fields if f.name.lower() == name), None)
    if field is None:
        if required:
            raise OptionError(f"required attribute '{name}' not found")
        return
    if not isinstance(field.dataType, allowed):
        kinds = " or ".join(t.__name__.replace("Type", "").lower() for t in allowed)
        raise OptionError(f"{name} attribute type must be {kinds}, not {field.dataType.simpleString()}")


def sink_options(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    """Checks the DataFrame's columns as Spark's Kafka sink does."""
    topic = options.get("topic")
    names = {f.name.lower() for f in schema.fields}
    if topic is None and "topic" not in names:
        raise OptionError("topic option required when no 'topic' attribute is present; use the topic option "
                          "to set a topic")
    _check_column(schema, "value", (StringType, BinaryType), required=True)
    _check_column(schema, "key", (StringType, BinaryType))
    _check_column(schema, "topic", (StringType,))
    _check_column(schema, "partition", (IntegerType,))
    _check_column(schema, "headers", (ArrayType,))
    exactly_once = str(options.get("exactlyOnce", "false")).strip().lower() == "true"
    bookkeeping = options.get("exactlyOnceTopic", topic)
    if exactly_once and bookkeeping is None:
        raise OptionError("exactlyOnce=true with topics from the 'topic' column needs the exactlyOnceTopic option: "
                          "an existing topic whose partition 0 keeps each task's last batch id")
    return SinkOptions(kafka_properties(options), topic, exactly_once,
                       options.get("transactionalIdPrefix", "klamm-spark"), bookkeeping)


def _bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def produce_all(options: SinkOptions, batches: Iterator[pa.RecordBatch], producer: Any = None) -> int:
    """Produce every row; raise if any delivery failed. Returns the number of records."""
    producer = producer or Producer(options.kafka)
    failures: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"{message.topic()}-{message.partition()}: {error.str()}")

    count = 0
    for batch in batches:
        columns = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        for row in range(batch.num_rows):
            topic = options.topic or columns["topic"][row]
            if topic is None:
                raise OptionError("null topic present in the data; use the topic option to set a default topic")
            arguments: dict[str, Any] = {"value": _bytes(columns["value"][row]), "on_delivery": delivered}
            if "key" in columns:
                arguments["key"] = _bytes(columns["key"][row])
            if columns.get("partition") and columns["partition"][row] is not None:
                arguments["partition"] = columns["partition"][row]
            if columns.get("headers") and columns["headers"][row]:
                arguments["headers"] = [(h["key"], h["value"]) for h in columns["headers"][row]]
            while True:
                try:
                    producer.produce(topic, **arguments)
                    break
                except BufferError:  # the local queue is full: let deliveries drain
                    producer.poll(0.1)
            count += 1
        producer.poll(0)
        if failures:
            break
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise RuntimeError(f"{len(failures)} records were not delivered, e.g. {failures[0]}")
    if remaining:
        raise TimeoutError(f"{remaining} records were not delivered within {FLUSH_TIMEOUT_S:.0f}s")
    return count


def _last_batch(options: SinkOptions, group: str) -> int:
    """The batch id the task's group holds (-1: none), once no transaction of it is pending (require_stable)."""
    consumer = Consumer({**options.kafka, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    try:
        committed = consumer.committed([TopicPartition(options.bookkeeping_topic, 0)], timeout=60)[0]
        return committed.offset - 1 if committed.offset >= 0 else -1
    finally:
        consumer.close()


def produce_exactly_once(options: SinkOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """The task's rows in one transaction with its batch id, unless that batch id is in already."""
    from pyspark import TaskContext

    task = TaskContext.get()
    query = task.getLocalProperty("sql.streaming.queryId") if task else None
    batch = task.getLocalProperty("streaming.sql.batchId") if task else None
    if task is None or query is None or batch is None:
        raise OptionError("exactlyOnce=true applies to streaming writes (writeStream) only")
    transactional_id = f"{options.transactional_prefix}-{query}-{task.partitionId()}"
    producer = Producer({**options.kafka, "transactional.id": transactional_id})
    producer.init_transactions(60)  # fences an earlier attempt of this task and aborts what it left open
    if _last_batch(options, transactional_id) >= int(batch):
        return 0  # written and committed before Spark recorded the batch: a replay
    producer.begin_transaction()
    try:
        count = produce_all(options, batches, producer)
        group = Consumer({**options.kafka, "group.id": transactional_id})
        try:
            producer.send_offsets_to_transaction([TopicPartition(options.bookkeeping_topic, 0, int(batch) + 1)],
                                                 group.consumer_group_metadata(), 60)
        finally:
            group.close()
        producer.commit_transaction(120)
    except BaseException:
        producer.abort_transaction(60)
        raise
    return count


class KlammBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        if options.exactly_once:
            raise OptionError("exactlyOnce=true applies to streaming writes (writeStream) only")
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return Written(produce_all(self.options, iterator))


class KlammStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.options.exactly_once:
            return Written(produce_exactly_once(self.options, iterator))
        return Written(produce_all(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every record was delivered when its task finished: nothing is left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Delivered records stay (at-least-once, as with Spark's Kafka sink); with exactlyOnce, committed
        transactions stay too, and a replay of the batch skips them."""
