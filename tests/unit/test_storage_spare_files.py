"""Spare files (klamm.storage.segment.SpareFiles): the flush job after a roll makes the next segment's files in its
worker, the next roll renames them instead of creating files on the event loop; a crash with spare files on disk,
or between a roll's renames, leaves a log that opens as it was; a deleted log's job creates none."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from klamm.protocol.batch import split_batches
from klamm.protocol.records import build_batch, decode_batch
from klamm.storage.log import Log, LogConfig
from klamm.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SpareFiles,
    file_name,
)

SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)


def append(log: Log, value: bytes = b"v") -> None:
    buf = bytearray(build_batch([(b"k", value)]))
    log.append(buf, split_batches(buf), leader_epoch=0)


def flush_job(log: Log) -> None:
    """What klamm.broker.log_flush does after an append or a roll (the worker's part run here)."""
    job = log.begin_flush()
    assert job is not None
    job.run()
    log.complete_flush(job)


def spare_inodes(directory: Path) -> dict[str, int]:
    return {suffix: os.stat(directory / f"spare{suffix}.spare").st_ino for suffix in SUFFIXES}


def segment_inodes(directory: Path, base: int) -> dict[str, int]:
    return {suffix: os.stat(directory / file_name(base, suffix)).st_ino for suffix in SUFFIXES}


def contents(log: Log) -> list[tuple[int, bytes]]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20, max_offset=log.log_end_offset, min_one=True)
        buf = bytearray(os.pread(result.fd, result.length, result.position))
        for header in split_batches(buf):
            out.append((header.base_offset, decode_batch(buf, header.position)[1][0].value))
            offset = header.next_offset
    return out


def test_a_roll_renames_the_files_a_flush_job_made(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    append(log)
    flush_job(log)  # the first job makes spare files (the log had none)
    spare = spare_inodes(log.directory)
    log.roll()
    assert segment_inodes(log.directory, 1) == spare  # the same files: renamed, not created
    assert not list(log.directory.glob("spare*"))
    append(log, b"w")
    flush_job(log)  # the roll's job makes the next ones
    spare = spare_inodes(log.directory)
    log.roll()
    assert segment_inodes(log.directory, 2) == spare
    assert contents(log) == [(0, b"v"), (1, b"w")]
    log.close()
    reopened = Log.open(tmp_path / "t-0", LogConfig())
    assert contents(reopened) == [(0, b"v"), (1, b"w")] and reopened.log_end_offset == 2
    reopened.close()


def test_a_roll_before_its_spare_is_made_creates_the_files(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    append(log)
    job = log.begin_flush()  # asks for spare files, not made until it runs
    log.roll()
    assert not list(log.directory.glob("spare*"))
    assert segment_inodes(log.directory, 1)
    job.run()
    log.complete_flush(job)
    spare = spare_inodes(log.directory)  # made now: the next roll takes them
    append(log)
    log.roll()
    assert segment_inodes(log.directory, 2) == spare
    log.close()


@pytest.mark.parametrize("renamed", [0, 1, 2, 3])
def test_a_crash_with_spare_files_or_between_a_rolls_renames(tmp_path: Path, monkeypatch, renamed: int) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    append(log)
    flush_job(log)
    real_rename = os.rename
    done = []

    def crashing_rename(source, target):
        if len(done) == renamed:
            raise SystemExit("killed")  # the process dies here: nothing after runs
        real_rename(source, target)
        done.append(target)

    if renamed < 3:
        monkeypatch.setattr(os, "rename", crashing_rename)
        with pytest.raises(SystemExit):
            log.roll()
        monkeypatch.undo()
    else:
        log.roll()
    for segment in log._segments:  # killed: files as they are, descriptors gone
        os.close(segment.fd)
    reopened = Log.open(tmp_path / "t-0", LogConfig(), clean_shutdown=False)
    assert contents(reopened) == [(0, b"v")] and reopened.log_end_offset == 1
    assert not [p.name for p in reopened.directory.iterdir() if p.name.endswith(".spare")]
    names = {p.name for p in reopened.directory.iterdir()}
    if renamed < 3:  # the index files a roll cut short renamed are orphans: gone
        assert not {name for name in names if name.startswith(file_name(1, "."))}
    else:  # a roll done: its empty segment stays, as a created one would
        assert set(segment_inodes(reopened.directory, 1))
    append(reopened, b"w")
    assert contents(reopened) == [(0, b"v"), (1, b"w")]
    reopened.close()


def test_a_deleted_logs_job_makes_no_spare_files(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    append(log)
    job = log.begin_flush()
    log.delete()
    job.run()  # after the deletion: nothing created, no directory brought back
    assert not (tmp_path / "t-0").exists()


def test_a_cancelled_spare_creates_nothing(tmp_path: Path) -> None:
    spare = SpareFiles(tmp_path)
    spare.cancel()
    spare.make()
    assert not spare.made and not list(tmp_path.iterdir())


def test_a_spare_never_replaces_a_segment_file(tmp_path: Path) -> None:
    spare = SpareFiles(tmp_path)
    spare.make()
    (tmp_path / file_name(5, LOG_SUFFIX)).write_bytes(b"data")
    with pytest.raises(FileExistsError):
        LogSegment.create(tmp_path, 5, LogConfig(), 0, spare=spare)
    assert (tmp_path / file_name(5, LOG_SUFFIX)).read_bytes() == b"data"
    assert spare.made and all(spare.path(suffix).exists() for suffix in SUFFIXES)
