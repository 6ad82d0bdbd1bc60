"""Flush policy end to end: fsync before the ack with group commit, and the internal topics' policies.

A real client (aiokafka) runs on the same event loop as an in-process broker, so
when `send_and_wait` returns, the broker has sent the ack; what the fsync seam
(klamm.storage.segment.FileIO) saw up to then is known exactly.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

import klamm.testing
from klamm.broker.partition import Partition
from klamm.protocol.batch import split_batches
from klamm.protocol.topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from klamm.storage.segment import FileIO

pytestmark = pytest.mark.timeout(120)


def run(coro_fn):
    """Run an async test body on a fresh event loop (no async pytest plugin here)."""
    import functools

    @functools.wraps(coro_fn)
    def wrapper(*args, **kwargs):
        asyncio.run(coro_fn(*args, **kwargs))
    return wrapper

PRODUCERS = 6
SENDS = 8


class FsyncProbe:
    """Counts the fsyncs of one log's segments and the log end each one covers.

    The first fsync of the log is held until every producer has one batch appended,
    so the batches arriving meanwhile must share the next fsync (group commit).
    """

    def __init__(self) -> None:
        self.log = None
        self.fsyncs = 0
        self.durable_end = 0  # offsets below were appended before an fsync that completed
        self._lock = threading.Lock()
        self._real = FileIO.fsync

    def __call__(self, io: FileIO, fd: int) -> None:
        log = self.log
        if log is None or fd not in {segment.fd for segment in log.segments}:
            self._real(io, fd)
            return
        if self.fsyncs == 0:
            give_up = time.monotonic() + 30  # a safety net, not a measurement
            while log.log_end_offset < PRODUCERS and time.monotonic() < give_up:
                time.sleep(0.001)
        covered = log.log_end_offset  # appended (written) before the fsync below starts
        self._real(io, fd)
        with self._lock:
            self.fsyncs += 1
            self.durable_end = max(self.durable_end, covered)


async def _create(bootstrap: str, topic: str, configs: dict[str, str] | None = None) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs or {})])
    finally:
        await admin.close()


@pytest.mark.parametrize("acks", [1, "all"])
@run
async def test_flush_messages_1_acks_only_after_the_fsync_and_producers_share_fsyncs(monkeypatch, acks):
    probe = FsyncProbe()
    monkeypatch.setattr(FileIO, "fsync", lambda io, fd: probe(io, fd))
    async with klamm.testing.broker(**{"log.flush.interval.messages": "1"}) as running:
        await _create(running.bootstrap_servers, "durable")
        log = running.broker.replicas.get("durable", 0).log
        probe.log = log
        early_acks: list[tuple[int, int]] = []

        async def produce(n: int) -> None:
            producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap_servers, acks=acks, linger_ms=0)
            await producer.start()
            try:
                for i in range(SENDS):
                    metadata = await producer.send_and_wait("durable", f"p{n}-{i}".encode(), partition=0)
                    # The ack is here: the fsync covering its offset must have completed.
                    if not (metadata.offset < probe.durable_end and metadata.offset < log.recovery_point):
                        early_acks.append((metadata.offset, probe.durable_end))
            finally:
                await producer.stop()

        await asyncio.gather(*(produce(n) for n in range(PRODUCERS)))
        batches = PRODUCERS * SENDS
        assert log.log_end_offset == batches
        assert early_acks == []
        assert 0 < probe.fsyncs < batches  # group commit: fewer fsyncs than batches
        assert probe.fsyncs <= batches - (PRODUCERS - 1)


@run
async def test_default_policy_acks_from_the_page_cache():
    """The default (flush.messages unset): the ack does not wait for an fsync."""
    async with klamm.testing.broker() as running:
        await _create(running.bootstrap_servers, "cached")
        producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap_servers, acks="all")
        await producer.start()
        try:
            await producer.send_and_wait("cached", b"v", partition=0)
        finally:
            await producer.stop()
        assert running.broker.replicas.get("cached", 0).log.recovery_point == 0


async def _transaction_and_commit(bootstrap: str) -> None:
    await _create(bootstrap, "data")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="tx-1")
    await producer.start()
    try:
        async with producer.transaction():
            await producer.send_and_wait("data", b"in a transaction", partition=0)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="g1", enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition("data", 0)])
        await consumer.commit({TopicPartition("data", 0): 1})
    finally:
        await consumer.stop()


def _unflushed(broker, topic: str) -> list[int]:
    return [p.log.log_end_offset - p.log.recovery_point
            for (name, _), p in broker.replicas.partitions.items() if name == topic]


async def _flushed(broker, topic: str) -> bool:
    """Whether the flusher fsyncs what `topic` holds within a few seconds."""
    for _ in range(500):
        if set(_unflushed(broker, topic)) == {0}:
            return True
        await asyncio.sleep(0.01)
    return False


@run
async def test_transaction_state_is_fsynced_on_every_write_and_offsets_follow_the_topic_policy():
    async with klamm.testing.broker() as running:
        await _transaction_and_commit(running.bootstrap_servers)
        broker = running.broker
        assert sum(p.log.log_end_offset for (name, _), p in broker.replicas.partitions.items()
                   if name == TRANSACTION_STATE) > 0
        # every state change fsynced (the Complete record, written after the answer, by the flusher soon after)
        assert await _flushed(broker, TRANSACTION_STATE)
        assert sum(_unflushed(broker, CONSUMER_OFFSETS)) > 0  # default policy: the page cache, as Kafka


@run
async def test_transaction_state_is_fsynced_beside_the_loop_and_markers_follow_the_fsync(monkeypatch):
    """__transaction_state's fsync on every write runs on the flusher's thread (on the event loop, each held
    every connection for as long as the disk took), and a transaction's marker is written once its
    PrepareCommit is fsynced: a marker for a record power loss could take back would commit the transaction
    on its partition while the coordinator, restarted, found it Ongoing and aborted it."""
    loop_thread = threading.current_thread()
    fsyncs_on_loop: list[bool] = []
    real_fsync = FileIO.fsync

    def fsync(io: FileIO, fd: int) -> None:
        if f"{TRANSACTION_STATE}-" in os.readlink(f"/proc/self/fd/{fd}"):
            fsyncs_on_loop.append(threading.current_thread() is loop_thread)
        real_fsync(io, fd)

    monkeypatch.setattr(FileIO, "fsync", fsync)
    state_fsynced_at_marker: list[bool] = []
    real_append_marker = Partition.append_marker

    def append_marker(partition: Partition, *args, **kwargs):
        if partition.topic == "data":
            state_fsynced_at_marker.append(set(_unflushed(running.broker, TRANSACTION_STATE)) == {0})
        return real_append_marker(partition, *args, **kwargs)

    monkeypatch.setattr(Partition, "append_marker", append_marker)
    async with klamm.testing.broker() as running:
        await _transaction_and_commit(running.bootstrap_servers)
        assert await _flushed(running.broker, TRANSACTION_STATE)
    assert fsyncs_on_loop and not any(fsyncs_on_loop)
    assert state_fsynced_at_marker == [True]


@run
async def test_offset_commits_are_fsynced_before_the_answer_with_flush_messages_1():
    async with klamm.testing.broker(**{"log.flush.interval.messages": "1"}) as running:
        await _transaction_and_commit(running.bootstrap_servers)
        assert set(_unflushed(running.broker, CONSUMER_OFFSETS)) == {0}
        assert await _flushed(running.broker, TRANSACTION_STATE)  # by the flusher, the Complete record too


@run
async def test_the_scheduled_flusher_fsyncs_data_older_than_flush_ms():
    """log.flush.scheduler.interval.ms runs Kafka's flushDirtyLogs pass: data older than flush.ms
    is fsynced with no append to trigger it (main checked flush.ms only inside append)."""
    async with klamm.testing.broker(**{"log.flush.scheduler.interval.ms": "20",
                                       "log.flush.interval.ms": "500"}) as running:
        await _create(running.bootstrap_servers, "aging")
        producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap_servers, acks=1)
        await producer.start()
        try:
            await producer.send_and_wait("aging", b"v", partition=0)
        finally:
            await producer.stop()
        log = running.broker.replicas.get("aging", 0).log
        for _ in range(1000):  # the periodic pass needs no append to happen
            if log.recovery_point == log.log_end_offset:
                break
            await asyncio.sleep(0.01)
        assert log.recovery_point == log.log_end_offset == 1


@run
async def test_power_loss_after_acks_with_flush_messages_1_loses_no_acknowledged_record(monkeypatch, tmp_path):
    """Real producers, then a power loss that keeps only fsynced bytes: every acked record is recovered."""
    import shutil
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "unit"))
    from test_storage_power_loss import RecordingIO

    from klamm.storage.log import Log

    recorder = RecordingIO()
    for name in ("open", "pwrite", "ftruncate"):
        monkeypatch.setattr(FileIO, name, lambda io, *args, _name=name: getattr(recorder, _name)(*args))

    def slow_fsync(io: FileIO, fd: int) -> None:
        time.sleep(0.005)  # a disk, not a RAM copy: an ack sent early would overtake it
        recorder.fsync(fd)

    monkeypatch.setattr(FileIO, "fsync", slow_fsync)
    acked: list[int] = []
    async with klamm.testing.broker(**{"log.flush.interval.messages": "1"}) as running:
        # A full index rolls the segment: every few batches here.
        await _create(running.bootstrap_servers, "kept", {"index.interval.bytes": "0", "segment.index.bytes": "40"})
        live = running.broker.replicas.get("kept", 0).log

        image = tmp_path / "image" / "kept-0"

        def power_loss() -> None:
            """Taken on the broker's loop (no append runs meanwhile): each .log file keeps only its
            fsynced bytes, indexes are lost, and the checkpoint is as old as it can be."""
            shutil.copytree(live.directory, image)
            for path in image.iterdir():
                if path.suffix == ".log":
                    path.write_bytes(recorder.durable(live.directory / path.name))
                elif path.suffix in (".index", ".timeindex"):
                    path.unlink()

        async def produce(n: int) -> None:
            producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap_servers, acks="all", linger_ms=0)
            await producer.start()
            try:
                for i in range(SENDS):
                    metadata = await producer.send_and_wait("kept", b"x" * 100 + f"{n}-{i}".encode(), partition=0)
                    acked.append(metadata.offset)
                    if len(acked) == PRODUCERS * SENDS:
                        power_loss()  # the moment of the last ack: the newest data is the least likely synced
            finally:
                await producer.stop()

        await asyncio.gather(*(produce(n) for n in range(PRODUCERS)))
        assert len(live.segments) > 1  # the crash spans rolls
    recovered = Log.open(image, live.config, recovery_point=0, clean_shutdown=False)
    try:
        present = set()
        offset = 0
        while offset < recovered.log_end_offset:
            chunk = recovered.read_bytes(offset, 1 << 20)
            for header in split_batches(chunk):
                present.update(range(header.base_offset, header.next_offset))
                offset = header.next_offset
        assert len(acked) == PRODUCERS * SENDS
        assert set(acked) <= present
    finally:
        recovered.close()


@run
async def test_with_flush_messages_1_consumers_read_only_fsynced_records(monkeypatch):
    """The high watermark stops at the recovery point: a record a power loss could take back is
    never served (Kafka fsyncs inside such an append, before it moves the high watermark)."""
    gate = threading.Event()
    real = FileIO.fsync

    def held_fsync(io: FileIO, fd: int) -> None:
        gate.wait(30)
        real(io, fd)

    async with klamm.testing.broker(**{"log.flush.interval.messages": "1"}) as running:
        await _create(running.bootstrap_servers, "visible")
        partition = running.broker.replicas.get("visible", 0)
        monkeypatch.setattr(FileIO, "fsync", held_fsync)
        producer = AIOKafkaProducer(bootstrap_servers=running.bootstrap_servers, acks=1)
        await producer.start()
        try:
            sent = asyncio.ensure_future(producer.send_and_wait("visible", b"v", partition=0))
            while partition.log.log_end_offset == 0:
                await asyncio.sleep(0.001)
            assert partition.high_watermark == 0 and not sent.done()  # appended, not yet fsynced
            gate.set()
            metadata = await sent
            assert partition.high_watermark == 1 == metadata.offset + 1
        finally:
            gate.set()
            await producer.stop()
