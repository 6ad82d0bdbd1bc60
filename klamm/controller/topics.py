"""Topic decisions: pure functions of (image, request) -> (results, records).

These mirror Kafka's ReplicationControlManager (createTopics, deleteTopics,
createPartitions): they validate against the image, never touch the log, and
return the records to append atomically. The controller appends and replays.
Error codes and messages follow Kafka's KRaft controller.

The decisions that make a record per partition are also generators of steps
(`decide_create_topics_steps`, `decide_create_partitions_steps`: a step every
PARTITIONS_A_STEP partitions, the decision the generator's return value), so
that a caller on the event loop can spread a topic of thousands of partitions
over several turns (`in_slices`); the plain functions run every step at once.
"""

from __future__ import annotations

import base64
import uuid
from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from klamm.controller.configs import ConfigValidator, run_validator
from klamm.controller.image import TOPIC_RESOURCE, MetadataImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import METADATA_TOPIC, has_collision_chars, unify_collision_chars, validate_topic_name
from klamm.steps import Steps, in_slices, run_steps

__all__ = [
    "METADATA_TOPIC",
    "Steps",
    "CreatePartitionsResult",
    "CreatePartitionsSpec",
    "CreateTopicSpec",
    "DeleteTopicResult",
    "TopicResult",
    "decide_create_partitions",
    "decide_create_partitions_steps",
    "decide_create_topics",
    "decide_create_topics_steps",
    "decide_delete_topics",
    "in_slices",
    "place_replicas",
    "random_uuid",
    "run_steps",
]

ZERO_UUID = uuid.UUID(int=0)
# Partition records a decision makes between two of its steps: about 0.1 ms.
PARTITIONS_A_STEP = 64


@dataclass(frozen=True)
class CreateTopicSpec:
    name: str
    num_partitions: int = -1  # -1: the broker default
    replication_factor: int = -1  # -1: the broker default
    assignments: Mapping[int, Sequence[int]] | None = None  # partition -> replicas
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicResult:
    name: str
    topic_id: uuid.UUID = ZERO_UUID
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True)
class CreatePartitionsSpec:
    topic: str
    count: int  # the new total number of partitions
    assignments: Sequence[Sequence[int]] | None = None  # replicas of each new partition


@dataclass(frozen=True)
class CreatePartitionsResult:
    topic: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


def random_uuid() -> uuid.UUID:
    """A random id as Kafka's Uuid.randomUuid makes them: never zero, never '-'-leading in base64."""
    while True:
        value = uuid.uuid4()
        if not base64.urlsafe_b64encode(value.bytes).startswith(b"-"):
            return value


# ---------------------------------------------------------------------------
# Placement


def place_replicas(brokers: Sequence[int], start_partition: int, count: int, replication_factor: int,
                   offset: int = 0) -> list[list[int]]:
    """Round-robin replicas over `brokers`: partition p starts at broker (p + offset) mod n.

    Raises INVALID_REPLICATION_FACTOR with Kafka's message when it cannot place.
    """
    if not brokers:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication_factor} time(s): "
                         "All brokers are currently fenced.")
    if replication_factor > len(brokers):
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         f"Unable to replicate the partition {replication_factor} time(s): The target "
                         f"replication factor of {replication_factor} cannot be reached because only "
                         f"{len(brokers)} broker(s) are registered.")
    n = len(brokers)
    ring = list(brokers) * 2  # a slice of it is the broker at each start and the next ones (rf <= n)
    return [ring[start:start + replication_factor]
            for start in ((p + offset) % n for p in range(start_partition, start_partition + count))]


def _check_manual_assignment(image: MetadataImage, replicas: Sequence[int], replication_factor: int | None) -> None:
    if not replicas:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "The manual partition assignment includes an empty replica list.")
    previous = None
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"The manual partition assignment includes broker {broker_id}, "
                             "but no such broker is registered.")
        if broker_id == previous:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"The manual partition assignment includes the broker {broker_id} more than once.")
        previous = broker_id
    if replication_factor is not None and len(replicas) != replication_factor:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"The manual partition assignment includes a partition with {len(replicas)} "
                         "replica(s), but this is not consistent with previous partitions, which have "
                         f"{replication_factor} replica(s).")


