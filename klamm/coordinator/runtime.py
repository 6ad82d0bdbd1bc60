"""The group coordinator inside the broker: __consumer_offsets, loading, appends and timers.

The topic is created on the first FindCoordinator(GROUP):
`offsets.topic.num.partitions` partitions, cleanup.policy=compact, and a
replication factor of min(offsets.topic.replication.factor, live brokers) —
Kafka would refuse to create it with fewer brokers than asked; a single-node
klamm caps it instead. This broker coordinates the groups of the partitions it
leads, following the metadata image (Kafka's onElection / onResignation): a
partition it becomes leader of is loaded (replayed from its start) before the
coordinator answers for its groups — meanwhile COORDINATOR_LOAD_IN_PROGRESS —
and one it stops leading is unloaded, its groups answering NOT_COORDINATOR.

`apply` writes an operation's records — one batch per partition (and producer),
appended synchronously — replays each batch into the state machine with the
offsets it got, and runs the operation's after-write actions. Those release
JoinGroup/SyncGroup responses: on a replicated partition they run once the HW
passes the records (Kafka 4 completes a write operation when its records are
committed), at once on RF=1. `apply_committed` answers so too: a
ConsumerGroupHeartbeat, classic Heartbeat, LeaveGroup, OffsetDelete or
DeleteGroups. One that wrote nothing answers once the HW passes what is
already written to its group's partition (Kafka's write that turned out a
read waits on the partition's last pending write), at once if nothing is
pending. Timer deadlines run on the event loop, woken early when an earlier
deadline is scheduled.

Reads at the high watermark: on a replicated __consumer_offsets a record is
replayed before the ISR has it. The state machine's offsets are then the latest
(what writes see), and OffsetFetch reads them as of the partition's HW (Kafka
4's reads at the last committed offset): before a read, and after each append,
the runtime tells the state machine the partition's current HW (`committed`).
An offset the ISR never takes is never read here: losing the leadership
unloads the partition, and a broker that loads it reads what it replays only
once its own HW passes it. OffsetFetch with require_stable reads the latest
state and answers once the HW passes what was written (`written_replicated`),
as Kafka 4 runs it as a write. ConsumerGroupDescribe and ListGroups read the
consumer groups as of the HW too; classic groups, whose state lives in memory
(their records only store each generation), are read as they are, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from klamm.controller.controller import changed_until
from klamm.coordinator.consumer_coordinator import ConsumerGroupConfig
from klamm.coordinator.consumer_group import TopicMetadata
from klamm.coordinator.coordinator import CoordinatorConfig, GroupCoordinator, Result
from klamm.coordinator.loading import PartitionLoads, read_batches
from klamm.coordinator.migration import MigrationPolicy
from klamm.coordinator.records import CoordinatorRecord
from klamm.coordinator.timer import Timer
from klamm.coordinator.timer_loop import run_timers
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import ControlRecordType, NewRecord, build_batch, control_type_of, decode_batch
from klamm.protocol.topics import CONSUMER_OFFSETS

log = logging.getLogger("klamm.coordinator")

# Append failures as the client sees them (Kafka's GroupMetadataManager / CoordinatorRuntime mapping). A
# local write that fails with an OSError is Kafka's KAFKA_STORAGE_ERROR, which a client hears as NOT_COORDINATOR.
_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.invalid_producer_epoch: ErrorCode.invalid_producer_epoch,  # a fenced TxnOffsetCommit
}
# Records too large: an offset commit says INVALID_COMMIT_OFFSET_SIZE, any other write UNKNOWN_SERVER_ERROR.
_TOO_LARGE = frozenset({ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size})


def append_error(exc: Exception) -> ErrorCode:
    """The Kafka error of a failed append to an internal partition: a KafkaError's code, or a disk error."""
    return exc.code if isinstance(exc, KafkaError) else ErrorCode.kafka_storage_error


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def coordinator_config(config: Any, num_partitions: int) -> CoordinatorConfig:
    return CoordinatorConfig(
        num_partitions=num_partitions,
        initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
        min_session_timeout_ms=config.group_min_session_timeout_ms,
        max_session_timeout_ms=config.group_max_session_timeout_ms,
        max_group_size=config.group_max_size,
        offsets_retention_ms=config.offsets_retention_minutes * 60 * 1000,
        offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
        offset_metadata_max_bytes=config.offset_metadata_max_bytes,
        consumer=ConsumerGroupConfig(
            session_timeout_ms=config.group_consumer_session_timeout_ms,
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            assignors=tuple(dict.fromkeys(name.rsplit(".", 1)[-1].removesuffix("Assignor").lower()
                                          for name in config.group_consumer_assignors)),
            max_size=config.group_consumer_max_size,
            migration_policy=MigrationPolicy(config.group_consumer_migration_policy.lower())),
    )


