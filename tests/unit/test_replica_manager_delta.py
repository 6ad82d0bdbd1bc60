"""ReplicaManager.apply_image applies only the topics an image changed, and ends where a walk of every
partition of the image would: random sequences of metadata changes, each image applied both ways."""

from __future__ import annotations

import random
import uuid
from pathlib import Path

import pytest

from klamm.broker.partition import log_config
from klamm.broker.replica_manager import ReplicaManager
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.controller.image import MetadataImage, apply_batch, empty_image
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.storage.log_manager import LogManager

NODE = 1
BROKERS = (1, 2, 3)


def replay(image: MetadataImage, records: list[MetadataRecord]) -> MetadataImage:
    return apply_batch(image, enumerate((decode_record(encode_record(r)) for r in records), start=image.offset + 1))


def manager(path: Path) -> tuple[ReplicaManager, list[dict]]:
    config = BrokerConfig.from_properties({"node.id": str(NODE), "log.dirs": str(path)})
    logs = LogManager([path], log_config(TopicConfig.resolve(config, {})))
    replicas = ReplicaManager(NODE, config, logs)
    updates: list[dict] = []
    replicas.followers_changed = lambda followers: updates.append(dict(followers))
    return replicas, updates


def state(replicas: ReplicaManager) -> dict:
    """Everything apply_image decides, by partition."""
    return {key: (p.topic_id, p.leader is None, p.leader_id, p.leader_epoch, tuple(p.replicas), tuple(p.isr),
                  None if p.leader is None else (p.leader.partition_epoch, p.leader.isr, p.leader.replicas,
                                                 frozenset(p.leader.fenced_or_shutting_down)),
                  p.config.overrides, p.log.config.segment_bytes)
            for key, p in replicas.partitions.items()}


def fetched(followers: dict) -> dict:
    return {key: p.leader_id for key, p in followers.items()}


def broker_records() -> list[MetadataRecord]:
    return [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": b, "incarnation_id": uuid.UUID(int=b), "broker_epoch": 10 + b, "end_points": [],
        "features": [], "rack": None, "fenced": False}) for b in BROKERS]


