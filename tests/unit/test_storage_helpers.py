"""Shared helpers for the storage tests (imported by the test_storage_* modules)."""

from __future__ import annotations

from pathlib import Path

from klamm.protocol.batch import split_batches
from klamm.protocol.records import build_batch
from klamm.storage.log import AppendResult, Log, LogConfig


class FakeClock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(
    records: int = 1,
    *,
    value_size: int = 10,
    timestamp: int = 1000,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    timestamps: list[int] | None = None,
) -> bytearray:
    """A v2 batch of `records` records (values of `value_size` bytes)."""
    from klamm.protocol.records import NewRecord

    if timestamps is not None:
        items = [NewRecord(None, b"x" * value_size, timestamp=t) for t in timestamps]
    else:
        items = [(None, bytes([65 + i % 26]) * value_size) for i in range(records)]
    return bytearray(
        build_batch(
            items,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            timestamp_ms=timestamp,
        )
    )


def append(log: Log, buf: bytearray, *, leader_epoch: int = 0, log_append_time_ms: int | None = None) -> AppendResult:
    return log.append(buf, split_batches(buf), leader_epoch=leader_epoch, log_append_time_ms=log_append_time_ms)


def open_log(tmp_path: Path, config: LogConfig | None = None, **kwargs) -> Log:
    return Log.open(tmp_path / "topic-0", config or LogConfig(), **kwargs)


def all_offsets(log: Log) -> list[int]:
    """Base offsets of every batch readable from the log start, following segments."""
    offsets = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read_bytes(offset, 1 << 20)
        if not data:
            break
        headers = split_batches(data)
        offsets.extend(h.base_offset for h in headers)
        offset = headers[-1].next_offset
    return offsets
