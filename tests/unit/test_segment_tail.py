"""find_batch among the newest batches (kept by appends) answers as a walk over the whole segment does."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_storage_helpers import append, batch, open_log

from klamm.storage import segment as segment_module
from klamm.storage.log import LogConfig
from klamm.storage.segment import LogSegment, scan_batches

# append (records, value size), truncate to a fraction of the log end, or roll
OPERATIONS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 30), st.integers(0, 400)),
    st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
    st.tuples(st.just("roll"), st.just(0), st.just(0)),
), min_size=1, max_size=40)


def walked(segment: LogSegment, offset: int) -> tuple[int, int, int] | None:
    """The first batch whose last offset >= `offset`, by a walk from the segment's first byte."""
    for header in scan_batches(segment.fd, 0, segment.size):
        if header.last_offset >= offset:
            return header.position, header.base_offset, header.last_offset
    return None


def found(segment: LogSegment, offset: int) -> tuple[int, int, int] | None:
    header = segment.find_batch(offset)
    return None if header is None else (header.position, header.base_offset, header.last_offset)


@settings(max_examples=60, deadline=None)
@given(operations=OPERATIONS, interval=st.sampled_from([1, 200, 1000, 4096, 1 << 20]),
       tail_batches=st.sampled_from([3, 512]))
def test_find_batch_agrees_with_a_walk(tmp_path_factory, operations, interval, tail_batches):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(segment_module, "_TAIL_BATCHES", tail_batches)
        log = open_log(tmp_path_factory.mktemp("log"), LogConfig(segment_bytes=1 << 30, index_interval_bytes=interval))
        check_operations(log, operations)
        assert len(log.active_segment._tail_last or ()) <= tail_batches


def check_operations(log, operations) -> None:
    for kind, count, size in operations:
        if kind == "append":
            append(log, batch(count, value_size=size))
        elif kind == "truncate":
            log.truncate_to(log.log_start_offset + int(count * (log.log_end_offset - log.log_start_offset)))
        elif log.active_segment.size:
            log.roll()
        for segment in log.segments:
            for offset in range(segment.base_offset - 1, log.log_end_offset + 2):
                assert found(segment, offset) == walked(segment, offset), (segment.base_offset, offset)


def test_the_newest_batches_are_found_without_a_walk(tmp_path, monkeypatch):
    """A tailing fetch asks for the newest batches: one header read each, however far the last index entry; and
    no more of them are kept than _TAIL_BATCHES."""
    monkeypatch.setattr(segment_module, "_TAIL_BATCHES", 50)
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 30, index_interval_bytes=1 << 20))
    for _ in range(200):
        append(log, batch(1, value_size=100))
    segment = log.active_segment
    assert len(segment._tail_last) <= 50
    expected = {offset: walked(segment, offset) for offset in range(195, 201)}

    def no_walk(*args, **kwargs):
        raise AssertionError("walked from the index entry")

    monkeypatch.setattr(segment_module, "scan_batches", no_walk)
    assert {offset: found(segment, offset) for offset in range(195, 201)} == expected
    log.roll()  # the segment no longer active: its newest batches are forgotten, found by a walk again
    with pytest.raises(AssertionError, match="walked"):
        segment.find_batch(199)
