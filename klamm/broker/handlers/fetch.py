"""Fetch (1): read record batches, long-polling until `min_bytes` or `max_wait`; v0-3 get message sets.

Record bytes are never read into Python: each partition's `records` is a
`FileRegion` of its segment file, sent with sendfile. Limits follow Kafka: at
most `partition_max_bytes` per partition and `max_bytes` (capped by the broker's
fetch.max.bytes) in all, but the first partition with data returns at least one
whole batch. A fetch inside a batch returns that whole batch (the client skips
the offsets before its position).

The region leases its file once the response is final (after the last await),
so a segment deleted while the response waits in its connection's queue still
sends its own bytes; the network layer releases the lease. A long poll looks its
partitions up again after each wake-up: a topic deleted (or recreated) meanwhile
is not read through the Partition it had before.

Fetch sessions (KIP-227, klamm/broker/fetch_session.py): epoch 0 opens a session
with a full fetch, later epochs send and receive only changes, epoch -1 is a
sessionless full fetch. From v13 topics are named by id.

read_committed reads stop at the last stable offset and carry the aborted
transactions (producer id, first offset) overlapping the range from the fetch
offset to the LSO, so the client drops their batches; read_uncommitted gets
null there, as from Kafka.

A fetch with a replica id (`replica_id` before v15, `replica_state` from v15)
is a follower's: it reads up to the log end instead of the high watermark, its
`last_fetched_epoch` is checked against this leader's epochs (a diverging epoch
is answered instead of records, and that fetch does not count as progress), and
its fetch offset tells the partition's LeaderState what the follower has, which
moves the high watermark and the ISR (klamm.broker.replication).

A consumer's fetch from v11 (KIP-392, which added rack_id) is served by a follower
too, up to the follower's own high watermark (or LSO), as Kafka's does
(FetchParams.fetchOnlyLeader: a follower's fetch, or a consumer's before v11).
With replica.selector.class set, the leader names a replica in the consumer's rack
as its preferred read replica (klamm.broker.replica_selector): that partition is
answered at once, without records, and the client fetches from that replica.

With an authorizer (Kafka's KafkaApis.handleFetchRequest): a follower's fetch
needs CLUSTER_ACTION on the cluster, else every partition answers
TOPIC_AUTHORIZATION_FAILED; a consumer needs READ on each topic, else its
partitions answer TOPIC_AUTHORIZATION_FAILED, before UNKNOWN_TOPIC_OR_PARTITION
(an unknown topic id stays UNKNOWN_TOPIC_ID). klamm's followers fetch over the
first listener: a PLAINTEXT one makes them User:ANONYMOUS, which then needs
CLUSTER_ACTION (a super user, or an ACL), as Kafka's inter-broker principal does.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Container
from typing import Any

from klamm.broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, FetchSession, FetchSessionCache
from klamm.broker.handlers import Api
from klamm.broker.handlers.leader_hints import LeaderHints
from klamm.broker.replica_selector import ReplicaView, preferred_read_replica
from klamm.broker.replication import diverging_epoch
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.protocol import message_set
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.sendplan import FileRegion
from klamm.steps import in_slices

READ_COMMITTED = 1
CONVERT_SLICE_S = 0.001  # of the loop's time a turn, converting batches down to message sets
_ZERO_ID = uuid.UUID(int=0)

# One partition to read: (topic key, position entry, Partition or None, error code)
Wanted = tuple[Any, Any, Any, ErrorCode]


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    by_id = request.api_version >= 13
    requested = [(t.topic_id if by_id else t.topic, p) for t in body.topics for p in t.partitions]
    if request.api_version >= 7:
        session, incremental, error = _session(broker.fetch_sessions, body, requested, by_id)
    else:  # fetch sessions (KIP-227) begin at v7: every older fetch is a full one
        session, incremental, error = None, False, ErrorCode.none
    if error != ErrorCode.none:
        return {"error_code": error, "session_id": 0, "responses": []}
    positions = [(key, cached) for (key, _), cached in session.partitions.items()] if incremental else requested
    read_committed = getattr(body, "isolation_level", 0) == READ_COMMITTED  # v4+
    replica_id = body.replica_state.replica_id if request.api_version >= 15 else body.replica_id
    # Kafka's KafkaApis: the broker's fetch.max.bytes caps the request's (v3+), and min_bytes with it.
    max_bytes = min(getattr(body, "max_bytes", broker.config.fetch_max_bytes), broker.config.fetch_max_bytes)
    min_bytes = min(body.min_bytes, max_bytes)
    deadline = time.monotonic() + body.max_wait.total_seconds()
    denied = _denied(broker, request, positions, by_id, replica_id) if broker.authorizer.enabled else None
    prefer = None
    if replica_id < 0 and request.api_version >= 11 and body.rack_id and broker.config.replica_selector_class:
        prefer = _ReadReplicas(broker, body.rack_id, request.listener)
    while True:
        wanted = _resolve(broker, positions, by_id)  # again after a wait: topics may be gone or new
        if denied:
            wanted = [(item[0], item[1], None, ErrorCode.topic_authorization_failed) if item[0] in denied else item
                      for item in wanted]
        entries, total, errors = _read_all(wanted, max_bytes, read_committed, replica_id,
                                           leader_only=request.api_version < 11, prefer=prefer)
        remaining = deadline - time.monotonic()
        if total >= min_bytes or errors or remaining <= 0:
            break
        request.leave_queue()  # parked, like Kafka's purgatory: no longer holds a place in the request queue
        broker.metrics.parked_fetches += 1
        try:
            await broker.replicas.wait_for_append([p for _, _, p, _ in wanted if p is not None], remaining)
        finally:
            broker.metrics.parked_fetches -= 1
    if session is not None:
        entries = _remember(session, entries, incremental)
    # No await until every read is leased or copied: the files read above are still open.
    converts = []
    for (_, position, partition, _), entry in entries:
        read = entry["records"]
        if read:  # only the reads that go out: a long poll reads again
            if request.api_version < 4:  # message sets: converted down, no zero copy (as in Kafka)
                if not partition.config.message_downconversion_enable:
                    entry.update(_error(entry["partition_index"], ErrorCode.unsupported_version, partition))
                    continue
                converts.append((entry, os.pread(read.file.fileno(), read.length, read.position),
                                 position.fetch_offset))
            else:
                entry["records"] = FileRegion(read.file.lease(), read.position, read.length)
            if replica_id < 0:  # replication is not a topic's bytes out
                broker.metrics.fetched(partition.topic, read.length)
    magic = 1 if request.api_version >= 2 else 0
    for entry, data, fetch_offset in converts:
        # from the fetch offset on, and no larger than what was read, however far compressed batches expand
        # (KIP-283); a slice of the loop a turn: a fetch of 1 MiB of small records converts for tens of ms
        out = bytearray()
        await in_slices(message_set.converting(data, magic, out, len(data), fetch_offset), CONVERT_SLICE_S)
        entry["records"] = bytes(out)
    hints = LeaderHints(broker, request.listener)
    for (key, _, _, _), entry in entries:
        if entry["error_code"] != ErrorCode.none:
            hints.add(entry, key if isinstance(key, str) else _topic_name(broker, key), entry["partition_index"])
    return {"error_code": ErrorCode.none, "session_id": session.session_id if session else 0,
            "responses": _by_topic(entries), "node_endpoints": hints.node_endpoints()}


class _Everything:
    """Every partition is refused: a follower's fetch without CLUSTER_ACTION."""

    def __contains__(self, key: Any) -> bool:
        return True

    def __bool__(self) -> bool:
        return True