def _live_isr(live: set[int], replicas: Sequence[int]) -> list[int]:
    """The replicas among the `live` brokers (image.live_brokers(), taken once per request, not per partition)."""
    return [r for r in replicas if r in live]


def _partition_record(topic_id: uuid.UUID, partition: int, replicas: Sequence[int], isr: Sequence[int]) -> MetadataRecord:
    return MetadataRecord("PartitionRecord", {
        "partition_id": partition,
        "topic_id": topic_id,
        "replicas": list(replicas),
        "isr": list(isr),
        "removing_replicas": [],
        "adding_replicas": [],
        "leader": isr[0],
        "leader_epoch": 0,
        "partition_epoch": 0,
    })


# ---------------------------------------------------------------------------
# CreateTopics


def decide_create_topics(image: MetadataImage, specs: Iterable[CreateTopicSpec],
                         **options: Any) -> tuple[list[TopicResult], list[MetadataRecord]]:
    """decide_create_topics_steps run at once."""
    return run_steps(decide_create_topics_steps(image, specs, **options))


def decide_create_topics_steps(
    image: MetadataImage,
    specs: Iterable[CreateTopicSpec],
    *,
    default_partitions: int,
    default_replication_factor: int,
    validate_config: ConfigValidator | None = None,
    new_topic_id: Callable[[], uuid.UUID] = random_uuid,
) -> Steps[tuple[list[TopicResult], list[MetadataRecord]]]:
    """Results in request order and the records creating the successful topics.

    Topics earlier in the same request count as existing for later ones, so two
    colliding names in one request cannot both be created.
    """
    results: list[TopicResult] = []
    records: list[MetadataRecord] = []
    taken = ChainMap({}, image.collision_names)  # a name can collide only with one that has '.' or '_' too
    created: set[str] = set()
    placement_offset = len(image.topics_by_id)
    for spec in specs:
        try:
            result, topic_records = yield from _create_topic(
                image, spec, taken, created, default_partitions, default_replication_factor,
                validate_config, new_topic_id, placement_offset)
        except KafkaError as exc:
            results.append(TopicResult(name=spec.name, error=exc.code, message=exc.message))
            continue
        results.append(result)
        records.extend(topic_records)
        if has_collision_chars(spec.name):
            taken.setdefault(unify_collision_chars(spec.name), spec.name)
        created.add(spec.name)
        placement_offset += 1
    return results, records


def _create_topic(
    image: MetadataImage,
    spec: CreateTopicSpec,
    taken: Mapping[str, str],
    created: set[str],
    default_partitions: int,
    default_replication_factor: int,
    validate_config: ConfigValidator | None,
    new_topic_id: Callable[[], uuid.UUID],
    placement_offset: int,
) -> Steps[tuple[TopicResult, list[MetadataRecord]]]:
    name = spec.name
    if name == METADATA_TOPIC:
        raise KafkaError(ErrorCode.invalid_request, f"Creation of internal topic {METADATA_TOPIC} is prohibited.")
    validate_topic_name(name)
    if name in image.topics_by_name or name in created:
        raise KafkaError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
    if has_collision_chars(name):
        colliding = taken.get(unify_collision_chars(name))
        if colliding is not None:
            raise KafkaError(ErrorCode.invalid_topic_exception,
                             f"Topic '{name}' collides with existing topic: {colliding}")
    configs = _creation_configs(spec.configs, validate_config)
    if spec.assignments:
        replicas_by_partition, isrs = _manual_partitions(image, spec)
    else:
        replicas_by_partition, isrs = _placed_partitions(image, spec, default_partitions,
                                                         default_replication_factor, placement_offset)
    topic_id = new_topic_id()
    records = [MetadataRecord("TopicRecord", {"name": name, "topic_id": topic_id})]
    records.extend(_config_records(TOPIC_RESOURCE, name, configs))
    for partition in sorted(replicas_by_partition):
        if partition % PARTITIONS_A_STEP == PARTITIONS_A_STEP - 1:
            yield
        records.append(_partition_record(topic_id, partition, replicas_by_partition[partition], isrs[partition]))
    result = TopicResult(
        name=name,
        topic_id=topic_id,
        num_partitions=len(replicas_by_partition),
        replication_factor=len(replicas_by_partition[0]),
        configs=configs,
    )
    return result, records


