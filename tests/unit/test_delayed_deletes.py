"""DelayedDeletes: the one place retention, topic deletion and the cleaner remove files."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from klamm.broker.background import BACKGROUND_NICE
from klamm.broker.log_tasks import DelayedDeletes


def test_removal_runs_after_its_delay_off_the_event_loop() -> None:
    ran: list[str] = []

    async def run() -> None:
        deletes = DelayedDeletes()
        loop_thread = threading.current_thread().name
        deletes.schedule(lambda: ran.append(threading.current_thread().name), 0)
        deletes.schedule(lambda: ran.append("late"), 60_000)
        assert deletes.pending == 2 and ran == []
        while len(ran) < 1:
            await asyncio.sleep(0.01)
        assert ran[0] != loop_thread  # an executor thread: rmtree of 10k segments must not stall the loop
        assert deletes.pending == 1
        await deletes.stop()  # what waits for its delay runs now, and stop() waits for it
        assert ran[1] == "late" and deletes.pending == 0

    asyncio.run(run())


def test_a_failed_removal_is_logged_not_raised(caplog) -> None:
    async def run() -> None:
        deletes = DelayedDeletes()
        deletes.schedule(lambda: 1 / 0, 0)
        while deletes.pending:
            await asyncio.sleep(0.01)
        await deletes.stop()

    asyncio.run(run())
    assert any("delayed delete failed" in r.getMessage() for r in caplog.records)


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_removals_run_at_the_lowest_cpu_priority_and_only_they() -> None:
    niceness: list[int] = []

    async def run() -> None:
        deletes = DelayedDeletes()
        deletes.schedule(lambda: niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id())), 0)
        while not niceness:
            await asyncio.sleep(0.01)
        await deletes.stop()

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    asyncio.run(run())
    assert niceness == [BACKGROUND_NICE]  # the loop's thread waited on a run queue behind 40,000 unlinks
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before  # the loop's thread keeps its own


def test_removals_due_together_share_one_timer_and_one_job_and_one_failure_spares_the_rest(caplog) -> None:
    ran: list[int] = []
    threads: set[str] = set()

    def remove(i: int) -> None:
        threads.add(threading.current_thread().name)
        if i == 3:
            raise OSError("gone already")
        ran.append(i)

    async def run() -> None:
        deletes = DelayedDeletes()
        loop = asyncio.get_running_loop()
        timers = len(loop._scheduled)  # type: ignore[attr-defined]
        for i in range(1000):  # a deleted topic's partitions, in one turn of the loop
            deletes.schedule(lambda i=i: remove(i), 5)
        assert len(loop._scheduled) - timers == 1  # type: ignore[attr-defined]  # not a timer each
        assert deletes.pending == 1000
        while deletes.pending:
            await asyncio.sleep(0.01)
        await deletes.stop()

    asyncio.run(run())
    assert ran == [i for i in range(1000) if i != 3]
    assert len(threads) == 1
    assert any("gone already" in r.getMessage() for r in caplog.records)
