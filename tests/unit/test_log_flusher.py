"""LogFlusher: flush.ms on a schedule, group commit per log, failures; nothing fsyncs on the loop at a roll."""

from __future__ import annotations

import asyncio
import os

import pytest
from test_storage_helpers import FakeClock, append, batch, open_log
from test_storage_power_loss import RecordingIO, durable_prefix

from klamm.broker.log_flush import LogFlusher
from klamm.controller.metadata_log import FileMetadataLog
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.storage.log import Log, LogConfig


async def _settled(flusher: LogFlusher) -> None:
    while flusher._running:  # the test waits for the executor's jobs
        await asyncio.gather(*flusher._running.values(), return_exceptions=True)


def test_scheduled_pass_flushes_logs_whose_unflushed_data_waited_flush_ms(tmp_path):
    clock = FakeClock()
    io = RecordingIO()
    old = Log.open(tmp_path / "old-0", LogConfig(flush_ms=1000), time_ms=clock, io=io)
    young = Log.open(tmp_path / "young-0", LogConfig(flush_ms=5000), time_ms=clock, io=io)

    async def scenario() -> None:
        flusher = LogFlusher(lambda: [old, young], time_ms=clock)
        append(old, batch(3))
        append(young, batch(2))
        assert flusher.run_once() == 0  # nothing waited long enough
        clock.now += 1000
        assert flusher.run_once() == 1
        await _settled(flusher)
        assert old.recovery_point == 3 == durable_prefix(old, io)
        assert young.recovery_point == 0
        clock.now += 4000
        flusher.run_once()
        await _settled(flusher)
        assert young.recovery_point == 2 == durable_prefix(young, io)

    asyncio.run(scenario())
    old.close()
    young.close()


def test_appends_while_a_flush_runs_share_the_next_one(tmp_path):
    io = RecordingIO()
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=1), io=io)

    async def scenario() -> None:
        flusher = LogFlusher(lambda: [log])
        waits = []
        for _ in range(10):
            result = append(log, batch(1))
            assert result.flush_due
            flusher.request(log)  # the first starts a job; the others queue behind it
            waits.append(asyncio.ensure_future(flusher.wait_durable(log, result.last_offset + 1)))
        await asyncio.gather(*waits)
        assert flusher.jobs_started == 2
        assert log.recovery_point == 10 == durable_prefix(log, io)

    asyncio.run(scenario())
    log.close()


def test_a_failed_fsync_fails_the_acks_waiting_for_it_and_a_later_flush_retries(tmp_path):
    class FailingIO(RecordingIO):
        fail = True

        def fsync(self, fd: int) -> None:
            if self.fail:
                raise OSError(5, "Input/output error")
            super().fsync(fd)

    io = FailingIO()
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=1), io=io)

    async def scenario() -> None:
        flusher = LogFlusher(lambda: [log])
        result = append(log, batch(2))
        flusher.request(log)
        with pytest.raises(KafkaError) as failed:
            await flusher.wait_durable(log, result.last_offset + 1)
        assert failed.value.code == ErrorCode.kafka_storage_error
        assert log.recovery_point == 0 and log.unflushed_messages == 2  # the range is flushed again later
        io.fail = False
        flusher.request(log)
        await flusher.wait_durable(log, result.last_offset + 1)
        assert log.recovery_point == 2 == durable_prefix(log, io)

    asyncio.run(scenario())
    log.close()


def test_a_roll_inside_an_append_does_not_fsync(tmp_path, monkeypatch):
    """Index fsyncs and the producer snapshot of a roll wait for the flush job (a worker thread)."""
    log = open_log(tmp_path, LogConfig(segment_bytes=300, index_interval_bytes=50))
    append(log, batch(3, value_size=60, producer_id=7, epoch=0, sequence=0))
    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    rolled = append(log, batch(3, value_size=60, producer_id=7, epoch=0, sequence=3))
    monkeypatch.undo()
    assert len(log.segments) == 2 and calls == []
    base = log.segments[-1].base_offset
    snapshot = log.directory / f"{base:020d}.snapshot"
    assert not snapshot.exists()  # encoded at the roll (the state at the roll offset), written by the job
    job = log.begin_flush()
    assert [s.path for s in job.snapshots] == [snapshot] and log.recovery_point == 0
    job.run()
    assert snapshot.exists()
    log.complete_flush(job)
    assert log.recovery_point == rolled.last_offset + 1
    log.close()


def test_metadata_log_fsyncs_each_commit_before_append_returns(tmp_path):
    io = RecordingIO()
    log = Log.open(tmp_path / "__cluster_metadata-0", LogConfig(), io=io)
    metadata = FileMetadataLog(log)
    for n in range(5):
        last = metadata.append([b"record-%d" % n, b"more"])
        assert log.recovery_point == last + 1 == durable_prefix(log, io)  # fsynced before the controller answers
    assert io.fsyncs == 5  # one fsync per commit
    log.close()


def test_a_retry_of_a_batch_not_yet_fsynced_waits_for_the_fsync_too(tmp_path):
    """flush.messages=1: a producer retry is answered from the original append, which may still
    be waiting for its fsync; the retry's ack must wait as well."""
    log = open_log(tmp_path, LogConfig(flush_messages=1))
    first = append(log, batch(2, producer_id=3, epoch=0, sequence=0))
    retry = append(log, batch(2, producer_id=3, epoch=0, sequence=0))
    assert retry.duplicate and retry.flush_due
    log.flush()
    again = append(log, batch(2, producer_id=3, epoch=0, sequence=0))
    assert again.duplicate and not again.flush_due and again.last_offset == first.last_offset
    log.close()
