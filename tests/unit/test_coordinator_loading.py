"""Replaying a coordinator's partition advances by batch, so emptied batches end."""

from __future__ import annotations

from types import SimpleNamespace

from klamm.protocol.records import assemble_batch, build_batch


def _empty_batch(base_offset: int, last_offset_delta: int) -> bytes:
    """What the cleaner leaves of a batch whose records all went: offsets kept, no records."""
    return assemble_batch(base_offset=base_offset, partition_leader_epoch=0, attributes=0,
                          last_offset_delta=last_offset_delta, base_timestamp=0, max_timestamp=0, producer_id=-1,
                          producer_epoch=-1, base_sequence=-1, records_count=0, body=b"")


def test_empty_batches_do_not_stall_the_replay() -> None:
    from klamm.coordinator.loading import read_batches

    log_bytes = build_batch([(b"a", b"1")], base_offset=0) + _empty_batch(1, 2) + build_batch([(b"b", b"2")],
                                                                                             base_offset=4)

    def read_bytes(offset: int, max_bytes: int, max_offset: int) -> bytes:
        return log_bytes  # every batch, whatever the offset: the reader must skip what it has seen

    partition = SimpleNamespace(log_start_offset=0, log_end_offset=5, log=SimpleNamespace(read_bytes=read_bytes))
    seen = [(header.base_offset, header.records_count, start) for _, header, start in read_batches(partition)]
    assert seen == [(0, 1, 0), (1, 0, 1), (4, 1, 4)]
