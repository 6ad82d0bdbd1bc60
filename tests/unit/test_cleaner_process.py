"""The cleaner process (klamm.storage.cleaner.Cleaner): the same segments as the cleaning run in this
process, a segment gone before or during a cleaning, a killed process, and stopping during a long cleaning."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cleaner import EAGER, NOW, append, dump, k

from klamm.protocol.compression import Compression
from klamm.storage import cleaner as cleaner_module
from klamm.storage.cleaner import (
    PROCESS_CONTEXT,
    Cleaner,
    CleanerCrashed,
    CleaningAborted,
    SegmentChanged,
    commit_clean,
    log_to_clean,
    prepare_clean,
)
from klamm.storage.log import Log, LogConfig
from klamm.storage.offset_map import OffsetMap
from klamm.storage.throttler import Throttler


@pytest.fixture(scope="module")
def shared_cleaner():
    cleaner = Cleaner(1 << 20)
    yield cleaner
    cleaner.close()


@pytest.fixture
def cleaners():
    made: list[Cleaner] = []
    yield made
    for cleaner in made:
        cleaner.close()


def slow_cleaner(cleaners: list[Cleaner], rate: float) -> Cleaner:
    # checked every 1 ms: at 10 ms or more, a whole cleaning can fit the first check interval unthrottled
    cleaner = Cleaner(1 << 20, throttler=Throttler(rate, check_interval_ms=1, context=PROCESS_CONTEXT))
    cleaners.append(cleaner)
    return cleaner


def big_log(path: Path) -> Log:
    """~560 kB over four inactive segments and an active one: 20 keys, many versions each."""
    log = Log.open(path, LogConfig(), time_ms=lambda: NOW)
    for n in range(1000):
        append(log, [(k(n % 20), b"v" * 500)])
        if n % 250 == 249:
            log.roll()
    append(log, [(k(0), b"active")])
    return log


def plan_of(log: Log):
    return prepare_clean(log_to_clean(log, EAGER, None, NOW, log.log_end_offset), NOW)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".cleaned"))


def wait_for(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def clean_in_thread(cleaner: Cleaner, plan) -> Future:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(cleaner.clean, plan)
    pool.shutdown(wait=False)
    return future


def commit(log: Log, result) -> bool:
    complete, replaced = commit_clean(log, result)
    for segment in replaced:
        segment.delete()
    return complete


def segment_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.suffix in (".log", ".index", ".timeindex", ".txnindex")}


# -- the same segments as a cleaning run here -----------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("records"), st.lists(st.tuples(st.integers(0, 7), st.booleans()), min_size=1, max_size=6),
                  st.sampled_from([Compression.NONE, Compression.GZIP])),
        st.tuples(st.just("roll"), st.just(None), st.just(None)),
    ),
    min_size=1, max_size=40,
)


def build(path: Path, ops) -> Log:
    log = Log.open(path, LogConfig(segment_bytes=600), time_ms=lambda: NOW)
    for n, (op, records, codec) in enumerate(ops):
        if op == "roll":
            if log.active_segment.size:
                log.roll()
            continue
        append(log, [(k(key), None if tombstone else f"v{n}-{key}".encode()) for key, tombstone in records],
               codec=codec)
    log.roll()
    append(log, [(k(99), b"active")])
    return log


def clean_here(log: Log):
    """The cleaning's own code, run in this process as the cleaner process runs it."""
    plan = plan_of(log)
    work = cleaner_module._Cleaning(OffsetMap(1 << 20), Throttler(float("inf")), lambda: False)
    return cleaner_module._result_of(plan, work.run(plan.job))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_the_process_writes_the_segments_a_cleaning_here_writes(shared_cleaner, ops):
    with tempfile.TemporaryDirectory() as tmp:
        there, here = build(Path(tmp) / "there-0", ops), build(Path(tmp) / "here-0", ops)
        before = dump(there)
        assert commit(there, shared_cleaner.clean(plan_of(there)))
        assert commit(here, clean_here(here))
        assert segment_files(there.directory) == segment_files(here.directory)
        assert [(s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in there.segments] == [
            (s.base_offset, s.size, s.next_offset, s.max_timestamp) for s in here.segments]
        # and what a compaction must leave: the latest record of each key (tombstones stay once)
        latest = {key: offset for offset, key, _ in before}
        assert dump(there) == [(o, key, v) for o, key, v in before if latest[key] == o]
        assert not leftovers(there.directory)
        cleaned = dump(here)
        for log in (there, here):
            log.close()
        reopened = Log.open(Path(tmp) / "there-0", LogConfig(), time_ms=lambda: NOW)
        assert dump(reopened) == cleaned
        reopened.close()


# -- a segment gone -----------------------------------------------------------------------------------


def test_a_segment_gone_before_the_process_opens_it_stops_the_cleaning(tmp_path, shared_cleaner):
    log = big_log(tmp_path / "topic-0")
    before = dump(log)
    plan = plan_of(log)
    log.delete_oldest_segments(1)  # retention renames it *.deleted after the plan was made
    with pytest.raises(SegmentChanged):
        shared_cleaner.clean(plan)
    assert not leftovers(log.directory) and dump(log) == before[250:]
    assert commit(log, shared_cleaner.clean(plan_of(log)))  # tried again from a new plan
    assert [key for _, key, _ in dump(log)] == [k(n) for n in range(20)] + [k(0)]
    log.close()


def test_a_segment_removed_by_retention_while_the_process_cleans(tmp_path, cleaners):
    log = big_log(tmp_path / "topic-0")
    cleaner = slow_cleaner(cleaners, 1_000_000.0)
    future = clean_in_thread(cleaner, plan_of(log))
    wait_for(lambda: leftovers(log.directory) or future.done())  # the process has opened every source
    assert not future.done()
    log.delete_oldest_segments(1)
    result = future.result()
    assert not commit(log, result)  # the group holding the removed segment is not swapped in
    assert not leftovers(log.directory)
    assert len(dump(log)) == 751
    log.close()


# -- the process's CPU priority -------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no getpriority on this platform")
def test_the_process_cleans_at_the_lowest_cpu_priority(tmp_path, cleaners):
    log = big_log(tmp_path / "topic-0")
    cleaner = Cleaner(1 << 20)
    cleaners.append(cleaner)
    assert commit(log, cleaner.clean(plan_of(log)))
    assert os.getpriority(os.PRIO_PROCESS, cleaner.pid) == cleaner_module.CLEANER_NICE == 19
    assert os.getpriority(os.PRIO_PROCESS, 0) < 19  # the broker's own priority is left alone
    log.close()


# -- a killed process ------------------------------------------------------------------------------------


def test_a_killed_process_fails_one_cleaning_and_the_next_starts_another(tmp_path, cleaners):
    log = big_log(tmp_path / "topic-0")
    before = dump(log)
    cleaner = slow_cleaner(cleaners, 1_000_000.0)
    future = clean_in_thread(cleaner, plan_of(log))
    wait_for(lambda: leftovers(log.directory))
    first = cleaner.pid
    os.kill(first, signal.SIGKILL)
    with pytest.raises(CleanerCrashed):
        future.result(timeout=30)
    assert not leftovers(log.directory) and dump(log) == before and cleaner.runs == 0
    cleaner.throttler.rate_per_sec = float("inf")  # the next process starts with the budget as it is now
    assert commit(log, cleaner.clean(plan_of(log)))
    assert cleaner.pid not in (None, first) and cleaner.runs == 1
    assert [key for _, key, _ in dump(log)] == [k(n) for n in range(20)] + [k(0)]
    log.close()


def fake_broker(tmp_path: Path, records: int = 1000, **props: str):
    from klamm.broker.log_tasks import DelayedDeletes
    from klamm.broker.partition import Partition
    from klamm.config.broker import BrokerConfig
    from klamm.config.topic import TopicConfig
    from klamm.storage.log_manager import LogManager

    config = BrokerConfig.from_properties({"log.cleaner.backoff.ms": "10", "log.dirs": str(tmp_path), **props})
    logs = LogManager([tmp_path], LogConfig(), time_ms=lambda: NOW)
    logs.startup()
    log = logs.create_log("compacted", 0)
    for n in range(records):
        append(log, [(k(n % 20), b"v" * 500)])
        if n % 250 == 249:
            log.roll()
    append(log, [(k(0), b"active")])
    topic = TopicConfig.resolve(config, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                                         "file.delete.delay.ms": "0"})
    partitions = {("compacted", 0): Partition("compacted", 0, uuid.uuid4(), log, topic)}
    return SimpleNamespace(config=config, log_dirs=[tmp_path], logs=logs, delayed_deletes=DelayedDeletes(),
                           replicas=SimpleNamespace(partitions=partitions)), log