class Changes:
    """Random metadata changes: topics created, deleted and recreated, leaders and ISRs moved, replicas
    reassigned, topic configs set, brokers fenced and unfenced."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ids = 0

    def replicas(self) -> list[int]:
        return self.rng.sample(BROKERS, self.rng.randint(1, 3))

    def create(self, name: str) -> list[MetadataRecord]:
        self.ids += 1
        topic_id = uuid.UUID(int=self.ids)
        records = [MetadataRecord("TopicRecord", {"name": name, "topic_id": topic_id})]
        for index in range(self.rng.randint(1, 4)):
            replicas = self.replicas()
            records.append(MetadataRecord("PartitionRecord", {
                "partition_id": index, "topic_id": topic_id, "replicas": replicas, "isr": replicas,
                "leader": replicas[0], "leader_epoch": 0, "partition_epoch": 0}))
        return records

    def next(self, image: MetadataImage) -> list[MetadataRecord]:
        rng = self.rng
        topics = list(image.topics_by_name.values())
        choice = rng.randrange(8) if topics else 0
        if choice == 0:
            return self.create(f"t{rng.randrange(6)}") if not topics or rng.random() < 0.5 else \
                self.create(f"new{self.ids}")
        topic = rng.choice(topics)
        index, meta = rng.choice(list(topic.partitions.items()))
        change = {"topic_id": topic.topic_id, "partition_id": index}
        if choice == 1:
            return [MetadataRecord("RemoveTopicRecord", {"topic_id": topic.topic_id})]
        if choice == 2:  # a new leader
            return [MetadataRecord("PartitionChangeRecord", {**change, "leader": rng.choice(meta.replicas)})]
        if choice == 3:  # the ISR shrinks or grows in the same leader epoch
            isr = [r for r in meta.replicas if r == meta.leader or rng.random() < 0.5]
            return [MetadataRecord("PartitionChangeRecord", {**change, "isr": isr})]
        if choice == 4:  # reassigned, possibly away from this node or onto it
            replicas = self.replicas()
            return [MetadataRecord("PartitionChangeRecord", {**change, "replicas": replicas, "isr": replicas,
                                                             "leader": replicas[0]})]
        if choice == 5:
            return [MetadataRecord("ConfigRecord", {"resource_type": 2, "resource_name": topic.name,
                                                    "name": "segment.bytes",
                                                    "value": str(rng.choice((1 << 20, 1 << 21)))})]
        if choice == 6:  # a broker fenced or unfenced: every led partition's ineligible set changes
            broker = rng.choice(BROKERS)
            return [MetadataRecord("BrokerRegistrationChangeRecord", {
                "broker_id": broker, "broker_epoch": 10 + broker, "fenced": rng.choice((1, -1))})]
        return [MetadataRecord("NoOpRecord", {})]  # a new image with every topic shared


@pytest.mark.parametrize("seed", range(12))
def test_applying_only_the_changed_topics_ends_where_a_full_walk_does(tmp_path: Path, seed: int) -> None:
    delta, delta_updates = manager(tmp_path / "delta")
    full, full_updates = manager(tmp_path / "full")
    changes = Changes(seed)
    image = replay(empty_image("c", 0), broker_records())
    for _ in range(60):
        image = replay(image, changes.next(image))
        delta.apply_image(image)
        full.reconfigure(full.config)  # the next image is walked whole
        full.apply_image(image)
        assert state(delta) == state(full)
        assert delta.followers() == {key: delta.partitions[key] for key in full.followers()}
        assert fetched(delta_updates[-1] if delta_updates else {}) == fetched(full_updates[-1])


def test_an_image_that_changes_one_topic_touches_only_its_partitions(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    replicas, updates = manager(tmp_path)
    touched: list[tuple[str, int]] = []
    apply_role = ReplicaManager._apply_role

    def counting(self, partition, meta, ineligible, *args):  # type: ignore[no-untyped-def]
        touched.append((partition.topic, partition.index))
        apply_role(self, partition, meta, ineligible, *args)
    monkeypatch.setattr(ReplicaManager, "_apply_role", counting)

    def topic(name: str, topic_id: int, leader: int = NODE) -> list[MetadataRecord]:
        return [MetadataRecord("TopicRecord", {"name": name, "topic_id": uuid.UUID(int=topic_id)})] + [
            MetadataRecord("PartitionRecord", {"partition_id": i, "topic_id": uuid.UUID(int=topic_id),
                                               "replicas": [NODE, 2], "isr": [NODE, 2], "leader": leader,
                                               "leader_epoch": 0, "partition_epoch": 0}) for i in range(3)]
    image = replay(empty_image("c", 0), broker_records() + topic("a", 1) + topic("b", 2, leader=2))
    replicas.apply_image(image)
    assert len(touched) == 6 and len(updates) == 1
    image = replay(image, topic("c", 3))
    touched.clear()
    replicas.apply_image(image)
    assert sorted(touched) == [("c", 0), ("c", 1), ("c", 2)]
    assert len(updates) == 1  # nothing this node fetches changed: the fetchers are left alone
    image = replay(image, [MetadataRecord("PartitionChangeRecord", {
        "topic_id": uuid.UUID(int=2), "partition_id": 1, "leader": NODE})])
    touched.clear()
    replicas.apply_image(image)
    assert sorted(touched) == [("b", 0), ("b", 1), ("b", 2)]
    assert fetched(updates[-1]) == {("b", 0): 2, ("b", 2): 2}
    image = replay(image, [MetadataRecord("BrokerRegistrationChangeRecord", {
        "broker_id": 2, "broker_epoch": 12, "fenced": 1})])
    touched.clear()
    replicas.apply_image(image)
    assert len(touched) == 9  # a broker fenced: every partition again
    image = replay(image, [MetadataRecord("RemoveTopicRecord", {"topic_id": uuid.UUID(int=1)})])
    touched.clear()
    replicas.apply_image(image)
    assert touched == [] and sorted(replicas.partitions) == [("b", 0), ("b", 1), ("b", 2), ("c", 0), ("c", 1),
                                                             ("c", 2)]