def _denied(broker: BrokerServices, request: Any, positions: list[tuple[Any, Any]], by_id: bool,
            replica_id: int) -> Container[Any]:
    """The topic keys (names, or ids from v13) this fetch may not read, as Kafka's KafkaApis decides:
    a follower needs CLUSTER_ACTION on the cluster for all of them, a consumer READ on each topic.
    An id the image does not know is not refused: it answers UNKNOWN_TOPIC_ID."""
    authorizer = broker.authorizer
    if replica_id >= 0:
        return set() if authorizer.allowed(request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER,
                                           CLUSTER_NAME) else _Everything()
    if by_id:
        topics = broker.controller.image.topics_by_id
        names = {key: topics[key].name for key, _ in positions if key in topics}
    else:
        names = {key: key for key, _ in positions}
    allowed = authorizer.allowed_names(request, AclOperation.READ, ResourceType.TOPIC, set(names.values()))
    return {key for key, name in names.items() if name not in allowed}


def _topic_name(broker: BrokerServices, topic_id: uuid.UUID) -> str:
    topic = broker.controller.image.topics_by_id.get(topic_id)
    return topic.name if topic is not None else ""


def _session(cache: FetchSessionCache, body: Any, requested: list, by_id: bool
             ) -> tuple[FetchSession | None, bool, ErrorCode]:
    """(session or None, whether the fetch is incremental, error) for the request's session fields."""
    session_id, epoch = body.session_id, body.session_epoch
    if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
        if session_id:
            cache.remove(session_id)
        if epoch == FINAL_EPOCH:
            return None, False, ErrorCode.none
        session = cache.create()
        if session is not None:
            session.update(requested, ())
        return session, False, ErrorCode.none
    session = cache.get(session_id) if session_id else None
    if session is None:
        return None, False, ErrorCode.fetch_session_id_not_found
    if epoch != session.epoch:
        return None, False, ErrorCode.invalid_fetch_session_epoch
    forgotten = [(t.topic_id if by_id else t.topic, index)
                 for t in getattr(body, "forgotten_topics_data", ()) for index in t.partitions]
    session.update(requested, forgotten)
    session.epoch += 1
    return session, True, ErrorCode.none


