"""New logs made off the event loop before the metadata that assigns them is applied.

A topic of a thousand partitions held the loop for a second while apply_image created its logs (a few hundred
microseconds of system calls each). ReplicaManager.logs_made_for has LogManager.create_logs make them in another
thread first; apply_image then finds them. These tests pin down that apply_image ends in the same state either
way, that the logs are made where and as they should be, and the races with create_log and shutdown.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from klamm.broker import replica_manager as replica_manager_module
from klamm.broker.partition import Partition
from klamm.controller.image import empty_image
from klamm.controller.records import MetadataRecord
from klamm.controller.topics import CreateTopicSpec, decide_create_topics
from klamm.storage import partition_metadata
from klamm.storage.log import Log, LogConfig
from klamm.storage import log_manager as log_manager_module
from klamm.storage.log_manager import LogManager
from tests.unit.test_replica_manager_delta import NODE, Changes, broker_records, manager, replay, state
from tests.unit.test_steps import Turns


@pytest.fixture
def creator():
    with ThreadPoolExecutor(1, thread_name_prefix="test-log-creation") as executor:
        yield executor


def opened_on(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The name of the thread each log directory was opened on (by Log.open)."""
    threads: dict[str, str] = {}
    original = Log.open.__func__  # type: ignore[attr-defined]

    def recording(cls, directory, *args, **kwargs):  # type: ignore[no-untyped-def]
        threads[Path(directory).name] = threading.current_thread().name
        return original(cls, directory, *args, **kwargs)
    monkeypatch.setattr(Log, "open", classmethod(recording))
    return threads


async def prepare_and_apply(replicas, records, image):
    """Apply `records` as a broker does: inside logs_made_for; returns the logs there before apply_image."""
    async with replicas.logs_made_for(records, image):
        made = {(log.topic, log.partition): log for log in replicas.logs.all_logs()}
        replicas.apply_image(replay(image, records))
    return made


def create_records(image, name: str, partitions: int, configs: dict[str, str] | None = None):
    spec = CreateTopicSpec(name=name, num_partitions=partitions, replication_factor=1, configs=configs or {})
    results, records = decide_create_topics(image, [spec], default_partitions=1, default_replication_factor=1)
    assert results[0].error == 0
    return records


def test_a_new_topic_s_logs_are_made_aside_and_apply_image_takes_them(tmp_path: Path, creator,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    threads = opened_on(monkeypatch)
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])
    records = create_records(image, "wide", 12, {"segment.bytes": str(1 << 21)})
    made = asyncio.run(prepare_and_apply(replicas, records, image))
    assert sorted(made) == [("wide", index) for index in range(12)]
    assert all(log.config.segment_bytes == 1 << 21 for log in made.values())
    assert {threads[f"wide-{index}"] for index in range(12)} == {"test-log-creation_0"}
    assert {key: replicas.partitions[key].log for key in made} == made
    assert all(replicas.partitions[("wide", index)].leader is not None for index in range(12))


