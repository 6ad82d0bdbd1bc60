"""A fetch's read of whole batches: the same answer as a walk over every byte, from header reads only."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st
from test_storage_helpers import append, batch, open_log

from klamm.protocol.batch import split_batches
from klamm.storage import segment as segment_module
from klamm.storage.log import LogConfig

ONE_SEGMENT = LogConfig(segment_bytes=1 << 30, index_interval_bytes=4096)


def reference_length(data: bytes, budget: int, max_offset: int) -> int:
    """Whole batches from the start of `data`, within `budget` bytes, each ending below `max_offset`."""
    total = 0
    for header in split_batches(data):
        if header.last_offset >= max_offset or total + header.size > budget:
            break
        total += header.size
    return total


@settings(max_examples=40, deadline=None)
@given(shapes=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 3000)), min_size=1, max_size=30),
       budget=st.integers(0, 120_000), start=st.integers(0, 29), max_offset_cut=st.integers(0, 400))
def test_whole_batches_match_a_walk_over_every_byte(tmp_path_factory, shapes, budget, start, max_offset_cut):
    log = open_log(tmp_path_factory.mktemp("log"), ONE_SEGMENT)
    for records, value_size in shapes:
        append(log, batch(records, value_size=value_size))
    segment = log.active_segment
    headers = list(segment.headers_from(0))
    first = headers[min(start, len(headers) - 1)]
    max_offset = min(first.base_offset + max_offset_cut, log.log_end_offset)
    data = os.pread(segment.fd, segment.size - first.position, first.position)
    assert segment._whole_batches(first.position, budget, max_offset) == reference_length(data, budget, max_offset)


def test_a_large_batch_is_not_read_to_be_sent(tmp_path, monkeypatch):
    """A follower's fetch of a 1 MB batch reads its header, not its megabyte (sendfile sends it)."""
    log = open_log(tmp_path, ONE_SEGMENT)
    for _ in range(3):
        append(log, batch(1000, value_size=1000))
    size = log.active_segment.size // 3
    read = []
    real_pread = os.pread

    def counting_pread(fd: int, length: int, position: int) -> bytes:
        data = real_pread(fd, length, position)
        read.append(len(data))
        return data

    monkeypatch.setattr(segment_module.os, "pread", counting_pread)
    result = log.read(0, 2 * size + 100, max_offset=log.log_end_offset, min_one=True)
    assert result.length == 2 * size
    assert sum(read) < size // 4, read
