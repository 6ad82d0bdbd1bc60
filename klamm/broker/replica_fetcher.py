"""Followers pull from leaders: one fetcher (one connection, one task) per source broker.

Kafka's ReplicaFetcherManager and ReplicaFetcherThread. The replica manager
hands over, after each metadata image, the partitions this broker follows
(`update`); each leader's fetcher sends one Fetch at a time for all of its
partitions, with this broker's id as the replica id, each partition at its log
end offset and with the epoch of its last batch. The answer per partition:

- batches: appended as they are (offsets, epochs, producer ids and CRCs kept;
  producer state and the leader-epoch cache follow them), and the leader's high
  watermark taken, capped by the local log;
- a diverging epoch: the logs differ past some point; truncate there
  (`klamm.broker.replication.truncation_offset`) and fetch again;
- OFFSET_OUT_OF_RANGE: start over at the leader's log start when this log ends
  below it, else truncate to the leader's high watermark;
- leadership errors (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
  UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION): the image is about to say
  who leads; the partition waits `replica.fetch.backoff.ms`.

The leader long-polls each fetch (`replica.fetch.wait.max.ms`), so a follower
asks again as soon as it is answered: that next fetch is what tells the leader
the records arrived, which moves the high watermark and completes acks=all.

Each fetcher keeps an incremental fetch session with its leader (KIP-227, as
Kafka's FetchSessionHandler): after the first full fetch a request names only
the partitions whose position moved (and those no longer fetched), and the
answer only those with records or news. A follower of the 17 partitions of
`__consumer_offsets` a leader has, and of one busy topic, no longer sends and
reads 18 entries for each record replicated.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.broker.fetch_session import INITIAL_EPOCH
from klamm.broker.peer_security import PLAINTEXT_PEER, PeerSecurity
from klamm.broker.replication import truncation_offset
from klamm.protocol import batch as batches
from klamm.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from klamm.broker.partition import Partition

log = logging.getLogger("klamm.replica_fetcher")

FETCH = 1
FETCH_VERSION = 12  # topic names, last_fetched_epoch, diverging_epoch, replica_id in the body
_RETRY_LATER = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                          ErrorCode.unknown_leader_epoch, ErrorCode.unknown_topic_or_partition,
                          ErrorCode.kafka_storage_error})


@dataclass
class FetchSettings:
    node_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partition_max_bytes: int
    backoff_ms: int
    request_timeout_ms: int = 30_000
    security: PeerSecurity = PLAINTEXT_PEER  # how the leader's inter-broker listener is reached


PartitionKey = tuple[str, int]
_SESSION_LOST = frozenset({ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch})


@dataclass
class FollowerSession:
    """The follower's side of its fetch session with one leader: what the leader's session holds of each
    partition, and the id and epoch the next request carries (epoch 0: a full fetch that asks the leader for a
    new session, closing the one it names)."""

    session_id: int = 0
    epoch: int = INITIAL_EPOCH
    held: dict[PartitionKey, dict[str, Any]] = field(default_factory=dict)  # as last sent
    _in_flight: tuple[dict[PartitionKey, dict[str, Any]], list[PartitionKey]] | None = None

    def request(self, wanted: dict[PartitionKey, dict[str, Any]]) -> tuple[dict[PartitionKey, dict[str, Any]],
                                                                          list[PartitionKey]]:
        """Of `wanted` (each partition's request entry), the entries to send and the partitions to forget."""
        if self.epoch == INITIAL_EPOCH:
            sent, forgotten = dict(wanted), []
        else:
            sent = {key: entry for key, entry in wanted.items() if self.held.get(key) != entry}
            forgotten = [key for key in self.held if key not in wanted]
        self._in_flight = (sent, forgotten)
        return sent, forgotten

    def answered(self, error: ErrorCode, session_id: int) -> None:
        """The leader's answer to the last request: its top-level error, and the session id it names."""
        sent, forgotten = self._in_flight or ({}, [])
        self._in_flight = None
        if error != ErrorCode.none:
            self.reset()  # the session is unknown, or out of step: start again with a full fetch
        elif self.epoch == INITIAL_EPOCH:
            self.session_id = session_id  # 0: the leader had no room for a session, the next fetch is full too
            if session_id:  # a session opened: the next request is its first incremental one
                self.epoch, self.held = INITIAL_EPOCH + 1, sent
        else:
            self.epoch += 1
            self.held.update(sent)
            for key in forgotten:
                self.held.pop(key, None)

    def reset(self) -> None:
        """The next request is a full fetch at epoch 0 (after an error, or a lost connection with an outcome
        unknown), naming the session so far: the leader drops it rather than keep it until it is evicted."""
        self.epoch, self.held, self._in_flight = INITIAL_EPOCH, {}, None


class ReplicaFetcherManager:
    def __init__(self, settings: FetchSettings, endpoint_of: Any) -> None:
        """`endpoint_of(node_id)` -> (host, port), or None while the node is unknown or fenced."""
        self.settings = settings
        self.endpoint_of = endpoint_of
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def update(self, followers: dict[tuple[str, int], Partition]) -> None:
        """Fetch exactly these partitions, each from the leader it now follows."""
        by_leader: dict[int, dict[tuple[str, int], Partition]] = {}
        for key, partition in followers.items():
            assert partition.leader_id is not None
            by_leader.setdefault(partition.leader_id, {})[key] = partition
        for leader_id in [n for n in self.fetchers if n not in by_leader]:
            self.fetchers.pop(leader_id).stop()
        for leader_id, partitions in by_leader.items():
            fetcher = self.fetchers.get(leader_id)
            if fetcher is None:
                fetcher = self.fetchers[leader_id] = ReplicaFetcher(leader_id, self.settings, self.endpoint_of)
                fetcher.start()
            fetcher.assign(partitions)

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            await fetcher.stopped()


class ReplicaFetcher:
    """Pulls every partition this broker follows from one leader."""

    def __init__(self, leader_id: int, settings: FetchSettings, endpoint_of: Any) -> None:
        self.leader_id = leader_id
        self.settings = settings
        self.endpoint_of = endpoint_of
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._delayed: dict[tuple[str, int], float] = {}  # partition -> monotonic time it may fetch again
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: BrokerConnection | None = None
        self._session = FollowerSession()
        self._unreachable = False  # logged once per outage
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        # The flag as well as the cancel: Python 3.11's wait_for can swallow a cancellation
        # that arrives as its wait ends, and the loop would go on.
        self._stopping = True
        self._changed.set()
        if self._task is not None:
            self._task.cancel()
        if self._connection is not None:
            self._connection.close()

    async def stopped(self) -> None:
        if self._task is not None:
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def assign(self, partitions: dict[tuple[str, int], Partition]) -> None:
        if partitions != self.partitions:
            # a partition handed over again (new epoch, or another Partition) may fetch at once
            self._delayed = {k: t for k, t in self._delayed.items()
                             if k in partitions and partitions[k] is self.partitions.get(k)}
            self.partitions = dict(partitions)
            self._changed.set()

    async def _run(self) -> None:
        while not self._stopping:
            ready = self._ready()
            if not ready:
                await self._wait_for_change(self._next_ready_in())
                continue
            connection = self._connect()
            if connection is None:
                await self._wait_for_change(self.settings.backoff_ms / 1000)
                continue
            try:
                response = await connection.request_views(
                    FETCH, FETCH_VERSION, self._request(ready),
                    (self.settings.max_wait_ms + self.settings.request_timeout_ms) / 1000)
            except BrokerUnavailable as exc:
                log.log(logging.DEBUG if self._unreachable else logging.INFO, "replica fetcher for broker %d: %s",
                        self.leader_id, exc)
                self._unreachable = True
                self._session.reset()
                await self._wait_for_change(self.settings.backoff_ms / 1000)
                continue
            self._unreachable = False
            if self._stopping:
                return
            error = ErrorCode(response["error_code"])
            self._session.answered(error, response["session_id"])
            if error in _SESSION_LOST:
                log.info("fetch session with broker %d lost (%s): fetching in full", self.leader_id, error.name)
                continue
            if error != ErrorCode.none:
                log.warning("fetch from broker %d failed: %s", self.leader_id, error.name)
                await self._wait_for_change(self.settings.backoff_ms / 1000)
                continue
            self._handle(ready, response)
            del response  # its records are views of the connection's buffer, which the next fetch reuses

    def _ready(self) -> dict[tuple[str, int], Partition]:
        now = time.monotonic()
        return {k: p for k, p in self.partitions.items() if self._delayed.get(k, 0) <= now}

    def _next_ready_in(self) -> float | None:
        if not self._delayed:
            return None
        return max(0.0, min(self._delayed.values()) - time.monotonic())

    async def _wait_for_change(self, timeout: float | None) -> None:
        if self._stopping:
            return
        self._changed.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        except TimeoutError:
            pass

    def _connect(self) -> BrokerConnection | None:
        endpoint = self.endpoint_of(self.leader_id)
        if endpoint is None:
            return None
        current = self._connection
        if current is None or (current.host, current.port) != endpoint:
            if current is not None:
                current.close()
            self._session.reset()
            self._connection = BrokerConnection(endpoint[0], endpoint[1], f"klamm-replica-fetcher-{self.settings.node_id}",
                                                self.settings.request_timeout_ms / 1000, self.settings.security)
        return self._connection

    def _request(self, partitions: dict[tuple[str, int], Partition]) -> dict[str, Any]:
        wanted = {key: {"partition": key[1],
                        "current_leader_epoch": partition.leader_epoch,
                        "fetch_offset": partition.log_end_offset,
                        "last_fetched_epoch": partition.log.leader_epoch_cache.latest_epoch,
                        "log_start_offset": partition.log_start_offset,
                        "partition_max_bytes": self.settings.partition_max_bytes}
                  for key, partition in partitions.items()}
        sent, forgotten = self._session.request(wanted)
        return {"replica_id": self.settings.node_id, "max_wait": self.settings.max_wait_ms,
                "min_bytes": self.settings.min_bytes, "max_bytes": self.settings.max_bytes, "isolation_level": 0,
                "session_id": self._session.session_id, "session_epoch": self._session.epoch,
                "topics": _by_topic(sent.items()),
                "forgotten_topics_data": _by_topic((key, key[1]) for key in forgotten), "rack_id": ""}

    def _handle(self, sent: dict[tuple[str, int], Partition], response: dict[str, Any]) -> None:
        """Apply a Fetch response decoded by `BrokerConnection.request_views` (records are memoryviews)."""
        for topic in response["responses"]:
            for data in topic["partitions"]:
                key = (topic["topic"], data["partition_index"])
                partition = sent.get(key)
                if partition is None or self.partitions.get(key) is not partition:
                    continue  # no longer fetched from here (a new image moved it)
                try:
                    self._apply(key, partition, data)
                except Exception:
                    log.exception("replicating %s-%d from broker %d failed", key[0], key[1], self.leader_id)
                    self._delay(key)

    def _apply(self, key: tuple[str, int], partition: Partition, data: dict[str, Any]) -> None:
        error = ErrorCode(data["error_code"])
        if error == ErrorCode.none:
            diverging = data["diverging_epoch"]
            if diverging is not None and diverging["epoch"] >= 0:
                epoch = diverging["epoch"]
                local = partition.log.leader_epoch_cache.end_offset_for(epoch)
                offset = truncation_offset((epoch, diverging["end_offset"]), local, partition.log_end_offset)
                log.info("%s-%d diverges from broker %d's log at epoch %d: truncating %d -> %d", key[0], key[1],
                         self.leader_id, epoch, partition.log_end_offset, offset)
                partition.truncate_to(offset)
                return
            records = data["records"]  # a view of the receive buffer: appended without a copy
            headers = batches.split_batches(records) if records else []
            if headers and headers[0].base_offset != partition.log_end_offset:
                return  # not where this log ends (it changed meanwhile): ask again
            partition.append_as_follower(records if headers else b"", headers, data["high_watermark"])
        elif error == ErrorCode.offset_out_of_range:
            if partition.log_end_offset < data["log_start_offset"]:
                partition.truncate_fully_and_start_at(data["log_start_offset"])
            else:
                partition.truncate_to(max(0, data["high_watermark"]))
        elif error in _RETRY_LATER:
            self._delay(key)
        else:
            log.warning("fetching %s-%d from broker %d: %s", key[0], key[1], self.leader_id, error.name)
            self._delay(key)

    def _delay(self, key: tuple[str, int]) -> None:
        self._delayed[key] = time.monotonic() + self.settings.backoff_ms / 1000


def _by_topic(items: Iterable[tuple[PartitionKey, Any]]) -> list[dict[str, Any]]:
    """Per-partition items of a Fetch request (entries, or the indexes of forgotten partitions) grouped under
    their topic, topics in first-seen order."""
    topics: dict[str, list[Any]] = {}
    for (topic, _), item in items:
        topics.setdefault(topic, []).append(item)
    return [{"topic": name, "partitions": grouped} for name, grouped in topics.items()]
