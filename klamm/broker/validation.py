"""Record-level validation of produced batches: Kafka's LogValidator, paid for only when needed.

The produce path trusts a batch header when it can: a batch whose first and max
timestamps are sane, inside the topic's timestamp bounds, of a non-compacted
topic, is appended without decoding a record. Otherwise (`needs_records`) the
records are decoded (decompressed first) and checked as Kafka checks each one:

* compacted topic: a record without a key is INVALID_RECORD;
* CreateTime topic: a timestamp other than -1 must lie within
  [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms],
  else INVALID_TIMESTAMP;
* a producer may not mark its batch LogAppendTime (INVALID_TIMESTAMP);

and the batch's max timestamp is recomputed from the records. That matters for
librdkafka, which writes firstTimestamp -1 and maxTimestamp 0 for records
produced with timestamp -1: Kafka stores -1 (no timestamp) there, so retention
falls back to the segment file's mtime instead of seeing 1970.
"""

from __future__ import annotations

from dataclasses import dataclass

from klamm.config.topic import TopicConfig
from klamm.protocol.batch import ATTR_TIMESTAMP_TYPE, BatchHeader
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import Record, decode_batch, keyed_timestamp_span, record_keys, record_timestamps

NO_TIMESTAMP = -1
# A compressed batch may inflate to max.message.bytes, never less than Kafka's default: clients size their
# batches by the default (librdkafka's batch.size is 1,000,000 uncompressed bytes), whatever a topic lowers.
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class RecordRules:
    """What a topic demands of each record (the LogValidator settings)."""

    topic_partition: str  # "topic-index", as Kafka names it in messages
    compacted: bool
    log_append_time: bool  # message.timestamp.type
    before_max_ms: int  # message.timestamp.before.max.ms
    after_max_ms: int  # message.timestamp.after.max.ms
    max_inflated: int = DEFAULT_MAX_MESSAGE_BYTES  # the most a batch's records may decompress to

    @classmethod
    def of(cls, topic: str, index: int, config: TopicConfig) -> RecordRules:
        return cls(f"{topic}-{index}", config.compact, config.message_timestamp_type == "LogAppendTime",
                   config.value_of("message.timestamp.before.max.ms"),
                   config.value_of("message.timestamp.after.max.ms"),
                   max(config.value_of("max.message.bytes"), DEFAULT_MAX_MESSAGE_BYTES))


def needs_records(header: BatchHeader, rules: RecordRules, now_ms: int) -> bool:
    """Whether the header alone cannot vouch for the batch, so its records must be decoded."""
    if rules.compacted or header.attributes & ATTR_TIMESTAMP_TYPE:
        return True
    if rules.log_append_time:
        return False  # the broker overwrites the timestamps anyway
    if header.base_timestamp < 0 or header.max_timestamp < header.base_timestamp:
        return True  # the max timestamp is not the records' (librdkafka's -1 / 0)
    if header.max_timestamp - now_ms > rules.after_max_ms:
        return True
    # Record timestamps may lie below the first one: only decoding finds the oldest.
    return rules.before_max_ms != _LONG_MAX


def validate_records(buf: bytes | bytearray | memoryview, header: BatchHeader, rules: RecordRules,
                     now_ms: int) -> int:
    """Check every record of the batch; return its max record timestamp (-1 if none has one).

    Raises KafkaError with Kafka's message and per-record errors (Produce v8+ record_errors).
    """
    producer_log_append_time = bool(header.attributes & ATTR_TIMESTAMP_TYPE)
    if rules.compacted and not producer_log_append_time:
        max_timestamp = _keyed_batch_within_rules(buf, header, rules, now_ms)
        if max_timestamp is not None:
            return max_timestamp
    records: list[tuple[int, int, bool, Record | None]]
    if producer_log_append_time:  # rare; its error message describes each record
        records = [(r.offset, r.timestamp, r.key is not None, r)
                   for r in decode_batch(buf, header.position, limit=rules.max_inflated)[1]]
    elif rules.compacted:
        records = [(offset, timestamp, key is not None, None)
                   for offset, timestamp, key in record_keys(buf, header, rules.max_inflated)]
    else:
        records = [(offset, timestamp, True, None)
                   for offset, timestamp in record_timestamps(buf, header, rules.max_inflated)]
    errors: list[tuple[int, str]] = []
    invalid_timestamp = False
    max_timestamp = NO_TIMESTAMP
    for index, (offset, timestamp, has_key, record) in enumerate(records):
        if not has_key:
            errors.append((index, f"Compacted topic cannot accept message without key in topic partition "
                                  f"{rules.topic_partition}."))
            continue
        message = _timestamp_error(rules, producer_log_append_time, offset, timestamp, record, now_ms)
        if message is not None:
            errors.append((index, message))
            invalid_timestamp = True
            continue
        max_timestamp = max(max_timestamp, timestamp)
    if errors:
        raise _rejected(errors, invalid_timestamp)
    return max_timestamp


def _keyed_batch_within_rules(buf: bytes | bytearray | memoryview, header: BatchHeader, rules: RecordRules,
                              now_ms: int) -> int | None:
    """The max record timestamp of a compacted topic's batch that passes every check, found without a list
    of its records; None when some record fails one, so the full walk can name it."""
    span = keyed_timestamp_span(buf, header, rules.max_inflated)
    if span is None:
        return None
    oldest, newest = header.base_timestamp + span[0], header.base_timestamp + span[1]
    if not rules.log_append_time and (now_ms - oldest > rules.before_max_ms or newest - now_ms > rules.after_max_ms):
        return None  # some record is out of bounds, unless it is one without a timestamp (-1)
    return max(newest, NO_TIMESTAMP)


def _timestamp_error(rules: RecordRules, producer_log_append_time: bool, offset: int, timestamp: int,
                     record: Record | None, now_ms: int) -> str | None:
    """Kafka's validateTimestamp for one record."""
    if not rules.log_append_time and timestamp != NO_TIMESTAMP:
        if now_ms - timestamp > rules.before_max_ms or timestamp - now_ms > rules.after_max_ms:
            low, high = _java_long(now_ms - rules.before_max_ms), _java_long(now_ms + rules.after_max_ms)
            return (f"Timestamp {timestamp} of message with offset {offset} is out of range. "
                    f"The timestamp should be within [{low}, {high}]")
    elif producer_log_append_time:
        return (f"Invalid timestamp type in message {_java_record(record)}. Producer should not set timestamp "
                f"type to LogAppendTime.")
    return None


def _rejected(errors: list[tuple[int, str]], invalid_timestamp: bool) -> KafkaError:
    """Kafka's processRecordErrors: any timestamp error makes the whole batch INVALID_TIMESTAMP."""
    if invalid_timestamp:
        return KafkaError(ErrorCode.invalid_timestamp, "One or more records have been rejected due to invalid timestamp",
                          errors)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return KafkaError(ErrorCode.invalid_record,
                      f"One or more records have been rejected due to {len(errors)} record errors in total, "
                      f"and only showing the first three errors at most: [{shown}]", errors)


def _java_record(record: Record | None) -> str:
    """DefaultRecord.toString, as Kafka puts it in the message (records are decoded whole here)."""
    assert record is not None
    key, value = record.key, record.value
    return (f"DefaultRecord(offset={record.offset}, timestamp={record.timestamp}, "
            f"key={0 if key is None else len(key)} bytes, value={0 if value is None else len(value)} bytes)")


def _java_long(value: int) -> int:
    """Wrap to a signed 64-bit value, as Kafka's arithmetic on longs does (e.g. now + Long.MAX_VALUE)."""
    return (value + 2**63) % 2**64 - 2**63