def _creation_configs(configs: Mapping[str, str | None], validate_config: ConfigValidator | None) -> dict[str, str]:
    null_names = [name for name, value in configs.items() if value is None]
    if null_names:
        raise KafkaError(ErrorCode.invalid_config,
                         "Null value not supported for topic configs: " + ",".join(null_names))
    result = {name: value for name, value in configs.items() if value is not None}
    run_validator(validate_config, result)
    return result


def _config_records(resource_type: int, resource_name: str, configs: Mapping[str, str]) -> list[MetadataRecord]:
    return [
        MetadataRecord("ConfigRecord", {"resource_type": resource_type, "resource_name": resource_name,
                                        "name": key, "value": value})
        for key, value in sorted(configs.items())
    ]


def _manual_partitions(image: MetadataImage, spec: CreateTopicSpec) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    if spec.replication_factor != -1:
        raise KafkaError(ErrorCode.invalid_request,
                         "A manual partition assignment was specified, but replication factor was not set to -1.")
    if spec.num_partitions != -1:
        raise KafkaError(ErrorCode.invalid_request,
                         "A manual partition assignment was specified, but numPartitions was not set to -1.")
    replicas_by_partition: dict[int, list[int]] = {}
    isrs: dict[int, list[int]] = {}
    replication_factor = None
    live = set(image.live_brokers())
    for partition, replicas in spec.assignments.items():  # type: ignore[union-attr]
        _check_manual_assignment(image, replicas, replication_factor)
        replication_factor = len(replicas)
        isr = _live_isr(live, replicas)
        if not isr:
            raise KafkaError(ErrorCode.invalid_replica_assignment,
                             f"All brokers specified in the manual partition assignment for partition "
                             f"{partition} are fenced or in controlled shutdown.")
        replicas_by_partition[partition] = list(replicas)
        isrs[partition] = isr
    if sorted(replicas_by_partition) != list(range(len(replicas_by_partition))):
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         "partitions should be a consecutive 0-based integer sequence")
    return replicas_by_partition, isrs


def _placed_partitions(image: MetadataImage, spec: CreateTopicSpec, default_partitions: int,
                       default_replication_factor: int,
                       placement_offset: int) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    if spec.replication_factor < -1 or spec.replication_factor == 0:
        raise KafkaError(ErrorCode.invalid_replication_factor,
                         "Replication factor must be larger than 0, or -1 to use the default value.")
    if spec.num_partitions < -1 or spec.num_partitions == 0:
        raise KafkaError(ErrorCode.invalid_partitions,
                         "Number of partitions was set to an invalid non-positive value.")
    num_partitions = default_partitions if spec.num_partitions == -1 else spec.num_partitions
    replication_factor = default_replication_factor if spec.replication_factor == -1 else spec.replication_factor
    placed = place_replicas(image.live_brokers(), 0, num_partitions, replication_factor, placement_offset)
    replicas_by_partition = dict(enumerate(placed))
    return replicas_by_partition, replicas_by_partition  # every replica in the ISR (records copy the lists)


# ---------------------------------------------------------------------------
# DeleteTopics