def test_a_new_topic_s_partitions_are_made_before_its_image_and_apply_image_takes_them(
        tmp_path: Path, creator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Made a slice per turn of the loop (here one a turn), leaders of the records' epoch: the image's apply then
    takes the very objects, and starts no leadership of its own."""
    monkeypatch.setattr(replica_manager_module, "SLICE_S", 0.0)
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])
    records = create_records(image, "wide", 8)
    leaderships: list[tuple[str, int]] = []
    become_leader = Partition.become_leader

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        leaderships.append((self.topic, self.index))
        become_leader(self, *args, **kwargs)
    monkeypatch.setattr(Partition, "become_leader", counting)
    created: list[tuple[str, int]] = []
    create = replica_manager_module.ReplicaManager._create

    def creating(self, topic, index, *args):  # type: ignore[no-untyped-def]
        created.append((topic, index))
        return create(self, topic, index, *args)
    monkeypatch.setattr(replica_manager_module.ReplicaManager, "_create", creating)

    async def commit() -> dict:
        async with replicas.logs_made_for(records, image):
            prepared = dict(replicas._prepared)
            assert not replicas.partitions
            replicas.apply_image(replay(image, records))
        return prepared
    prepared = asyncio.run(commit())
    assert sorted(prepared) == [("wide", index) for index in range(8)] and len(leaderships) == 8
    assert all(replicas.partitions[key] is partition for key, partition in prepared.items())
    assert created == []  # taken as they are (_take_made_ahead), nothing of _create's to do
    assert all(p.leader is not None and p.leader_epoch == 0 for p in replicas.partitions.values())
    assert replicas._prepared == {}


def test_a_few_new_logs_are_left_to_apply_image(tmp_path: Path, creator, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = opened_on(monkeypatch)
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])
    records = create_records(image, "narrow", replica_manager_module.MADE_ASIDE_AT_LEAST - 1)
    assert asyncio.run(prepare_and_apply(replicas, records, image)) == {}
    assert len(replicas.partitions) == replica_manager_module.MADE_ASIDE_AT_LEAST - 1
    assert set(threads.values()) == {threading.current_thread().name}


@pytest.mark.parametrize("seed", range(6))
def test_applying_after_preparing_ends_where_applying_alone_does(tmp_path: Path, creator, seed: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager_module, "MADE_ASIDE_AT_LEAST", 1)  # every new log made aside
    prepared, _ = manager(tmp_path / "prepared")
    prepared.log_creator = creator
    alone, _ = manager(tmp_path / "alone")
    changes = Changes(seed)
    image = replay(empty_image("c", 0), broker_records())
    for _ in range(60):
        records = changes.next(image)
        asyncio.run(prepare_and_apply(prepared, records, image))
        image = replay(image, records)
        alone.apply_image(image)
        assert state(prepared) == state(alone)
        assert {(log.topic, log.partition) for log in prepared.logs.all_logs()} == set(prepared.partitions)


def test_only_this_node_s_replicas_get_logs(tmp_path: Path, creator) -> None:
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), broker_records())
    topic_id = uuid.UUID(int=7)
    records = [MetadataRecord("TopicRecord", {"name": "spread", "topic_id": topic_id})] + [
        MetadataRecord("PartitionRecord", {"partition_id": i, "topic_id": topic_id, "replicas": replicas_,
                                           "isr": replicas_, "leader": replicas_[0], "leader_epoch": 0,
                                           "partition_epoch": 0})
        for i, replicas_ in enumerate([[NODE, 2], [2, 3], [3, NODE], [2, NODE], [NODE], [3, 2]])]
    made = asyncio.run(prepare_and_apply(replicas, records, image))
    assert sorted(made) == [("spread", 0), ("spread", 2), ("spread", 3), ("spread", 4)]
    assert sorted(replicas.partitions) == sorted(made)


def test_logs_made_for_records_never_applied_are_removed(tmp_path: Path, creator) -> None:
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])

    async def not_committed() -> int:
        async with replicas.logs_made_for(create_records(image, "lost", 6), image):
            assert len(replicas._prepared) == 6
            return len(replicas.logs.all_logs())  # the commit failed: nothing applied
    assert asyncio.run(not_committed()) == 6
    assert replicas.logs.all_logs() == [] and not list(tmp_path.glob("lost-*"))
    assert replicas._prepared == {} and replicas.flusher._watchers == {}  # their partitions dropped too


def test_a_large_topic_s_logs_are_found_and_dropped_a_slice_of_the_loop_at_a_time(
        tmp_path: Path, creator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager_module, "SLICE_S", 0.0)  # the loop's turn after every step
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])
    records = create_records(image, "lost", 200)
    turns = Turns()
    seen: dict[str, int] = {}
    creating = replicas.logs.create_logs

    async def create_logs(*args, **kwargs) -> None:
        seen["queued"] = turns.count
        await creating(*args, **kwargs)
    monkeypatch.setattr(replicas.logs, "create_logs", create_logs)

    async def not_committed() -> None:
        async with turns:
            async with replicas.logs_made_for(records, image):
                seen["applied"] = turns.count  # the commit failed: nothing applied
            seen["ended"] = turns.count
    asyncio.run(not_committed())
    steps = 200 // replica_manager_module.PARTITIONS_A_STEP
    assert seen["queued"] >= steps  # finding the logs to make: not one callback
    assert seen["ended"] - seen["applied"] >= 2 * steps  # dropping the partitions and logs no image took
    assert replicas.logs.all_logs() == [] and not list(tmp_path.glob("lost-*")) and replicas._prepared == {}


def test_a_cancellation_while_unused_logs_are_dropped_still_drops_them_all(
        tmp_path: Path, creator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager_module, "SLICE_S", 0.0)
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])
    left = asyncio.Event()

    async def not_committed() -> None:
        async with replicas.logs_made_for(create_records(image, "lost", 200), image):
            left.set()

    async def cancelled_part_way() -> None:
        task = asyncio.create_task(not_committed())
        await left.wait()
        for _ in range(3):  # a few slices of the clean-up
            await asyncio.sleep(0)
        assert replicas._prepared  # not done yet
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(cancelled_part_way())
    assert replicas.logs.all_logs() == [] and not list(tmp_path.glob("lost-*")) and replicas._prepared == {}


def test_create_log_of_a_name_being_made_waits_for_that_log(tmp_path: Path, creator,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # every name queued in create_logs' first turn: a slice used up early (a loaded machine) left t-2 unqueued,
    # and create_log made it on the loop, waiting for nothing
    monkeypatch.setattr(log_manager_module, "TAKE_SLICE_S", 60.0)
    logs = LogManager([tmp_path / "a", tmp_path / "b"], LogConfig())
    logs.startup()
    started, release = threading.Event(), threading.Event()
    creator.submit(lambda: (started.set(), release.wait(10)))  # holds the creation thread

    async def race() -> tuple[Log, Log]:
        making = asyncio.ensure_future(logs.create_logs([("t", i, LogConfig()) for i in range(4)], creator))
        await asyncio.sleep(0)
        assert started.wait(10)
        threading.Timer(0.05, release.set).start()
        taken = logs.create_log("t", 2)  # waits for the creation thread, makes nothing of its own
        await making
        return taken, logs.get_log("t", 2)
    taken, kept = asyncio.run(race())
    assert taken is kept
    assert sorted(log.partition for log in logs.all_logs()) == [0, 1, 2, 3]
    assert sorted(len(list(d.glob("t-*"))) for d in (tmp_path / "a", tmp_path / "b")) == [2, 2]
    logs.shutdown()


def test_a_log_that_cannot_be_made_leaves_its_name_free(tmp_path: Path, creator,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    logs = LogManager([tmp_path], LogConfig())
    logs.startup()
    (tmp_path / "t-1").write_text("in the way")
    asyncio.run(logs.create_logs([("t", i, LogConfig()) for i in range(3)], creator))
    assert sorted(log.partition for log in logs.all_logs()) == [0, 2]
    assert "could not create the log of t-1" in caplog.text
    with pytest.raises(OSError):
        logs.create_log("t", 1)
    (tmp_path / "t-1").unlink()
    assert logs.create_log("t", 1).partition == 1
    logs.shutdown()


def test_shutdown_closes_the_logs_of_a_creation_no_one_waited_for(tmp_path: Path, creator,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # every name queued in create_logs' first turn: a slice used up early (a loaded machine) left the rest
    # unqueued when the cancellation came, and they were never made
    monkeypatch.setattr(log_manager_module, "TAKE_SLICE_S", 60.0)
    logs = LogManager([tmp_path], LogConfig())
    logs.startup()

    async def abandon() -> None:
        making = asyncio.ensure_future(logs.create_logs([("t", i, LogConfig()) for i in range(5)], creator))
        await asyncio.sleep(0)
        making.cancel()
        with pytest.raises(asyncio.CancelledError):
            await making
    asyncio.run(abandon())
    logs.shutdown()  # waits for the thread's logs, closes them and checkpoints them
    reopened = LogManager([tmp_path], LogConfig())
    reopened.startup()
    assert sorted(log.partition for log in reopened.all_logs()) == [0, 1, 2, 3, 4]
    reopened.shutdown()


def two_decisions(image, name: str, partitions: int):
    """Two CreateTopics of one name decided on one image, as two requests at once decide them: each gives the
    topic its own id; the first commit wins, the other is decided again (TOPIC_ALREADY_EXISTS)."""
    first, second = create_records(image, name, partitions), create_records(image, name, partitions)
    assert first[0].data["topic_id"] != second[0].data["topic_id"]
    return first, second


def restarted_keeps(tmp_path: Path, image, name: str, partitions: int) -> None:
    """A restart on the same disk takes every log of the topic as its own (none deleted as a stray)."""
    replicas, _ = manager(tmp_path)
    replicas.logs.startup()
    kept = {(log.topic, log.partition): log.directory for log in replicas.logs.all_logs()}
    replicas.apply_image(image)
    assert {key: p.log.directory for key, p in replicas.partitions.items()} == kept
    assert len(kept) == partitions and all(key[0] == name for key in kept)
    replicas.shutdown()


@pytest.mark.parametrize("winner_enters", ["while-the-loser-s-logs-are-made", "after-the-loser-prepared"])
def test_the_logs_made_for_an_overtaken_decision_take_the_committed_topic_id(
        tmp_path: Path, creator, winner_enters: str, caplog: pytest.LogCaptureFixture) -> None:
    """The loser made the logs (its topic id in their partition.metadata) and maybe their partitions; the winner
    commits: its partitions take those logs with its topic id, on disk too, so that a restart keeps them."""
    replicas, _ = manager(tmp_path)
    replicas.log_creator = creator
    image = replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])
    loser, winner = two_decisions(image, "twice", 6)
    winner_id = winner[0].data["topic_id"]
    started, release = threading.Event(), threading.Event()
    creator.submit(lambda: (started.set(), release.wait(10)))  # holds the creation thread

    async def race() -> None:
        committed = asyncio.Event()

        async def losing() -> None:
            async with replicas.logs_made_for(loser, image):
                await committed.wait()  # its commit then finds the image moved on: decided again, refused
        losing_task = asyncio.ensure_future(losing())
        await asyncio.sleep(0)
        assert started.wait(10)
        if winner_enters == "after-the-loser-prepared":
            release.set()
            while len(replicas._prepared) < 6:
                await asyncio.sleep(0.01)
        else:
            threading.Timer(0.05, release.set).start()
        async with replicas.logs_made_for(winner, image):
            replicas.apply_image(replay(image, winner))
        committed.set()
        await losing_task
    asyncio.run(race())
    assert sorted(replicas.partitions) == [("twice", index) for index in range(6)]
    for partition in replicas.partitions.values():
        assert partition.topic_id == partition.log.topic_id == winner_id
        assert partition_metadata.read(partition.log.directory) == winner_id
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("twice")) == \
        [f"twice-{index}" for index in range(6)]
    assert "stray" not in caplog.text
    replicas.shutdown()
    restarted_keeps(tmp_path, replay(image, winner), "twice", 6)
    assert "stray" not in caplog.text


def test_create_logs_of_names_another_call_is_making_waits_for_them(tmp_path: Path, creator) -> None:
    """So that whoever applies the second call's records finds the logs made, not a thread to wait on."""
    logs = LogManager([tmp_path], LogConfig())
    logs.startup()
    started, release = threading.Event(), threading.Event()
    creator.submit(lambda: (started.set(), release.wait(10)))  # holds the creation thread

    async def race() -> bool:
        first = asyncio.ensure_future(logs.create_logs([("t", i, LogConfig()) for i in range(4)], creator))
        await asyncio.sleep(0)
        assert started.wait(10)
        second = asyncio.ensure_future(logs.create_logs([("t", i, LogConfig()) for i in range(2, 4)], creator))
        await asyncio.sleep(0.05)
        waiting = not second.done()
        release.set()
        await asyncio.gather(first, second)
        return waiting
    assert asyncio.run(race())
    assert sorted(log.partition for log in logs.all_logs()) == list(range(4))
    logs.shutdown()


def test_create_logs_hands_its_names_to_the_thread_a_slice_of_the_loop_at_a_time(
        tmp_path: Path, creator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Queueing 2,000 names was one callback of 3-13 ms. Each slice's names go to the thread before the loop goes
    on, so a create_log of one of them, run meanwhile, waits for the thread and never for create_logs."""
    monkeypatch.setattr(log_manager_module, "TAKE_SLICE_S", 0.0)  # the loop's turn after every name
    logs = LogManager([tmp_path], LogConfig())
    logs.startup()
    taken: list[Log] = []

    async def race() -> int:
        async with Turns() as turns:
            making = asyncio.ensure_future(logs.create_logs([("t", i, LogConfig()) for i in range(6)], creator))
            while ("t", 2) not in logs._creating:
                await asyncio.sleep(0)
            queued_by = turns.count
            taken.append(logs.create_log("t", 2))  # queued, maybe not made yet: waits for the thread
            await making
            assert queued_by >= 2  # the names before it were queued over turns of the loop
            return turns.count
    assert asyncio.run(race()) >= 6
    assert sorted(log.partition for log in logs.all_logs()) == list(range(6))
    assert logs.get_log("t", 2) is taken[0] and logs._creating == {}
    logs.shutdown()


def test_a_creation_cancelled_while_queueing_leaves_no_name_waiting_forever(
        tmp_path: Path, creator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(log_manager_module, "TAKE_SLICE_S", 0.0)
    logs = LogManager([tmp_path], LogConfig())
    logs.startup()

    async def cancelled() -> None:
        making = asyncio.ensure_future(logs.create_logs([("t", i, LogConfig()) for i in range(6)], creator))
        while ("t", 2) not in logs._creating:
            await asyncio.sleep(0)
        making.cancel()
        with pytest.raises(asyncio.CancelledError):
            await making
    asyncio.run(cancelled())
    queued = sorted(logs._creating)
    assert queued and all(batch.future is not None for _, batch in logs._creating.values())
    assert logs.create_log(*queued[-1]).partition == queued[-1][1]  # made by the thread, taken here
    assert logs.create_log("t", 5).partition == 5  # never queued: made here
    logs.shutdown()  # closes what the thread made that no one took
    reopened = LogManager([tmp_path], LogConfig())
    reopened.startup()
    assert {log.partition for log in reopened.all_logs()} >= {p for _, p in queued} | {5}
    reopened.shutdown()
