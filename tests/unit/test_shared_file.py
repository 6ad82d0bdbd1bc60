"""SharedFile: a segment's descriptor closes with its last reference, never under a lease."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from klamm.protocol.batch import split_batches
from klamm.protocol.records import build_batch
from klamm.storage.log import Log, LogConfig
from klamm.storage.retention import delete_segments
from klamm.storage.shared_file import SharedFile


def test_descriptor_closes_with_the_last_reference(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"data")
    shared = SharedFile(os.open(path, os.O_RDONLY))
    fd = shared.fileno()
    lease = shared.lease()
    shared.release()  # the owner lets go: the lease keeps it open
    assert os.pread(lease.fileno(), 4, 0) == b"data"
    lease.release()
    lease.release()  # idempotent
    assert shared.closed
    with pytest.raises(OSError):
        os.fstat(fd)
    with pytest.raises(ValueError):
        shared.fileno()
    with pytest.raises(ValueError):
        shared.lease()


def test_a_lease_reads_a_deleted_segment_not_the_file_that_reuses_its_number(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", LogConfig())
    batch = bytearray(build_batch([(b"k", b"original")]))
    log.append(batch, split_batches(batch), leader_epoch=0)
    read = log.read(0, 1 << 20, max_offset=log.log_end_offset, min_one=True)
    original = log.read_bytes(0, 1 << 20)
    lease = read.file.lease()
    number = lease.fileno()
    delete_segments(log.delete_oldest_segments(1))
    intruder = tmp_path / "intruder"
    intruder.write_bytes(b"X" * len(batch))
    other = os.open(intruder, os.O_RDONLY)  # the lowest free number: not the leased one
    try:
        assert other != number
        assert os.pread(lease.fileno(), read.length, read.position) == original
    finally:
        os.close(other)
        lease.release()
    with pytest.raises(OSError):
        os.fstat(number)
    log.close()