# The APIs a group's coordinator answers (Kafka's GroupCoordinator): while a broker of a cluster does not know
# __consumer_offsets yet, they wait for it (the broker wraps their handlers: GroupCoordinatorRuntime.known).
GROUP_COORDINATOR_APIS = frozenset({
    8,   # OffsetCommit
    9,   # OffsetFetch
    11,  # JoinGroup
    12,  # Heartbeat
    13,  # LeaveGroup
    14,  # SyncGroup
    15,  # DescribeGroups
    28,  # TxnOffsetCommit
    42,  # DeleteGroups
    47,  # OffsetDelete
    68,  # ConsumerGroupHeartbeat
    69,  # ConsumerGroupDescribe
})


def topics_of(image: Any) -> dict[str, TopicMetadata]:
    """The cluster's topics as consumer-protocol groups see them: id and partition count by name."""
    return {name: TopicMetadata(topic.topic_id, name, len(topic.partitions))
            for name, topic in image.topics_by_name.items()}


class GroupCoordinatorRuntime:
    def __init__(self, broker: Any) -> None:
        self.broker = broker
        self._wake = asyncio.Event()
        self.timer = Timer(wall_clock_ms, on_change=self._wake.set)
        self.coordinator: GroupCoordinator | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # the partitions of __consumer_offsets this broker leads are loaded and served
        self._loads = PartitionLoads(CONSUMER_OFFSETS, broker.node_id,
                                     lambda index: self.coordinator.begin_loading(index), self._load,
                                     lambda index: self.coordinator.unload(index))
        self._unsubscribe: Callable[[], None] | None = None
        self._topics_cache: tuple[Any, dict[str, TopicMetadata]] = (None, {})
        self._deferred: set[asyncio.Future[None]] = set()  # after-write actions waiting for the HW (apply)

    # lifecycle
    async def start(self) -> None:
        self._tasks.append(asyncio.ensure_future(self._run_timers()))
        self._unsubscribe = self.broker.controller.on_change(lambda _old, new: self.follow_leadership(new))
        self.follow_leadership(self.broker.controller.image)

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._loads.stop()
        for task in self._tasks:
            task.cancel()
        self._tasks.clear()
        for deferred in list(self._deferred):
            deferred.cancel()

    def _topic(self) -> Any:
        return self.broker.controller.image.topics_by_name.get(CONSUMER_OFFSETS)

    def ensure_topic(self, *, deferred: bool = False) -> None:
        """Create __consumer_offsets if missing and start serving the (empty) partitions led here (with `deferred`,
        COORDINATOR_NOT_AVAILABLE while it is created: Broker.create_internal_topic)."""
        if self._topic() is None:
            config = self.broker.config
            self.broker.create_internal_topic(
                CONSUMER_OFFSETS, config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
                {"compression.type": "producer", "segment.bytes": str(config.offsets_topic_segment_bytes)},
                deferred=deferred)
            self._loads.load_now()  # the new partitions are empty: serve them at once

    async def loads_settled(self) -> None:
        """Until the partitions this broker began to load have been loaded."""
        await self._loads.settled()

    # loading: a partition is served while this broker leads it
    def follow_leadership(self, image: Any) -> None:
        """Load the partitions of __consumer_offsets this broker now leads; unload those it stopped leading."""
        topic = image.topics_by_name.get(CONSUMER_OFFSETS)
        if topic is None:
            return
        if self.coordinator is None:
            self.coordinator = GroupCoordinator(coordinator_config(self.broker.config, len(topic.partitions)),
                                                self.timer)
            self.coordinator.consumer.topics = self._topics
            self.coordinator.consumer.group_configs = self._group_configs
        self._loads.follow(image, self.coordinator.owned)

    def _group_configs(self, group_id: str) -> Mapping[str, str]:
        """A group's dynamic configs in the current image (KIP-848), read at each heartbeat."""
        return self.broker.controller.image.group_configs(group_id)

    def _topics(self) -> dict[str, TopicMetadata]:
        """The image's topics, computed again only when the image changed."""
        image = self.broker.controller.image
        if self._topics_cache[0] is not image:
            self._topics_cache = (image, topics_of(image))
        return self._topics_cache[1]

    def _load(self, index: int) -> None:
        coordinator = self.coordinator
        assert coordinator is not None
        started = time.monotonic()
        before = len(coordinator.groups)
        self._load_partition(coordinator, index)
        loaded = len(coordinator.groups) - before
        log.log(logging.INFO if loaded else logging.DEBUG, "loaded %d groups from %s-%d in %.0f ms", loaded,
                CONSUMER_OFFSETS, index, (time.monotonic() - started) * 1000)

    def _load_partition(self, coordinator: GroupCoordinator, index: int) -> None:
        partition = self.broker.replicas.get(CONSUMER_OFFSETS, index)
        coordinator.advance(index, partition.high_watermark)  # what is past it is read once the HW passes it
        for offset, record in self._read_partition(partition, index):
            if isinstance(record, tuple):
                coordinator.replay_marker(index, *record, offset=offset)
            else:
                coordinator.replay(record, offset)
        coordinator.advance(index, partition.high_watermark)
        coordinator.finish_loading(index)

    def _read_partition(self, partition: Any, index: int
                        ) -> Iterator[tuple[int, CoordinatorRecord | tuple[int, bool]]]:
        """The partition's records with their offsets; a transaction marker as (producer id, commit)."""
        for buf, header, start in read_batches(partition):
            if header.is_control:
                control = control_type_of(buf, header.position)
                if control is not None:
                    yield header.base_offset, (header.producer_id, control == ControlRecordType.COMMIT)
                continue
            producer_id = header.producer_id if header.is_transactional else -1
            for record in decode_batch(buf, header.position)[1]:
                if record.offset >= start and record.key is not None:
                    yield record.offset, CoordinatorRecord(index, record.key, record.value, producer_id,
                                                           header.producer_epoch)

    # serving
    async def known(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until this broker knows __consumer_offsets and has loaded the partitions of
        it that it leads. In a cluster, FindCoordinator at another broker names this one as soon as that broker
        has the new topic, and this one may apply it a moment later: a group request arriving meanwhile would be
        refused with NOT_COORDINATOR, which librdkafka's admin client hands to its caller instead of retrying.
        Requests of one connection that arrive after the topic did may run before one that waited here.
        A request arriving while a partition newly led here waits to be loaded (a turn of the loop) waits for
        the load too: it would hear COORDINATOR_LOAD_IN_PROGRESS, which librdkafka's admin client hands to its
        caller as well."""
        # subscribed after follow_leadership: the coordinator exists once a change has made it; its loads run
        # within a turn of the loop
        if self.coordinator is not None or await changed_until(
                self.broker.controller.on_change, lambda _image: self.coordinator is not None, timeout_s):
            await self._loads.settled()

    def waits(self) -> bool:
        """Whether a group request must first wait (`known`): no coordinator yet, or loads begun not run."""
        return self.coordinator is None or self._loads.pending()

    def ready(self) -> GroupCoordinator:
        """The coordinator, or NOT_COORDINATOR while this broker knows no __consumer_offsets: it coordinates no
        group (Kafka's CoordinatorRuntime, active from start-up, answers so for a partition it does not host).
        A broker of a cluster can be named by FindCoordinator at another one before it has applied the new topic
        (its requests wait for it first: `known`); one still without it answers NOT_COORDINATOR, on which a client
        rediscovers the coordinator, where kafkajs gives up on COORDINATOR_NOT_AVAILABLE after a JoinGroup."""
        if self.coordinator is None:
            raise KafkaError(ErrorCode.not_coordinator)
        return self.coordinator

    def apply(self, result: Result) -> Any:
        """Append the result's records, replay them, run its after-write actions; its response.

        State changes only by replaying what was written: a batch whose append
        fails replays nothing (and later ones are not written). The actions then
        run with the error, which is raised as KafkaError. The actions release
        JoinGroup and SyncGroup responses, which Kafka 4 completes once the
        records are committed: while the HW is short of what was written, they
        run when it passes it (`_after_commit`), or with the error if it does not
        within offsets.commit.timeout.ms or the leadership goes. On RF=1 the HW
        passes at the append and they run at once.
        """
        error, ends = self._write(result)
        self._run_after_write(result, error, ends)
        if error != ErrorCode.none:
            raise KafkaError(error)
        return result.response

    async def apply_committed(self, result: Result, group_id: str) -> Any:
        """`apply`, answering once the HW passes the records written (Kafka 4 completes a write operation so:
        ConsumerGroupHeartbeat, the classic Heartbeat, LeaveGroup, OffsetDelete, DeleteGroups). An operation
        that wrote nothing to `group_id`'s partition answers once the HW passes what is written there already
        (Kafka's highest pending offset), at once if it has; so does one whose records the HW has passed
        (RF=1). KafkaError with the client's error if the HW does not get there: COORDINATOR_NOT_AVAILABLE
        after offsets.commit.timeout.ms, NOT_COORDINATOR if the leadership goes."""
        return await self.write_committed(result, group_id)

    def write_committed(self, result: Result, group_id: str) -> Awaitable[Any]:
        """`apply_committed` whose records are appended now, before the caller's first await (several writes
        of one request, in order); the awaitable answers as `apply_committed` does. KafkaError at once if
        there is no coordinator."""
        error, ends = self._write(result)
        if error == ErrorCode.none:
            self._add_pending(ends, group_id)
        waiting = self._run_after_write(result, error, ends)
        return self._answer(result, error, waiting)

    def _add_pending(self, ends: dict[int, int], group_id: str) -> None:
        """An operation that wrote nothing to its group's partition waits for what is written there already:
        it may have read state whose records the ISR does not have yet."""
        index = self.ready().partition_for(group_id)
        partition = self.broker.replicas.partitions.get((CONSUMER_OFFSETS, index))
        if index not in ends and partition is not None:
            ends[index] = partition.log_end_offset

    async def _answer(self, result: Result, error: ErrorCode, waiting: dict[int, int]) -> Any:
        if waiting:
            error = await self._committed(waiting)
        if error != ErrorCode.none:
            raise KafkaError(error)
        return result.response

    def _run_after_write(self, result: Result, error: ErrorCode, ends: dict[int, int]) -> dict[int, int]:
        """Run the result's after-write actions now, or once the HW passes what it wrote (a task of their own,
        whoever awaits the response); what the HW has not passed yet."""
        waiting = self._uncommitted(ends) if error == ErrorCode.none else {}
        if waiting and result.after_write:
            task = asyncio.ensure_future(self._after_commit(waiting, result.after_write))
            self._deferred.add(task)
            task.add_done_callback(self._deferred.discard)
        else:
            for action in result.after_write:
                action(error)
        return waiting

    def _write(self, result: Result) -> tuple[ErrorCode, dict[int, int]]:
        """Append and replay the result's records: the client's error (NONE) and, by partition, the offset
        just past what was written there."""
        coordinator = self.ready()
        ends: dict[int, int] = {}
        for index, records in _by_partition(result.records).items():
            try:
                ends[index] = self._append(coordinator, index, records)
            except (KafkaError, OSError) as exc:
                log.warning("append to %s-%d failed: %r", CONSUMER_OFFSETS, index, exc)
                return _client_error(append_error(exc), result.offset_commit), ends
        return ErrorCode.none, ends

    def _uncommitted(self, ends: dict[int, int]) -> dict[int, int]:
        """Those of `ends` the partition's HW has not reached yet."""
        partitions = self.broker.replicas.partitions
        return {index: end for index, end in ends.items()
                if (partition := partitions.get((CONSUMER_OFFSETS, index))) is not None
                and partition.high_watermark < end}

    async def _committed(self, ends: dict[int, int]) -> ErrorCode:
        """Wait until each partition's HW reaches its end offset; NONE, or the client's error: the HW did not
        within offsets.commit.timeout.ms (REQUEST_TIMED_OUT: COORDINATOR_NOT_AVAILABLE) or the leadership went
        (NOT_COORDINATOR). The records are appended with acks=1 as Kafka's coordinator does: an ISR below
        min.insync.replicas once the HW has passed them is no error."""
        timeout_s = self.broker.config.offsets_commit_timeout_ms / 1000
        for index, end in ends.items():
            partition = self.broker.replicas.partitions.get((CONSUMER_OFFSETS, index))
            if partition is None:
                return ErrorCode.not_coordinator
            error = await partition.wait_for_replication(end, timeout_s)
            if error not in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):
                return _client_error(error, offset_commit=False)
            if self.coordinator is not None:
                self._advance(self.coordinator, index)
        return ErrorCode.none

    async def _after_commit(self, ends: dict[int, int], actions: list[Callable[[ErrorCode], None]]) -> None:
        error = await self._committed(ends)
        for action in actions:
            try:
                action(error)
            except Exception:
                log.exception("group coordinator after-write action failed")

    def _append(self, coordinator: GroupCoordinator, index: int, records: list[CoordinatorRecord]) -> int:
        """One batch per producer (transactional commits go in that producer's batch), each replayed with
        its offsets once appended; the offset past the last."""
        batches: dict[tuple[int, int], list[CoordinatorRecord]] = {}
        for record in records:
            batches.setdefault((record.producer_id, record.producer_epoch), []).append(record)
        partition = self.broker.replicas.get(CONSUMER_OFFSETS, index)
        end = 0
        for (producer_id, epoch), batch in batches.items():
            data = build_batch([NewRecord(record.key, record.value) for record in batch], producer_id=producer_id,
                               producer_epoch=epoch, transactional=producer_id >= 0)
            first = partition.append(data).first_offset
            end = first + len(batch)
            # the HW as the append left it (RF=1: past the batch already, which then replays as committed)
            coordinator.advance(index, partition.high_watermark)
            for delta, record in enumerate(batch):
                coordinator.replay(record, first + delta)
        return end

    def replay_marker(self, index: int, producer_id: int, commit: bool, offset: int) -> None:
        """A transaction marker appended to __consumer_offsets-`index` at `offset` (by the transaction
        coordinator's WriteTxnMarkers): the producer's pending offsets there become the groups', or go."""
        coordinator = self.coordinator
        if coordinator is None:
            return
        coordinator.replay_marker(index, producer_id, commit, offset)
        self._advance(coordinator, index)

    def committed(self, group_id: str) -> GroupCoordinator:
        """The coordinator, for a read at the high watermark of the group's partition as it is now."""
        coordinator = self.ready()
        self._advance(coordinator, coordinator.partition_for(group_id))
        return coordinator

    def committed_all(self) -> GroupCoordinator | None:
        """The coordinator (None before __consumer_offsets exists), for a read at the high watermark of every
        partition it serves (ListGroups)."""
        coordinator = self.coordinator
        if coordinator is not None:
            for index in coordinator.owned:
                self._advance(coordinator, index)
        return coordinator

    def _advance(self, coordinator: GroupCoordinator, index: int) -> None:
        partition = self.broker.replicas.partitions.get((CONSUMER_OFFSETS, index))
        if partition is not None:
            coordinator.advance(index, partition.high_watermark)

    async def written_replicated(self, group_id: str) -> ErrorCode:
        """Wait until the HW of the group's partition passes what is written there now (a require_stable
        OffsetFetch, which Kafka 4 runs as a write without records); NONE, or NOT_COORDINATOR if it does not
        within offsets.commit.timeout.ms or the leadership goes (Kafka's answer to a fetch that failed so)."""
        coordinator = self.ready()
        index = coordinator.partition_for(group_id)
        partition = self.broker.replicas.partitions.get((CONSUMER_OFFSETS, index))
        if partition is None:
            return ErrorCode.not_coordinator
        error = await partition.wait_for_replication(partition.log_end_offset,
                                                     self.broker.config.offsets_commit_timeout_ms / 1000)
        if error not in (ErrorCode.none, ErrorCode.not_enough_replicas_after_append):  # the latter: the HW passed
            return ErrorCode.not_coordinator
        self._advance(coordinator, index)
        return ErrorCode.none

    async def replicated(self, group_id: str) -> ErrorCode:
        """Wait until what was written for the group is on the ISR of its partition (Kafka writes with acks=-1).

        Waits at most offsets.commit.timeout.ms; the error a client should see, or NONE.
        """
        coordinator = self.coordinator
        if coordinator is None:
            return ErrorCode.none
        partition = self.broker.replicas.partitions.get((CONSUMER_OFFSETS, coordinator.partition_for(group_id)))
        if partition is None:
            return ErrorCode.not_coordinator
        error = await partition.wait_for_replication(partition.log_end_offset,
                                                     self.broker.config.offsets_commit_timeout_ms / 1000)
        self._advance(coordinator, coordinator.partition_for(group_id))
        return error if error == ErrorCode.none else _client_error(error, offset_commit=True)

    async def _run_timers(self) -> None:
        await run_timers(self.timer, self._wake, self._fire_timers)

    def _fire_timers(self) -> None:
        if self.coordinator is None:
            return
        for result in self.coordinator.poll_timers():
            try:
                self.apply(result)
            except KafkaError:
                pass  # logged by apply; the state machine has run the failure actions
            except Exception:
                log.exception("group coordinator timer failed")


def _by_partition(records: list[CoordinatorRecord]) -> dict[int, list[CoordinatorRecord]]:
    grouped: dict[int, list[CoordinatorRecord]] = {}
    for record in records:
        grouped.setdefault(record.partition, []).append(record)
    return grouped


def _client_error(code: ErrorCode, offset_commit: bool) -> ErrorCode:
    if code in _TOO_LARGE:
        return ErrorCode.invalid_commit_offset_size if offset_commit else ErrorCode.unknown_server_error
    return _APPEND_ERRORS.get(code, ErrorCode.unknown_server_error)