def _remember(session: FetchSession, entries: list, incremental: bool) -> list:
    """Record what the client is told; an incremental answer keeps only what changed."""
    kept = []
    for wanted, entry in entries:
        key, position = wanted[0], wanted[1]
        cached = session.partitions.get((key, position.partition))
        changed = cached.changed(entry) if cached is not None else True
        if changed or not incremental:
            kept.append((wanted, entry))
    return kept


def _resolve(broker: BrokerServices, positions: list[tuple[Any, Any]], by_id: bool) -> list[Wanted]:
    """Find each (topic key, position)'s partition, or the error that replaces it."""
    image = broker.controller.image
    wanted = []
    for key, position in positions:
        partition, error = None, ErrorCode.none
        try:
            if by_id:
                meta = image.topics_by_id.get(key)
                if meta is None:
                    raise KafkaError(ErrorCode.unknown_topic_id)
                name = meta.name
            else:
                name = key
            partition = broker.replicas.get(name, position.partition)
            _check_epoch(partition, getattr(position, "current_leader_epoch", -1))
        except KafkaError as exc:
            partition, error = None, exc.code
        wanted.append((key, position, partition, error))
    return wanted


def _check_epoch(partition: Any, epoch: int) -> None:
    if epoch < 0 or epoch == partition.leader_epoch:
        return
    raise KafkaError(ErrorCode.fenced_leader_epoch if epoch < partition.leader_epoch else ErrorCode.unknown_leader_epoch)