def decide_delete_topics(
    image: MetadataImage, topics: Iterable[str | uuid.UUID]
) -> tuple[list[DeleteTopicResult], list[MetadataRecord]]:
    """Results in request order (names or ids) and one RemoveTopicRecord per topic."""
    results: list[DeleteTopicResult] = []
    records: list[MetadataRecord] = []
    removed: set[uuid.UUID] = set()
    for name_or_id in topics:
        topic = image.topic(name_or_id)
        if topic is None:
            if isinstance(name_or_id, uuid.UUID):
                results.append(DeleteTopicResult(None, name_or_id, ErrorCode.unknown_topic_id,
                                                 "This server does not host this topic ID."))
            else:
                results.append(DeleteTopicResult(name_or_id, ZERO_UUID, ErrorCode.unknown_topic_or_partition,
                                                 "This server does not host this topic-partition."))
            continue
        results.append(DeleteTopicResult(topic.name, topic.topic_id))
        if topic.topic_id not in removed:  # the same topic named twice is removed once
            removed.add(topic.topic_id)
            records.append(MetadataRecord("RemoveTopicRecord", {"topic_id": topic.topic_id}))
    return results, records


# ---------------------------------------------------------------------------
# CreatePartitions


def decide_create_partitions(
    image: MetadataImage, specs: Iterable[CreatePartitionsSpec]
) -> tuple[list[CreatePartitionsResult], list[MetadataRecord]]:
    return run_steps(decide_create_partitions_steps(image, specs))


def decide_create_partitions_steps(
    image: MetadataImage, specs: Iterable[CreatePartitionsSpec]
) -> Steps[tuple[list[CreatePartitionsResult], list[MetadataRecord]]]:
    """decide_create_partitions in steps."""
    results: list[CreatePartitionsResult] = []
    records: list[MetadataRecord] = []
    for spec in specs:
        try:
            records.extend((yield from _create_partitions(image, spec)))
        except KafkaError as exc:
            results.append(CreatePartitionsResult(spec.topic, exc.code, exc.message))
        else:
            results.append(CreatePartitionsResult(spec.topic))
    return results, records


def _create_partitions(image: MetadataImage, spec: CreatePartitionsSpec) -> Steps[list[MetadataRecord]]:
    topic = image.topics_by_name.get(spec.topic)
    if topic is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
    current = len(topic.partitions)
    if spec.count == current:
        raise KafkaError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
    if spec.count < current:
        raise KafkaError(ErrorCode.invalid_partitions,
                         f"The topic {spec.topic} currently has {current} partition(s); "
                         f"{spec.count} would not be an increase.")
    additional = spec.count - current
    if spec.assignments is not None and len(spec.assignments) != additional:
        raise KafkaError(ErrorCode.invalid_replica_assignment,
                         f"Attempted to add {additional} additional partition(s), but only "
                         f"{len(spec.assignments)} assignment(s) were specified.")
    replication_factor = len(topic.partitions[min(topic.partitions)].replicas) if topic.partitions else 1
    live = set(image.live_brokers())
    if spec.assignments is not None:
        new_replicas = []
        for i, replicas in enumerate(spec.assignments):
            _check_manual_assignment(image, replicas, replication_factor)
            if not _live_isr(live, replicas):
                raise KafkaError(ErrorCode.invalid_replica_assignment,
                                 f"All brokers specified in the manual partition assignment for partition "
                                 f"{current + i} are fenced or in controlled shutdown.")
            new_replicas.append(list(replicas))
    else:
        new_replicas = place_replicas(image.live_brokers(), current, additional, replication_factor)
    records = []
    for i, replicas in enumerate(new_replicas):
        if i % PARTITIONS_A_STEP == PARTITIONS_A_STEP - 1:
            yield
        isr = _live_isr(live, replicas)
        if not isr:
            raise KafkaError(ErrorCode.invalid_replication_factor,
                             f"Unable to replicate the partition {replication_factor} time(s): "
                             "All brokers are currently fenced or in controlled shutdown.")
        records.append(_partition_record(topic.topic_id, current + i, replicas, isr))
    return records
