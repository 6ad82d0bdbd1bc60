"""Crash recovery: torn tails at every byte, garbage tails, bad indexes, clean vs unclean opens."""

from __future__ import annotations

import os
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_storage_helpers import all_offsets, append, batch, open_log

from klamm.protocol.batch import read_batch_header
from klamm.storage.log import LogConfig

CONFIG = LogConfig(segment_bytes=100_000, index_interval_bytes=64)


def write_batches(tmp_path, sizes: list[int], config: LogConfig = CONFIG) -> tuple[list[int], list[int]]:
    """Append one batch per size (records count); return batch base offsets and end byte positions."""
    log = open_log(tmp_path, config)
    bases, ends = [], []
    for records in sizes:
        bases.append(append(log, batch(records, value_size=7)).first_offset)
        ends.append(log.active_segment.size)
    log.flush()
    for segment in log.segments:
        segment.close()  # an unclean stop: no snapshot, no final time index entry
    return bases, ends


def test_recovery_from_a_tail_cut_at_every_byte_of_the_last_batch(tmp_path):
    bases, ends = write_batches(tmp_path / "original", [2, 1, 3, 2, 4])
    source = tmp_path / "original" / "topic-0"
    last_start, last_end = ends[-2], ends[-1]
    for cut in range(last_start, last_end):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(source, work / "topic-0")
        os.truncate(work / "topic-0" / "00000000000000000000.log", cut)
        log = open_log(work, CONFIG, clean_shutdown=False)
        assert log.log_end_offset == bases[-1], cut
        assert all_offsets(log) == bases[:-1]
        assert (work / "topic-0" / "00000000000000000000.log").stat().st_size == last_start
        result = append(log, batch(2))
        assert result.first_offset == bases[-1]
        log.close()
        reopened = open_log(work, CONFIG)
        assert all_offsets(reopened) == bases[:-1] + [bases[-1]]
        assert reopened.log_end_offset == bases[-1] + 2
        reopened.close()
        shutil.rmtree(work)


def test_recovery_after_cut_deletes_later_segments(tmp_path):
    config = LogConfig(segment_bytes=400, index_interval_bytes=64)
    log = open_log(tmp_path, config)
    for _ in range(20):
        append(log, batch(2, value_size=20))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    for segment in log.segments:
        segment.close()
    directory = tmp_path / "topic-0"
    second = directory / f"{bases[1]:020d}.log"
    os.truncate(second, second.stat().st_size - 1)
    # Recovering from the start of the log, the damaged middle segment cuts everything after it.
    log = open_log(tmp_path, config, clean_shutdown=False, recovery_point=0)
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert not (directory / f"{bases[2]:020d}.log").exists()
    assert log.log_end_offset == all_offsets(log)[-1] + 2


def test_garbage_tail_is_removed(tmp_path):
    bases, ends = write_batches(tmp_path, [1, 2, 3])
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    with open(path, "ab") as f:
        f.write(b"\x00" * 100)
    log = open_log(tmp_path, CONFIG, clean_shutdown=False)
    assert log.log_end_offset == 6
    assert path.stat().st_size == ends[-1]


def test_corrupt_crc_in_the_middle_truncates_there(tmp_path):
    bases, ends = write_batches(tmp_path, [1, 1, 1, 1])
    path = tmp_path / "topic-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[ends[1] + 70] ^= 0xFF  # a record byte of the third batch
    path.write_bytes(data)
    log = open_log(tmp_path, CONFIG, clean_shutdown=False)
    assert log.log_end_offset == 2
    assert all_offsets(log) == [0, 1]


def test_unclean_open_only_checks_from_the_recovery_point_segment(tmp_path):
    config = LogConfig(segment_bytes=400, index_interval_bytes=64)
    log = open_log(tmp_path, config)
    for _ in range(20):
        append(log, batch(2, value_size=20))
    bases = [s.base_offset for s in log.segments]
    end = log.log_end_offset
    for segment in log.segments:
        segment.close()
    # Damage a record byte in the first segment: below the recovery point it is trusted.
    first = tmp_path / "topic-0" / f"{bases[0]:020d}.log"
    data = bytearray(first.read_bytes())
    data[80] ^= 0xFF
    first.write_bytes(data)
    log = open_log(tmp_path, config, clean_shutdown=False, recovery_point=bases[-1])
    assert log.log_end_offset == end


