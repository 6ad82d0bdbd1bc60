"""The cleaner's pick of the dirtiest compacted log (Kafka's grabFilthiestCompactedLog) runs a slice of the
partitions a turn of the loop.

In one callback it cost about 18 us a compacted partition: 36 ms at 2,000, every log.cleaner.backoff.ms while
nothing is due, on every worker. Now it hands the loop back every PICK_SLICE_S. Between the slices a partition
may go, or another worker may take it, so the log chosen is looked at again where the caller marks it in
progress. These tests pin down that the pick interleaves with other callbacks, chooses what a pick in one go
chooses, and never returns a log gone or taken meanwhile.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_cleaner import NOW, append, k
from test_steps import counting_turns

from klamm.broker import cleaner_tasks
from klamm.broker.cleaner_tasks import LogCleanerService, compaction_config
from klamm.broker.partition import Partition
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.storage.cleaner import CleanerCheckpoints, grab_filthiest, log_to_clean
from klamm.storage.log import LogConfig
from klamm.storage.log_manager import LogManager

# Per partition: segments rolled, each of 20 records over `keys` keys (fewer keys: dirtier once cleaned once).
SHAPES = {("a", 0): 1, ("b", 0): 3, ("c", 0): 2, ("d", 0): 4, ("e", 0): 0}


def broker_with_logs(tmp_path: Path):
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path)})
    logs = LogManager([tmp_path], LogConfig(), time_ms=lambda: NOW)
    logs.startup()
    compacted = TopicConfig.resolve(config, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    plain = TopicConfig.resolve(config, {})
    partitions = {}
    for (topic, index), rolls in SHAPES.items():
        log = logs.create_log(topic, index)
        for roll in range(rolls):
            for n in range(20):
                append(log, [(k(n % (roll + 2)), b"v" * 100)])
            log.roll()
        append(log, [(k(0), b"active")])
        partitions[(topic, index)] = Partition(topic, index, uuid.uuid4(), log, compacted)
    log = logs.create_log("plain", 0)
    for n in range(40):
        append(log, [(k(n), b"v")])
        if n == 19:
            log.roll()
    partitions[("plain", 0)] = Partition("plain", 0, uuid.uuid4(), log, plain)
    broker = SimpleNamespace(config=config, log_dirs=[tmp_path], logs=logs, replicas=SimpleNamespace(
        partitions=partitions))
    service = LogCleanerService(broker)
    service.checkpoints = CleanerCheckpoints([tmp_path])
    return broker, service


@pytest.fixture
def one_partition_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cleaner_tasks, "PICK_SLICE_S", 0.0)
    monkeypatch.setattr(cleaner_tasks, "PICK_PARTITIONS_A_STEP", 1)


def in_one_go(broker, service) -> object:
    """What the pick was before the slices: every compacted partition's LogToClean, the filthiest of them."""
    return grab_filthiest(
        log_to_clean(p.log, compaction_config(p.config), service.checkpoints.get(p.log), NOW, p.last_stable_offset)
        for key, p in broker.replicas.partitions.items() if p.config.compact and key not in service._in_progress)


def test_the_pick_hands_the_loop_back_and_chooses_what_one_go_would(tmp_path: Path, one_partition_a_slice) -> None:
    broker, service = broker_with_logs(tmp_path)
    expected = in_one_go(broker, service)
    try:
        chosen, turns = asyncio.run(counting_turns(service._grab_filthiest(NOW)))
        assert expected is not None and chosen is not None
        assert chosen.log is expected.log and chosen.cleanable_bytes == expected.cleanable_bytes
        assert turns >= len(broker.replicas.partitions) - 1
        # taken by another worker: the next dirtiest
        service._in_progress.add((chosen.log.topic, chosen.log.partition))
        runner_up = in_one_go(broker, service)
        assert asyncio.run(service._grab_filthiest(NOW)).log is runner_up.log
    finally:
        broker.logs.shutdown()


@pytest.mark.parametrize("change", ["removed", "taken", "replaced"])
def test_a_log_gone_or_taken_during_the_pick_is_not_chosen(tmp_path: Path, one_partition_a_slice,
                                                           change: str) -> None:
    broker, service = broker_with_logs(tmp_path)
    filthiest = in_one_go(broker, service)
    key = (filthiest.log.topic, filthiest.log.partition)
    partitions = broker.replicas.partitions

    async def run():
        pick = asyncio.create_task(service._grab_filthiest(NOW))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert not pick.done()
        if change == "removed":
            del partitions[key]
        elif change == "taken":
            service._in_progress.add(key)
        else:  # deleted and created again under the same name: another log
            old = partitions[key]
            partitions[key] = Partition(key[0], key[1], uuid.uuid4(), broker.logs.create_log("other", 0), old.config)
        return await pick

    try:
        chosen = asyncio.run(run())
        assert chosen is not None and (chosen.log.topic, chosen.log.partition) != key
    finally:
        broker.logs.shutdown()


def test_a_log_of_one_segment_is_seen_as_the_walks_saw_it(tmp_path: Path) -> None:
    """log_to_clean's shortcut for a log that is all active segment gives what its general walk gives."""
    logs = LogManager([tmp_path], LogConfig(), time_ms=lambda: NOW)
    logs.startup()
    log = logs.create_log("one", 0)
    for n in range(10):
        append(log, [(k(n), b"v")])
    config = compaction_config(TopicConfig.resolve(BrokerConfig.from_properties({"log.dirs": str(tmp_path)}),
                                                   {"cleanup.policy": "compact", "min.compaction.lag.ms": "5"}))
    try:
        for checkpoint in (None, 0, 4, 10, 11):
            ltc = log_to_clean(log, config, checkpoint, NOW, log.log_end_offset)
            first_dirty = 0 if checkpoint is None or checkpoint > 10 else checkpoint
            assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset) == (first_dirty, 0)
            assert (ltc.clean_bytes, ltc.cleanable_bytes) == (log.segments[0].size if first_dirty > 0 else 0, 0)
            assert not ltc.needs_compaction_now and ltc.reset_checkpoint == (checkpoint == 11)
    finally:
        logs.shutdown()
