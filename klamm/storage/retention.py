"""Retention: which old segments of a log go, as Kafka's UnifiedLog.deleteOldSegments decides.

Three rules, applied in Kafka's order, each deleting a prefix of the segments
that is left by the previous one:

1. log start offset: a segment whose successor starts at or below the log start
   offset holds nothing readable (DeleteRecords moved the start past it). Always.
2. retention.bytes: while the log is larger than retention.bytes by at least the
   oldest segment's size, that segment goes. Only with cleanup.policy delete.
3. retention.ms: a segment whose largest record timestamp (its file's mtime when
   it holds no timestamp) is more than retention.ms old goes. Only with delete.

A segment goes only if every offset in it is below the high watermark, and an
empty active segment is never deleted. When every segment goes, the log rolls a
new empty active segment first (Log.delete_oldest_segments), like Kafka, so an
idle topic does empty out. Negative retention values mean unlimited.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from klamm.storage.log import Log
from klamm.storage.segment import LogSegment

__all__ = ["RetentionPolicy", "SegmentView", "count_deletable", "enforce_retention", "segment_views"]


@dataclass(frozen=True)
class RetentionPolicy:
    retention_ms: int  # -1: unlimited
    retention_bytes: int  # -1: unlimited
    delete: bool  # cleanup.policy contains "delete"


@dataclass(frozen=True)
class SegmentView:
    """What retention needs to know of one segment."""

    base_offset: int
    next_offset: int  # base offset of the next segment, or the log end offset for the last one
    size: int
    largest_timestamp: int


def segment_views(log: Log) -> list[SegmentView]:
    segments = log.segments
    views = []
    for i, segment in enumerate(segments):
        nxt = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
        views.append(SegmentView(segment.base_offset, nxt, segment.size, _largest_timestamp(segment)))
    return views


def _largest_timestamp(segment: LogSegment) -> int:
    """Kafka's LogSegment.largestTimestamp: the max record timestamp, else the file's mtime."""
    if segment.max_timestamp >= 0:
        return segment.max_timestamp
    try:
        return int(os.stat(segment.log_path).st_mtime * 1000)
    except FileNotFoundError:
        return 0


def count_deletable(segments: list[SegmentView], policy: RetentionPolicy, *, now_ms: int, log_start_offset: int,
                    high_watermark: int) -> int:
    """How many of the oldest `segments` retention deletes now."""
    deleted = _prefix(segments, 0, high_watermark,
                      lambda s, has_next: has_next and s.next_offset <= log_start_offset)
    if not policy.delete:
        return deleted
    if policy.retention_bytes >= 0:
        excess = sum(s.size for s in segments[deleted:]) - policy.retention_bytes
        if excess >= 0:
            def too_big(s: SegmentView, _has_next: bool) -> bool:
                nonlocal excess
                if excess - s.size < 0:
                    return False
                excess -= s.size
                return True
            deleted = _prefix(segments, deleted, high_watermark, too_big)
    if policy.retention_ms >= 0:
        deleted = _prefix(segments, deleted, high_watermark,
                          lambda s, _has_next: now_ms - s.largest_timestamp > policy.retention_ms)
    return deleted


def _prefix(segments: list[SegmentView], start: int, high_watermark: int, predicate) -> int:  # type: ignore[no-untyped-def]
    """Index after the run of segments from `start` that the predicate (and the HW bound) lets go."""
    n = start
    while n < len(segments):
        segment = segments[n]
        has_next = n + 1 < len(segments)
        if not has_next and segment.size == 0:
            break
        if segment.next_offset > high_watermark or not predicate(segment, has_next):
            break
        n += 1
    return n


def enforce_retention(log: Log, policy: RetentionPolicy, *, now_ms: int, high_watermark: int) -> list[LogSegment]:
    """Detach the segments retention deletes (files renamed to .deleted); the caller deletes them later."""
    count = count_deletable(segment_views(log), policy, now_ms=now_ms, log_start_offset=log.log_start_offset,
                            high_watermark=high_watermark)
    return log.delete_oldest_segments(count)


def delete_segments(segments: list[LogSegment]) -> None:
    """Close and unlink detached segments: blocking, for an executor."""
    for segment in segments:
        segment.delete()
