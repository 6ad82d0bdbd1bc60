"""The controller's listener: how brokers of other processes reach the controller of a combined node.

Bound on the listener named by `controller.listener.names` when `process.roles`
includes `controller` and the quorum has voters. It serves, against this node's
`Controller`:

- ApiVersions;
- BrokerRegistration (62): a broker of the cluster (cluster id checked:
  INCONSISTENT_CLUSTER_ID) is registered fenced, with a new broker epoch (the
  registration record's offset);
- BrokerHeartbeat (63): the broker's session is renewed; it is unfenced once its
  metadata has caught up with its registration (Kafka's rule) and it does not
  ask to stay fenced; `want_shut_down` is a controlled shutdown, answered
  `should_shut_down` once the broker leads nothing (it is then fenced). A
  broker silent for `broker.session.timeout.ms` is fenced: its leaderships move;
- Fetch (1) of `__cluster_metadata` partition 0: the metadata log's batches from
  the fetch offset, as a KRaft observer fetches them (long poll until the next
  commit); the high watermark is the log end, a single controller commits on append.
  An offset the log was cleaned behind is answered with the newest snapshot's id,
  and FetchSnapshot (59) serves that snapshot file, as KRaft's leader does;
- DescribeQuorum (55), answered by this node's own handler from its quorum
  (klamm/controller/quorum_info.py), which the Fetch handler tells of every
  broker's fetch (replica id and offset: the observers' state); DescribeCluster
  (60) as a controller answers it (KIP-919: endpoint type CONTROLLER, the
  controller's own endpoint), for admin clients given `--bootstrap-controller`;
- AlterPartition (56), AllocateProducerIds (67), and CreateTopics (19) for the
  internal topics brokers create on first use;
- the admin writes brokers forward for their clients (KIP-590): CreateTopics,
  DeleteTopics (20), CreatePartitions (37), ElectLeaders (43),
  AlterPartitionReassignments (45), AlterUserScramCredentials (51), CreateAcls
  (30), DeleteAcls (31), AlterClientQuotas (49) and UpdateFeatures (57), answered
  by this node's own handlers, and
  AlterConfigs (33) / IncrementalAlterConfigs (44) of topics and brokers, already
  validated by the forwarding broker (a broker's configs name that broker, not this one).

The listener's security protocol (listener.security.protocol.map) applies as on a
client listener: TLS, and SASL through SaslHandshake (17) and SaslAuthenticate (36),
before which nothing else is served. Once a peer authenticates (SASL, or a client
certificate on mutual TLS), an authorizer, if configured, must allow its principal
CLUSTER_ACTION on the cluster, as Kafka's ControllerApis asks of brokers and
controllers (`super.users` usually names them); a peer refused is disconnected.
klamm trusts a PLAINTEXT controller listener's peers without asking the authorizer
(Kafka would ask about User:ANONYMOUS): a deployment that does not trust its
network secures that listener.

A controller of a quorum of several voters (klamm/controller/quorum_controller.py)
serves the same, with Raft under it: Vote, BeginQuorumEpoch and EndQuorumEpoch
go to its Raft node, and so do Fetch and FetchSnapshot of `__cluster_metadata`,
from voters and from brokers alike. Only the active controller takes the writes
above and DescribeQuorum; it answers a write once Raft has committed what it
appended. A standby closes the connection instead, and the broker tries the next
voter. Broker sessions are tracked by the active controller only, renewed for
every broker when it takes over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from klamm.broker.handlers import api_versions, sasl
from klamm.broker.authentication import ANONYMOUS, CONTROLLER_PEER, ForwardedSession
from klamm.broker.authorizer import CLUSTER, CLUSTER_NAME
from klamm.broker.network import PLAINTEXT, Acceptor, CloseConnection, ListenerSecurity, Processor
from klamm.config.group import validate_group_configs
from klamm.config.topic import TopicConfig
from klamm.controller.image import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, Endpoint
from klamm.controller.metadata_log import METADATA_PARTITION, METADATA_TOPIC
from klamm.controller.quorum_controller import QuorumController
from klamm.controller.quorum_info import SINGLE_VOTER_EPOCH, SingleVoterQuorum
from klamm.controller.raft import wire
from klamm.controller.snapshot import SnapshotId
from klamm.protocol.acl import CLUSTER_OPERATIONS, NOT_INCLUDED, AclOperation
from klamm.protocol.api import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY
from klamm.protocol.connection import ProtocolError
from klamm.protocol.envelope import decode_principal, decode_request, encode_response
from klamm.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from klamm.broker.broker import Broker

log = logging.getLogger("klamm.controller_server")

FETCH, ALTER_CONFIGS, METADATA_FETCH_BYTES = 1, 33, 8 * 1024 * 1024
SUPPORTED = {1: (12, 12), 18: (0, 4), 19: (2, 7), 20: (6, 6), 30: (3, 3), 31: (3, 3), 33: (2, 2), 37: (3, 3),
             43: (2, 2), 44: (1, 1), 45: (0, 0), 49: (0, 1), 51: (0, 0), 55: (0, 2), 56: (3, 3), 59: (0, 1),
             57: (0, 2), 58: (0, 0), 60: (0, 1), 62: (3, 3), 63: (1, 1), 64: (0, 0), 67: (0, 0)}
# What a broker forwards in an Envelope (58): the delegation token writes, whose principal matters here.
ENVELOPED = {38: (0, 3), 39: (0, 2), 40: (0, 2)}
RAFT_SUPPORTED = {wire.VOTE: (2, 2), wire.BEGIN_QUORUM_EPOCH: (0, 0), wire.END_QUORUM_EPOCH: (0, 0)}
SASL_SUPPORTED = {SASL_HANDSHAKE_KEY: (0, 1), SASL_AUTHENTICATE_KEY: (0, 2)}
# The writes a quorum's standby refuses (the broker then finds the active controller), and whose answer
# waits until what they appended is committed.
WRITES = frozenset({19, 20, 30, 31, 33, 37, 43, 44, 45, 49, 51, 56, 57, 58, 62, 63, 64, 67})
LEADER_ONLY = WRITES | {55}  # and DescribeQuorum, which only the leader can answer
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2  # DescribeCluster endpoint types


class ControllerServer:
    def __init__(self, broker: Broker, host: str, port: int, security: ListenerSecurity = PLAINTEXT) -> None:
        self.broker = broker
        self.security = security
        self.controller = broker.controller
        assert broker.quorum is not None, "a controller listener needs the quorum it leads"
        self.quorum: SingleVoterQuorum | QuorumController = broker.quorum
        self.raft = broker.quorum if isinstance(broker.quorum, QuorumController) else None
        self.host, self.port = host, port
        self.sessions: dict[int, float] = {}  # broker id -> monotonic time of its last heartbeat
        self.metadata_offsets: dict[int, int] = {}  # broker id -> the metadata offset its last heartbeat reported
        self._committed = asyncio.Event()
        self._acceptor: Acceptor | None = None
        self._processor: Processor | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._unsubscribe = self.controller.on_change(lambda _old, _new: self._committed.set())
        forwarded = broker.handle_as_controller
        self._apis = {1: self.fetch, 18: self.api_versions, 19: forwarded, 20: forwarded, 30: forwarded,
                      31: forwarded, 33: self.alter_configs,
                      37: forwarded, 43: forwarded, 44: self.alter_configs, 45: forwarded, 49: forwarded, 51: forwarded,
                      55: forwarded, 56: self.alter_partition, 57: forwarded, 59: self.fetch_snapshot,
                      60: self.describe_cluster,
                      58: self.envelope, 62: self.register, 63: self.heartbeat, 64: forwarded,
                      67: self.allocate_producer_ids}
        if self.raft is not None:
            self._apis.update({1: self.raft_request, 59: self.raft_request, wire.VOTE: self.raft_request,
                               wire.BEGIN_QUORUM_EPOCH: self.raft_request, wire.END_QUORUM_EPOCH: self.raft_request})
            self.raft.on_activate.append(self._renew_sessions)
        self._supported = {**SUPPORTED, **(RAFT_SUPPORTED if self.raft is not None else {}),
                           **(SASL_SUPPORTED if security.sasl is not None else {})}
        if security.sasl is not None:
            self._apis.update({SASL_HANDSHAKE_KEY: lambda r: sasl.sasl_handshake(self.broker, r),
                               SASL_AUTHENTICATE_KEY: lambda r: sasl.sasl_authenticate(self.broker, r)})

    async def start(self) -> None:
        config = self.broker.config
        self._processor = Processor(0, self.handle, self.supported_versions, config.socket_request_max_bytes,
                                    config.connections_max_idle_ms, False)
        self._processor.start()
        self._acceptor = Acceptor(self.host, self.port, [self._processor], security=self.security)
        await self._acceptor.start()
        self.port = self._acceptor.port
        self._tasks.append(asyncio.ensure_future(self._fence_expired_sessions()))
        log.info("controller listening on %s:%d", self.host or "0.0.0.0", self.port)

    async def stop(self) -> None:
        self._unsubscribe()
        for task in self._tasks:
            task.cancel()
        if self._acceptor is not None:
            await self._acceptor.stop()
        if self._processor is not None:
            self._processor.close_all()

    def supported_versions(self) -> dict[int, tuple[int, int]]:
        return self._supported

    async def handle(self, request: Any, connection: Any) -> Any:
        if request.api_key in SASL_SUPPORTED:
            return await self._apis[request.api_key](request)
        if not self._peer_allowed(request):
            log.warning("closing the connection of %s from %s: the authorizer does not allow it ClusterAction on "
                        "the cluster", request.session.principal, connection.peer)
            raise CloseConnection()
        request.session = CONTROLLER_PEER  # the broker that forwarded a write authorized it
        if self.raft is None or request.api_key not in LEADER_ONLY:
            return await self._apis[request.api_key](request)
        # A quorum's write: only the active controller takes it, and answers once it is committed.
        # Elsewhere the connection closes, and the broker tries the next voter (it has no other way
        # to learn which controller is active).
        try:
            if not self.raft.active:
                raise KafkaError(ErrorCode.not_controller, "not the active controller")
            response = await self._apis[request.api_key](request)
            if request.api_key in WRITES:
                await self.raft.wait_committed(self.broker.config.request_timeout_ms / 1000)
        except KafkaError as exc:
            if exc.code != ErrorCode.not_controller:
                raise
            log.debug("%s to controller %d: %s", type(request.body).__name__, self.broker.node_id, exc)
            raise CloseConnection() from None
        return response

    async def envelope(self, request: Any) -> dict[str, Any]:
        """A client's request a broker forwarded with its principal: handled here as that principal."""
        body = request.body
        try:
            principal, token_authenticated = decode_principal(bytes(body.request_principal))
            inner = decode_request(bytes(body.request_data), ENVELOPED)
        except ProtocolError as exc:
            log.info("Envelope from %s refused: %s", request.client_host or "?", exc)
            return {"response_data": None, "error_code": ErrorCode.invalid_request}
        inner.session = ForwardedSession(principal, token_authenticated)
        inner.client_host = request.client_host
        response = await self.broker.handle_as_controller(inner)
        return {"response_data": encode_response(inner, response), "error_code": ErrorCode.none}

    def _peer_allowed(self, request: Any) -> bool:
        """An authenticated peer needs CLUSTER_ACTION on the cluster when an authorizer is configured."""
        authorizer = self.broker.authorizer
        if request.session is ANONYMOUS or not authorizer.enabled:
            return True
        return authorizer.allowed(request, AclOperation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME)

    async def raft_request(self, request: Any) -> dict[str, Any]:
        """Vote, BeginQuorumEpoch, EndQuorumEpoch, and Fetch / FetchSnapshot of `__cluster_metadata`, to Raft."""
        assert self.raft is not None
        driver = self.raft.driver
        cluster_id = getattr(request.body, "cluster_id", None)
        if cluster_id not in (None, "", self.controller.cluster_id):  # another cluster's node: Kafka's check
            return wire.error_body(request.api_key, ErrorCode.inconsistent_cluster_id)
        message = wire.request_message(request.api_key, request.body, driver.node.epoch)
        if message is None:
            raise KafkaError(ErrorCode.invalid_request, "the controller serves only __cluster_metadata-0")
        source = getattr(message, "replica_id", None)
        if source is None:
            source = getattr(message, "candidate_id", None)
        if source is None:
            source = message.leader_id  # type: ignore[union-attr]
        return wire.response_body(request.api_key, await driver.handle_request(source, message))

    def _renew_sessions(self) -> None:
        """A newly active controller gives every registered broker a whole session to heartbeat to it."""
        now = time.monotonic()
        self.sessions = {b.node_id: now for b in self.controller.image.brokers.values() if not b.fenced}

    async def api_versions(self, request: Any) -> dict[str, Any]:
        return await api_versions.handle(self, request)  # type: ignore[arg-type]

    # ------------------------------------------------------------ brokers
    async def register(self, request: Any) -> dict[str, Any]:
        body = request.body
        if body.cluster_id != self.controller.cluster_id:
            return {"error_code": ErrorCode.inconsistent_cluster_id, "broker_epoch": -1}
        listener = body.listeners[0] if body.listeners else None
        if listener is None:
            return {"error_code": ErrorCode.invalid_request, "broker_epoch": -1}
        endpoints = [Endpoint(e.name, e.host, e.port, e.security_protocol) for e in body.listeners]
        registration = self.controller.register_broker(body.broker_id, listener.host, listener.port, listener.name,
                                                       rack=body.rack, fenced=True, incarnation_id=body.incarnation_id,
                                                       endpoints=endpoints)
        self.sessions[body.broker_id] = time.monotonic()
        log.info("broker %d registered at %s (epoch %d)", body.broker_id,
                 ", ".join(f"{e.name}://{e.host}:{e.port}" for e in endpoints), registration.epoch)
        return {"error_code": ErrorCode.none, "broker_epoch": registration.epoch}

    async def heartbeat(self, request: Any) -> dict[str, Any]:
        body = request.body
        registration = self.controller.image.brokers.get(body.broker_id)
        if registration is None or registration.epoch != body.broker_epoch:
            return {"error_code": ErrorCode.stale_broker_epoch, "is_caught_up": False, "is_fenced": True,
                    "should_shut_down": False}
        self.sessions[body.broker_id] = time.monotonic()
        self.metadata_offsets[body.broker_id] = body.current_metadata_offset
        caught_up = body.current_metadata_offset >= registration.epoch
        if registration.fenced and caught_up and not body.want_fence and not body.want_shut_down:
            self.controller.unfence_broker(body.broker_id)
        should_shut_down = False
        if body.want_shut_down:
            self.controller.controlled_shutdown(body.broker_id)
            should_shut_down = not self._leads_anything(body.broker_id)
            if should_shut_down:
                self.controller.fence_broker(body.broker_id)
                self.sessions.pop(body.broker_id, None)
        registration = self.controller.image.brokers[body.broker_id]
        return {"error_code": ErrorCode.none, "is_caught_up": caught_up, "is_fenced": registration.fenced,
                "should_shut_down": should_shut_down}

    async def wait_for_brokers_to_catch_up(self, timeout_s: float) -> None:
        """Until every broker with a live session reports the metadata committed so far (or the timeout)."""
        target = self.controller.image.offset
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(self.metadata_offsets.get(b, -1) >= target for b in self.sessions):
                return
            await asyncio.sleep(0.05)
        behind = sorted(b for b in self.sessions if self.metadata_offsets.get(b, -1) < target)
        log.warning("brokers %s did not catch up with the metadata in %.1f s", behind, timeout_s)

    def _leads_anything(self, broker_id: int) -> bool:
        return any(p.leader == broker_id for t in self.controller.image.topics_by_name.values()
                   for p in t.partitions.values())

    async def _fence_expired_sessions(self) -> None:
        timeout = self.broker.config.broker_session_timeout_ms / 1000
        while True:
            await asyncio.sleep(min(timeout / 4, 1.0))
            now = time.monotonic()
            if self.raft is not None and not self.raft.active:
                continue
            for broker_id, last in list(self.sessions.items()):
                registration = self.controller.image.brokers.get(broker_id)
                if now - last > timeout and registration is not None and not registration.fenced:
                    log.info("broker %d missed its heartbeats for %.1f s: fenced", broker_id, now - last)
                    self.controller.fence_broker(broker_id)
                    self.sessions.pop(broker_id, None)

    # ------------------------------------------------------------ metadata for brokers
    async def fetch(self, request: Any) -> dict[str, Any]:
        body = request.body
        [topic] = body.topics
        [position] = topic.partitions
        if topic.topic != METADATA_TOPIC or position.partition != METADATA_PARTITION:
            raise KafkaError(ErrorCode.invalid_request, "the controller serves only __cluster_metadata")
        metadata_log = self.controller.log.log  # the Log under FileMetadataLog
        # Served up to what is committed (fsynced): a client's write may have appended beyond, its fsync running.
        committed = self.controller.log.committed_end_offset
        # The fetch offset is the fetcher's log end: recorded on arrival and again when a long poll ends,
        # as Kafka's leader does, for DescribeQuorum's observers.
        self.quorum.record_fetch(body.replica_id, position.fetch_offset)
        deadline = time.monotonic() + body.max_wait.total_seconds()
        waited = False
        while position.fetch_offset >= committed and time.monotonic() < deadline:
            waited = True
            self._committed.clear()
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._committed.wait()
            except TimeoutError:
                break
            committed = self.controller.log.committed_end_offset
        if waited:
            self.quorum.record_fetch(body.replica_id, position.fetch_offset)
        entry = {"partition_index": METADATA_PARTITION, "error_code": ErrorCode.none,
                 "high_watermark": committed, "last_stable_offset": committed,
                 "log_start_offset": metadata_log.log_start_offset, "preferred_read_replica": -1, "records": b"",
                 "current_leader": {"leader_id": self.controller.node_id, "leader_epoch": SINGLE_VOTER_EPOCH}}
        if position.fetch_offset < metadata_log.log_start_offset:
            # The log was cleaned behind a snapshot: the fetcher loads that first (FetchSnapshot), as in KRaft.
            newest = max(self.controller.log.snapshots(), default=None)
            if newest is None:
                entry["error_code"] = ErrorCode.offset_out_of_range
            else:
                entry["snapshot_id"] = {"end_offset": newest.end_offset, "epoch": newest.epoch}
        elif position.fetch_offset < committed:
            entry["records"] = metadata_log.read_bytes(position.fetch_offset, METADATA_FETCH_BYTES,
                                                       max_offset=committed)
        return {"error_code": ErrorCode.none, "session_id": 0,
                "responses": [{"topic": METADATA_TOPIC, "partitions": [entry]}]}

    async def fetch_snapshot(self, request: Any) -> dict[str, Any]:
        """FetchSnapshot (59) of `__cluster_metadata`: a slice of the snapshot file from `position`."""
        body = request.body
        [topic] = body.topics
        [wanted] = topic.partitions
        if topic.name != METADATA_TOPIC or wanted.partition != METADATA_PARTITION:
            raise KafkaError(ErrorCode.invalid_request, "the controller serves only __cluster_metadata")
        snapshot_id = SnapshotId(wanted.snapshot_id.end_offset, wanted.snapshot_id.epoch)
        answer: dict[str, Any] = {"index": METADATA_PARTITION, "error_code": ErrorCode.none,
                                  "snapshot_id": {"end_offset": snapshot_id.end_offset, "epoch": snapshot_id.epoch},
                                  "current_leader": {"leader_id": self.controller.node_id,
                                                     "leader_epoch": SINGLE_VOTER_EPOCH},
                                  "size": 0, "position": wanted.position, "unaligned_records": b""}
        try:
            data = self.controller.log.snapshot_bytes(snapshot_id) \
                if snapshot_id in self.controller.log.snapshots() else None
        except OSError:
            data = None  # removed by the cleaner meanwhile
        if data is None:
            answer["error_code"] = ErrorCode.snapshot_not_found
        elif not 0 <= wanted.position <= len(data):
            answer["error_code"] = ErrorCode.position_out_of_range
        else:
            answer["size"] = len(data)
            answer["unaligned_records"] = data[wanted.position:wanted.position + min(body.max_bytes,
                                                                                   METADATA_FETCH_BYTES)]
        return {"error_code": ErrorCode.none, "topics": [{"name": METADATA_TOPIC, "partitions": [answer]}]}

    async def describe_cluster(self, request: Any) -> dict[str, Any]:
        """DescribeCluster at a controller (KIP-919): the quorum's voters, for endpoint type CONTROLLER only."""
        body = request.body
        endpoint_type = getattr(body, "endpoint_type", BROKERS_ENDPOINT)  # v0 cannot name one: BROKERS
        error = _endpoint_type_error(endpoint_type, request.api_version)
        if error is not None:
            return {"error_code": error[0], "error_message": error[1], "endpoint_type": BROKERS_ENDPOINT,
                    "cluster_id": "", "controller_id": -1, "brokers": []}
        if self.raft is not None:  # any voter answers: the leader it knows, if any
            endpoints, leader_id = self.raft.endpoints, self.raft.node.leader_id
        else:
            quorum = self.quorum.describe_quorum()
            endpoints, leader_id = quorum.voter_endpoints, quorum.leader_id
        controllers = [{"broker_id": node_id, "host": host, "port": port, "rack": None}
                       for node_id, node_endpoints in sorted(endpoints.items())
                       for _, host, port in node_endpoints[:1]]
        operations = CLUSTER_OPERATIONS if body.include_cluster_authorized_operations else NOT_INCLUDED
        return {"error_code": ErrorCode.none, "endpoint_type": CONTROLLERS_ENDPOINT,
                "cluster_id": self.controller.cluster_id, "controller_id": leader_id, "brokers": controllers,
                "cluster_authorized_operations": operations}

    # ------------------------------------------------------------ writes brokers ask for
    async def alter_partition(self, request: Any) -> dict[str, Any]:
        body = request.body
        topics = []
        for topic in body.topics:
            answers = []
            for data in topic.partitions:
                isr = [state.broker_id for state in data.new_isr_with_epochs]
                error, partition = self.controller.alter_partition(
                    body.broker_id, body.broker_epoch, topic.topic_id, data.partition_index, data.leader_epoch,
                    data.partition_epoch, isr, data.leader_recovery_state)
                answer: dict[str, Any] = {"partition_index": data.partition_index, "error_code": error}
                if partition is not None:
                    answer.update(leader_id=partition.leader, leader_epoch=partition.leader_epoch,
                                  isr=list(partition.isr), leader_recovery_state=partition.leader_recovery_state,
                                  partition_epoch=partition.partition_epoch)
                answers.append(answer)
            topics.append({"topic_id": topic.topic_id, "partitions": answers})
        return {"error_code": ErrorCode.none, "topics": topics}

    async def allocate_producer_ids(self, request: Any) -> dict[str, Any]:
        block = self.controller.allocate_producer_ids(request.body.broker_id)
        return {"error_code": ErrorCode.none, "producer_id_start": block.start, "producer_id_len": len(block)}

    async def alter_configs(self, request: Any) -> dict[str, Any]:
        """AlterConfigs (every override replaced) or IncrementalAlterConfigs (SET and DELETE) a broker forwards."""
        replace = request.api_key == ALTER_CONFIGS
        results = []
        for resource in request.body.resources:
            set_configs = {c.name: c.value for c in resource.configs if replace or c.config_operation == SET}
            deletes = [c.name for c in resource.configs if not replace and c.config_operation == DELETE]
            try:
                if resource.resource_type == TOPIC_RESOURCE:
                    self.controller.alter_topic_configs(
                        resource.resource_name, set_configs, deletes, replace=replace,
                        validate_config=lambda configs: TopicConfig.validate(self.broker.config, configs))
                elif resource.resource_type == BROKER_RESOURCE:
                    name = resource.resource_name
                    self.controller.alter_broker_configs(int(name) if name else None, set_configs, deletes,
                                                         replace=replace)
                elif resource.resource_type == GROUP_RESOURCE:
                    self.controller.alter_group_configs(
                        resource.resource_name, set_configs, deletes, replace=replace,
                        validate_config=lambda configs: validate_group_configs(self.broker.config, configs))
                else:
                    raise KafkaError(ErrorCode.invalid_request, f"Unexpected resource type {resource.resource_type}")
                error, message = ErrorCode.none, None
            except KafkaError as exc:
                error, message = exc.code, exc.message
            results.append({"error_code": error, "error_message": message, "resource_type": resource.resource_type,
                            "resource_name": resource.resource_name})
        return {"responses": results}


def _endpoint_type_error(endpoint_type: int, version: int) -> tuple[ErrorCode, str] | None:
    """Kafka's answer to a DescribeCluster that a controller cannot serve (AuthHelper): v0 INVALID_REQUEST."""
    if endpoint_type == CONTROLLERS_ENDPOINT:
        return None
    if endpoint_type != BROKERS_ENDPOINT:
        code = ErrorCode.invalid_request if version == 0 else ErrorCode.unsupported_endpoint_type
        return code, f"Unsupported endpoint type {endpoint_type}"
    code = ErrorCode.invalid_request if version == 0 else ErrorCode.mismatched_endpoint_type
    return code, "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER"
