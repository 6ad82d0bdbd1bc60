"""klamm.spark.segments.read_slice over a segment file written here: which records, in which Arrow batches."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from klamm.protocol.records import (
    NewRecord,
    build_batch,
    build_control_batch,
    decode_batch,
)
from klamm.spark import segments
from klamm.spark.reading import BATCH_ROWS
from klamm.spark.segments import SegmentSlice, read_slice

TS = 1_700_000_000_000


def write_segment(path: Path, batches: list[bytes]) -> int:
    data = b"".join(batches)
    path.write_bytes(data)
    return len(data)


def expected_offsets_and_values(batches: list[bytes], start: int, end: int) -> list[tuple[int, bytes | None]]:
    rows = []
    for buf in batches:
        header, records = decode_batch(buf, 0)
        if not header.is_control:
            rows += [(r.offset, r.value) for r in records if start <= r.offset < end]
    return rows


def test_small_batches_are_put_together_by_rows_and_large_records_by_bytes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(segments, "_BATCH_BYTES", 1 << 20)
    small = [build_batch([NewRecord(b"k", b"%d" % i, timestamp=TS)] * 7, base_offset=7 * i, timestamp_ms=TS)
             for i in range(3000)]  # 21,000 records, 7 to a batch
    path = tmp_path / "00000000000000000000.log"
    limit = write_segment(path, small)
    out = list(read_slice(SegmentSlice(str(path), "t", 0, 5, 20_990, limit, ()), False))
    # 2 rows of the first batch, then batches of 7 until there are BATCH_ROWS (10,000) or more
    assert [b.num_rows for b in out] == [2 + 1429 * 7, 1429 * 7, 20_985 - 2 - 2 * 1429 * 7]
    assert BATCH_ROWS == 10_000
    table = pa.Table.from_batches(out)
    assert list(zip(table.column("offset").to_pylist(), table.column("value").to_pylist())) == \
        expected_offsets_and_values(small, 5, 20_990)

    large = [build_batch([NewRecord(None, bytes([i % 256]) * 100_000, timestamp=TS)] * 2, base_offset=2 * i,
                         timestamp_ms=TS) for i in range(30)]
    limit = write_segment(path, large)
    out = list(read_slice(SegmentSlice(str(path), "t", 0, 0, 60, limit, ()), True))
    assert [b.num_rows for b in out] == [12, 12, 12, 12, 12]  # about 1 MiB each, not 10,000 rows
    assert [v for b in out for v in b.column("value").to_pylist()] == [bytes([i // 2]) * 100_000 for i in range(60)]


def test_markers_and_aborted_batches_are_skipped(tmp_path: Path) -> None:
    batches = [build_batch([(b"k", b"committed")] * 3, base_offset=0, producer_id=5, producer_epoch=0,
                           base_sequence=0, transactional=True, timestamp_ms=TS),
               build_control_batch(1, producer_id=5, producer_epoch=0, coordinator_epoch=0, base_offset=3,
                                   timestamp_ms=TS),
               build_batch([(b"k", b"aborted")] * 3, base_offset=4, producer_id=5, producer_epoch=0,
                           base_sequence=3, transactional=True, timestamp_ms=TS),
               build_control_batch(0, producer_id=5, producer_epoch=0, coordinator_epoch=0, base_offset=7,
                                   timestamp_ms=TS),
               build_batch([(None, b"plain")], base_offset=8, timestamp_ms=TS)]
    path = tmp_path / "00000000000000000000.log"
    limit = write_segment(path, batches)
    out = pa.Table.from_batches(list(read_slice(SegmentSlice(str(path), "t", 0, 0, 9, limit, ((5, 4, 7),)),
                                                False)))
    assert out.column("offset").to_pylist() == [0, 1, 2, 8]
    assert out.column("value").to_pylist() == [b"committed"] * 3 + [b"plain"]