def test_the_service_survives_a_killed_cleaner_and_cleans_later(tmp_path):
    from klamm.broker.cleaner_tasks import LogCleanerService

    broker, log = fake_broker(tmp_path)
    expected = [k(n) for n in range(20)] + [k(0)]

    async def run() -> LogCleanerService:
        service = LogCleanerService(broker)
        [cleaner] = service.cleaners
        # 1 MB/s, checked every 1 ms: the first cleaning takes over a second, long enough to be seen
        cleaner.throttler = Throttler(1_000_000.0, check_interval_ms=1, context=PROCESS_CONTEXT)
        service.start()
        try:
            while not leftovers(log.directory):
                await asyncio.sleep(0.01)
            first = cleaner.pid
            os.kill(first, signal.SIGKILL)
            # until the next cleaning is swapped in: `runs` counts it in the worker thread, before the loop swaps
            while [key for _, key, _ in dump(log)] != expected:
                await asyncio.sleep(0.01)
            assert cleaner.pid not in (None, first)
        finally:  # a failure must not leave the process cleaning
            await service.stop()
            await broker.delayed_deletes.stop()
        return service

    service = asyncio.run(asyncio.wait_for(run(), 60))
    assert service.runs == 1
    assert not leftovers(log.directory)
    broker.logs.shutdown()


