"""Which partition of __consumer_offsets holds a group: Kafka's rule, so placement matches."""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: 31*h + c over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(hashCode) % partitions, where Utils.abs is `x & 0x7fffffff`."""
    return (java_string_hash(group_id) & 0x7FFFFFFF) % partitions
