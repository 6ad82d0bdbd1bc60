"""The local controller: decides metadata records, appends them, replays them.

Every mutation runs the same three steps, as Kafka's QuorumController does:

1. decide: a pure function of the current image and the request returns the
   results and the records (topics.py, configs.py, brokers.py);
2. append: the records go to the metadata log as one batch (atomic);
3. replay: the appended records are decoded and applied to the image, the new
   image replaces the old one, and the change listeners run.

This is the single-node quorum. A replicated Raft quorum will replicate the
same log; only step 2 changes (append, replicate, wait for commit), and
followers run step 3 on what they fetch.

Replay applies the records decoded from the bytes that were appended, so a
restarted controller that loads the log arrives at exactly the same image.
Methods are synchronous and must be called from one thread (the event loop).

Snapshots (KIP-630, klamm/controller/snapshot.py): once
metadata.log.max.record.bytes.between.snapshots of records were committed since
the last snapshot, or metadata.log.max.snapshot.interval.ms passed with any
committed, the current image is written as a snapshot: in a worker thread when
an executor is given (the image is immutable, so the loop goes on committing),
one snapshot at a time. Start-up loads the newest valid snapshot that the log
reaches back to and replays only the records after it; an invalid one is
skipped in favour of an older one, or of the whole log. The snapshot's "last
contained log timestamp" is the time it was taken, at or after its last record.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from klamm.controller.acl_changes import AclCreateResult, AclDeleteResult, decide_create_acls, decide_delete_acls
from klamm.controller.acls import Acl, AclFilter
from klamm.controller.bootstrap import read_bootstrap
from klamm.controller.brokers import decide_register_broker
from klamm.controller.client_quotas import ClientQuotaAlteration, ClientQuotaResult, decide_alter_client_quotas
from klamm.controller.configs import (ConfigValidator, decide_alter_broker_configs, decide_alter_group_configs,
                                     decide_alter_topic_configs)
from klamm.controller.elections import ElectionOutcome, decide_elect_leaders
from klamm.controller.features import BOOTSTRAP_METADATA_VERSION, FeatureUpdate, decide_update_features
from klamm.controller.partition_changes import (NO_LEADER, UNCLEAN_KEY, decide_alter_partition, decide_balance_leaders,
                                                decide_controlled_shutdown, decide_reassignments,
                                                decide_fence_broker, decide_leaderless_elections,
                                                decide_unfence_broker, decide_unregister_broker)
from klamm.controller.image import (BrokerRegistration, Endpoint, ImageBuilder, MetadataImage, PartitionImage,
                                    empty_image)
from klamm.controller.meta_properties import random_base64_uuid
from klamm.controller.delegation_tokens import (TokenResult, TokenSettings, decide_create_token,
                                               decide_expire_token, decide_renew_token, decide_sweep_tokens)
from klamm.controller.metadata_log import MetadataLog, wall_clock_ms
from klamm.controller.records import MetadataRecord, MetadataRecordError, complete_record, decode_record, encode_record
from klamm.controller.scram import (ScramAlterResult, ScramDeletion, ScramUpsertion,
                                    decide_alter_user_scram_credentials)
from klamm.controller.snapshot import SnapshotError, SnapshotId, image_records
from klamm.controller.topics import (
    CreatePartitionsResult,
    CreatePartitionsSpec,
    CreateTopicSpec,
    DeleteTopicResult,
    TopicResult,
    decide_create_partitions,
    decide_create_topics,
    decide_delete_topics,
)
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import value_record

__all__ = [
    "METADATA_VERSION",
    "PRODUCER_ID_BLOCK_SIZE",
    "ChangeListener",
    "Controller",
    "changed_until",
    "MetadataLogError",
    "ScramAlterResult",
    "ScramDeletion",
    "ScramUpsertion",
    "SnapshotPolicy",
    "CreatePartitionsResult",
    "CreatePartitionsSpec",
    "CreateTopicSpec",
    "Decided",
    "DeleteTopicResult",
    "TopicResult",
]

log = logging.getLogger(__name__)

# The metadata.version feature level written at bootstrap: 3.9-IV0.
METADATA_VERSION = BOOTSTRAP_METADATA_VERSION
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE

ChangeListener = Callable[[MetadataImage, MetadataImage], None]


async def changed_until(on_change: Callable[[ChangeListener], Callable[[], None]],
                        condition: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
    """Wait, at most `timeout_s`, for a change of the image after which `condition(new image)` holds; whether
    one came. `on_change` is the image's subscription (Controller.on_change); listeners run in the order they
    subscribed, so those subscribed before this one have seen the change."""
    met = asyncio.Event()
    unsubscribe = on_change(lambda _old, new: met.set() if condition(new) else None)
    try:
        await asyncio.wait_for(met.wait(), timeout_s)
    except asyncio.TimeoutError:
        return False
    finally:
        unsubscribe()
    return True
SNAPSHOT_EPOCH = 0  # a single-node quorum stays in leader epoch 0


@dataclass
class Decided:
    """A decision made on `image` before its commit (a dry run while this node made the logs it gives it). The
    commit takes it as it is if the image is still that one, so that what was made for its records (new topics'
    ids, their partitions) is what is committed; otherwise the controller decides again."""

    image: MetadataImage
    results: list[Any]
    records: list[MetadataRecord]
    # the records encoded, and as decoding them gives them (complete_record), once `encode` ran
    values: list[bytes] = field(default_factory=list)
    completed: list[MetadataRecord] = field(default_factory=list)
    # `image` with the completed records applied, once `encode` ran: the commit only sets its offset and builds
    builder: ImageBuilder | None = None
    # each value as the record of a metadata batch (value_record), for the metadata log's append
    value_records: list[bytes] = field(default_factory=list)

    async def encode(self, slice_s: float) -> None:
        """Encode the records and apply them to an image builder ahead of the commit, `slice_s` of the loop's
        time a turn (a topic of many partitions: about 7 us a partition, which the commit then does not
        spend)."""
        builder = ImageBuilder(self.image)
        stop = time.perf_counter() + slice_s
        for delta, record in enumerate(self.records):
            value = encode_record(record)
            self.values.append(value)
            self.value_records.append(value_record(delta, value))
            completed = complete_record(record)
            self.completed.append(completed)
            builder.apply(completed)
            if time.perf_counter() >= stop:
                await asyncio.sleep(0)
                stop = time.perf_counter() + slice_s
        self.builder = builder

    def encoded(self) -> Encoded | None:
        if self.builder is None:
            return None
        return Encoded(self.values, self.completed, self.builder, b"".join(self.value_records))


@dataclass(frozen=True)
class Encoded:
    """Records made ready for a commit ahead of it (Decided.encode): their values for the metadata log, the
    records as decoding those gives them, and a builder holding them applied to the image they were decided
    on (None: the commit applies them), and the values' records in a batch, joined (None: the log encodes
    them)."""

    values: list[bytes]
    completed: Iterable[MetadataRecord]
    builder: ImageBuilder | None = None
    batch_body: bytes | None = None


class MetadataLogError(RuntimeError):
    """The metadata log cannot be loaded (it starts past every valid snapshot)."""


@dataclass(frozen=True)
class SnapshotPolicy:
    """When to snapshot and what to keep; Kafka's defaults."""

    max_bytes_between: int = 20 * 1024 * 1024  # metadata.log.max.record.bytes.between.snapshots
    max_interval_ms: int = 3_600_000  # metadata.log.max.snapshot.interval.ms; 0: no time trigger
    retention_bytes: int = 100 * 1024 * 1024  # metadata.max.retention.bytes; -1: unlimited
    retention_ms: int = 7 * 24 * 3_600_000  # metadata.max.retention.ms; -1: unlimited


