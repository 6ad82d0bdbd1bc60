"""LogRetention.run_pass: the periodic retention pass gives the event loop back as it goes, and skips a
partition that stopped being hosted meanwhile."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from test_storage_helpers import append, batch

from klamm.broker import log_tasks
from klamm.broker.log_tasks import LogRetention
from klamm.storage.log import Log, LogConfig
from klamm.storage.retention import delete_segments

SEGMENT_BYTES = 1000


def _partition(tmp_path, n: int) -> SimpleNamespace:
    log = Log.open(tmp_path / f"t{n}-0", LogConfig(segment_bytes=SEGMENT_BYTES))
    while len(log.segments) < 3:
        append(log, batch(3, value_size=100))
    # retention.bytes lets exactly the oldest segment go
    retained = sum(segment.size for segment in log.segments[1:])
    config = SimpleNamespace(retention_ms=-1, retention_bytes=retained, delete=True, file_delete_delay_ms=0)
    return SimpleNamespace(topic=f"t{n}", index=0, log=log, config=config, high_watermark=log.log_end_offset)


class _Broker:
    def __init__(self, partitions: list[SimpleNamespace]) -> None:
        self.replicas = SimpleNamespace(partitions={(p.topic, p.index): p for p in partitions})
        self.deleted: list[object] = []
        self.checkpoints = 0
        self.sliced_checkpoints = 0  # the pass on the loop takes the checkpoints' snapshot in slices
        self.delayed_deletes = SimpleNamespace(segments=lambda segments, _delay: self.deleted.extend(segments))
        self.logs = SimpleNamespace(checkpoint=self._checkpoint, checkpoint_in_slices=self._checkpoint_in_slices)

    def _checkpoint(self) -> None:
        self.checkpoints += 1

    async def _checkpoint_in_slices(self) -> None:
        self.sliced_checkpoints += 1

    def close(self, partitions: list[SimpleNamespace]) -> None:
        delete_segments(self.deleted)  # type: ignore[arg-type]
        for partition in partitions:
            partition.log.close()


def test_a_pass_lets_other_callbacks_run_between_partitions(tmp_path, monkeypatch) -> None:
    partitions = [_partition(tmp_path, n) for n in range(30)]
    broker = _Broker(partitions)
    monkeypatch.setattr(log_tasks, "RETENTION_SLICE_S", 0.0)  # give the loop back after every partition
    removed_mid_pass = partitions[20]

    async def run() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                if ticks == 10:  # the topic is deleted while the pass runs
                    del broker.replicas.partitions[(removed_mid_pass.topic, 0)]
                await asyncio.sleep(0)

        task = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        try:
            deleted = await LogRetention(broker).run_pass(now_ms=0)
        finally:
            task.cancel()
        return deleted, ticks

    deleted, ticks = asyncio.run(run())
    assert ticks >= 29  # the ticker ran between the partitions, not after the pass
    assert deleted == 29 and len(broker.deleted) == 29
    assert (broker.sliced_checkpoints, broker.checkpoints) == (1, 0)
    assert len(removed_mid_pass.log.segments) == 3  # skipped: no longer hosted when its turn came
    assert all(len(p.log.segments) == 2 for p in partitions if p is not removed_mid_pass)
    broker.close(partitions)


def test_run_once_and_run_pass_delete_the_same(tmp_path) -> None:
    first_partitions = [_partition(tmp_path / "a", n) for n in range(5)]
    second_partitions = [_partition(tmp_path / "b", n) for n in range(5)]
    first, second = _Broker(first_partitions), _Broker(second_partitions)
    assert LogRetention(first).run_once(now_ms=0) == 5
    assert asyncio.run(LogRetention(second).run_pass(now_ms=0)) == 5
    starts = [[p.log.log_start_offset for p in b.replicas.partitions.values()] for b in (first, second)]
    assert starts[0] == starts[1] and all(start > 0 for start in starts[0])
    first.close(first_partitions)
    second.close(second_partitions)
