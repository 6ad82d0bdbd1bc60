"""Reading a coordinator's internal partition from its start, batch by batch.

Both coordinators rebuild their state by replaying their topic at start-up.
Reading advances by whole batches, so a batch that compaction emptied of
records still moves the position on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from klamm.protocol.batch import BatchHeader, split_batches

READ_CHUNK_BYTES = 1024 * 1024


def read_batches(partition: Any) -> Iterator[tuple[bytes, BatchHeader, int]]:
    """(buffer, batch header, first offset to replay) for every batch of the partition's log.

    Records of a batch below the third value are before the log start offset and
    are not part of the state.
    """
    offset, end = partition.log_start_offset, partition.log_end_offset
    while offset < end:
        buf = partition.log.read_bytes(offset, READ_CHUNK_BYTES, max_offset=end)
        if not buf:
            return
        for header in split_batches(buf):
            if header.next_offset <= offset:
                continue
            yield buf, header, offset
            offset = header.next_offset