class Controller:
    def __init__(self, log: MetadataLog, node_id: int, cluster_id: str | None = None, *,
                 snapshots: SnapshotPolicy | None = None, executor: Executor | None = None,
                 time_ms: Callable[[], int] = wall_clock_ms, unclean_leader_election: bool = False) -> None:
        """`snapshots` None takes none; `executor` None writes them synchronously.

        `unclean_leader_election` is this node's static unclean.leader.election.enable: the
        default for topics without the config and no cluster-wide dynamic value.
        """
        self.log = log
        self.node_id = node_id
        self.cluster_id = cluster_id or random_base64_uuid()
        self._image = empty_image(self.cluster_id, node_id)  # what decisions see: every record appended
        self._published = self._image  # what `image` and the listeners see: what is committed
        self._unpublished: list[MetadataImage] = []  # a quorum leader's images awaiting the commit, oldest first
        self._defer_publishing = False
        self._flush_later = False  # inside commits_flushed_later
        self._listeners: list[ChangeListener] = []
        self._producer_ids: Iterator[int] = iter(())
        self._policy = snapshots
        self._executor = executor
        self._time_ms = time_ms
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = time_ms()
        self._pending: Future[None] | None = None
        self._static_unclean = unclean_leader_election
        self._bootstrap: list[MetadataRecord] | None = None  # bootstrap.checkpoint's records, read by load()

    @property
    def image(self) -> MetadataImage:
        """The committed metadata: what brokers and clients are served."""
        return self._published

    def defer_publishing(self) -> None:
        """A quorum's controller: publish its own changes only once `publish_committed` says they are committed."""
        self._defer_publishing = True

    @contextmanager
    def commits_flushed_later(self) -> Iterator[None]:
        """Within: a single voter's commits append without their fsync and publish nothing. The caller has the
        log's flush job run off the loop, then publishes what it covers (klamm.controller.flushed_commits).
        A commit outside meanwhile fsyncs the whole log and publishes everything, these too."""
        self._flush_later = True
        try:
            yield
        finally:
            self._flush_later = False

    def publish_committed(self, end_offset: int) -> None:
        """Every record below `end_offset` is committed: publish the newest image that holds no other."""
        ready = 0
        while ready < len(self._unpublished) and self._unpublished[ready].offset < end_offset:
            ready += 1
        if ready:
            image = self._unpublished[ready - 1]
            del self._unpublished[:ready]
            self._publish(image)

    def load(self, *, bootstrap: bool = True) -> MetadataImage:
        """Load the newest valid snapshot and replay the log after it; bootstrap an empty log.

        A quorum's controller (`bootstrap` False) sees only committed records here; it bootstraps
        the metadata version once it leads (`bootstrap_if_empty`). An empty log reads its
        directory's bootstrap.checkpoint here (BootstrapError: a node with a damaged one does not start)."""
        self.reload()
        if self.log.end_offset == 0 and self.log.bootstrap_directory is not None:
            self._bootstrap = read_bootstrap(self.log.bootstrap_directory)
        if bootstrap and self.log.end_offset == 0:
            self.bootstrap_if_empty()
        else:
            self.maybe_snapshot()
        return self._image

    def reload(self) -> MetadataImage:
        """The image again from the newest snapshot and the log (a quorum's: what is committed)."""
        image, start = self._load_snapshot()
        builder = ImageBuilder(image)
        replayed = 0
        for offset, value in self.log.replay(start):
            builder.apply(decode_record(value), offset)
            replayed += len(value)
        self._bytes_since_snapshot = replayed
        self._swap(builder.build())
        return self._image

    def bootstrap_if_empty(self) -> None:
        """A new cluster's first records: the metadata.version feature level, and what `klamm storage format`
        put in bootstrap.checkpoint (--add-scram's credentials; klamm/controller/bootstrap.py)."""
        if "metadata.version" in self._image.features:
            return
        records = list(self._bootstrap or ())
        if not any(r.type == "FeatureLevelRecord" and r.data["name"] == "metadata.version" for r in records):
            records.insert(0, MetadataRecord("FeatureLevelRecord", {"name": "metadata.version",
                                                                    "feature_level": METADATA_VERSION}))
        self._commit(records)
        self._bootstrap = None

    def apply_committed(self, records: Sequence[tuple[int, bytes]]) -> None:
        """Replay records another controller appended, now committed (a standby controller follows the leader)."""
        if not records:
            return
        builder = ImageBuilder(self._image)
        for offset, value in records:
            builder.apply(decode_record(value), offset)
        self._swap(builder.build())
        self._bytes_since_snapshot += sum(len(value) for _, value in records)
        self.maybe_snapshot()

    def _load_snapshot(self) -> tuple[MetadataImage, int]:
        """(image, offset to replay from): the newest usable snapshot's, else empty from offset 0."""
        empty = empty_image(self.cluster_id, self.node_id)
        start = self.log.log_start_offset
        for snapshot_id in reversed(self.log.snapshots()):
            if snapshot_id.end_offset < start:
                break  # the log no longer reaches back to it (nor to any older one)
            try:
                snapshot = self.log.read_snapshot(snapshot_id)
                builder = ImageBuilder(empty)
                for value in snapshot.values:
                    builder.apply(decode_record(value))
            except (SnapshotError, MetadataRecordError) as exc:
                log.warning("ignoring metadata snapshot %s: %s", snapshot_id.file_name, exc)
                continue
            builder.offset = snapshot_id.end_offset - 1
            if snapshot_id.end_offset > self.log.end_offset:
                # The log lost records the snapshot holds (Kafka truncates the log to the snapshot).
                self.log.start_at_snapshot(snapshot_id)
            self._last_snapshot_ms = snapshot.last_contained_ms
            log.info("loaded metadata snapshot %s", snapshot_id.file_name)
            return builder.build(), snapshot_id.end_offset
        if start > 0:
            raise MetadataLogError(f"the metadata log starts at offset {start} and no valid snapshot reaches it")
        return empty, 0

    def on_change(self, listener: ChangeListener) -> Callable[[], None]:
        """Call `listener(old_image, new_image)` after every change; returns an unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def close(self) -> None:
        if self._pending is not None:
            self._finish_snapshot(wait=True)
        self.log.close()

    # -- snapshots ---------------------------------------------------------------------

    def maybe_snapshot(self) -> None:
        """Snapshot the image when the policy says so; called after each commit and periodically."""
        if self._policy is None:
            return
        if self._pending is not None:
            if not self._pending.done():
                return
            self._finish_snapshot(wait=False)
        now = self._time_ms()
        policy = self._policy
        due = self._bytes_since_snapshot >= policy.max_bytes_between or (
            policy.max_interval_ms > 0 and self._bytes_since_snapshot > 0
            and now - self._last_snapshot_ms >= policy.max_interval_ms)
        if due:
            self.snapshot(now)

    def snapshot(self, now_ms: int | None = None) -> SnapshotId | None:
        """Start a snapshot of the current image (None if one at this offset exists or one is under way)."""
        if self._pending is not None:
            return None
        image = self._image
        if image.offset + 1 > self.log.committed_end_offset:
            return None  # a quorum leader's image runs ahead of the commit: snapshot committed state only
        snapshot_id = SnapshotId(image.offset + 1, self.log.epoch_of(image.offset))
        existing = self.log.snapshots()
        if snapshot_id.end_offset <= 0 or (existing and existing[-1].end_offset >= snapshot_id.end_offset):
            return None
        now = self._time_ms() if now_ms is None else now_ms
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = now

        def write() -> None:
            self.log.write_snapshot(snapshot_id, (encode_record(r) for r in image_records(image)), now)

        if self._executor is None:
            write()
            self.clean()
        else:
            self._pending = self._executor.submit(write)
        return snapshot_id

    def _finish_snapshot(self, *, wait: bool) -> None:
        pending, self._pending = self._pending, None
        assert pending is not None
        try:
            pending.result() if wait else pending.result(timeout=0)
        except Exception:  # the log still holds every record; the next trigger tries again
            log.exception("writing a metadata snapshot failed")
            return
        self.clean()

    def clean(self) -> None:
        """Apply the retention of snapshots and of the log behind them (after snapshots, and periodically)."""
        if self._policy is None:
            return
        self.log.maybe_clean(self._policy.retention_bytes, self._policy.retention_ms, self._time_ms())

    # -- brokers ---------------------------------------------------------------------

    def register_broker(self, node_id: int, host: str, port: int, listener: str = "PLAINTEXT",
                        rack: str | None = None, *, fenced: bool = False,
                        incarnation_id: uuid.UUID | None = None,
                        endpoints: Sequence[Endpoint] | None = None) -> BrokerRegistration:
        """Register the broker's endpoint; writes only when it is new or changed (or `fenced`, always).

        Unfenced, a broker back after being fenced leads again the partitions that waited for it.
        Fenced (a broker of another process), a live earlier registration is fenced first, so its
        leaderships move, as for a broker that restarted without a clean shutdown.
        """
        current = self._image.brokers.get(node_id)
        if fenced and current is not None and not current.fenced:
            self.fence_broker(node_id)
        records = decide_register_broker(self._image, node_id, host, port, listener, rack, fenced=fenced,
                                         incarnation_id=incarnation_id, endpoints=endpoints)
        if records:
            self._commit(records)
            if not fenced:
                self._commit_if_any(decide_leaderless_elections(self._image, node_id,
                                                                unclean_default=self._unclean_default()))
        return self._image.brokers[node_id]

    def fence_broker(self, node_id: int) -> None:
        """The broker missed its heartbeats: out of every ISR, its leaderships moved (partition_changes)."""
        self._commit_if_any(decide_fence_broker(self._image, node_id, unclean_default=self._unclean_default()))

    def unfence_broker(self, node_id: int) -> None:
        self._commit_if_any(decide_unfence_broker(self._image, node_id, unclean_default=self._unclean_default()))

    def controlled_shutdown(self, node_id: int) -> None:
        """The broker is shutting down: its leaderships move away while it still serves."""
        self._commit_if_any(decide_controlled_shutdown(self._image, node_id,
                                                       unclean_default=self._unclean_default()))

    def elect_leaderless(self) -> None:
        """Leaders for leaderless partitions where the configs now allow an unclean election (KRaft's periodic check)."""
        records = decide_leaderless_elections(self._image, NO_LEADER, unclean_default=self._unclean_default())
        self._commit_if_any(records)

    def _unclean_default(self) -> bool:
        """unclean.leader.election.enable for topics without it: this node's dynamic config, the cluster-wide
        dynamic one, else the static config (KRaft's lookup)."""
        for node in (self.node_id, None):
            value = self._image.broker_configs(node).get(UNCLEAN_KEY)
            if value is not None:
                return value.strip().lower() == "true"
        return self._static_unclean

    def alter_partition_reassignments(self, targets: Mapping[str, Mapping[int, Sequence[int] | None]]
                                      ) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]:
        """Start (or cancel, with None) reassignments; they complete when the new replicas join the ISR."""
        results, records = decide_reassignments(self._image, targets)
        self._commit_if_any(records)
        return results

    def balance_leaders(self) -> None:
        """Leadership back to preferred replicas (auto.leader.rebalance.enable)."""
        self._commit_if_any(decide_balance_leaders(self._image))

    def _commit_if_any(self, records: list[MetadataRecord]) -> None:
        if records:
            self._commit(records)

    def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker: the node leaves every ISR and the cluster; KafkaError BROKER_ID_NOT_REGISTERED."""
        self._commit(decide_unregister_broker(self._image, node_id, unclean_default=self._unclean_default()))

    # -- topics ------------------------------------------------------------------------

    def create_topics(self, requests: Sequence[CreateTopicSpec], *, validate_only: bool = False,
                      default_partitions: int = 1, default_replication_factor: int = 1,
                      validate_config: ConfigValidator | None = None,
                      decided: Decided | None = None) -> list[TopicResult]:
        if decided is not None and self._take(decided, validate_only):
            return decided.results
        results, records = decide_create_topics(
            self._image, requests, default_partitions=default_partitions,
            default_replication_factor=default_replication_factor, validate_config=validate_config)
        if records and not validate_only:
            self._commit(records)
        return results

    def update_features(self, updates: Sequence[FeatureUpdate], *, validate_only: bool = False
                        ) -> tuple[ErrorCode, str | None]:
        """UpdateFeatures: all of them, or none with the first one's error (klamm/controller/features.py)."""
        error, message, records = decide_update_features(self._image, self.node_id, updates)
        if records and not validate_only:
            self._commit(records)
        return error, message

    def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]:
        """Delete by name or id; results in request order."""
        results, records = decide_delete_topics(self._image, topics)
        if records:
            self._commit(records)
        return results

    def create_partitions(self, requests: Sequence[CreatePartitionsSpec], *, validate_only: bool = False,
                          decided: Decided | None = None) -> list[CreatePartitionsResult]:
        if decided is not None and self._take(decided, validate_only):
            return decided.results
        results, records = decide_create_partitions(self._image, requests)
        if records and not validate_only:
            self._commit(records)
        return results

    def elect_leaders(self, election: int, partitions: Mapping[str, Sequence[int]] | None
                      ) -> dict[str, list[tuple[int, ElectionOutcome]]]:
        """(partition, outcome) per requested partition (None: every partition whose election was needed)."""
        results, records = decide_elect_leaders(self._image, election, partitions)
        if records:
            self._commit(records)
        return results

    def alter_partition(self, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                        leader_epoch: int, partition_epoch: int, isr: Sequence[int],
                        leader_recovery_state: int = 0) -> tuple[ErrorCode, PartitionImage | None]:
        """A leader's AlterPartition: (error, the partition as committed) — Kafka's answer carries it."""
        error, records = decide_alter_partition(self._image, broker_id, broker_epoch, topic_id, partition,
                                                leader_epoch, partition_epoch, isr, leader_recovery_state)
        if error != ErrorCode.none:
            return error, None
        self._commit(records)
        return error, self._image.topics_by_id[topic_id].partitions[partition]

    # -- configs ------------------------------------------------------------------------

    def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete_configs: Iterable[str] = (),
                            *, replace: bool = False, validate_only: bool = False,
                            validate_config: ConfigValidator | None = None) -> dict[str, str]:
        """Change a topic's explicit configs; returns them as they are (or would be) after.

        `replace` drops every key not in set_configs (AlterConfigs); otherwise
        the change is incremental (IncrementalAlterConfigs SET/DELETE). Raises
        KafkaError: UNKNOWN_TOPIC_OR_PARTITION, or INVALID_CONFIG from the validator.
        """
        configs, records = decide_alter_topic_configs(
            self._image, topic, set_configs, delete_configs, replace=replace, validate_config=validate_config)
        if records and not validate_only:
            self._commit(records)
        return configs

    def alter_broker_configs(self, node_id: int | None, set_configs: Mapping[str, str],
                             delete_configs: Iterable[str] = (), *, replace: bool = False,
                             validate_only: bool = False,
                             validate_config: ConfigValidator | None = None) -> dict[str, str]:
        """Dynamic broker configs of `node_id`, or cluster-wide defaults with node_id None."""
        configs, records = decide_alter_broker_configs(
            self._image, node_id, set_configs, delete_configs, replace=replace, validate_config=validate_config)
        if records and not validate_only:
            self._commit(records)
        return configs

    def alter_group_configs(self, group_id: str, set_configs: Mapping[str, str], delete_configs: Iterable[str] = (),
                            *, replace: bool = False, validate_only: bool = False,
                            validate_config: ConfigValidator | None = None) -> dict[str, str]:
        """A group's dynamic configs (consumer.session.timeout.ms, ...), as GROUP ConfigRecords."""
        configs, records = decide_alter_group_configs(
            self._image, group_id, set_configs, delete_configs, replace=replace, validate_config=validate_config)
        if records and not validate_only:
            self._commit(records)
        return configs

    # -- SCRAM credentials ---------------------------------------------------------------

    def alter_user_scram_credentials(self, deletions: Sequence[ScramDeletion],
                                     upsertions: Sequence[ScramUpsertion]) -> list[ScramAlterResult]:
        """AlterUserScramCredentials: one result per user named (klamm/controller/scram.py)."""
        results, records = decide_alter_user_scram_credentials(self._image, deletions, upsertions)
        self._commit_if_any(records)
        return results

    # -- delegation tokens ---------------------------------------------------------------

    def create_delegation_token(self, settings: TokenSettings, owner: str, requester: str,
                                renewers: Sequence[tuple[str, str]], max_lifetime_ms: int) -> TokenResult:
        """CreateDelegationToken (klamm/controller/delegation_tokens.py); `settings` are this node's."""
        result, records = decide_create_token(self._image, settings, owner, requester, renewers, max_lifetime_ms,
                                              self._time_ms())
        self._commit_if_any(records)
        return result

    def renew_delegation_token(self, settings: TokenSettings, principal: str, hmac: bytes,
                               renew_period_ms: int) -> TokenResult:
        result, records = decide_renew_token(self._image, settings, principal, hmac, renew_period_ms,
                                             self._time_ms())
        self._commit_if_any(records)
        return result

    def expire_delegation_token(self, settings: TokenSettings, principal: str, hmac: bytes,
                                expiry_period_ms: int) -> TokenResult:
        result, records = decide_expire_token(self._image, settings, principal, hmac, expiry_period_ms,
                                              self._time_ms())
        self._commit_if_any(records)
        return result

    def sweep_expired_delegation_tokens(self) -> None:
        """Remove the tokens past their expiry or lifetime (every delegation.token.expiry.check.interval.ms)."""
        self._commit_if_any(decide_sweep_tokens(self._image, self._time_ms()))

    # -- ACLs ----------------------------------------------------------------------------

    def create_acls(self, acls: Sequence[Acl]) -> list[AclCreateResult]:
        """CreateAcls: one result per ACL; the new ones committed as one batch (klamm/controller/acl_changes.py)."""
        results, records = decide_create_acls(self._image, acls)
        self._commit_if_any(records)
        return results

    def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclDeleteResult]:
        """DeleteAcls: per filter, the ACLs it matched; all of them removed as one batch."""
        results, records = decide_delete_acls(self._image, filters)
        self._commit_if_any(records)
        return results

    # -- producer ids ------------------------------------------------------------------

    def allocate_producer_ids(self, broker_id: int, count: int = PRODUCER_ID_BLOCK_SIZE) -> range:
        """Reserve a block of producer ids for a broker (ProducerIdsRecord), as AllocateProducerIds does."""
        if count <= 0:
            raise KafkaError(ErrorCode.invalid_request, "producer id block size must be positive")
        first = self._image.next_producer_id
        broker = self._image.brokers.get(broker_id)
        self._commit([MetadataRecord("ProducerIdsRecord", {
            "broker_id": broker_id,
            "broker_epoch": broker.epoch if broker is not None else -1,
            "next_producer_id": first + count,
        })])
        return range(first, first + count)

    def allocate_producer_id(self) -> int:
        """One producer id for this node, from a block reserved a thousand at a time."""
        producer_id = next(self._producer_ids, None)
        if producer_id is None:
            self._producer_ids = iter(self.allocate_producer_ids(self.node_id))
            producer_id = next(self._producer_ids)
        return producer_id

    # -- client quotas -------------------------------------------------------------------

    def alter_client_quotas(self, alterations: Sequence[ClientQuotaAlteration], *, validate_only: bool = False,
                            resolvable_hosts: Iterable[str] = ()) -> list[ClientQuotaResult]:
        """AlterClientQuotas: one result per entity; the successful ones committed as one batch unless
        validate_only (klamm/controller/client_quotas.py)."""
        results, records = decide_alter_client_quotas(self._image, alterations, resolvable_hosts)
        if not validate_only:
            self._commit_if_any(records)
        return results

    def _take(self, decided: Decided, validate_only: bool) -> bool:
        """Commit a decision made ahead as it is, if the image is still the one it was made on; False: decide
        again."""
        if decided.image is not self._image:
            return False
        if decided.records and not validate_only:
            self._commit(decided.records, decided.encoded())
        return True

    # -- append and replay -------------------------------------------------------------

    def _commit(self, records: Sequence[MetadataRecord], encoded: Encoded | None = None) -> MetadataImage:
        """Append `records` as one batch, replay them and publish the new image. `encoded`: the records made
        ready already (Decided.encode), its builder on this image."""
        if encoded is None:
            encoded = Encoded([encode_record(record) for record in records], map(complete_record, records))
        values = encoded.values
        later = self._flush_later
        # a later flush: the log is a FileMetadataLog (FlushedCommits), which takes the records encoded ahead
        last_offset = self.log.append(values, flush=False, encoded=encoded.batch_body) if later \
            else self.log.append(values)
        builder = encoded.builder
        if builder is None:
            builder = ImageBuilder(self._image)
            first_offset = last_offset - len(values) + 1
            for i, record in enumerate(encoded.completed):  # as decoded from `values`, which every node replays
                builder.apply(record, first_offset + i)
        builder.offset = last_offset
        self._swap(builder.build(), committed=not (self._defer_publishing or later))
        self._bytes_since_snapshot += sum(len(value) for value in values)
        self.maybe_snapshot()
        return self._image

    def _swap(self, new: MetadataImage, *, committed: bool = True) -> None:
        self._image = new
        if committed:
            self._unpublished.clear()
            self._publish(new)
        else:
            self._unpublished.append(new)

    def _publish(self, new: MetadataImage) -> None:
        old, self._published = self._published, new
        for listener in list(self._listeners):
            try:
                listener(old, new)
            except Exception:  # the change is committed; one bad listener must not hide it from others
                log.exception("metadata change listener failed")