# -- stopping ----------------------------------------------------------------------------------------------


def test_stopping_the_service_during_a_long_cleaning_returns_promptly(tmp_path):
    from klamm.broker.cleaner_tasks import LogCleanerService

    broker, log = fake_broker(tmp_path)
    before = dump(log)

    async def run() -> float:
        service = LogCleanerService(broker)
        [cleaner] = service.cleaners
        # 20 kB/s, checked every 1 ms: this cleaning would take a minute
        cleaner.throttler = Throttler(20_000.0, check_interval_ms=1, context=PROCESS_CONTEXT)
        service.start()
        while cleaner.pid is None:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # mapping, throttled
        process = cleaner._process
        started = time.monotonic()
        await service.stop()
        elapsed = time.monotonic() - started
        assert not process.is_alive()
        await broker.delayed_deletes.stop()
        return elapsed

    assert asyncio.run(run()) < 3.0
    assert dump(log) == before and not leftovers(log.directory)
    broker.logs.shutdown()


def test_close_kills_a_process_that_does_not_answer(tmp_path, cleaners):
    log = big_log(tmp_path / "topic-0")
    cleaner = slow_cleaner(cleaners, 1_000_000.0)
    future = clean_in_thread(cleaner, plan_of(log))
    wait_for(lambda: leftovers(log.directory))
    process = cleaner._process
    os.kill(cleaner.pid, signal.SIGSTOP)  # deaf to the stop flag
    started = time.monotonic()
    cleaner.close(timeout_s=0.5)
    with pytest.raises(CleaningAborted):
        future.result(timeout=10)
    assert time.monotonic() - started < 5.0
    process.join(5)
    assert not process.is_alive()
    assert not leftovers(log.directory)
    log.close()