def test_clean_open_rebuilds_a_missing_index(tmp_path):
    log = open_log(tmp_path, CONFIG)
    for _ in range(30):
        append(log, batch(2))
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.index"
    expected = index.read_bytes()
    assert expected
    index.unlink()
    log = open_log(tmp_path, CONFIG)
    assert index.read_bytes() == expected
    assert log.log_end_offset == 60


def test_clean_open_rebuilds_an_index_pointing_past_the_log(tmp_path):
    log = open_log(tmp_path, CONFIG)
    for _ in range(30):
        append(log, batch(2))
    log.close()
    index = tmp_path / "topic-0" / "00000000000000000000.index"
    expected = index.read_bytes()
    with open(index, "ab") as f:
        f.write((1000).to_bytes(4, "big") + (10**6).to_bytes(4, "big"))
    log = open_log(tmp_path, CONFIG)
    assert index.read_bytes() == expected
    assert all_offsets(log) == list(range(0, 60, 2))


def test_clean_open_with_torn_tail_still_recovers(tmp_path):
    bases, ends = write_batches(tmp_path, [1, 1, 1])
    os.truncate(tmp_path / "topic-0" / "00000000000000000000.log", ends[-1] - 3)
    log = open_log(tmp_path, CONFIG, clean_shutdown=True)
    assert log.log_end_offset == 2


def test_recovery_rebuilds_indexes_identically(tmp_path):
    log = open_log(tmp_path, CONFIG)
    for n in range(40):
        append(log, batch(1 + n % 3, value_size=9))
    log.close()
    directory = tmp_path / "topic-0"
    expected = (directory / "00000000000000000000.index").read_bytes()
    expected_time = (directory / "00000000000000000000.timeindex").read_bytes()
    log = open_log(tmp_path, CONFIG, clean_shutdown=False)
    log.close()
    assert (directory / "00000000000000000000.index").read_bytes() == expected
    assert (directory / "00000000000000000000.timeindex").read_bytes() == expected_time


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=12),
    value_size=st.integers(min_value=0, max_value=300),
    cut_fraction=st.floats(min_value=0.0, max_value=1.0),
    garbage=st.binary(max_size=200),
    segment_bytes=st.sampled_from([300, 1000, 100_000]),
)
def test_crash_recovery_property(tmp_path_factory, sizes, value_size, cut_fraction, garbage, segment_bytes):
    root = tmp_path_factory.mktemp("prop")
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=100)
    log = open_log(root, config)
    batches = []  # (segment base, end position in segment, base offset, bytes)
    for records in sizes:
        result = append(log, batch(records, value_size=value_size))
        batches.append((log.active_segment.base_offset, log.active_segment.size, result.first_offset))
    end_offset = log.log_end_offset
    for segment in log.segments:
        segment.close()
    # Cut the last segment file somewhere, then append garbage.
    last_base = batches[-1][0]
    path = root / "topic-0" / f"{last_base:020d}.log"
    size = path.stat().st_size
    cut = int(size * cut_fraction)
    os.truncate(path, cut)
    with open(path, "ab") as f:
        f.write(garbage)
    log = open_log(root, config, clean_shutdown=False)
    survivors = [b for b in batches if b[0] < last_base or b[1] <= cut]
    expected_end = end_offset if len(survivors) == len(batches) else batches[len(survivors)][2]
    assert log.log_end_offset == expected_end
    assert all_offsets(log) == [b[2] for b in survivors]
    result = append(log, batch(1))
    assert result.first_offset == expected_end
    assert read_batch_header(log.read_bytes(expected_end, 1000)).base_offset == expected_end
    log.close()
    shutil.rmtree(root)
