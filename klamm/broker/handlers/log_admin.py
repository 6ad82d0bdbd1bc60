"""Log management APIs: DeleteRecords (21), OffsetForLeaderEpoch (23), AlterReplicaLogDirs (34),
DescribeLogDirs (35), DescribeProducers (61).

All answer from the hosted partitions' logs, as Kafka's ReplicaManager does on
a leader. With a single replica a DeleteRecords is complete as soon as the
leader's log start offset moved, so it answers at once.

With an authorizer (Kafka's KafkaApis): DeleteRecords needs DELETE on each
topic, DescribeProducers READ, OffsetForLeaderEpoch CLUSTER_ACTION on the cluster
(a follower) or else DESCRIBE on each topic (a consumer), each refused topic's
partitions answering TOPIC_AUTHORIZATION_FAILED; AlterReplicaLogDirs needs ALTER
on the cluster and DescribeLogDirs DESCRIBE on it, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from collections.abc import Container, Iterable
from pathlib import Path
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.fetch import _check_epoch
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import INTERNAL_TOPICS, METADATA_TOPIC, validate_topic_name

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK


def _denied_topics(broker: BrokerServices, request: Any, operation: AclOperation, names: Iterable[str]
                   ) -> Container[str]:
    """The topics the principal may not do `operation` on (none without an authorizer)."""
    if not broker.authorizer.enabled:
        return ()
    asked = set(names)
    return asked - broker.authorizer.allowed_names(request, operation, ResourceType.TOPIC, asked)


def _partition_or_error(broker: BrokerServices, topic: str, index: int) -> Any:
    """The hosted partition; UNKNOWN_TOPIC_OR_PARTITION if the image does not know it,
    NOT_LEADER_OR_FOLLOWER if it exists but is not hosted here."""
    partition = broker.replicas.partitions.get((topic, index))
    if partition is not None:
        return partition
    image_topic = broker.controller.image.topics_by_name.get(topic)
    if image_topic is not None and index in image_topic.partitions:
        raise KafkaError(ErrorCode.not_leader_or_follower)
    raise KafkaError(ErrorCode.unknown_topic_or_partition)


# -- DeleteRecords -----------------------------------------------------------------------


async def delete_records(broker: BrokerServices, request: Any) -> dict[str, Any]:
    denied = _denied_topics(broker, request, AclOperation.DELETE, (t.name for t in request.body.topics))
    topics = []
    for topic in request.body.topics:
        if topic.name in denied:
            results = [{"partition_index": p.partition_index, "low_watermark": -1,
                        "error_code": ErrorCode.topic_authorization_failed} for p in topic.partitions]
        else:
            results = [_delete_records_one(broker, topic.name, p.partition_index, p.offset) for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": results})
    return {"topics": topics}


def _delete_records_one(broker: BrokerServices, topic: str, index: int, offset: int) -> dict[str, Any]:
    try:
        low_watermark = delete_records_before(broker, topic, index, offset)
    except KafkaError as exc:
        return {"partition_index": index, "low_watermark": -1, "error_code": exc.code}
    return {"partition_index": index, "low_watermark": low_watermark, "error_code": ErrorCode.none}


def delete_records_before(broker: BrokerServices, topic: str, index: int, offset: int) -> int:
    """Move the log start offset to `offset` (-1: the high watermark); returns the low watermark."""
    if topic in INTERNAL_TOPICS or topic == METADATA_TOPIC:
        raise KafkaError(ErrorCode.invalid_topic_exception, f"Cannot delete records of internal topic {topic}")
    partition = _partition_or_error(broker, topic, index)
    if not partition.config.delete:
        raise KafkaError(ErrorCode.policy_violation,
                         f"Records of partition {topic}-{index} can not be deleted due to the configured policy")
    target = partition.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        raise KafkaError(ErrorCode.offset_out_of_range, f"The offset {target} for partition {topic}-{index} is not valid")
    if target > partition.high_watermark:
        raise KafkaError(ErrorCode.offset_out_of_range,
                         f"Cannot increment the log start offset to {target} of partition {topic}-{index} "
                         f"since it is larger than the high watermark {partition.high_watermark}")
    partition.log.maybe_increment_log_start_offset(target)
    return partition.log.log_start_offset


# -- OffsetForLeaderEpoch -----------------------------------------------------------------


async def offset_for_leader_epoch(broker: BrokerServices, request: Any) -> dict[str, Any]:
    # KIP-320: a follower's CLUSTER_ACTION covers every topic, a consumer needs DESCRIBE on each
    denied: Container[str] = ()
    if broker.authorizer.enabled and not broker.authorizer.allowed(request, AclOperation.CLUSTER_ACTION,
                                                                   ResourceType.CLUSTER, CLUSTER_NAME):
        denied = _denied_topics(broker, request, AclOperation.DESCRIBE, (t.topic for t in request.body.topics))
    topics = []
    for topic in request.body.topics:
        if topic.topic in denied:
            partitions = [{"error_code": ErrorCode.topic_authorization_failed, "partition": p.partition,
                           "leader_epoch": -1, "end_offset": -1} for p in topic.partitions]
        else:
            partitions = [_end_offset_for(broker, topic.topic, p) for p in topic.partitions]
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"topics": topics}


def _end_offset_for(broker: BrokerServices, topic: str, request: Any) -> dict[str, Any]:
    index = request.partition
    try:
        partition = _partition_or_error(broker, topic, index)
        partition.check_leader()
        _check_epoch(partition, getattr(request, "current_leader_epoch", -1))
    except KafkaError as exc:
        return {"error_code": exc.code, "partition": index, "leader_epoch": -1, "end_offset": -1}
    # (-1, -1) when the epoch is unknown or older than the cache, as Kafka answers with NONE
    epoch, end_offset = partition.log.leader_epoch_cache.end_offset_for(request.leader_epoch)
    return {"error_code": ErrorCode.none, "partition": index, "leader_epoch": epoch, "end_offset": end_offset}


# -- AlterReplicaLogDirs ------------------------------------------------------------------------


async def alter_replica_log_dirs(broker: BrokerServices, request: Any) -> dict[str, Any]:
    """Move replicas hosted here to another of this broker's log dirs (klamm.broker.replica_moves).

    Answered once each move has begun, as Kafka does; DescribeLogDirs shows the copy (is_future_key)
    until it takes over. A path that is not one of log.dirs is LOG_DIR_NOT_FOUND, a partition not
    hosted here REPLICA_NOT_AVAILABLE.
    """
    refused = broker.authorizer.enabled and not broker.authorizer.allowed(
        request, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    log_dirs = {Path(d).resolve(): Path(d) for d in broker.log_dirs}
    results: dict[str, list[dict[str, Any]]] = {}
    for wanted in request.body.dirs:
        if refused:  # every partition, as Kafka's error response
            for topic in wanted.topics:
                results.setdefault(topic.name, []).extend(
                    {"partition_index": index, "error_code": ErrorCode.cluster_authorization_failed}
                    for index in topic.partitions)
            continue
        log_dir = log_dirs.get(Path(wanted.path).resolve()) if Path(wanted.path).is_absolute() else None
        for topic in wanted.topics:
            for index in topic.partitions:
                results.setdefault(topic.name, []).append(
                    {"partition_index": index, "error_code": _move(broker, topic.name, index, log_dir)})
    return {"results": [{"topic_name": name, "partitions": partitions} for name, partitions in results.items()]}


def _move(broker: BrokerServices, topic: str, index: int, log_dir: Path | None) -> ErrorCode:
    if log_dir is None:
        return ErrorCode.log_dir_not_found
    try:
        partition = _partition_or_error(broker, topic, index)
    except KafkaError as exc:
        return ErrorCode.replica_not_available if exc.code == ErrorCode.not_leader_or_follower else exc.code
    broker.replicas.moves.start(partition, log_dir)
    return ErrorCode.none


# -- DescribeLogDirs ---------------------------------------------------------------------------


async def describe_log_dirs(broker: BrokerServices, request: Any) -> dict[str, Any]:
    if broker.authorizer.enabled and not broker.authorizer.allowed(request, AclOperation.DESCRIBE,
                                                                   ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": ErrorCode.cluster_authorization_failed, "results": []}
    wanted = _wanted_partitions(request.body.topics)
    by_dir: dict[Path, dict[str, list[Any]]] = {Path(d).resolve(): defaultdict(list) for d in broker.log_dirs}
    for log in broker.logs.all_logs():
        if log.topic == METADATA_TOPIC:
            continue  # the metadata log belongs to the quorum, not to the log manager, in Kafka
        if wanted is not None and (log.topic, log.partition) not in wanted:
            continue
        by_dir.setdefault(log.directory.parent.resolve(), defaultdict(list))[log.topic].append((log, None))
        move = broker.replicas.moves.future_log(log.topic, log.partition)
        if move is not None:  # a move under way: the copy, in the log dir it goes to
            target, copy = move
            by_dir.setdefault(target.resolve(), defaultdict(list))[log.topic].append((copy, log))
    results = [_describe_dir(directory, topics) for directory, topics in by_dir.items()]
    return {"error_code": ErrorCode.none, "results": results}


def _wanted_partitions(topics: Any) -> set[tuple[str, int]] | None:
    if topics is None:
        return None
    return {(t.topic, p) for t in topics for p in t.partitions}


def _describe_dir(directory: Path, topics: dict[str, list[tuple[Any, Any]]]) -> dict[str, Any]:
    """Each log of the directory; a future log (a copy being made) with its lag behind the current one."""
    try:
        usage = shutil.disk_usage(directory)
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    return {
        "error_code": ErrorCode.none,
        "log_dir": str(directory),
        "topics": [{"name": name, "partitions": [
            {"partition_index": log.partition, "partition_size": log.size_in_bytes(),
             "offset_lag": 0 if current is None else max(0, current.log_end_offset - log.log_end_offset),
             "is_future_key": current is not None}
            for log, current in sorted(logs, key=lambda entry: (entry[0].partition, entry[1] is not None))]}
            for name, logs in sorted(topics.items())],
        "total_bytes": total,
        "usable_bytes": usable,
    }


# -- DescribeProducers -----------------------------------------------------------------------


async def describe_producers(broker: BrokerServices, request: Any) -> dict[str, Any]:
    denied = _denied_topics(broker, request, AclOperation.READ, (t.name for t in request.body.topics))
    topics = []
    for topic in request.body.topics:
        error = _invalid_topic(topic.name)  # Kafka's order: an invalid name, then READ, then the partitions
        if error is None and topic.name in denied:
            error = KafkaError(ErrorCode.topic_authorization_failed, "Topic authorization failed.")
        if error is not None:
            partitions = [{"partition_index": index, "error_code": error.code, "error_message": error.message,
                           "active_producers": []} for index in topic.partition_indexes]
        else:
            partitions = [_producers_of(broker, topic.name, index) for index in topic.partition_indexes]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"topics": topics}


def _invalid_topic(name: str) -> KafkaError | None:
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc
    return None


def _producers_of(broker: BrokerServices, topic: str, index: int) -> dict[str, Any]:
    try:
        partition = _partition_or_error(broker, topic, index)
    except KafkaError as exc:
        return {"partition_index": index, "error_code": exc.code, "error_message": None, "active_producers": []}
    producers = [
        {"producer_id": entry.producer_id, "producer_epoch": entry.epoch, "last_sequence": entry.last_seq,
         "last_timestamp": entry.last_timestamp, "coordinator_epoch": entry.coordinator_epoch,
         "current_txn_start_offset": entry.current_txn_first_offset}
        for entry in partition.log.producer_state.producers.values()
    ]
    return {"partition_index": index, "error_code": ErrorCode.none, "error_message": None,
            "active_producers": producers}


APIS = [
    Api(21, 0, 2, delete_records),
    Api(23, 0, 4, offset_for_leader_epoch),
    Api(34, 0, 2, alter_replica_log_dirs),
    Api(35, 0, 4, describe_log_dirs),
    Api(61, 0, 0, describe_producers),
]
