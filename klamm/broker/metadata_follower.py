"""A broker-only node (process.roles=broker) and its controller: metadata, lifecycle and writes.

`MetadataFollower` stands where a combined node has its `Controller`: it holds
the metadata image, built by fetching `__cluster_metadata` from the controller
as a KRaft observer does (long polls from the next offset, the batches decoded
and replayed with klamm.controller.image; where the controller's log was
cleaned behind a snapshot, that snapshot first, by FetchSnapshot), and calls the
change listeners with each new image, so the replica manager, the coordinators and the metrics
follow it exactly as on a combined node. The image is kept in memory: a
restarted broker fetches the log again from its start (or its snapshot).

`BrokerLifecycle` registers the broker (BrokerRegistration: it starts fenced),
heartbeats every `broker.heartbeat.interval.ms` (every 10 ms until unfenced) with how far its metadata
has come (the controller unfences it once that reaches its registration), and at
shutdown asks for a controlled shutdown and waits until the controller has
moved its leaderships away.

`RemoteControllerClient` sends the writes a broker-only node makes itself —
AlterPartition, AllocateProducerIds, CreateTopics (internal and auto-created
topics) — to the controller, and forwards the admin writes clients send to
this broker (as Kafka's brokers forward them, KIP-590): CreateTopics,
DeleteTopics, CreatePartitions, ElectLeaders, AlterPartitionReassignments,
config changes, AlterUserScramCredentials (with the client's salted passwords:
the controller derives the keys it stores), CreateAcls and DeleteAcls (the
ACLs this broker authorized and found well formed; the controller decides and
answers each one) and DescribeQuorum. A config change
is validated here first, against this broker's configuration and image, as
Kafka's broker does before it forwards. The metadata fetches carry this broker's id, so the controller lists
it among the quorum's observers.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any

from klamm.broker.client import BrokerConnection, BrokerUnavailable
from klamm.controller.acl_changes import AclCreateResult, AclDeleteResult
from klamm.controller.acls import Acl, AclFilter
from klamm.controller.image import (BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, Endpoint, ImageBuilder,
                                    MetadataImage, apply_batch, empty_image)
from klamm.controller.metadata_log import METADATA_PARTITION, METADATA_TOPIC
from klamm.controller.records import MetadataRecord, MetadataRecordError, decode_record
from klamm.controller.snapshot import SnapshotError, SnapshotId, parse_snapshot
from klamm.controller.client_quotas import ClientQuotaAlteration, ClientQuotaResult
from klamm.controller.configs import (ConfigValidator, decide_alter_broker_configs, decide_alter_group_configs,
                                     decide_alter_topic_configs)
from klamm.controller.delegation_tokens import TokenResult
from klamm.controller.elections import ElectionOutcome
from klamm.controller.features import ALL_FAILED, FeatureUpdate
from klamm.controller.quorum_info import QuorumInfo, from_response
from klamm.controller.scram import ScramAlterResult, ScramDeletion, ScramUpsertion
from klamm.controller.topics import (CreatePartitionsResult, CreatePartitionsSpec, CreateTopicSpec, DeleteTopicResult,
                                     TopicResult)
from klamm.protocol.batch import split_batches
from klamm.protocol.envelope import decode_response, encode_principal, encode_request
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import decode_batch

log = logging.getLogger("klamm.metadata_follower")

FETCH, CREATE_TOPICS, ALTER_PARTITION, BROKER_REGISTRATION, BROKER_HEARTBEAT, ALLOCATE_PRODUCER_IDS = \
    1, 19, 56, 62, 63, 67
DELETE_TOPICS, ALTER_CONFIGS, CREATE_PARTITIONS, ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = 20, 33, 37, 43, 44
ALTER_PARTITION_REASSIGNMENTS, ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_QUORUM = 45, 51, 55
CREATE_ACLS, DELETE_ACLS = 30, 31
ALTER_CLIENT_QUOTAS = 49
UPDATE_FEATURES = 57
UNREGISTER_BROKER = 64
ENVELOPE, CREATE_DELEGATION_TOKEN, RENEW_DELEGATION_TOKEN, EXPIRE_DELEGATION_TOKEN = 58, 38, 39, 40
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
ZERO_UUID = uuid.UUID(int=0)
FETCH_SNAPSHOT, SNAPSHOT_CHUNK_BYTES = 59, 8 << 20
RETRY_S = 0.2
FORWARD_RETRY_S = 10.0  # how long a write this broker forwards keeps trying to reach the active controller
# Until unfenced a broker heartbeats this often, not every broker.heartbeat.interval.ms: it is unfenced by the
# first heartbeat that finds its metadata caught up (Kafka's BrokerLifecycleManager: 10 ms while STARTING).
STARTING_HEARTBEAT_S = 0.01
LEADER_RETRY_S = 0.05
# What a broker does around applying fetched records on top of its image (ReplicaManager.logs_made_for)
Preparer = Callable[[Sequence[MetadataRecord], MetadataImage], AbstractAsyncContextManager[None]]
LEADER_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
                          ErrorCode.unknown_leader_epoch})


class MetadataFollower:
    def __init__(self, node_id: int, cluster_id: str, controller_id: int, connect: Callable[[], BrokerConnection],
                 max_wait_ms: int = 500, prepare: Preparer | None = None, request_timeout_ms: int = 2000) -> None:
        self.node_id = node_id
        self.cluster_id = cluster_id
        self._controller_id = controller_id
        self._image = empty_image(cluster_id, controller_id)
        self._connect = connect
        self._max_wait_ms = max_wait_ms
        # A fetch unanswered this long after its wait gives up on that controller (controller.quorum.request.timeout.ms,
        # as Kafka's observers): the next try goes to another voter, which names the leader.
        self._fetch_timeout_s = (max_wait_ms + request_timeout_ms) / 1000
        self._listeners: list[Callable[[MetadataImage, MetadataImage], None]] = []
        self._prepare = prepare  # entered around applying fetched records (new logs made before, off the loop)
        self.caught_up = asyncio.Event()  # set once a fetch has reached the controller's log end
        self.high_watermark = 0
        # Where the next fetch starts and the epoch of the batch before it: the end of what was applied,
        # control batches included (a quorum leader opens its epoch with one).
        self._fetch_offset = 0
        self._last_epoch = 0

    @property
    def image(self) -> MetadataImage:
        return self._image

    def on_change(self, listener: Callable[[MetadataImage, MetadataImage], None]) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    async def run(self) -> None:
        connection = self._connect()
        unreachable = False  # logged once per outage, not at every retry
        while True:
            try:
                response = await connection.request(FETCH, 12, self._request(), self._fetch_timeout_s)
            except BrokerUnavailable as exc:
                log.log(logging.DEBUG if unreachable else logging.INFO, "metadata fetch from the controller: %s", exc)
                unreachable = True
                await asyncio.sleep(RETRY_S)
                continue
            entry = response.responses[0].partitions[0] if response.responses else None
            if entry is not None and entry.error_code in LEADER_MOVED:
                # A voter that does not lead (any more): it names the leader when it knows one.
                locator = getattr(connection, "locator", None)
                if locator is not None:
                    locator.learn(entry.current_leader.leader_id)
                await asyncio.sleep(LEADER_RETRY_S)
                continue
            if unreachable:  # answered by the leader: not by a voter naming one that may still be down
                log.info("metadata fetch from the controller: reachable again")
                unreachable = False
            if entry is None or entry.error_code != ErrorCode.none:
                log.warning("metadata fetch from the controller: %s", entry.error_code.name if entry else "no answer")
                await asyncio.sleep(RETRY_S)
                continue
            self.high_watermark = entry.high_watermark
            if entry.snapshot_id.end_offset >= 0:
                await self._load_snapshot(connection, SnapshotId(entry.snapshot_id.end_offset, entry.snapshot_id.epoch))
                continue
            before = self._fetch_offset
            if entry.records:
                await self._apply(self._committed_records(bytearray(entry.records), entry.high_watermark))
            if self._fetch_offset >= self.high_watermark:
                self.caught_up.set()
            elif self._fetch_offset == before:
                await asyncio.sleep(LEADER_RETRY_S)  # only records not yet committed: wait for the commit

    def _request(self) -> dict[str, Any]:
        # The broker's id, as a KRaft observer fetches: the controller reports it in DescribeQuorum.
        return {"replica_id": self.node_id, "max_wait": self._max_wait_ms, "min_bytes": 1, "max_bytes": 8 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                    "partition": METADATA_PARTITION, "current_leader_epoch": -1, "fetch_offset": self._fetch_offset,
                    "last_fetched_epoch": self._last_epoch, "log_start_offset": -1,
                    "partition_max_bytes": 8 << 20}]}],
                "forgotten_topics_data": [], "rack_id": ""}

    async def _load_snapshot(self, connection: BrokerConnection, snapshot_id: SnapshotId) -> None:
        """The controller's log no longer reaches back here: take its snapshot, then fetch from its end."""
        data = bytearray()
        while True:
            try:
                response = await connection.request(FETCH_SNAPSHOT, 1, {
                    "replica_id": -1, "max_bytes": SNAPSHOT_CHUNK_BYTES, "topics": [{
                        "name": METADATA_TOPIC, "partitions": [{
                            "partition": METADATA_PARTITION, "current_leader_epoch": -1,
                            "snapshot_id": {"end_offset": snapshot_id.end_offset, "epoch": snapshot_id.epoch},
                            "position": len(data)}]}]})
            except BrokerUnavailable as exc:
                log.info("fetching metadata snapshot %s: %s", snapshot_id.file_name, exc)
                return  # the next fetch says which snapshot to take then
            answer = response.topics[0].partitions[0] if response.topics else None
            error = response.error_code if answer is None else answer.error_code
            if error != ErrorCode.none:
                log.warning("fetching metadata snapshot %s: %s", snapshot_id.file_name, error.name)
                await asyncio.sleep(RETRY_S)
                return
            data += answer.unaligned_records
            if len(data) >= answer.size or not answer.unaligned_records:
                break
        try:
            snapshot = parse_snapshot(bytes(data), snapshot_id, f"snapshot {snapshot_id.file_name} from the controller")
            builder = ImageBuilder(empty_image(self.cluster_id, self._controller_id))
            for value in snapshot.values:
                builder.apply(decode_record(value))
        except (SnapshotError, MetadataRecordError) as exc:
            log.warning("%s", exc)  # corrupted on the way: fetch again
            await asyncio.sleep(RETRY_S)
            return
        builder.offset = snapshot_id.end_offset - 1
        self._fetch_offset, self._last_epoch = snapshot_id.end_offset, snapshot_id.epoch
        old, self._image = self._image, builder.build()
        log.info("loaded metadata snapshot %s from the controller (%d records)", snapshot_id.file_name,
                 len(snapshot.values))
        for listener in list(self._listeners):
            listener(old, self._image)

    def _committed_records(self, buf: bytearray, high_watermark: int) -> list[tuple[int, MetadataRecord]]:
        """The records of the whole batches below the high watermark (a quorum's uncommitted tail may still
        change) not applied yet; the next fetch starts after them."""
        records = []
        for header in split_batches(buf):
            if header.next_offset > high_watermark:
                break
            if header.next_offset <= self._fetch_offset:
                continue
            self._fetch_offset, self._last_epoch = header.next_offset, max(0, header.partition_leader_epoch)
            if header.is_control:
                continue
            for record in decode_batch(buf, header.position)[1]:
                if record.offset > self._image.offset and record.value is not None:
                    records.append((record.offset, decode_record(record.value)))
        return records

    async def _apply(self, records: list[tuple[int, MetadataRecord]]) -> None:
        """Replay `records` into the image, and tell the listeners once what they need is prepared (the logs of
        new partitions made beside the loop). Clients are served the new image meanwhile, as Kafka's metadata
        cache takes an image before its replica manager applies it: a partition not hosted yet answers
        NOT_LEADER_OR_FOLLOWER, which clients retry."""
        if not records:
            return
        old = self._image
        new = self._image = apply_batch(old, records)
        around = self._prepare([record for _, record in records], old) if self._prepare is not None else nullcontext()
        async with around:
            for listener in list(self._listeners):
                listener(old, new)