class _ReadReplicas:
    """The preferred read replica of each partition this broker leads, for a consumer in `rack`: a follower
    in that rack that has the fetch offset, is in the ISR and unfenced, with an endpoint on the listener."""

    def __init__(self, broker: BrokerServices, rack: str, listener: str) -> None:
        self._broker = broker
        self._rack = rack
        self._listener = listener

    def __call__(self, partition: Any, fetch_offset: int) -> int:
        followers = partition.readable_followers(fetch_offset)
        if not followers:
            return -1
        broker = self._broker
        brokers = broker.controller.image.brokers
        views = []
        for node_id, log_end_offset, since_caught_up_ms in followers:
            registration = brokers.get(node_id)
            if registration is None or registration.fenced or broker.endpoint_for(node_id, self._listener) is None:
                continue
            views.append(ReplicaView(node_id, registration.rack, log_end_offset, since_caught_up_ms))
        leader = ReplicaView(broker.node_id, broker.config.broker_rack, partition.log_end_offset, 0)
        return preferred_read_replica(self._rack, leader, views)


def _read_all(wanted: list[Wanted], max_bytes: int, read_committed: bool, replica_id: int, *,
              leader_only: bool, prefer: _ReadReplicas | None = None) -> tuple[list, int, bool]:
    """(wanted, partition response) pairs, total record bytes, and whether to answer now (an error, a
    diverging epoch, a preferred read replica)."""
    entries = []
    total = 0
    errors = False
    for item in wanted:
        _, position, partition, error = item
        if partition is None:
            errors = True
            entries.append((item, _error(position.partition, error)))
            continue
        limit = min(position.partition_max_bytes, max_bytes - total)
        try:
            if replica_id >= 0:
                diverging = _diverging(partition, position)
                if diverging is not None:
                    errors = True  # answered at once: the follower truncates before it fetches again
                    entries.append((item, {**_error(position.partition, ErrorCode.none, partition),
                                           "diverging_epoch": {"epoch": diverging[0], "end_offset": diverging[1]}}))
                    continue
                read = partition.read_for_follower(position.fetch_offset, max(limit, 0), min_one=total == 0)
                partition.on_follower_fetch(replica_id, position.fetch_offset,
                                            getattr(position, "log_start_offset", -1))
            else:
                preferred = prefer(partition, position.fetch_offset) if prefer is not None else -1
                if preferred >= 0:  # no read here: the client fetches from that replica (Kafka's readFromLog)
                    errors = True
                    entries.append((item, {**_error(position.partition, ErrorCode.none, partition),
                                           "preferred_read_replica": preferred}))
                    continue
                read = partition.read(position.fetch_offset, max(limit, 0), read_committed=read_committed,
                                      min_one=total == 0, leader_only=leader_only)
        except KafkaError as exc:
            errors = True
            entries.append((item, _error(position.partition, exc.code, partition)))
            continue
        total += read.length
        entries.append((item, {
            "partition_index": position.partition,
            "error_code": ErrorCode.none,
            "high_watermark": partition.high_watermark,
            "last_stable_offset": partition.last_stable_offset,
            "log_start_offset": partition.log_start_offset,
            "preferred_read_replica": -1,
            "aborted_transactions": _aborted(partition, position.fetch_offset) if read_committed else None,
            "records": read if read.length else b"",  # a ReadResult, leased as a FileRegion once final
        }))
    return entries, total, errors


def _diverging(partition: Any, position: Any) -> tuple[int, int] | None:
    """A follower's log differs from this leader's past some point: (epoch, end offset) to truncate by."""
    last_fetched = getattr(position, "last_fetched_epoch", -1)
    if last_fetched < 0:
        return None
    return diverging_epoch(partition.log.leader_epoch_cache.end_offset_for(last_fetched), position.fetch_offset,
                           last_fetched)


def _by_topic(entries: list) -> list[dict[str, Any]]:
    """Group partition responses by topic, in first-seen order (name before v13, id after)."""
    topics: dict[Any, list] = {}
    for (key, _, _, _), entry in entries:
        topics.setdefault(key, []).append(entry)
    return [{"topic": key if isinstance(key, str) else "", "topic_id": key if isinstance(key, uuid.UUID) else _ZERO_ID,
             "partitions": partitions} for key, partitions in topics.items()]


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


APIS = [Api(1, 0, 17, handle)]
