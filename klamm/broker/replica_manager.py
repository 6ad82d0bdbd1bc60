"""The partitions this broker hosts, kept in step with the metadata image.

When the controller publishes a new image, `apply_image` creates logs for new
partitions of this node and removes those of deleted topics, and makes this
broker the leader or a follower of each as the image says (Kafka's
ReplicaManager.applyDelta): a new leader epoch starts a LeaderState; a follower
is handed to the replica fetcher of its leader (`followers_changed`); an ISR
committed in the same epoch reaches the LeaderState. The leader's ISR
proposals go to the controller through `send_isr_proposal` (AlterPartition).

A new topic made ahead of its image (`logs_made_for`, for topics of several
partitions) is hosted after the image, a slice per turn of the loop, before
logs_made_for ends: a topic of 1,000 partitions held the loop for 3-5 ms in
apply_image. Meanwhile a partition of it answers NOT_LEADER_OR_FOLLOWER (`get`),
as Kafka's does while its replica manager has not applied what its metadata
cache serves; a later image first hosts what is left as the earlier one had it.

A removed partition leaves `partitions` at once, and is torn down (its waiters
answered, its log detached and its directory renamed) a slice per turn of the
loop: a deleted topic of 1,000 partitions held the loop for about 20 ms in one
callback. A name recreated meanwhile finishes its old partition's teardown
before its log is looked up or made, so a new topic never finds the old log.
The log's files are removed after `file.delete.delay.ms` by the broker's
DelayedDeletes (klamm.broker.log_tasks), off the event loop; responses already
holding its file regions still send them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

from klamm.broker.log_flush import LogFlusher
from klamm.broker.replica_moves import ReplicaMoves
from klamm.broker.partition import Partition, log_config
from klamm.broker.replication import IsrProposal
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.controller.image import TOPIC_RESOURCE, MetadataImage, PartitionImage, TopicImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import CONSUMER_OFFSETS, METADATA_TOPIC, TRANSACTION_STATE, is_internal
from klamm.steps import Steps, each_value, in_slices, run_steps
from klamm.storage.log import Log, LogConfig
from klamm.storage.log_manager import LogManager

log = logging.getLogger("klamm.replicas")

# Fewer new logs than this are left to apply_image, on the loop (about 0.3 ms each): a creation that waits for
# another thread costs a turn of the loop, and lets a later request of the connection run before its commit.
MADE_ASIDE_AT_LEAST = 4
# How long one turn of the loop tears removed partitions down (about 20 us each), or makes new ones ahead of
# their image, or checks ISRs, before it lets other callbacks run
SLICE_S = 0.0005
# The periodic ISR check's partitions a step (about 2 us each)
PARTITIONS_A_STEP = 32


class ReplicaManager:
    def __init__(self, node_id: int, config: BrokerConfig, logs: LogManager,
                 schedule_delete: Callable[[Callable[[], None], int], None] | None = None) -> None:
        self.node_id = node_id
        # (remove, delay_ms): the broker's DelayedDeletes.schedule; without one, removal is immediate
        self._schedule_delete = schedule_delete or (lambda remove, _delay_ms: remove())
        self.config = config
        self.logs = logs
        self.partitions: dict[tuple[str, int], Partition] = {}
        # removed from `partitions`, not yet torn down (in the order removed)
        self._leaving: dict[tuple[str, int], Partition] = {}
        # made by logs_made_for before the records giving them are committed; taken by apply_image
        self._prepared: dict[tuple[str, int], Partition] = {}
        # While logs_made_for's records are applied, apply_image leaves the partitions of a new topic made ahead
        # there (`_made_ahead_topics`) to `_adopt`, which hosts them a slice per turn of the loop before
        # logs_made_for ends: the topic, what is left of its partitions, and whether a follower among those
        # taken changed what the replica fetchers see.
        self._made_ahead_topics: set[str] = set()
        self._deferred: deque[tuple[TopicImage, Iterator[tuple[int, PartitionImage]]]] = deque()
        self._deferred_fetching = False
        self._topic_configs: dict[str, TopicConfig] = {}
        # The image's topics as last applied (None: walk all of the next image) and its fenced or
        # shutting-down brokers: what `apply_image` compares the next image with.
        self._applied: Mapping[str, TopicImage] | None = None
        self._cluster_topics: Mapping[str, TopicImage] = {}  # the latest image's topics, hosted here or not
        self._ineligible: set[int] = set()
        self.flusher = LogFlusher(lambda: [partition.log for partition in self.partitions.values()])
        # AlterReplicaLogDirs: replicas moving to another log dir
        self.moves = ReplicaMoves(logs, self.flusher, lambda topic, index: self.partitions.get((topic, index)),
                                  self._schedule_delete)
        # Set by the broker: the image clients are served (it can be ahead of the one applied here while the logs
        # of new partitions are made), AlterPartition for a leader's proposal, and the replica fetchers' update.
        self.served_image: Callable[[], MetadataImage] | None = None
        self.send_isr_proposal: Callable[[Partition, IsrProposal], None] | None = None
        self.followers_changed: Callable[[dict[tuple[str, int], Partition]], None] | None = None
        # Set by the broker: where logs_made_for makes new logs (None: apply_image makes them all)
        self.log_creator: Executor | None = None

    def topic_config(self, topic: str, overrides: dict[str, str] | None = None) -> TopicConfig:
        """The topic's effective config; re-resolved only when its overrides change."""
        cached = self._topic_configs.get(topic)
        if cached is not None and (overrides is None or dict(cached.overrides) == overrides):
            return cached
        config = TopicConfig.resolve(self.config, overrides or {})
        self._topic_configs[topic] = config
        return config

    def reconfigure(self, config: BrokerConfig) -> None:
        """New broker defaults (dynamic broker configs): every topic config is re-resolved at the next apply_image."""
        self.config = config
        self._topic_configs.clear()
        self._applied = None

    def get(self, topic: str, index: int) -> Partition:
        """The hosted partition, or Kafka's error for it (ReplicaManager.getPartitionOrError): a partition of
        the cluster this broker holds no replica of is NOT_LEADER_OR_FOLLOWER, which sends the client back to
        its metadata; one the cluster lacks is UNKNOWN_TOPIC_OR_PARTITION."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            topics = self._cluster_topics if self.served_image is None else self.served_image().topics_by_name
            image = topics.get(topic)
            exists = image is not None and index in image.partitions
            raise KafkaError(ErrorCode.not_leader_or_follower if exists else ErrorCode.unknown_topic_or_partition)
        return partition

    def apply_image(self, image: MetadataImage) -> None:
        """Host exactly the partitions the image assigns to this node, as leader or follower.

        Only what changed since the last image is applied (Kafka's applyDelta): images share every topic a
        change did not touch (klamm.controller.image.ImageBuilder), so a topic image that is the same object
        as last time needs nothing. A change in which brokers are fenced or shutting down, new broker
        defaults (`reconfigure`), or an image that failed part-way, walks every partition again."""
        self._adopt_slice(everything=True)  # new topics an earlier image left: hosted as that image had them
        ineligible = {b.node_id for b in image.brokers.values() if b.fenced or b.in_controlled_shutdown}
        previous, self._applied = self._applied, None  # an error part-way leaves the next image a full walk
        topics = self._cluster_topics = image.topics_by_name
        full = previous is None or ineligible != self._ineligible
        changed, removed = (list(topics.values()), []) if full else _changes(previous, image)
        fetching_changed = full
        wanted: set[tuple[str, int]] = set()
        for topic in changed:
            if not full and topic.name in self._made_ahead_topics and topic.name not in previous \
                    and not is_internal(topic.name):  # coordinators load theirs as their listeners see the image
                self._deferred.append((topic, iter(topic.partitions.items())))  # taken by `_adopt`, in slices
                continue
            fetching_changed |= self._apply_partitions(topic, iter(topic.partitions.items()), ineligible, wanted,
                                                       watch_fetching=not fetching_changed)[0]
        if full:
            stale = [key for key in self.partitions if key not in wanted]
        else:  # hosted partitions are those the last image gave this node: look only in the topics that changed
            before = [previous[t.name] for t in changed if t.name in previous]
            before += [previous[name] for name in removed]
            stale = [key for topic in before for key in ((topic.name, index) for index in topic.partitions)
                     if key in self.partitions and key not in wanted]
        for key in stale:
            self._remove(self.partitions[key])
        self._applied, self._ineligible = topics, ineligible
        if (fetching_changed or stale) and self.followers_changed is not None:
            self.followers_changed(self.followers())

    def _apply_partitions(self, topic: TopicImage, items: Iterator[tuple[int, PartitionImage]], ineligible: set[int],
                          wanted: set[tuple[str, int]] | None = None, stop: float | None = None,
                          watch_fetching: bool = True) -> tuple[bool, bool]:
        """Host the partitions of `topic` that `items` yields (all of them, or until perf_counter() passes `stop`)
        as the image has them; whether what the replica fetchers see changed (looked at if `watch_fetching`), and
        whether `items` is done. `wanted` collects their keys."""
        config = self.topic_config(topic.name, dict(topic.configs))
        storage = None  # the topic's LogConfig, made once for all its partitions that need it
        fetching_changed = not watch_fetching  # not watching: as if seen to change, so never looked at
        for index, meta in items:
            if self.node_id in meta.replicas:
                key = (topic.name, index)
                if wanted is not None:
                    wanted.add(key)
                partition = self.partitions.get(key)
                if partition is not None or not self._take_made_ahead(key, meta, topic.topic_id, config, ineligible):
                    fetching = _fetching(partition)
                    if partition is None or not _same_id(partition.topic_id, topic.topic_id):
                        if partition is not None:
                            self._remove(partition)
                        storage = storage or _log_config(topic.name, config)
                        partition = self._create(topic.name, index, topic.topic_id, config, storage)
                    reconfigured = partition.config is not config
                    if reconfigured:
                        storage = storage or _log_config(topic.name, config)
                        partition.config = config
                        partition.log.config = storage
                    self._apply_role(partition, meta, ineligible, reconfigured)
                    if not fetching_changed and _fetching(partition) != fetching:
                        fetching_changed = True
            if stop is not None and time.perf_counter() >= stop:
                return fetching_changed and watch_fetching, False
        return fetching_changed and watch_fetching, True

    def _adopt_slice(self, everything: bool = False) -> bool:
        """Host the partitions of the new topics apply_image left to `_adopt` (`_deferred`) for SLICE_S, or all
        of them; whether some are left. The replica fetchers hear of the followers among them once all are."""
        if not self._deferred:
            return False
        stop = None if everything else time.perf_counter() + SLICE_S
        while self._deferred:
            topic, items = self._deferred[0]
            fetching_changed, done = self._apply_partitions(topic, items, self._ineligible, stop=stop)
            self._deferred_fetching |= fetching_changed
            if not done:
                return True
            self._deferred.popleft()
        if self._deferred_fetching and self.followers_changed is not None:
            self.followers_changed(self.followers())
        self._deferred_fetching = False
        return False

    async def _adopt(self) -> None:
        """The new topics apply_image left, hosted a slice per turn of the loop."""
        while self._adopt_slice():
            await asyncio.sleep(0)

    @asynccontextmanager
    async def logs_made_for(self, records: Sequence[MetadataRecord], image: MetadataImage) -> AsyncIterator[None]:
        """Around applying `records` on top of `image`: first the logs they give this node are made in the
        log-creation thread while the loop goes on, so that apply_image finds them; after, those of them no
        partition took (the records were not committed after all) are removed. The partitions of those logs are
        made too, a slice per turn of the loop, leaders of the epoch the records give them, so that applying
        the image only takes them. Used around a controller's commit of new topics or partitions, and around a
        broker applying what it fetched of the metadata log."""
        names = _names(records, image)
        # In slices: a few microseconds a partition (7-15 ms of the loop in one callback at 2,000 partitions here).
        wanted = await in_slices(self._new_logs(records, image, names), SLICE_S) \
            if self.log_creator is not None else []
        if len(wanted) < MADE_ASIDE_AT_LEAST:
            yield
            return
        started = time.monotonic()
        await asyncio.sleep(0)  # the loop's turn between finding the new logs and queueing them
        made = {(topic, index) for topic, index, _ in wanted}
        cleanup = self._drop_unused(made, wanted)  # in slices once the records are applied, what is left after
        try:
            ids = {name: topic_id for topic_id, name in names.items()}
            await self.logs.create_logs(wanted, self.log_creator, ids)
        except RuntimeError as exc:  # the thread is gone (the broker stopping): apply_image makes them
            log.debug("new logs left to apply_image: %s", exc)
        else:
            log.info("made the logs of %d new partitions beside the event loop in %.0f ms", len(wanted),
                     (time.monotonic() - started) * 1000)
        topics = {topic for topic, _, _ in wanted}
        try:
            await self._prepare_partitions(records, names, made)
            self._made_ahead_topics |= topics
            try:
                yield
            finally:
                self._made_ahead_topics -= topics  # left to `_adopt` only while these records are applied
            await self._adopt()
            await in_slices(cleanup, SLICE_S)
        finally:
            self._adopt_slice(everything=True)  # an error or a cancellation part-way: what is left, now
            run_steps(cleanup)

    def _drop_unused(self, made: set[tuple[str, int]], wanted: Sequence[tuple[str, int, LogConfig]]) -> Steps[None]:
        """After logs_made_for: the partitions made ahead that no image took, and the logs `wanted` that no
        partition took (the records were not committed after all), PARTITIONS_A_STEP a step."""
        for n, key in enumerate(made, 1):
            unused = self._prepared.pop(key, None)
            if unused is not None:  # not taken: its log goes below
                self.flusher.forget(unused.log)
            if n % PARTITIONS_A_STEP == 0:
                yield
        for n, (topic, index, _) in enumerate(wanted, 1):  # empty and never read: removed at once
            self._settle((topic, index))
            if (topic, index) not in self.partitions and (detached := self.logs.delete_log(topic, index)):
                self._schedule_delete(detached.delete, 0)
            if n % PARTITIONS_A_STEP == 0:
                yield

    async def _prepare_partitions(self, records: Sequence[MetadataRecord], names: Mapping[uuid.UUID, str],
                                  made: set[tuple[str, int]]) -> None:
        """The partitions of the logs just `made` for `records`, for apply_image to take (`_create`): the
        image's apply then costs the loop a few microseconds a partition, where making one and starting its
        leadership cost about ten. SLICE_S a turn of the loop."""
        stop = time.perf_counter() + SLICE_S
        for record in records:
            data = record.data
            if record.type != "PartitionRecord":
                continue
            name = names.get(data["topic_id"])
            key = (name, data["partition_id"])
            log_ = self.logs.get_log(*key) if name is not None and key in made else None
            if log_ is None or key in self.partitions:
                continue
            partition = self._partition(key[0], key[1], data["topic_id"], log_, self.topic_config(key[0]))
            if data["leader"] == self.node_id:
                partition.become_leader(data["leader_epoch"], node_id=self.node_id,
                                        partition_epoch=data["partition_epoch"], replicas=data["replicas"],
                                        isr=data["isr"], lag_max_ms=self.config.replica_lag_time_max_ms)
            self._prepared[key] = partition
            if time.perf_counter() >= stop:
                await asyncio.sleep(0)
                stop = time.perf_counter() + SLICE_S

    def _new_logs(self, records: Sequence[MetadataRecord], image: MetadataImage,
                  names: Mapping[uuid.UUID, str]) -> Steps[list[tuple[str, int, LogConfig]]]:
        """(topic, partition, log config) of each partition `records` give this node that has no log here
        (`names`: the topics' names, `_names`), PARTITIONS_A_STEP records a step."""
        overrides: dict[str, dict[str, str]] = {}
        for record in records:
            data = record.data
            if record.type == "ConfigRecord" and data["resource_type"] == TOPIC_RESOURCE and \
                    data.get("value") is not None:
                overrides.setdefault(data["resource_name"], {})[data["name"]] = data["value"]
        wanted: list[tuple[str, int, LogConfig]] = []
        configs: dict[str, LogConfig] = {}
        for n, record in enumerate(records, 1):
            if n % PARTITIONS_A_STEP == 0:
                yield
            data = record.data
            if record.type != "PartitionRecord" or self.node_id not in data.get("replicas", ()):
                continue
            name = names.get(data["topic_id"])
            if name is None:
                continue
            self._settle((name, data["partition_id"]))
            if self.logs.get_log(name, data["partition_id"]) is not None:
                continue
            if name not in configs:  # resolved as apply_image resolves it, which then finds it resolved
                topic = image.topics_by_id.get(data["topic_id"])
                given = {**(topic.configs if topic is not None else {}), **overrides.get(name, {})}
                configs[name] = _log_config(name, self.topic_config(name, given))
            wanted.append((name, data["partition_id"], configs[name]))
        return wanted

    def _take_made_ahead(self, key: tuple[str, int], meta: PartitionImage, topic_id: uuid.UUID, config: TopicConfig,
                         ineligible: set[int]) -> bool:
        """Host the partition made ahead for these very records (logs_made_for) as it is, when it is all that
        `_create` and `_apply_role` would make of it: its topic id, config and log the image's, leader of the
        image's epochs (a third of apply_image's time for a new topic goes, BENCHMARKS.md)."""
        made = self._prepared.get(key)
        if made is None or made.config is not config or made.leader is None or meta.leader != self.node_id \
                or made.leader_epoch != meta.leader_epoch or made.leader.partition_epoch != meta.partition_epoch \
                or made.leader.fenced_or_shutting_down != ineligible or not _same_id(made.topic_id, topic_id) \
                or not _same_id(made.log.topic_id, topic_id) or key in self._leaving \
                or made.log is not self.logs.get_log(*key):
            return False
        del self._prepared[key]
        self.partitions[key] = made
        return True

    def _apply_role(self, partition: Partition, meta: PartitionImage, ineligible: set[int],
                    reconfigured: bool = False) -> None:
        """`reconfigured`: the topic's config changed (min.insync.replicas: acks=all appends waiting are looked
        at again)."""
        if meta.leader == self.node_id:
            if partition.leader is None or partition.leader_epoch != meta.leader_epoch:
                partition.become_leader(meta.leader_epoch, node_id=self.node_id,
                                        partition_epoch=meta.partition_epoch, replicas=meta.replicas, isr=meta.isr,
                                        lag_max_ms=self.config.replica_lag_time_max_ms)
            elif not reconfigured and partition.leader.partition_epoch == meta.partition_epoch and \
                    partition.leader.fenced_or_shutting_down == ineligible:
                return  # the image changed nothing of it (one made ahead for these very records, logs_made_for)
            partition.on_partition_change(meta.partition_epoch, meta.replicas, meta.isr, ineligible)
        elif partition.leader is not None or partition.leader_id != meta.leader or \
                partition.leader_epoch != meta.leader_epoch:
            partition.become_follower(meta.leader, meta.leader_epoch, meta.replicas, meta.isr)
        else:
            partition.replicas, partition.isr = list(meta.replicas), list(meta.isr)

    def followers(self) -> dict[tuple[str, int], Partition]:
        """The partitions this broker follows (with a live leader to fetch from)."""
        return {key: p for key, p in self.partitions.items() if p.leader is None and p.leader_id is not None
                and p.leader_id >= 0}

    async def check_isr(self) -> None:
        """Kafka's isr-expiration task: every led partition proposes a shrink if its followers lag. SLICE_S a
        turn of the loop: a broker hosting thousands of partitions would otherwise hold the loop for
        milliseconds. A partition removed since the pass began is left out, one replaced is checked as it is."""
        await in_slices(each_value(self.partitions, PARTITIONS_A_STEP, Partition.check_isr), SLICE_S)

    async def check_isr_periodically(self) -> None:
        interval = self.config.replica_lag_time_max_ms / 2 / 1000
        while True:
            await asyncio.sleep(interval)
            await self.check_isr()

    def _create(self, topic: str, index: int, topic_id: uuid.UUID, config: TopicConfig,
                storage: LogConfig) -> Partition:
        self._settle((topic, index))
        existing = self._log_of(topic, index, topic_id)
        prepared = self._prepared.pop((topic, index), None)
        if prepared is not None and _same_id(prepared.topic_id, topic_id) and prepared.log is existing:
            partition = prepared
        else:
            if prepared is not None:
                self.flusher.forget(prepared.log)
            log_ = existing if existing is not None else self.logs.create_log(topic, index, storage)
            partition = self._partition(topic, index, topic_id, log_, config)
        partition.log.config = storage
        if not _same_id(partition.log.topic_id, topic_id):  # a log from before partition.metadata, or made now
            partition.log.record_topic_id(topic_id)
        self.partitions[(topic, index)] = partition
        return partition

    def _log_of(self, topic: str, index: int, topic_id: uuid.UUID) -> Log | None:
        """The log there is under the partition's name, unless its partition.metadata names another topic: that
        one is a deleted topic's whose deletion never reached the disk (a crash before its directory's rename,
        or this broker down meanwhile), and is set aside now as Kafka sets a stray log aside: renamed to
        `<name>.<uuid>-stray` and kept for the operator, never loaded nor deleted. Only a log found at
        startup can be one: a log made since under another id was made ahead (logs_made_for) for a decision that
        another commit of the name overtook (two CreateTopics of one topic at once); empty and never served, it
        is the committed topic's."""
        existing = self.logs.get_log(topic, index)
        if existing is None or existing.topic_id is None or _same_id(existing.topic_id, topic_id) or \
                not self.logs.found_at_start(topic, index):
            return existing
        aside = self.logs.set_aside(topic, index)
        log.warning("the log of %s-%d belongs to topic id %s, not to the topic's %s: a deleted topic's (a stray), "
                    "set aside as %s", topic, index, existing.topic_id, topic_id, aside)
        return None

    def set_aside_strays(self) -> list[Path]:
        """Once the image is caught up at startup: set aside each log found at startup whose partition the image
        does not give this node (Kafka's stray replicas: its topic deleted, or made again under a new id, or the
        partition moved to other brokers, while this one was down or before a crash made the deletion durable);
        where they went. A log the image does give this node is left, hosted or not."""
        aside: list[Path] = []
        for log_ in self.logs.all_logs():
            key = (log_.topic, log_.partition)
            if key in self.partitions or key in self._leaving or log_.topic == METADATA_TOPIC or \
                    not self.logs.found_at_start(*key):
                continue
            topic = self._cluster_topics.get(log_.topic)
            meta = topic.partitions.get(log_.partition) if topic is not None else None
            if meta is not None and self.node_id in meta.replicas and \
                    (log_.topic_id is None or _same_id(log_.topic_id, topic.topic_id)):
                continue
            where = self.logs.set_aside(*key)
            if where is not None:
                log.warning("the log of %s-%d (topic id %s) is no replica the metadata gives this broker: a stray, "
                            "set aside as %s", key[0], key[1], log_.topic_id, where)
                aside.append(where)
        return aside

    def _partition(self, topic: str, index: int, topic_id: uuid.UUID, log_: Log, config: TopicConfig) -> Partition:
        # The group coordinator appends synchronously and answers some writes without awaiting the HW: its
        # fsyncs run inline. The transaction coordinator's answers and markers wait for the HW, which under
        # flush.messages=1 waits for the flusher (klamm.broker.partition).
        partition = Partition(topic, index, topic_id, log_, config, flusher=self.flusher,
                              flush_inline=topic == CONSUMER_OFFSETS)
        partition.on_isr_proposal = self._propose
        return partition

    def _propose(self, partition: Partition, proposal: IsrProposal) -> None:
        if self.send_isr_proposal is not None:
            self.send_isr_proposal(partition, proposal)

    def _remove(self, partition: Partition) -> None:
        """Out of `partitions` now; torn down by `_tear_down_slice`, in this turn of the loop or a later one."""
        key = (partition.topic, partition.index)
        del self.partitions[key]
        self._topic_configs.pop(partition.topic, None)
        self._settle(key)  # removed, recreated and removed again before it was torn down: the older one first
        self._leaving[key] = partition
        if len(self._leaving) > 1:
            return  # a slice is scheduled already
        try:
            asyncio.get_running_loop().call_soon(self._tear_down_slice)
        except RuntimeError:  # no loop (start-up and tests): at once
            self._tear_down_slice(everything=True)

    def _tear_down_slice(self, everything: bool = False) -> None:
        """Tear leaving partitions down for SLICE_S, then go on in the next turn of the loop."""
        stop = time.perf_counter() + SLICE_S
        while self._leaving:
            key = next(iter(self._leaving))
            self._tear_down(self._leaving.pop(key), submit=False)
            if not everything and self._leaving and time.perf_counter() >= stop:
                asyncio.get_running_loop().call_soon(self._tear_down_slice)
                return
        # the log dirs' checkpoints without them, and their renames, in one write (its snapshot is O(logs): a
        # callback of its own)
        if everything:
            self.logs.submit_deletions()
        else:
            asyncio.get_running_loop().call_soon(self.logs.submit_deletions)

    def _settle(self, key: tuple[str, int]) -> None:
        """Tear down now the leaving partition of this name, if any: before its log is looked up or made."""
        partition = self._leaving.pop(key, None)
        if partition is not None:
            self._tear_down(partition)

    def _tear_down(self, partition: Partition, submit: bool = True) -> None:
        self.flusher.forget(partition.log)
        partition.become_follower(-1, partition.leader_epoch, (), ())  # waiting acks and long polls answer now
        detached = self.logs.delete_log(partition.topic, partition.index, submit)
        if detached is not None:
            self._schedule_delete(detached.delete, partition.config.file_delete_delay_ms)

    async def wait_for_append(self, partitions: Iterable[Partition], timeout: float) -> None:
        """Return after the next append to any of `partitions`, or after `timeout` seconds."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        watched = list(partitions)
        for partition in watched:
            partition.add_waiter(future)
        try:
            await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            for partition in watched:
                partition.remove_waiter(future)

    def shutdown(self) -> None:
        self._tear_down_slice(everything=True)  # a deleted topic must not come back with the next start
        self.moves.stop()
        self.logs.shutdown()


def _names(records: Sequence[MetadataRecord], image: MetadataImage) -> dict[uuid.UUID, str]:
    """The names of the topics `records` give partitions to (new ones named by their TopicRecord)."""
    names = {r.data["topic_id"]: r.data["name"] for r in records if r.type == "TopicRecord"}
    for record in records:
        if record.type == "PartitionRecord" and record.data["topic_id"] not in names:
            topic = image.topics_by_id.get(record.data["topic_id"])
            if topic is not None:
                names[topic.topic_id] = topic.name
    return names


def _changes(previous: Mapping[str, TopicImage], image: MetadataImage) -> tuple[list[TopicImage], list[str]]:
    """(the topics of `image` that are not the same objects as in `previous`, the names of those it no longer has).
    An image built on `previous` names the topics it touched; any other walks every topic."""
    topics = image.topics_by_name
    names = image.topics_changed(previous)
    if names is None:
        return [t for name, t in topics.items() if previous.get(name) is not t], list(previous.keys() - topics.keys())
    changed = [topics[name] for name in names if name in topics and previous.get(name) is not topics[name]]
    return changed, [name for name in names if name in previous and name not in topics]


def _same_id(one: uuid.UUID | None, other: uuid.UUID | None) -> bool:
    # Mostly the very object (the image's records gave both): `is` spares UUID.__eq__, a Python call.
    return one is other or one == other


def _fetching(partition: Partition | None) -> tuple[Partition, int] | None:
    """What the replica fetchers see of a partition: the leader it is fetched from, if it is a follower."""
    if partition is None or partition.leader is not None or partition.leader_id is None or partition.leader_id < 0:
        return None
    return partition, partition.leader_id


def _log_config(topic: str, config: TopicConfig) -> LogConfig:
    """A topic's log config; __transaction_state is fsynced on every write whatever the flush
    settings: a single node has no replica to hold a PrepareCommit that power loss would erase
    after its markers were written (README, "What an acknowledgement means")."""
    storage = log_config(config)
    return replace(storage, flush_messages=1) if topic == TRANSACTION_STATE else storage

