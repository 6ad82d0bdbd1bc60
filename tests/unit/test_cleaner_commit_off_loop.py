"""A cleaning's swap is committed off the event loop: its directory fsync and the cleaner-offset-checkpoint
write wait on the filesystem's journal (tens of milliseconds while other files are written), which on the
loop held every connection's requests. The renames stay on the loop, a cleaned group per turn (readers never
see a half-swapped group); the replaced segments' files are unlinked only after the fsync made those renames
durable."""

from __future__ import annotations

import asyncio
import threading

from test_cleaner_process import fake_broker

from klamm.broker.cleaner_tasks import LogCleanerService
from klamm.broker import cleaner_tasks, log_tasks
from klamm.storage import checkpoint, cleaner
from klamm.storage.cleaner import CLEANER_OFFSET_CHECKPOINT, CleanerCheckpoints


def _service(broker, tmp_path) -> tuple[LogCleanerService, object]:
    """A cleaner service as start() makes it, without its periodic tasks, and its one worker."""
    service = LogCleanerService(broker)
    service.checkpoints = CleanerCheckpoints([tmp_path])
    [worker] = service.cleaners
    return service, worker


def test_the_fsync_and_the_checkpoint_of_a_cleaning_run_off_the_loop_and_before_the_unlinks(tmp_path, monkeypatch):
    broker, log = fake_broker(tmp_path)
    events: list[tuple[str, bool]] = []  # (what, on the loop's thread)
    loop_thread: list[int] = []
    real_fsync, real_write, real_delete = (checkpoint.fsync_dir, checkpoint.write_offset_checkpoint,
                                             log_tasks.delete_segments)

    def on_loop() -> bool:
        return threading.get_ident() == loop_thread[0]

    def fsync_dir(directory, **options):
        if directory == log.directory:
            events.append(("fsync", on_loop()))
        real_fsync(directory, **options)

    def write_offset_checkpoint(path, offsets):
        if path.name == CLEANER_OFFSET_CHECKPOINT:
            events.append(("checkpoint", on_loop()))
        real_write(path, offsets)

    def delete_segments(segments):
        events.append(("unlink", on_loop()))
        real_delete(segments)

    monkeypatch.setattr(cleaner_tasks, "fsync_dir", fsync_dir)
    monkeypatch.setattr(cleaner, "write_offset_checkpoint", write_offset_checkpoint)
    monkeypatch.setattr(log_tasks, "delete_segments", delete_segments)
    before = len(log.segments)

    async def run() -> None:
        loop_thread.append(threading.get_ident())
        service, worker = _service(broker, tmp_path)
        try:
            assert await service.clean_once(worker)
            await broker.delayed_deletes.stop()  # file.delete.delay.ms=0: the unlinks, waited for
        finally:
            await service.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert len(log.segments) < before  # the cleaning was swapped in
    assert events[0] == ("fsync", False)  # first: before the checkpoint and before any unlink
    assert events.count(("checkpoint", False)) == 1 and ("unlink", False) in events
    assert all(not on_loop for _, on_loop in events)
    assert CleanerCheckpoints([tmp_path]).get(log) == log.segments[-1].base_offset
    broker.logs.shutdown()


def test_a_swap_made_before_the_broker_stops_keeps_its_checkpoint(tmp_path, monkeypatch):
    """A stop that comes while a cleaning's directory fsync runs (the compacted log already readable) waits for
    the fsync and the checkpoint: a clean shutdown leaves the log's clean point on disk."""
    broker, log = fake_broker(tmp_path)
    fsyncing, release = threading.Event(), threading.Event()
    real_fsync = checkpoint.fsync_dir

    def slow_fsync_dir(directory, **options):
        if directory == log.directory:
            fsyncing.set()
            release.wait(30)
        real_fsync(directory, **options)

    monkeypatch.setattr(cleaner_tasks, "fsync_dir", slow_fsync_dir)
    before = len(log.segments)

    async def run() -> None:
        service, worker = _service(broker, tmp_path)
        cleaning = asyncio.ensure_future(service.clean_once(worker))
        try:
            while not fsyncing.is_set():
                await asyncio.sleep(0.01)
            assert len(log.segments) < before  # swapped in: readers see the compacted log
            cleaning.cancel()  # as stop() cancels its workers
            asyncio.get_running_loop().call_later(0.2, release.set)
            await service.stop()
            assert cleaning.cancelled()
        finally:
            release.set()
            await broker.delayed_deletes.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert CleanerCheckpoints([tmp_path]).get(log) == log.segments[-1].base_offset
    broker.logs.shutdown()


def test_a_cleaning_of_several_groups_is_swapped_in_over_several_turns_of_the_loop(tmp_path, monkeypatch):
    """Nine renames a group: a cleaning of many segments swapped in at once held the loop 20 ms and more."""
    from klamm.storage.log import LogConfig

    broker, log = fake_broker(tmp_path)
    log.config = LogConfig(segment_bytes=200_000)  # each 250-record segment a group of its own
    monkeypatch.setattr(cleaner_tasks, "SWAP_SLICE_S", 0.0)  # a group a turn
    original = set(map(id, log.segments))
    seen: list[int] = []  # how many of the log's segments are the cleaning's, turn by turn

    async def run() -> None:
        service, worker = _service(broker, tmp_path)
        cleaning = asyncio.ensure_future(service.clean_once(worker))
        try:
            while not cleaning.done():
                seen.append(sum(id(segment) not in original for segment in log.segments))
                await asyncio.sleep(0)
            assert cleaning.result()
            await broker.delayed_deletes.stop()
        finally:
            await service.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert len(set(seen)) >= 3, f"cleaned segments seen turn by turn: {sorted(set(seen))}"
    assert CleanerCheckpoints([tmp_path]).get(log) == log.segments[-1].base_offset
    broker.logs.shutdown()
