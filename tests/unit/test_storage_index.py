"""Offset and time indexes: Kafka's byte format, lookups, truncation, sanity checks."""

from __future__ import annotations

import struct

import pytest
from test_storage_helpers import append, batch, open_log

from klamm.storage.index import CorruptIndex, OffsetIndex, TimeIndex
from klamm.storage.log import LogConfig


def test_offset_index_on_disk_format_and_lookup(tmp_path):
    index = OffsetIndex(tmp_path / "00000000000000000100.index", 100, 1024)
    index.append(103, 0)
    index.append(110, 400)
    index.append(125, 900)
    assert (tmp_path / "00000000000000000100.index").read_bytes() == struct.pack(">iiiiii", 3, 0, 10, 400, 25, 900)
    assert index.lookup(99) == (100, 0)
    assert index.lookup(102) == (100, 0)
    assert index.lookup(103) == (103, 0)
    assert index.lookup(111) == (110, 400)
    assert index.lookup(10**6) == (125, 900)
    with pytest.raises(ValueError):
        index.append(125, 1000)


def test_offset_index_truncate_and_reload(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 1024)
    for n in range(10):
        index.append(n * 10, n * 100)
    index.truncate_to(45)
    assert index.entries == 5 and path.stat().st_size == 40
    index.close()
    loaded = OffsetIndex(path, 0, 1024)
    loaded.load()
    loaded.sanity_check(log_size=10_000)
    assert loaded.lookup(1000) == (40, 400)


def test_offset_index_sanity_checks(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00")
    with pytest.raises(CorruptIndex):
        OffsetIndex(path, 0, 1024).load()
    path.write_bytes(struct.pack(">iiii", 5, 0, 3, 10))
    index = OffsetIndex(path, 0, 1024)
    index.load()
    with pytest.raises(CorruptIndex):
        index.sanity_check(100)
    path.write_bytes(struct.pack(">ii", 5, 500))
    index.load()
    with pytest.raises(CorruptIndex):
        index.sanity_check(100)  # position past the log


def test_offset_index_is_full(tmp_path):
    index = OffsetIndex(tmp_path / "x.index", 0, 8 * 2 + 5)
    assert index.max_entries == 2
    index.append(1, 0)
    assert not index.is_full
    index.append(2, 10)
    assert index.is_full


def test_time_index_on_disk_format_and_lookup(tmp_path):
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 1024)
    index.maybe_append(1000, 52)
    index.maybe_append(1000, 53)  # not a new maximum: ignored
    index.maybe_append(900, 54)  # ignored
    index.maybe_append(2000, 60)
    assert path.read_bytes() == struct.pack(">qiqi", 1000, 2, 2000, 10)
    assert index.lookup(999) == (-1, 50)
    assert index.lookup(1000) == (1000, 52)
    assert index.lookup(1999) == (1000, 52)
    assert index.lookup(5000) == (2000, 60)
    index.truncate_to(60)
    assert index.entries == 1
    with pytest.raises(CorruptIndex):
        index.sanity_check(next_offset_bound=52)


def test_log_indexes_are_sparse_in_kafka_format(tmp_path):
    config = LogConfig(index_interval_bytes=200)
    log = open_log(tmp_path, config)
    size = len(batch(1, value_size=30))
    for n in range(20):
        append(log, batch(1, value_size=30, timestamp=1000 + n))
    directory = tmp_path / "topic-0"
    entries = list(struct.iter_unpack(">ii", (directory / "00000000000000000000.index").read_bytes()))
    # An entry is added for a batch once more than 200 bytes were appended since the last one.
    per_entry = 200 // size + 1
    assert entries[0] == (per_entry, per_entry * size)
    assert all(position == offset * size for offset, position in entries)
    assert [offset for offset, _ in entries] == list(range(per_entry, 20, per_entry))
    log.close()
    times = list(struct.iter_unpack(">qi", (directory / "00000000000000000000.timeindex").read_bytes()))
    assert times[-1] == (1019, 19)  # closing records the segment's final max timestamp
    assert [t for t, _ in times] == sorted({t for t, _ in times})
    for timestamp, offset in times:
        assert timestamp == 1000 + offset
