"""A single controller's client writes: fsynced in a worker thread, published and answered after it."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Executor, Future
from pathlib import Path

import pytest

pytestmark = pytest.mark.asyncio

from klamm.controller.controller import Controller, CreateTopicSpec
from klamm.controller.flushed_commits import FlushedCommits
from klamm.controller.metadata_log import FileMetadataLog


class GatedExecutor(Executor):
    """Runs each job in a thread of its own once `gate` is set; records the threads and can fail the jobs."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.threads: list[str] = []
        self.fail: Exception | None = None

    def submit(self, fn, /, *args, **kwargs) -> Future:  # type: ignore[override]
        future: Future = Future()

        def run() -> None:
            self.gate.wait(10)
            self.threads.append(threading.current_thread().name)
            try:
                if self.fail is not None:
                    raise self.fail
                future.set_result(fn(*args, **kwargs))
            except Exception as exc:  # noqa: BLE001
                future.set_exception(exc)

        threading.Thread(target=run, name="flush-worker", daemon=True).start()
        return future


def make(tmp_path: Path) -> tuple[Controller, FileMetadataLog]:
    log = FileMetadataLog.open(tmp_path)
    controller = Controller(log, 1, "flushed-commits-test-cluster")
    controller.load()
    controller.register_broker(1, "localhost", 9092)
    return controller, log


def create(controller: Controller, name: str):
    return lambda: controller.create_topics([CreateTopicSpec(name)], default_partitions=3,
                                            default_replication_factor=1)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_write_is_published_and_answered_once_its_fsync_ran_in_the_worker(tmp_path: Path,
                                                                                monkeypatch) -> None:
    controller, log = make(tmp_path)
    monkeypatch.setattr(log.log, "flush", lambda: pytest.fail("the loop fsynced the metadata log"))
    executor = GatedExecutor()
    write = asyncio.ensure_future(FlushedCommits(controller, executor).write(create(controller, "orders")))
    await settle()
    assert not write.done()
    assert log.end_offset > log.committed_end_offset  # appended, not yet durable
    assert "orders" not in controller.image.topics_by_name  # nothing published before it is durable
    executor.gate.set()
    [result] = await asyncio.wait_for(write, 10)
    assert result.error.name == "none"
    assert executor.threads == ["flush-worker"]
    assert log.committed_end_offset == log.end_offset
    assert len(controller.image.topics_by_name["orders"].partitions) == 3
    monkeypatch.undo()
    log.close()


async def held_at_the_gate(tmp_path: Path, name: str):
    """A controller, its log, the gated executor, and a write of topic `name` waiting for its flush job."""
    controller, log = make(tmp_path)
    executor = GatedExecutor()
    write = asyncio.ensure_future(FlushedCommits(controller, executor).write(create(controller, name)))
    await settle()
    return controller, log, executor, write


async def test_an_inline_commit_meanwhile_publishes_the_waiting_write_too(tmp_path: Path) -> None:
    controller, log, executor, write = await held_at_the_gate(tmp_path, "first")
    create(controller, "second")()  # a synchronous commit (as a broker's heartbeat): fsyncs the whole log
    assert {"first", "second"} <= controller.image.topics_by_name.keys()
    assert log.committed_end_offset == log.end_offset
    executor.gate.set()
    await asyncio.wait_for(write, 10)
    assert {"first", "second"} <= controller.image.topics_by_name.keys()
    log.close()


async def test_a_write_given_up_is_still_made_durable_and_published(tmp_path: Path) -> None:
    controller, log, executor, write = await held_at_the_gate(tmp_path, "orders")
    write.cancel()
    await settle()
    assert write.cancelled()
    executor.gate.set()
    for _ in range(200):
        if "orders" in controller.image.topics_by_name:
            break
        await asyncio.sleep(0.01)
    assert "orders" in controller.image.topics_by_name
    assert log.committed_end_offset == log.end_offset
    log.close()


async def test_writes_during_a_flush_share_the_next_one(tmp_path: Path) -> None:
    controller, log = make(tmp_path)
    executor = GatedExecutor()
    commits = FlushedCommits(controller, executor)
    writes = [asyncio.ensure_future(commits.write(create(controller, "t0")))]
    await settle()  # its job started, held at the gate
    writes += [asyncio.ensure_future(commits.write(create(controller, f"t{i}"))) for i in range(1, 4)]
    await settle()
    executor.gate.set()
    await asyncio.wait_for(asyncio.gather(*writes), 10)
    assert len(executor.threads) == 2  # the first write's job, then one for the three that came during it
    assert {f"t{i}" for i in range(4)} <= controller.image.topics_by_name.keys()
    log.close()


async def test_a_failed_fsync_fails_the_write_and_publishes_nothing_until_a_later_one(tmp_path: Path) -> None:
    controller, log = make(tmp_path)
    executor = GatedExecutor()
    executor.fail = OSError("disk gone")
    executor.gate.set()
    commits = FlushedCommits(controller, executor)
    with pytest.raises(OSError):
        await asyncio.wait_for(commits.write(create(controller, "lost")), 10)
    assert "lost" not in controller.image.topics_by_name
    executor.fail = None
    await asyncio.wait_for(commits.write(create(controller, "next")), 10)
    assert {"lost", "next"} <= controller.image.topics_by_name.keys()  # the next job covers both again
    assert log.committed_end_offset == log.end_offset
    log.close()


async def test_a_write_that_commits_nothing_does_not_wait(tmp_path: Path) -> None:
    controller, log = make(tmp_path)
    executor = GatedExecutor()  # never opened: a job would hang the test
    commits = FlushedCommits(controller, executor)
    [result] = await asyncio.wait_for(commits.write(lambda: controller.create_topics(
        [CreateTopicSpec("checked")], validate_only=True, default_partitions=1, default_replication_factor=1)), 1)
    assert result.error.name == "none" and executor.threads == []
    log.close()