def _epoch_ms(value: datetime.datetime) -> int:
    """A kio timestamp as ms since the epoch (-1 stays -1)."""
    return round(value.timestamp() * 1000)


def _controller_message(message: str | None) -> str | None:
    """The controller's reason, without the prefix the UpdateFeatures answer adds to it (added again here)."""
    return message[len(ALL_FAILED):] if message is not None and message.startswith(ALL_FAILED) else message


class BrokerLifecycle:
    """Registration, heartbeats and controlled shutdown of a broker-only node (Kafka's BrokerLifecycleManager)."""

    def __init__(self, node_id: int, cluster_id: str, follower: MetadataFollower,
                 connect: Callable[[], BrokerConnection], interval_ms: int) -> None:
        self.node_id, self.cluster_id, self.follower = node_id, cluster_id, follower
        self._connection = connect()
        self.interval_s = interval_ms / 1000
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.unfenced = asyncio.Event()
        self._shutting_down = False
        self._unreachable = False  # the controller: logged once per outage, not at every retry

    def _log_unreachable(self, what: str, exc: Exception) -> None:
        log.log(logging.DEBUG if self._unreachable else logging.INFO, "%s: %s", what, exc)
        self._unreachable = True

    async def register(self, endpoints: Sequence[Endpoint], rack: str | None) -> None:
        """BrokerRegistration with every advertised listener (the inter-broker one first)."""
        while True:
            try:
                response = await self._connection.request(BROKER_REGISTRATION, 3, {
                    "broker_id": self.node_id, "cluster_id": self.cluster_id, "incarnation_id": self.incarnation_id,
                    "listeners": [{"name": e.name, "host": e.host, "port": e.port,
                                   "security_protocol": e.security_protocol} for e in endpoints],
                    "features": [], "rack": rack})
            except BrokerUnavailable as exc:
                self._log_unreachable("registering with the controller", exc)
                await asyncio.sleep(RETRY_S)
                continue
            self._unreachable = False
            if response.error_code == ErrorCode.inconsistent_cluster_id:
                raise KafkaError(ErrorCode.inconsistent_cluster_id,
                                 f"the controller's cluster is not {self.cluster_id} (see meta.properties)")
            if response.error_code == ErrorCode.none:
                self.broker_epoch = response.broker_epoch
                return
            log.warning("registration refused: %s", response.error_code.name)
            await asyncio.sleep(RETRY_S)

    async def heartbeat_periodically(self) -> None:
        while not self._shutting_down:
            response = await self._heartbeat(want_shut_down=False)
            starting = response is not None and response.error_code == ErrorCode.none and not self.unfenced.is_set()
            await asyncio.sleep(STARTING_HEARTBEAT_S if starting else self.interval_s)

    async def _heartbeat(self, *, want_shut_down: bool) -> Any:
        try:
            response = await self._connection.request(BROKER_HEARTBEAT, 1, {
                "broker_id": self.node_id, "broker_epoch": self.broker_epoch,
                "current_metadata_offset": self.follower.image.offset, "want_fence": False,
                "want_shut_down": want_shut_down, "offline_log_dirs": []})
        except BrokerUnavailable as exc:
            self._log_unreachable("heartbeat to the controller", exc)
            return None
        if self._unreachable:
            log.info("heartbeat to the controller: reachable again")
            self._unreachable = False
        if response.error_code == ErrorCode.none and not response.is_fenced:
            self.unfenced.set()
        return response

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Ask the controller to move this broker's leaderships away; return once it has (or at the timeout)."""
        self._shutting_down = True
        deadline = asyncio.get_running_loop().time() + timeout_s
        while asyncio.get_running_loop().time() < deadline:
            response = await self._heartbeat(want_shut_down=True)
            if response is None or response.should_shut_down:
                return  # done, or no controller to move anything: stop now
            await asyncio.sleep(0.1)

    def close(self) -> None:
        self._connection.close()


