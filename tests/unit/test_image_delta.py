"""An image built by ImageBuilder keeps its name map, its changed topics and its collision names right, so the
listeners that read only the changed topics end where a walk of every topic does: random batches of metadata
changes (several records an image: topics created, deleted and recreated under the same name in one batch,
partitions moved, ISRs changed, topic configs set), each image checked against the one before it."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from types import MappingProxyType, SimpleNamespace

import pytest

from klamm.broker.metrics import BrokerMetrics
from klamm.controller.image import ImageBuilder, MetadataImage, apply_batch, empty_image
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.protocol.topics import has_collision_chars, unify_collision_chars

NODE = 1
NAMES = ("a", "b.c", "b_d", "e_f", "g.h.i", "j")


def replay(image: MetadataImage, records: list[MetadataRecord]) -> MetadataImage:
    return apply_batch(image, enumerate((decode_record(encode_record(r)) for r in records), start=image.offset + 1))


class Changes:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ids = 0

    def create(self, name: str) -> list[MetadataRecord]:
        self.ids += 1
        topic_id = uuid.UUID(int=self.ids)
        records = [MetadataRecord("TopicRecord", {"name": name, "topic_id": topic_id})]
        for index in range(self.rng.randint(1, 3)):
            replicas = self.rng.sample((1, 2, 3), self.rng.randint(1, 3))
            records.append(MetadataRecord("PartitionRecord", {
                "partition_id": index, "topic_id": topic_id, "replicas": replicas, "isr": replicas,
                "leader": replicas[0], "leader_epoch": 0, "partition_epoch": 0}))
        return records

    def batch(self, image: MetadataImage) -> list[MetadataRecord]:
        """Several changes, each valid against the image as the records before it in the batch leave it."""
        records: list[MetadataRecord] = []
        names = dict(image.topics_by_name)  # name -> (topic id, partitions) as the batch goes
        live = {name: (t.topic_id, dict(t.partitions)) for name, t in names.items()}
        for _ in range(self.rng.randint(1, 5)):
            free = [n for n in NAMES if n not in live]
            choice = self.rng.randrange(6) if live else 0
            if choice == 0 and free:
                name = self.rng.choice(free)
                created = self.create(name)
                records += created
                live[name] = (created[0].data["topic_id"], {r.data["partition_id"]: None for r in created[1:]})
                continue
            if not live:
                continue
            name = self.rng.choice(sorted(live))
            topic_id, partitions = live[name]
            index = self.rng.choice(sorted(partitions))
            if choice == 1:
                records.append(MetadataRecord("RemoveTopicRecord", {"topic_id": topic_id}))
                del live[name]
            elif choice == 2:
                isr = self.rng.sample((1, 2, 3), self.rng.randint(1, 3))
                records.append(MetadataRecord("PartitionChangeRecord", {
                    "topic_id": topic_id, "partition_id": index, "isr": isr, "replicas": [1, 2, 3],
                    "leader": isr[0]}))
            elif choice == 3:
                records.append(MetadataRecord("ConfigRecord", {
                    "resource_type": 2, "resource_name": name, "name": "retention.ms",
                    "value": str(self.rng.randrange(1, 10**6))}))
            elif choice == 4:  # deleted and created again under the same name, in the same image
                records.append(MetadataRecord("RemoveTopicRecord", {"topic_id": topic_id}))
                created = self.create(name)
                records += created
                live[name] = (created[0].data["topic_id"], {r.data["partition_id"]: None for r in created[1:]})
            else:
                records.append(MetadataRecord("NoOpRecord", {}))
        return records


def isr_counts(before: MetadataImage, after: MetadataImage) -> tuple[float, float]:
    metrics = BrokerMetrics(SimpleNamespace(node_id=NODE))
    metrics.count_isr_changes(before, after)
    text = metrics.exposition().decode()
    counts = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith(("klamm_isr_shrinks_total", "klamm_isr_expands_total"))}
    return counts["klamm_isr_shrinks_total"], counts["klamm_isr_expands_total"]


def unrelated(image: MetadataImage) -> MetadataImage:
    """The same image under a name map it was not built on: listeners must walk every topic of it."""
    return replace(image, topics_by_name=MappingProxyType(dict(image.topics_by_name)))


@pytest.mark.parametrize("seed", range(10))
def test_an_image_names_every_topic_its_build_changed(seed: int) -> None:
    changes = Changes(seed)
    image = empty_image("c", 0)
    replayed: list[MetadataRecord] = []
    for _ in range(80):
        batch = changes.batch(image)
        replayed += batch
        before, image = image, replay(image, batch)
        assert dict(image.topics_by_name) == {t.name: t for t in image.topics_by_id.values()}
        assert all(image.topics_by_name[t.name] is t for t in image.topics_by_id.values())
        names = image.topics_changed(before.topics_by_name)
        assert names is not None and image.topics_changed(unrelated(before).topics_by_name) is None
        differ = {n for n in before.topics_by_name.keys() | image.topics_by_name.keys()
                  if before.topics_by_name.get(n) is not image.topics_by_name.get(n)}
        assert differ <= set(names)
        assert dict(image.collision_names) == {unify_collision_chars(n): n for n in image.topics_by_name
                                               if has_collision_chars(n)}
        assert isr_counts(before, image) == isr_counts(unrelated(before), image)
    assert image == replay(empty_image("c", 0), replayed)  # the same as one batch from nothing


def test_a_deleted_topic_is_forgotten_through_the_change_and_through_a_walk() -> None:
    metrics = BrokerMetrics(SimpleNamespace())
    changes = Changes(0)
    image = replay(empty_image("c", 0), changes.create("kept") + changes.create("gone.1"))
    after = replay(image, [MetadataRecord("RemoveTopicRecord", {"topic_id": image.topics_by_name["gone.1"].topic_id})])
    for before in (image, unrelated(image)):
        metrics.produced("gone.1", 10, 1)
        metrics.forget_deleted_topics(before, after)
        assert 'topic="gone.1"' not in metrics.exposition().decode()


def test_a_builder_builds_one_image() -> None:
    builder = ImageBuilder(empty_image("c", 0))
    builder.apply(MetadataRecord("TopicRecord", {"name": "t", "topic_id": uuid.UUID(int=1)}))
    image = builder.build()
    with pytest.raises(RuntimeError):
        builder.apply(MetadataRecord("TopicRecord", {"name": "u", "topic_id": uuid.UUID(int=2)}))
    with pytest.raises(RuntimeError):
        builder.build()
    assert list(image.topics_by_name) == ["t"]
