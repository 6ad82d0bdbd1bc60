"""Indexes read from the mapped file: lookups equal a reference list whether writable or sealed,
and sealed indexes hold no descriptor and no entries in memory."""

from __future__ import annotations

import bisect
import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from klamm.storage.index import OffsetIndex, TimeIndex

BASE = 1000

# Strictly increasing offsets with non-decreasing positions; probes anywhere around them.
offset_entries = st.lists(st.tuples(st.integers(1, 50), st.integers(0, 500)), max_size=60).map(
    lambda steps: _accumulate(steps))
probes = st.lists(st.integers(BASE - 10, BASE + 60 * 50 + 10), min_size=1, max_size=30)


def _accumulate(steps: list[tuple[int, int]]) -> list[tuple[int, int]]:
    entries, offset, position = [], BASE - 1, 0
    for offset_step, position_step in steps:
        offset += offset_step
        position += position_step
        entries.append((offset, position))
    return entries


def _reference_offset(entries: list[tuple[int, int]], target: int) -> tuple[int, int]:
    n = bisect.bisect_right([o for o, _ in entries], target)
    return entries[n - 1] if n else (BASE, 0)


def _reference_time(entries: list[tuple[int, int]], target: int) -> tuple[int, int]:
    n = bisect.bisect_right([t for t, _ in entries], target)
    return entries[n - 1] if n else (-1, BASE)


def _fresh(tmp: Path, name: str) -> Path:
    path = tmp / name
    path.unlink(missing_ok=True)
    return path


@settings(max_examples=60, deadline=None)
@given(entries=offset_entries, probe=probes, cut=st.integers(BASE - 5, BASE + 3100))
def test_offset_lookup_equals_reference_writable_sealed_and_reloaded(tmp_path_factory, entries, probe, cut) -> None:
    path = _fresh(tmp_path_factory.getbasetemp(), "00000000000000001000.index")
    index = OffsetIndex(path, BASE, 1 << 20)
    index.reset()
    for offset, position in entries:
        index.append(offset, position)
    assert [index.lookup(p) for p in probe] == [_reference_offset(entries, p) for p in probe]
    index.close()
    assert index.sealed
    assert [index.lookup(p) for p in probe] == [_reference_offset(entries, p) for p in probe]
    reloaded = OffsetIndex(path, BASE, 1 << 20)
    reloaded.load()
    assert reloaded.sealed and reloaded.entries == len(entries)
    assert [reloaded.lookup(p) for p in probe] == [_reference_offset(entries, p) for p in probe]
    assert reloaded.last_entry() == (entries[-1] if entries else (BASE, 0))
    # Truncating a sealed index (its segment becomes active again) then appending keeps agreeing.
    reloaded.truncate_to(cut)
    kept = [e for e in entries if e[0] < cut]
    assert reloaded.entries == len(kept) and path.stat().st_size == 8 * len(kept)
    last_offset, last_position = kept[-1] if kept else (BASE - 1, 0)
    reloaded.append(last_offset + 7, last_position + 3)
    kept.append((last_offset + 7, last_position + 3))
    reloaded.close()
    assert [reloaded.lookup(p) for p in probe] == [_reference_offset(kept, p) for p in probe]


time_entries = st.lists(st.tuples(st.integers(1, 1000), st.integers(0, 20)), max_size=60)


@settings(max_examples=60, deadline=None)
@given(steps=time_entries, probe=st.lists(st.integers(-5, 70_000), min_size=1, max_size=30),
       cut=st.integers(BASE, BASE + 1300))
def test_time_lookup_equals_reference_writable_sealed_and_reloaded(tmp_path_factory, steps, probe, cut) -> None:
    path = _fresh(tmp_path_factory.getbasetemp(), "00000000000000001000.timeindex")
    entries, timestamp, offset = [], 0, BASE
    for time_step, offset_step in steps:
        timestamp += time_step
        offset += offset_step
        entries.append((timestamp, offset))
    index = TimeIndex(path, BASE, 1 << 20)
    index.reset()
    for t, o in entries:
        index.maybe_append(t, o)
    assert [index.lookup(p) for p in probe] == [_reference_time(entries, p) for p in probe]
    index.close()
    assert [index.lookup(p) for p in probe] == [_reference_time(entries, p) for p in probe]
    reloaded = TimeIndex(path, BASE, 1 << 20)
    reloaded.load()
    reloaded.sanity_check(offset + 1)
    assert [reloaded.lookup(p) for p in probe] == [_reference_time(entries, p) for p in probe]
    reloaded.truncate_to(cut)
    kept = [e for e in entries if e[1] < cut]
    reloaded.close()
    assert reloaded.entries == len(kept)
    assert [reloaded.lookup(p) for p in probe] == [_reference_time(kept, p) for p in probe]


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_sealed_indexes_hold_no_descriptors_or_entries(tmp_path: Path) -> None:
    indexes = []
    for n in range(300):
        index = OffsetIndex(tmp_path / f"{n:020d}.index", n * 1000, 1 << 20)
        index.reset()
        for i in range(50):
            index.append(n * 1000 + i + 1, i * 100)
        index.close()
        indexes.append(index)
    before = _open_fds()
    for n, index in enumerate(indexes):
        assert index.sealed
        assert index.lookup(n * 1000 + 25) == (n * 1000 + 25, 2400)
    assert _open_fds() == before
    assert all(index._buffer is None for index in indexes)  # nothing of the entries stays in memory


def test_a_deleted_sealed_index_reads_as_empty(tmp_path: Path) -> None:
    """A read in flight on a segment whose files were deleted scans from the segment start."""
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0, 1 << 20)
    index.append(10, 100)
    index.close()
    index.path.unlink()
    assert index.lookup(50) == (0, 0)