class RemoteControllerClient:
    """The writes of a broker-only node, sent to the controller (see the module docstring)."""

    def __init__(self, connect: Callable[[], BrokerConnection], lifecycle: BrokerLifecycle) -> None:
        self._connection = connect()
        self._lifecycle = lifecycle

    async def create_topics(self, specs: Sequence[CreateTopicSpec], *, validate_only: bool) -> list[TopicResult]:
        response = await self._request(CREATE_TOPICS, 7, {"timeout": 30_000, "validate_only": validate_only, "topics": [
            {"name": s.name, "num_partitions": s.num_partitions, "replication_factor": s.replication_factor,
             "assignments": [{"partition_index": i, "broker_ids": list(b)} for i, b in (s.assignments or {}).items()],
             "configs": [{"name": k, "value": v} for k, v in s.configs.items()]} for s in specs]})
        return [TopicResult(name=t.name, error=t.error_code, message=t.error_message, topic_id=t.topic_id,
                            num_partitions=t.num_partitions, replication_factor=t.replication_factor)
                for t in response.topics]

    async def alter_partition(self, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                              leader_epoch: int, partition_epoch: int, isr: Sequence[int]) -> ErrorCode:
        response = await self._request(ALTER_PARTITION, 3, {"broker_id": broker_id, "broker_epoch": broker_epoch,
                                                            "topics": [{"topic_id": topic_id, "partitions": [{
                                                                "partition_index": partition,
                                                                "leader_epoch": leader_epoch,
                                                                "new_isr_with_epochs": [{"broker_id": b,
                                                                                         "broker_epoch": -1}
                                                                                        for b in isr],
                                                                "leader_recovery_state": 0,
                                                                "partition_epoch": partition_epoch}]}]})
        if response.error_code != ErrorCode.none:
            return response.error_code
        return response.topics[0].partitions[0].error_code

    async def allocate_producer_ids(self) -> range:
        response = await self._request(ALLOCATE_PRODUCER_IDS, 0, {"broker_id": self._lifecycle.node_id,
                                                                  "broker_epoch": self._lifecycle.broker_epoch})
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code)
        return range(response.producer_id_start, response.producer_id_start + response.producer_id_len)

    async def _request(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send to the controller, again after a failed try for up to FORWARD_RETRY_S, as Kafka's
        NodeToControllerChannelManager does: a voter that is not the active controller closes the connection
        (the next try goes to the next voter: controller_channel.py), and a connection made before the
        controller restarted fails at its first use. Then NOT_CONTROLLER, which clients retry."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FORWARD_RETRY_S
        while True:
            try:
                return await self._connection.request(api_key, version, body)
            except BrokerUnavailable as exc:
                if loop.time() + RETRY_S >= deadline:
                    raise KafkaError(ErrorCode.not_controller, str(exc)) from None
                log.debug("api_key=%d to the controller: %s; trying again", api_key, exc)
            await asyncio.sleep(RETRY_S)

    # Admin writes a client sent to this broker: forwarded to the controller, as Kafka's brokers forward them.
    async def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]:
        response = await self._request(DELETE_TOPICS, 6, {"timeout_ms": 30_000, "topics": [
            {"name": t, "topic_id": ZERO_UUID} if isinstance(t, str) else {"name": None, "topic_id": t}
            for t in topics]})
        return [DeleteTopicResult(name=r.name, topic_id=r.topic_id, error=ErrorCode(r.error_code),
                                  message=r.error_message) for r in response.responses]

    async def create_partitions(self, specs: Sequence[CreatePartitionsSpec], *,
                                validate_only: bool) -> list[CreatePartitionsResult]:
        response = await self._request(CREATE_PARTITIONS, 3, {"timeout_ms": 30_000, "validate_only": validate_only,
                                                              "topics": [{
            "name": s.topic, "count": s.count,
            "assignments": None if s.assignments is None else [{"broker_ids": list(a)} for a in s.assignments]}
            for s in specs]})
        return [CreatePartitionsResult(topic=r.name, error=ErrorCode(r.error_code), message=r.error_message)
                for r in response.results]

    async def elect_leaders(self, election: int, partitions: Mapping[str, Sequence[int]] | None
                            ) -> dict[str, list[tuple[int, ElectionOutcome]]]:
        wanted = None if partitions is None else [{"topic": t, "partitions": list(p)} for t, p in partitions.items()]
        response = await self._request(ELECT_LEADERS, 2, {"election_type": election, "topic_partitions": wanted,
                                                          "timeout_ms": 30_000})
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code)
        return {r.topic: [(p.partition_id, (ErrorCode(p.error_code), p.error_message)) for p in r.partition_result]
                for r in response.replica_election_results}

    async def alter_partition_reassignments(self, targets: Mapping[str, Mapping[int, Sequence[int] | None]]
                                            ) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]:
        response = await self._request(ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 30_000, "topics": [
            {"name": name, "partitions": [{"partition_index": index,
                                           "replicas": None if replicas is None else list(replicas)}
                                          for index, replicas in partitions.items()]}
            for name, partitions in targets.items()]})
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code, response.error_message)
        return {r.name: {p.partition_index: (ErrorCode(p.error_code), p.error_message) for p in r.partitions}
                for r in response.responses}

    async def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete_configs: Iterable[str],
                                  *, replace: bool, validate_only: bool,
                                  validate_config: ConfigValidator | None) -> dict[str, str]:
        # Validated here against this broker's view (its configs, its image), then committed by the controller.
        delete_configs = list(delete_configs)
        configs, _ = decide_alter_topic_configs(self._lifecycle.follower.image, topic, set_configs, delete_configs,
                                                replace=replace, validate_config=validate_config)
        if not validate_only:
            await self._alter_configs(TOPIC_RESOURCE, topic, set_configs, delete_configs, replace)
        return configs

    async def alter_broker_configs(self, node_id: int | None, set_configs: Mapping[str, str],
                                   delete_configs: Iterable[str], *, replace: bool, validate_only: bool,
                                   validate_config: ConfigValidator | None) -> dict[str, str]:
        delete_configs = list(delete_configs)
        configs, _ = decide_alter_broker_configs(self._lifecycle.follower.image, node_id, set_configs,
                                                 delete_configs, replace=replace, validate_config=validate_config)
        if not validate_only:
            name = "" if node_id is None else str(node_id)
            await self._alter_configs(BROKER_RESOURCE, name, set_configs, delete_configs, replace)
        return configs

    async def alter_group_configs(self, group_id: str, set_configs: Mapping[str, str], delete_configs: Iterable[str],
                                  *, replace: bool, validate_only: bool,
                                  validate_config: ConfigValidator | None) -> dict[str, str]:
        delete_configs = list(delete_configs)
        configs, _ = decide_alter_group_configs(self._lifecycle.follower.image, group_id, set_configs, delete_configs,
                                                replace=replace, validate_config=validate_config)
        if not validate_only:
            await self._alter_configs(GROUP_RESOURCE, group_id, set_configs, delete_configs, replace)
        return configs

    async def _alter_configs(self, resource_type: int, name: str, set_configs: Mapping[str, str],
                             delete_configs: Sequence[str], replace: bool) -> None:
        """AlterConfigs (replacing every override) or IncrementalAlterConfigs (SET and DELETE) at the controller."""
        if replace:
            response = await self._request(ALTER_CONFIGS, 2, {"validate_only": False, "resources": [{
                "resource_type": resource_type, "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in set_configs.items()]}]})
        else:
            configs = [{"name": k, "config_operation": SET, "value": v} for k, v in set_configs.items()]
            configs += [{"name": k, "config_operation": DELETE, "value": None} for k in delete_configs]
            response = await self._request(INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [{
                "resource_type": resource_type, "resource_name": name, "configs": configs}]})
        result = response.responses[0]
        if result.error_code != ErrorCode.none:
            raise KafkaError(result.error_code, result.error_message)

    async def alter_client_quotas(self, alterations: Sequence[ClientQuotaAlteration], *,
                                  validate_only: bool) -> list[ClientQuotaResult]:
        """AlterClientQuotas at the controller, which validates it (Kafka's brokers always forward it)."""
        response = await self._request(ALTER_CLIENT_QUOTAS, 1, {"validate_only": validate_only, "entries": [{
            "entity": [{"entity_type": t, "entity_name": n} for t, n in a.entity],
            "ops": [{"key": k, "value": 0.0 if v is None else v, "remove": v is None} for k, v in a.ops]}
            for a in alterations]})
        return [ClientQuotaResult(tuple((e.entity_type, e.entity_name) for e in r.entity), ErrorCode(r.error_code),
                                  r.error_message) for r in response.entries]

    async def update_features(self, updates: Sequence[FeatureUpdate], *,
                              validate_only: bool) -> tuple[ErrorCode, str | None]:
        """UpdateFeatures at the controller, which decides it (Kafka's brokers forward it)."""
        response = await self._request(UPDATE_FEATURES, 1, {"timeout_ms": 60_000, "validate_only": validate_only,
                                                            "feature_updates": [
            {"feature": u.name, "max_version_level": u.level, "upgrade_type": u.upgrade_type} for u in updates]})
        return ErrorCode(response.error_code), _controller_message(response.error_message)

    async def alter_user_scram_credentials(self, deletions: Sequence[ScramDeletion],
                                           upsertions: Sequence[ScramUpsertion]) -> list[ScramAlterResult]:
        response = await self._request(ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "deletions": [{"name": d.name, "mechanism": d.mechanism} for d in deletions],
            "upsertions": [{"name": u.name, "mechanism": u.mechanism, "iterations": u.iterations, "salt": u.salt,
                            "salted_password": u.salted_password} for u in upsertions]})
        return [ScramAlterResult(r.user, ErrorCode(r.error_code), r.error_message) for r in response.results]

    async def create_acls(self, acls: Sequence[Acl]) -> list[AclCreateResult]:
        response = await self._request(CREATE_ACLS, 3, {"creations": [{
            "resource_type": a.resource_type, "resource_name": a.resource_name,
            "resource_pattern_type": a.pattern_type, "principal": a.principal, "host": a.host,
            "operation": a.operation, "permission_type": a.permission} for a in acls]})
        return [AclCreateResult(ErrorCode(r.error_code), r.error_message) for r in response.results]

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclDeleteResult]:
        response = await self._request(DELETE_ACLS, 3, {"filters": [{
            "resource_type_filter": f.resource_type, "resource_name_filter": f.resource_name,
            "pattern_type_filter": f.pattern_type, "principal_filter": f.principal, "host_filter": f.host,
            "operation": f.operation, "permission_type": f.permission} for f in filters]})
        return [AclDeleteResult(ErrorCode(r.error_code), r.error_message, tuple(
            Acl(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                m.permission_type) for m in r.matching_acls)) for r in response.filter_results]

    async def unregister_broker(self, node_id: int) -> None:
        """UnregisterBroker at the controller (Kafka's brokers forward it there)."""
        response = await self._request(UNREGISTER_BROKER, 0, {"broker_id": node_id})
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code, response.error_message)

    async def create_delegation_token(self, owner: str, requester: str, renewers: Sequence[tuple[str, str]],
                                      max_lifetime_ms: int) -> TokenResult:
        """CreateDelegationToken at the controller, as `requester` (in an Envelope: the controller records who
        asked)."""
        owner_type, _, owner_name = owner.partition(":")
        response = await self._enveloped(requester, CREATE_DELEGATION_TOKEN, 3, {
            "owner_principal_type": owner_type, "owner_principal_name": owner_name, "max_lifetime": max_lifetime_ms,
            "renewers": [{"principal_type": kind, "principal_name": name} for kind, name in renewers]})
        return TokenResult(ErrorCode(response.error_code), response.token_id, bytes(response.hmac),
                           _epoch_ms(response.issue_timestamp), _epoch_ms(response.expiry_timestamp),
                           _epoch_ms(response.max_timestamp))

    async def renew_delegation_token(self, principal: str, hmac: bytes, renew_period_ms: int) -> TokenResult:
        response = await self._enveloped(principal, RENEW_DELEGATION_TOKEN, 2,
                                         {"hmac": hmac, "renew_period": renew_period_ms})
        return TokenResult(ErrorCode(response.error_code), expiry_ms=_epoch_ms(response.expiry_timestamp))

    async def expire_delegation_token(self, principal: str, hmac: bytes, expiry_period_ms: int) -> TokenResult:
        response = await self._enveloped(principal, EXPIRE_DELEGATION_TOKEN, 2,
                                         {"hmac": hmac, "expiry_time_period": expiry_period_ms})
        return TokenResult(ErrorCode(response.error_code), expiry_ms=_epoch_ms(response.expiry_timestamp))

    async def _enveloped(self, principal: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """A request made at the controller as `principal` (Envelope; the client's address is not sent: this
        broker authorized the request)."""
        response = await self._request(ENVELOPE, 0, {
            "request_data": encode_request(api_key, version, body, "klamm-forwarded"),
            "request_principal": encode_principal(principal), "client_host_address": b""})
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code, "the controller refused the forwarded request")
        return decode_response(api_key, version, bytes(response.response_data))

    async def describe_quorum(self) -> QuorumInfo:
        """DescribeQuorum at the controller (Kafka's brokers forward it there)."""
        response = await self._request(DESCRIBE_QUORUM, 2, {"topics": [
            {"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": METADATA_PARTITION}]}]})
        if response.error_code != ErrorCode.none:
            raise KafkaError(response.error_code, response.error_message)
        partition = response.topics[0].partitions[0]
        if partition.error_code != ErrorCode.none:
            raise KafkaError(partition.error_code, partition.error_message)
        return from_response(partition, response.nodes)

    def close(self) -> None:
        self._connection.close()


class ProducerIdBlocks:
    """Producer ids for a broker-only node: blocks from the controller, the next one fetched ahead."""

    def __init__(self, client: RemoteControllerClient) -> None:
        self._client = client
        self._current: range = range(0)
        self._position = 0
        self._next: asyncio.Task[range] | None = None

    async def prime(self) -> None:
        self._current, self._position = await self._client.allocate_producer_ids(), 0

    def take(self) -> int:
        if self._position >= len(self._current):
            if self._next is not None and self._next.done() and not self._next.exception():
                self._current, self._position, self._next = self._next.result(), 0, None
            else:
                self._fetch_next()
                raise KafkaError(ErrorCode.coordinator_load_in_progress, "waiting for a producer id block")
        producer_id = self._current[self._position]
        self._position += 1
        if self._position * 10 >= len(self._current) * 9:
            self._fetch_next()
        return producer_id

    def _fetch_next(self) -> None:
        if self._next is None or (self._next.done() and self._next.exception() is not None):
            self._next = asyncio.ensure_future(self._client.allocate_producer_ids())
