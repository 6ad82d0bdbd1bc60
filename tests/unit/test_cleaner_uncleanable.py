"""Uncleanable partitions (Kafka's LogCleanerManager.uncleanablePartitions): a cleaning that fails on its
own bytes is not retried every log.cleaner.backoff.ms, a process killed once is; the mark goes when the
partition is deleted; Kafka's uncleanable-partitions-count and uncleanable-bytes as gauges per log dir."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import uuid

from prometheus_client.parser import text_string_to_metric_families
from test_cleaner import append, dump, k
from test_cleaner_process import fake_broker, leftovers, segment_files

from klamm.broker import cleaner_tasks
from klamm.broker.cleaner_tasks import LogCleanerService
from klamm.broker.metrics import BrokerMetrics
from klamm.broker.partition import Partition
from klamm.storage.cleaner import PROCESS_CONTEXT
from klamm.storage.throttler import Throttler

BACKOFF_S = 0.01  # fake_broker's log.cleaner.backoff.ms


def corrupt_first_batch(log) -> None:
    """Give the first batch of the first segment an unknown codec, keeping the file's size and mtime (the
    cleaner process checks both): every cleaning of the log fails the same way."""
    path = log.segments[0].log_path
    stat = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(22)  # low byte of the attributes: compression codec bits 0-2
        f.write(b"\x07")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def count_plans(monkeypatch) -> list[int]:
    """Each cleaning the service starts, counted."""
    planned: list[int] = []
    real = cleaner_tasks.prepare_clean

    def counting(ltc, now):
        planned.append(now)
        return real(ltc, now)

    monkeypatch.setattr(cleaner_tasks, "prepare_clean", counting)
    return planned


def gauges(broker) -> dict[tuple[str, str], float]:
    text = BrokerMetrics(broker).exposition().decode()
    return {(s.name, s.labels.get("log_directory", "")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name.startswith("klamm_log_cleaner_uncleanable")}


async def until(condition, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_cleaning_that_always_fails_marks_the_partition_uncleanable(tmp_path, monkeypatch, caplog):
    broker, log = fake_broker(tmp_path)
    corrupt_first_batch(log)
    before = segment_files(log.directory)
    planned = count_plans(monkeypatch)

    async def run() -> LogCleanerService:
        service = LogCleanerService(broker)
        broker.log_cleaner = service
        service.start()
        try:
            await until(lambda: service.is_uncleanable(log))
            await asyncio.sleep(50 * BACKOFF_S)  # fifty backoffs: not tried again
            assert gauges(broker) == {
                ("klamm_log_cleaner_uncleanable_partitions", str(tmp_path)): 1,
                ("klamm_log_cleaner_uncleanable_bytes", str(tmp_path)): sum(s.size for s in log.segments[:-1]),
            }
        finally:
            await service.stop()
            await broker.delayed_deletes.stop()
        return service

    with caplog.at_level(logging.ERROR, logger="klamm.cleaner"):
        service = asyncio.run(asyncio.wait_for(run(), 60))
    assert len(planned) == 1 and service.runs == 0
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "compacted-0" in errors[0].getMessage() and "uncleanable" in errors[0].getMessage()
    assert errors[0].exc_info is not None  # the cause, with its traceback
    assert segment_files(log.directory) == before and not leftovers(log.directory)
    broker.logs.shutdown()


def test_the_mark_goes_with_the_deleted_partition(tmp_path, monkeypatch):
    broker, log = fake_broker(tmp_path)
    corrupt_first_batch(log)
    planned = count_plans(monkeypatch)

    async def run() -> None:
        service = LogCleanerService(broker)
        broker.log_cleaner = service
        service.start()
        try:
            await until(lambda: service.is_uncleanable(log))
            broker.logs.delete_log("compacted", 0)
            del broker.replicas.partitions[("compacted", 0)]
            await until(lambda: not service.is_uncleanable(log))
            assert gauges(broker)[("klamm_log_cleaner_uncleanable_partitions", str(tmp_path))] == 0
        finally:
            await service.stop()
            await broker.delayed_deletes.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert len(planned) == 1
    broker.logs.shutdown()


def test_a_process_killed_once_is_retried_twice_in_a_row_marks_uncleanable(tmp_path, monkeypatch):
    broker, log = fake_broker(tmp_path)
    before = dump(log)
    planned = count_plans(monkeypatch)

    async def kill_the_cleaning(cleaner) -> None:
        await until(lambda: leftovers(log.directory) and cleaner.pid is not None)
        os.kill(cleaner.pid, signal.SIGKILL)
        await until(lambda: not leftovers(log.directory))

    async def run() -> LogCleanerService:
        service = LogCleanerService(broker)
        [cleaner] = service.cleaners
        # 1 MB/s, checked every 1 ms: a cleaning takes over a second, long enough to be killed
        cleaner.throttler = Throttler(1_000_000.0, check_interval_ms=1, context=PROCESS_CONTEXT)
        service.start()
        try:
            await kill_the_cleaning(cleaner)
            await until(lambda: len(planned) == 2)
            assert not service.is_uncleanable(log)  # once may be the OOM killer: tried again
            await kill_the_cleaning(cleaner)
            await until(lambda: service.is_uncleanable(log))
            await asyncio.sleep(50 * BACKOFF_S)
        finally:
            await service.stop()
            await broker.delayed_deletes.stop()
        return service

    service = asyncio.run(asyncio.wait_for(run(), 60))
    assert len(planned) == 2 and service.runs == 0
    assert dump(log) == before
    broker.logs.shutdown()


def test_other_partitions_are_still_cleaned(tmp_path):
    broker, bad = fake_broker(tmp_path)
    corrupt_first_batch(bad)
    good = broker.logs.create_log("compacted", 1)
    for n in range(100):
        append(good, [(k(n % 5), b"w" * 100)])
    good.roll()
    append(good, [(k(0), b"active")])
    config = broker.replicas.partitions[("compacted", 0)].config
    broker.replicas.partitions[("compacted", 1)] = Partition("compacted", 1, uuid.uuid4(), good, config)

    cleaned = [k(n) for n in range(5)] + [k(0)]

    async def run() -> LogCleanerService:
        service = LogCleanerService(broker)
        service.start()
        try:
            # the cleaned segments swapped in, not only written: `runs` counts in the worker before the loop swaps
            await until(lambda: service.is_uncleanable(bad) and [key for _, key, _ in dump(good)] == cleaned)
        finally:
            await service.stop()
            await broker.delayed_deletes.stop()
        return service

    service = asyncio.run(asyncio.wait_for(run(), 60))
    assert not service.is_uncleanable(good)
    assert service.runs == 1  # the good partition's cleaning; the bad one's failed
    broker.logs.shutdown()


def test_a_failure_of_a_log_deleted_meanwhile_marks_nothing(tmp_path, caplog):
    broker, log = fake_broker(tmp_path)
    service = LogCleanerService(broker)
    broker.logs.delete_log("compacted", 0)  # its files went from under the cleaning
    with caplog.at_level(logging.INFO, logger="klamm.cleaner"):
        service._mark_uncleanable(cleaner_tasks.LogCleaningFailed(log, FileNotFoundError("gone")))
    assert not service.is_uncleanable(log)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    log.delete()
    broker.logs.shutdown()
