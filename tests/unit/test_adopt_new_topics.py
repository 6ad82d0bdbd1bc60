"""A new topic made ahead (ReplicaManager.logs_made_for) is hosted a slice per turn of the loop after its image.

apply_image took every partition of a new topic in one callback: about 3 us each, 3-5 ms for a topic of a
thousand. Inside logs_made_for it now leaves such a topic's partitions to the end of logs_made_for, which
hosts them SLICE_S at a time; a request for one not hosted yet answers NOT_LEADER_OR_FOLLOWER, as Kafka's
broker does for a partition its metadata cache has before its replica manager. These tests pin down that the
slices interleave with other work, that an image applied meanwhile first hosts what the earlier one gave,
and that a commit abandoned part-way still hosts its topic.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from klamm.broker import replica_manager as replica_manager_module
from klamm.controller.image import empty_image
from klamm.controller.records import MetadataRecord
from klamm.controller.topics import CreateTopicSpec, decide_create_topics
from klamm.protocol.errors import ErrorCode, KafkaError
from tests.unit.test_prepare_logs import create_records
from tests.unit.test_replica_manager_delta import NODE, broker_records, fetched, manager, replay, state

PARTITIONS = 8


@pytest.fixture
def creator():
    with ThreadPoolExecutor(1, thread_name_prefix="test-log-creation") as executor:
        yield executor


@pytest.fixture
def one_partition_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_manager_module, "SLICE_S", 0.0)


def single_node_image():
    return replay(empty_image("c", 0), [r for r in broker_records() if r.data["broker_id"] == NODE])


def replicated_records(image, name: str, partitions: int):
    """A topic on all three brokers: this node leads some partitions and follows the others."""
    spec = CreateTopicSpec(name=name, num_partitions=partitions, replication_factor=3, configs={})
    results, records = decide_create_topics(image, [spec], default_partitions=1, default_replication_factor=3)
    assert results[0].error == 0
    return records


def started(path: Path, creator, image, updates: list[dict] | None = None):
    """A replica manager that has applied `image` (the first image applied walks everything, at once); what it
    tells the replica fetchers goes to `updates`."""
    replicas, _ = manager(path)
    replicas.log_creator = creator
    replicas.apply_image(image)
    if updates is not None:
        replicas.followers_changed = updates.append
    return replicas


def test_a_new_topic_is_hosted_a_slice_per_turn_after_its_image(tmp_path: Path, creator,
                                                                one_partition_a_slice) -> None:
    image = single_node_image()
    replicas = started(tmp_path, creator, image)
    records = create_records(image, "wide", PARTITIONS)
    new = replay(image, records)
    replicas.served_image = lambda: new
    hosted_each_turn: list[int] = []

    async def watch() -> None:
        while True:
            hosted_each_turn.append(len(replicas.partitions))
            await asyncio.sleep(0)

    async def commit() -> dict:
        watcher = asyncio.create_task(watch())
        async with replicas.logs_made_for(records, image):
            prepared = dict(replicas._prepared)
            replicas.apply_image(new)
            assert replicas.partitions == {}  # the image is applied; its new topic is left to the slices
            with pytest.raises(KafkaError) as raised:
                replicas.get("wide", 0)
            assert raised.value.code == ErrorCode.not_leader_or_follower
        watcher.cancel()
        return prepared

    prepared = asyncio.run(commit())
    assert all(replicas.partitions[key] is partition for key, partition in prepared.items())
    assert len(replicas.partitions) == PARTITIONS
    assert all(p.leader is not None and p.leader_epoch == 0 for p in replicas.partitions.values())
    between = [n for n in hosted_each_turn if 0 < n < PARTITIONS]
    assert len(set(between)) >= PARTITIONS // 2  # other work ran while the topic was being hosted


def test_an_image_applied_before_the_slices_end_first_hosts_what_the_earlier_one_gave(
        tmp_path: Path, creator, one_partition_a_slice) -> None:
    image = replay(empty_image("c", 0), broker_records())
    updates: list[dict] = []
    replicas = started(tmp_path / "sliced", creator, image, updates)
    alone, _ = manager(tmp_path / "alone")
    records = replicated_records(image, "wide", PARTITIONS)
    created = replay(image, records)
    topic_id = created.topics_by_name["wide"].topic_id
    partition = next(i for i, p in created.topics_by_name["wide"].partitions.items() if NODE in p.replicas)
    moved = replay(created, [MetadataRecord("PartitionChangeRecord", {
        "topic_id": topic_id, "partition_id": partition, "leader": NODE, "isr": [NODE]})])

    async def commit() -> None:
        async with replicas.logs_made_for(records, image):
            replicas.apply_image(created)
            assert replicas._deferred
            replicas.apply_image(moved)  # another commit before the slices ran
            assert len(replicas._deferred) == 0
    asyncio.run(commit())
    alone.apply_image(created)
    alone.apply_image(moved)
    assert state(replicas) == state(alone)
    assert replicas.partitions[("wide", partition)].leader is not None
    followed = {(name, index): meta.leader for name, t in moved.topics_by_name.items()
                for index, meta in t.partitions.items() if NODE in meta.replicas and meta.leader != NODE}
    assert followed and fetched(updates[-1]) == followed  # the fetchers heard of the followers taken in slices


def test_the_fetchers_hear_of_a_new_topic_s_followers_once_its_slices_end(tmp_path: Path, creator,
                                                                          one_partition_a_slice) -> None:
    image = replay(empty_image("c", 0), broker_records())
    updates: list[dict] = []
    replicas = started(tmp_path, creator, image, updates)
    records = replicated_records(image, "wide", PARTITIONS)
    created = replay(image, records)

    async def commit() -> None:
        async with replicas.logs_made_for(records, image):
            replicas.apply_image(created)
            assert updates == []
        assert len(updates) == 1
    asyncio.run(commit())
    followed = {("wide", index): meta.leader for index, meta in created.topics_by_name["wide"].partitions.items()
                if NODE in meta.replicas and meta.leader != NODE}
    assert followed and fetched(updates[0]) == followed


def test_a_commit_abandoned_while_its_topic_is_hosted_still_hosts_all_of_it(tmp_path: Path, creator,
                                                                           one_partition_a_slice) -> None:
    image = single_node_image()
    replicas = started(tmp_path, creator, image)
    records = create_records(image, "wide", PARTITIONS)
    new = replay(image, records)

    async def commit() -> None:
        async with replicas.logs_made_for(records, image):
            replicas.apply_image(new)

    async def abandon() -> None:
        task = asyncio.create_task(commit())
        while len(replicas.partitions) < 2:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    asyncio.run(abandon())
    assert sorted(replicas.partitions) == [("wide", index) for index in range(PARTITIONS)]
    assert {(log.topic, log.partition) for log in replicas.logs.all_logs()} == set(replicas.partitions)


def test_an_internal_topic_is_hosted_with_its_image(tmp_path: Path, creator) -> None:
    """Coordinators load the partitions they lead as their listeners see the image: those must be there."""
    image = single_node_image()
    replicas = started(tmp_path, creator, image)
    records = create_records(image, "__consumer_offsets", PARTITIONS)

    async def commit() -> None:
        async with replicas.logs_made_for(records, image):
            replicas.apply_image(replay(image, records))
            assert len(replicas.partitions) == PARTITIONS
    asyncio.run(commit())


def test_outside_logs_made_for_apply_image_hosts_a_new_topic_at_once(tmp_path: Path) -> None:
    image = single_node_image()
    replicas = started(tmp_path, None, image)
    replicas.apply_image(replay(image, create_records(image, "wide", PARTITIONS)))
    assert len(replicas.partitions) == PARTITIONS
    assert uuid.UUID(int=0) not in {p.topic_id for p in replicas.partitions.values()}
