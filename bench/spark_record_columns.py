"""Rows per second of klamm.spark.record_columns.batch_rows (one batch to Arrow rows, headers included).

    .venv/bin/python bench/spark_record_columns.py [--records N]

Batches of N records (default 1,000) with 8-byte keys and 100-byte values, uncompressed:
40 headers a record (12-byte UTF-8 keys, 16-byte values), the same with every
seventh key not UTF-8 and with no key UTF-8, and 2 headers a record for comparison. Best of 5 timeit
repeats, each converting the batch enough times to take about 0.2 s.
"""

from __future__ import annotations

import argparse
import timeit

from klamm.protocol.records import NewRecord, build_batch
from klamm.spark.record_columns import batch_rows

TS = 1_700_000_000_000


def batch(records: int, headers: int, bad_keys: int) -> bytes:
    """Every `bad_keys`th header key of a record is not UTF-8 (0: none)."""
    def key(j: int) -> str | bytes:
        return b"header-\xff%03d" % j if bad_keys and j % bad_keys == 0 else f"header-{j:05d}"

    return build_batch([NewRecord(b"%08d" % i, b"v" * 100, [(key(j), b"%016d" % j) for j in range(headers)], TS)
                        for i in range(records)], timestamp_ms=TS)


def rows_per_second(buf: bytes, records: int) -> float:
    timer = timeit.Timer(lambda: batch_rows(buf, "t", 0, True))
    number, _ = timer.autorange()
    return records * number / min(timer.repeat(5, number))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1000)
    records = parser.parse_args().records
    for headers, bad_keys, label in ((40, 0, "40 headers"), (40, 7, "40 headers, 1 key in 7 not UTF-8"),
                                     (40, 1, "40 headers, no key UTF-8"), (2, 0, "2 headers")):
        buf = batch(records, headers, bad_keys)
        print(f"{label:36} {rows_per_second(buf, records):>12,.0f} rows/s  ({len(buf):,} B a batch)")


if __name__ == "__main__":
    main()
