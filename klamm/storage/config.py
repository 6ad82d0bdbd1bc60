"""Per-log configuration: the topic-level storage settings Kafka applies to a partition log."""

from __future__ import annotations

from dataclasses import dataclass

MAX_LONG = 2**63 - 1


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    segment_index_bytes: int = 10485760  # segment.index.bytes (max index file size; roll when full)
    flush_messages: int = MAX_LONG  # flush.messages
    flush_ms: int = MAX_LONG  # flush.ms
    retention_ms: int = 604800000  # retention.ms (applied by a later retention task)
    retention_bytes: int = -1  # retention.bytes
