"""Fetch (1), v4+: read record batches, long-polling until `min_bytes` or `max_wait`.

Record bytes are never read into Python: each partition's `records` is a
`FileRegion` of its segment file, sent with sendfile. Limits follow Kafka: at
most `partition_max_bytes` per partition and `max_bytes` in all, but the first
partition with data returns at least one whole batch. A fetch inside a batch
returns that whole batch (the client skips the offsets before its position).

Fetch sessions (KIP-227) are declined: the response carries session id 0, which
tells the client to keep sending full fetch requests — Kafka's own answer when
its session cache is full. An unknown non-zero session id gets
FETCH_SESSION_ID_NOT_FOUND. From v13 topics are named by id.

read_committed reads stop at the last stable offset and carry the aborted
transactions (producer id, first offset) overlapping the range from the fetch
offset to the LSO, so the client drops their batches; read_uncommitted gets
null there, as from Kafka.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from klamm.broker.handlers import Api
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.sendplan import FileRegion

READ_COMMITTED = 1
FINAL_EPOCH = -1


async def handle(broker: Any, request: Any) -> dict[str, Any]:
    body = request.body
    if body.session_id != 0:
        return {"error_code": ErrorCode.fetch_session_id_not_found, "session_id": 0, "responses": []}
    by_id = request.api_version >= 13
    wanted = _resolve(broker, body.topics, by_id)
    read_committed = body.isolation_level == READ_COMMITTED
    deadline = time.monotonic() + body.max_wait.total_seconds()
    while True:
        responses, total, errors, reads = _read_all(broker, wanted, body.max_bytes, read_committed)
        remaining = deadline - time.monotonic()
        if total >= body.min_bytes or errors or remaining <= 0:
            for topic, size in reads:  # only the reads that go out: a long poll reads again
                broker.metrics.fetched(topic, size)
            return {"error_code": ErrorCode.none, "session_id": 0, "responses": responses}
        partitions = [p for _, _, p, _ in wanted if p is not None]
        broker.metrics.parked_fetches += 1
        try:
            await broker.replicas.wait_for_append(partitions, remaining)
        finally:
            broker.metrics.parked_fetches -= 1


def _resolve(broker: Any, topics: Any, by_id: bool) -> list[tuple[Any, Any, Any, Any]]:
    """(topic key, partition request, Partition or None, error) for each requested partition."""
    image = broker.controller.image
    wanted = []
    for topic in topics:
        if by_id:
            meta = image.topics_by_id.get(topic.topic_id)
            name = meta.name if meta is not None else None
            missing = ErrorCode.unknown_topic_id
        else:
            name = topic.topic
            missing = ErrorCode.unknown_topic_or_partition
        key = topic.topic_id if by_id else topic.topic
        for part in topic.partitions:
            partition, error = None, ErrorCode.none
            try:
                if name is None:
                    raise KafkaError(missing)
                partition = broker.replicas.get(name, part.partition)
                _check_epoch(partition, getattr(part, "current_leader_epoch", -1))
            except KafkaError as exc:
                partition, error = None, exc.code
            wanted.append((key, part, partition, error))
    return wanted


def _check_epoch(partition: Any, epoch: int) -> None:
    if epoch < 0 or epoch == partition.leader_epoch:
        return
    raise KafkaError(ErrorCode.fenced_leader_epoch if epoch < partition.leader_epoch else ErrorCode.unknown_leader_epoch)


def _read_all(broker: Any, wanted: list, max_bytes: int, read_committed: bool) -> tuple[list, int, bool, list]:
    responses: list[dict[str, Any]] = []
    reads: list[tuple[str, int]] = []  # (topic, bytes) of each partition with data, for metrics
    by_key: dict[Any, list] = {}
    total = 0
    errors = False
    for key, part, partition, error in wanted:
        if key not in by_key:
            by_key[key] = []
            responses.append({"topic": key, "topic_id": key, "partitions": by_key[key]})
        if partition is None:
            errors = True
            by_key[key].append(_error(part.partition, error))
            continue
        limit = min(part.partition_max_bytes, max_bytes - total)
        try:
            read = partition.read(part.fetch_offset, max(limit, 0), read_committed=read_committed, min_one=total == 0)
        except KafkaError as exc:
            errors = True
            by_key[key].append(_error(part.partition, exc.code, partition))
            continue
        records: Any = FileRegion(read.fd, read.position, read.length) if read.length else b""
        total += read.length
        if read.length:
            reads.append((partition.topic, read.length))
        by_key[key].append({
            "partition_index": part.partition,
            "error_code": ErrorCode.none,
            "high_watermark": partition.high_watermark,
            "last_stable_offset": partition.last_stable_offset,
            "log_start_offset": partition.log_start_offset,
            "preferred_read_replica": -1,
            "aborted_transactions": _aborted(partition, part.fetch_offset) if read_committed else None,
            "records": records,
        })
    for entries in responses:
        if not isinstance(entries["topic"], str):
            entries["topic"] = ""
        if not isinstance(entries["topic_id"], uuid.UUID):
            entries["topic_id"] = uuid.UUID(int=0)
    return responses, total, errors, reads


def _aborted(partition: Any, fetch_offset: int) -> list[dict[str, int]]:
    return [{"producer_id": txn.producer_id, "first_offset": txn.first_offset}
            for txn in partition.aborted_transactions(fetch_offset)]


def _error(index: int, code: ErrorCode, partition: Any = None) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": partition.high_watermark if partition else -1,
        "last_stable_offset": partition.last_stable_offset if partition else -1,
        "log_start_offset": partition.log_start_offset if partition else -1,
        "preferred_read_replica": -1,
        "records": b"",
    }


APIS = [Api(1, 4, 17, handle)]
