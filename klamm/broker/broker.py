"""The broker: one object that owns storage, metadata, handlers and the network.

Nothing here is global, so a process (a test) can run several brokers. Start-up
order: load the logs (recovering after an unclean stop), replay the metadata
log into the image, host the partitions it assigns to this node (as leader or
follower), bind the listener, register the endpoint, then serve. Shutdown moves
this broker's leaderships away first (controlled shutdown), then reverses the
rest and ends with the log manager's checkpoints and clean-shutdown marker.

Where the metadata comes from depends on the node's roles: a combined node
(process.roles=broker,controller, the default) runs the Controller on its own
metadata log and, with a quorum configured, serves other brokers on its
controller listener (klamm.broker.controller_server); a broker-only node follows
that controller over the network (klamm.broker.metadata_follower); brokers of an
in-process cluster share one Controller object (klamm.testing.run_cluster).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from klamm.broker.fetch_session import FetchSessionCache
from klamm.broker.handlers import Api, registry
from klamm.broker.handlers.configs import apply_dynamic_broker_configs
from klamm.broker.handlers.groups import CREATION_WAIT_S
from klamm.broker.cleaner_tasks import LogCleanerService
from klamm.broker.metadata_entries import TopicEntries
from klamm.broker.log_tasks import DelayedDeletes, LogRetention
from klamm.broker.producer_expiration import expire_producers_periodically
from klamm.broker.metrics import BrokerMetrics, MetricsServer
from klamm.broker.network import (
    Acceptor,
    ClientConnection,
    ConnectionQuotas,
    ListenerSecurity,
    Processor,
    RequestBudget,
    SocketSettings,
    check_socket_server_config,
)
from klamm.broker.partition import log_config
from klamm.broker.peer_security import controller_security, inter_broker_security
from klamm.broker.controller_channel import ControllerLocator, QuorumConnection
from klamm.broker.controller_server import ControllerServer
from klamm.broker.metadata_follower import BrokerLifecycle, MetadataFollower, ProducerIdBlocks, RemoteControllerClient
from klamm.broker.replica_fetcher import FetchSettings, ReplicaFetcherManager
from klamm.broker.replica_manager import ReplicaManager
from klamm.broker.txn_marker_channel import TxnMarkerChannel
from klamm.broker.tls import server_context
from klamm.broker.authentication import SaslListener
from klamm.broker.authorizer import authorizer_for
from klamm.broker.principal_mapping import PrincipalMapper
from klamm.broker.quotas import ClientQuotas
from klamm.broker.txn_verification import TxnVerifier
from klamm.broker.services import ControllerClient, LocalControllerClient
from klamm.config.broker import BrokerConfig, parse_listener
from klamm.config.topic import TopicConfig
from klamm.controller.brokers import SECURITY_PROTOCOLS as SECURITY_PROTOCOL_IDS
from klamm.controller.controller import Controller, CreateTopicSpec, SnapshotPolicy
from klamm.controller.delegation_tokens import TokenCredentials, TokenSettings
from klamm.controller.flushed_commits import FlushedCommits
from klamm.controller.image import Endpoint
from klamm.controller.meta_properties import MetaPropertiesError, ensure_meta_properties, read_meta_properties
from klamm.controller.metadata_log import FileMetadataLog
from klamm.controller.quorum_controller import QuorumController, RaftMetadataLog
from klamm.controller.quorum_info import SingleVoterQuorum
from klamm.controller.raft.driver import RaftDriver, raft_config
from klamm.controller.raft.driver import now_ms as raft_now_ms
from klamm.controller.raft.file_log import FileRaftLog
from klamm.controller.raft.node import RaftNode
from klamm.controller.raft.quorum_state import FileQuorumStateStore
from klamm.coordinator.runtime import GROUP_COORDINATOR_APIS, GroupCoordinatorRuntime
from klamm.coordinator.transactions.runtime import TransactionCoordinatorRuntime
from klamm.protocol.connection import Request
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.sasl import ScramCredential
from klamm.storage.log_manager import LogManager

CONSUMER_GROUP_APIS = (68, 69)  # ConsumerGroupHeartbeat, ConsumerGroupDescribe (KIP-848)
# Produce and Fetch run in the connection's read up to their first wait, a task made only if they wait
# (klamm.broker.network._run_at_once): most produce requests never wait. Their handlers (and Broker.handle)
# ask nothing of their task before they first wait (no asyncio.timeout, no current_task) -- keep it so.
RUN_AT_ONCE = frozenset({0, 1})
log = logging.getLogger("klamm.broker")


def _once_offsets_topic_known(handle: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """A group coordinator's handler that, at a broker of a cluster not knowing __consumer_offsets yet or about
    to load a partition of it, first waits for that (GroupCoordinatorRuntime.known)."""

    async def handle_known(broker: Broker, request: Any) -> Any:
        if broker.group_coordinator.waits() and (broker.broker_only or broker.in_quorum):
            await broker.group_coordinator.known(CREATION_WAIT_S)
        return await handle(broker, request)

    return handle_known


class Broker:
    def __init__(self, config: BrokerConfig, *, controller: Controller | None = None) -> None:
        """`controller`: a Controller shared with other brokers of this process (an in-process cluster,
        see klamm.testing.inprocess_cluster); without one the broker runs its own, on its own log."""
        self.static_config = config  # server.properties; self.config adds the dynamic broker configs
        self.config = config
        self.node_id = config.node_id
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self._apis: dict[int, Api] = registry()
        for key in GROUP_COORDINATOR_APIS & self._apis.keys():  # not a check on every other request's path
            api = self._apis[key]
            self._apis[key] = dataclasses.replace(api, handle=_once_offsets_topic_known(api.handle))
        # shared by every connection (read only): a copy each would cost ~5 KiB per connection
        self._supported = {key: (api.min_version, api.max_version) for key, api in self._apis.items()}
        if "consumer" not in config.group_coordinator_rebalance_protocols:  # as Kafka: not offered when disabled
            for key in CONSUMER_GROUP_APIS:
                self._supported.pop(key, None)
        # Client listeners, in the order of `listeners`; the first is `listener_name`, `host`, `port`
        # (the address tests and tools bootstrap from). Ports are the bound ones once started.
        self.client_listeners = config.client_listeners()  # none on a dedicated controller
        self.listener_name, self.host, self.port = (self.client_listeners or [parse_listener(config.listeners[0])])[0]
        self.listener_ports: dict[str, int] = {name: port for name, _, port in self.client_listeners}
        self.inter_broker_listener = config.inter_broker_listener
        self.security_protocol = config.security_protocol_of(self.listener_name)
        self._per_ip_overrides = check_socket_server_config(config)  # fails before anything starts
        self.advertised_host = self.host
        self.advertised_port = self.port
        self.advertised: dict[str, tuple[str, int]] = {}  # listener name -> (host, port) registered
        self.logs: LogManager | None = None
        self.controller: Controller = controller  # type: ignore[assignment]
        self._shared_controller = controller is not None
        self._unsubscribe: list[Callable[[], None]] = []
        self._requests_in_flight: set[asyncio.Task[None]] = set()  # AlterPartition requests
        self.fetchers: ReplicaFetcherManager | None = None
        self.broker_only = sorted(set(config.process_roles)) == ["broker"]  # a controller elsewhere
        # a dedicated controller: no client listener, not a broker of the cluster, leads nothing
        self.controller_only = sorted(set(config.process_roles)) == ["controller"]
        self.lifecycle: BrokerLifecycle | None = None
        self.controller_server: ControllerServer | None = None
        self.quorum: SingleVoterQuorum | QuorumController | None = None  # the metadata quorum (not broker-only)
        self._internal_topics_requested: set[str] = set()
        self._as_controller: _ControllerSide | None = None  # a combined node of a quorum: see handle_as_controller
        # how this node reaches other brokers and the controllers (TLS, SASL: ConfigError now if it cannot)
        self.peer_security = inter_broker_security(config)
        self.token_credentials = TokenCredentials(lambda: self.controller.image,
                                                  lambda: TokenSettings.of(self.config).secret_key)
        self.controller_security = controller_security(config)
        # WriteTxnMarkers to partitions led elsewhere (used from start-up: loading finishes prepared transactions)
        self.txn_markers = TxnMarkerChannel(self.node_id, self._endpoint_of, config.request_timeout_ms,
                                            self.peer_security)
        self.txn_verifier = TxnVerifier(self.node_id, self._endpoint_of, config.request_timeout_ms,  # KIP-890
                                        self.peer_security)
        self.controller_client: ControllerClient = None  # type: ignore[assignment]
        self.replicas: ReplicaManager = None  # type: ignore[assignment]
        self.group_coordinator: GroupCoordinatorRuntime = None  # type: ignore[assignment]  # group coordinator
        self.transactions: TransactionCoordinatorRuntime = None  # type: ignore[assignment]
        self._acceptors: list[Acceptor] = []
        self._snapshot_writer: ThreadPoolExecutor | None = None
        self._log_creator: ThreadPoolExecutor | None = None  # new logs of many partitions (logs_made_for)
        self._metadata_flusher: ThreadPoolExecutor | None = None  # a single controller's fsyncs (FlushedCommits)
        self._processors: list[Processor] = []
        self._stopped = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        self.metadata_entries = TopicEntries()  # Metadata responses' topic entries, kept encoded
        self.authorizer = authorizer_for(config, lambda: self.controller.image)  # ACLs of the image of the moment
        self.quotas = ClientQuotas(lambda: self.controller.image, config.quota_window_num,
                                   config.quota_window_size_seconds * 1000)
        self.bytes_in = 0
        self.delayed_deletes = DelayedDeletes()  # retention, topic deletion and the cleaner remove files here
        self.retention = LogRetention(self)
        self.log_cleaner = LogCleanerService(self)
        self.metrics = BrokerMetrics(self)  # always counted; served only when metrics.port >= 0
        self._metrics_server: MetricsServer | None = None
        self.metrics_port: int | None = None  # the endpoint's bound port, None when it is off

    # lifecycle
    async def start(self) -> None:
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
        if self.broker_only and any(read_meta_properties(d) is None for d in self.log_dirs):
            raise MetaPropertiesError(f"a broker of a cluster needs formatted log directories: run "
                                      f"klamm storage format --cluster-id <id> --config <its server.properties> "
                                      f"({', '.join(str(d) for d in self.log_dirs)})")
        cluster_id = ensure_meta_properties(self.log_dirs, self.node_id, self.config.cluster_id or (
            self.controller.cluster_id if self._shared_controller else None))
        self.logs = LogManager(self.log_dirs, log_config(TopicConfig.resolve(self.config, {})))
        self.replicas = ReplicaManager(self.node_id, self.config, self.logs, self.delayed_deletes.schedule)
        self._log_creator = ThreadPoolExecutor(1, thread_name_prefix="klamm-log-creation")
        self.replicas.log_creator = self._log_creator
        self.logs.startup(lambda topic: log_config(self.replicas.topic_config(topic)))
        if self.broker_only:
            self._follow_the_controller(cluster_id)
        elif self.in_quorum:
            self._join_the_quorum(cluster_id)
            if not self.controller_only:
                self._reach_the_active_controller(cluster_id)
        else:
            if not self._shared_controller:
                self._snapshot_writer = ThreadPoolExecutor(1, thread_name_prefix="klamm-metadata-snapshot")
                self.controller = Controller(
                    FileMetadataLog(self.logs, segment_bytes=self.config.metadata_log_segment_bytes), self.node_id,
                    cluster_id, snapshots=snapshot_policy(self.config), executor=self._snapshot_writer,
                    unclean_leader_election=self.config.unclean_leader_election_enable)
                self.controller.load()
            self.quorum = SingleVoterQuorum(self.controller.node_id, self.controller.log, self._voter_endpoints())
            flushed = None
            if not self._shared_controller:  # one flusher per controller: a shared one's writes stay inline
                self._metadata_flusher = ThreadPoolExecutor(1, thread_name_prefix="klamm-metadata-flush")
                flushed = FlushedCommits(self.controller, self._metadata_flusher)
            self.controller_client = LocalControllerClient(self.controller, self, self.quorum,
                                                           self.replicas.logs_made_for, flushed)
        apply_dynamic_broker_configs(self, self.controller.image)
        self.replicas.served_image = lambda: self.controller.image
        self.replicas.apply_image(self.controller.image)
        self._listen(lambda _old, new: self.replicas.apply_image(new))
        self._listen(self.metrics.forget_deleted_topics)
        self._listen(self.metrics.count_isr_changes)
        self._listen(lambda _old, new: apply_dynamic_broker_configs(self, new))
        # group coordinator: loads __consumer_offsets (if it exists) while serving
        self.group_coordinator = GroupCoordinatorRuntime(self)
        await self.group_coordinator.start()
        # transaction coordinator: loads __transaction_state (if it exists) and finishes prepared transactions
        self.transactions = TransactionCoordinatorRuntime(self)
        await self.transactions.start()
        if not self.controller_only:
            await self._start_network()
        await self._start_metrics()
        self._start_replication()
        if self.broker_only:
            await self._join_the_cluster()
        elif self.in_quorum:
            await self._start_controller_listener()
            if not self.controller_only:  # a broker of the cluster like any other, via the active controller
                await self._join_the_cluster()
        else:
            if not self.controller_only:
                self.controller.register_broker(self.node_id, self.advertised_host, self.advertised_port,
                                                self.listener_name, rack=self.static_config.broker_rack,
                                                endpoints=self.registered_endpoints())
            await self._start_controller_listener()
        if not self.controller_only:  # caught up with the metadata: a log no replica of it took is a stray
            self.replicas.set_aside_strays()
        self._tasks.append(asyncio.ensure_future(self._checkpoint_periodically()))
        self._tasks.append(asyncio.ensure_future(expire_producers_periodically(self)))
        self.retention.start()
        self.replicas.flusher.start(self.config.log_flush_scheduler_interval_ms)
        self.log_cleaner.start()
        log.info("klamm ready: node %d serving %s (cluster %s, data in %s)", self.node_id,
                 ", ".join(f"{name} on {host or '0.0.0.0'}:{self.listener_ports[name]}"
                           for name, host, _ in self.client_listeners), cluster_id,
                 ",".join(str(d) for d in self.log_dirs))

    async def _start_network(self) -> None:
        config = self.config
        native = _loop_has_native_sendfile(asyncio.get_running_loop())
        budget = RequestBudget(config.queued_max_requests, config.queued_max_request_bytes)
        self._processors = [
            Processor(i, self.handle, self.supported_versions, config.socket_request_max_bytes,
                      config.connections_max_idle_ms, native, budget, RUN_AT_ONCE)
            for i in range(max(1, config.num_network_threads))
        ]
        for processor in self._processors:
            processor.start()
        # one set of connection quotas, processors and request budget for every listener, as Kafka's SocketServer
        quotas = ConnectionQuotas(config.max_connections, config.max_connections_per_ip, self._per_ip_overrides)
        sockets = SocketSettings(config.socket_send_buffer_bytes, config.socket_receive_buffer_bytes,
                                 config.socket_listen_backlog_size)
        securities = [self._security(config, name) for name, _, _ in self.client_listeners]  # all checked first
        for (name, host, port), security in zip(self.client_listeners, securities):
            acceptor = Acceptor(host, port, self._processors, quotas, sockets, security)
            await acceptor.start()
            self._acceptors.append(acceptor)
            self.listener_ports[name] = acceptor.port
            advertised = config.advertised_listener(name)
            if advertised is not None:  # a listener left out of advertised.listeners is not registered
                self.advertised[name] = (advertised[0] or socket.gethostname(), advertised[1] or acceptor.port)
        self.port = self.listener_ports[self.listener_name]
        self.advertised_host, self.advertised_port = self.advertised.get(
            self.listener_name, (self.host or socket.gethostname(), self.port))

    def _security(self, config: BrokerConfig, listener: str) -> ListenerSecurity:
        """TLS, SASL and certificate principals of a client listener (ConfigError when they cannot work)."""
        protocol = config.security_protocol_of(listener)
        tls = server_context(config) if protocol in ("SSL", "SASL_SSL") else None
        sasl = SaslListener(config, listener, self._scram_credential,
                            token_lookup=self.token_credentials.lookup) if protocol.startswith("SASL_") else None
        principals = PrincipalMapper(config.ssl_principal_mapping_rules) if protocol == "SSL" else None
        return ListenerSecurity(tls, sasl, principals, listener)

    def registered_endpoints(self) -> list[Endpoint]:
        """What this broker registers: each advertised client listener (name, host, port, security protocol),
        the inter-broker listener first, so the image's `host`/`port` of a registration are that one's."""
        endpoints = [Endpoint(name, host, port, SECURITY_PROTOCOL_IDS[self.config.security_protocol_of(name)])
                     for name, (host, port) in self.advertised.items()]
        return sorted(endpoints, key=lambda e: e.name != self.inter_broker_listener)

    def _scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.controller.image.scram_credential(user, mechanism)  # the metadata as it is now

    # a broker of a cluster (process.roles=broker): metadata, lifecycle and writes through the controller
    def _follow_the_controller(self, cluster_id: str) -> None:
        voters = _parse_voters(self.config.controller_quorum_voters)
        connect = self._controller_connections(ControllerLocator(voters))
        first_voter = min(voters)
        follower = MetadataFollower(self.node_id, cluster_id, first_voter, connect,  # type: ignore[arg-type]
                                    prepare=self.replicas.logs_made_for,
                                    request_timeout_ms=self.config.controller_quorum_request_timeout_ms)
        self.controller = follower  # type: ignore[assignment]  # what handlers read: the image
        self.lifecycle = BrokerLifecycle(self.node_id, cluster_id, follower, connect,
                                         self.config.broker_heartbeat_interval_ms)
        self.controller_client = RemoteControllerClient(connect, self.lifecycle)  # type: ignore[assignment]
        self._producer_ids = ProducerIdBlocks(self.controller_client)  # type: ignore[arg-type]
        self._tasks.append(asyncio.ensure_future(follower.run()))

    def _reach_the_active_controller(self, cluster_id: str) -> None:
        """A combined node of a quorum: its broker registers, heartbeats and writes through the active
        controller (this node's or another's), and reads the committed image of its own controller."""
        locator = ControllerLocator(_parse_voters(self.config.controller_quorum_voters))
        connect = self._controller_connections(locator)
        node, step = self.quorum.node, self.quorum.driver.on_step  # type: ignore[union-attr]

        def step_and_locate() -> None:  # its own Raft node knows first which voter leads
            step()
            locator.learn(node.leader_id)
        self.quorum.driver.on_step = step_and_locate  # type: ignore[union-attr]
        self.lifecycle = BrokerLifecycle(self.node_id, cluster_id, self.controller, connect,  # type: ignore[arg-type]
                                         self.config.broker_heartbeat_interval_ms)
        # The controller listener's writes are this node's controller's own; the broker's go to the active one.
        self._as_controller = _ControllerSide(self, self.controller_client)
        self.controller_client = RemoteControllerClient(connect, self.lifecycle)  # type: ignore[assignment]
        self._producer_ids = ProducerIdBlocks(self.controller_client)  # type: ignore[arg-type]

    def _controller_connections(self, locator: ControllerLocator) -> Callable[[], QuorumConnection]:
        """A new connection to the active controller per call; all share what they learn of which one it is."""
        timeout_s = self.config.request_timeout_ms / 1000
        return lambda: QuorumConnection(locator, f"klamm-broker-{self.node_id}", timeout_s, self.controller_security)

    @property
    def in_quorum(self) -> bool:
        """A controller of a quorum of several voters (dedicated or combined)."""
        return not self.broker_only and len(self.config.controller_quorum_voters) > 1

    async def _join_the_cluster(self) -> None:
        """Register, catch up with the metadata, get unfenced: then the broker serves (Kafka's start-up)."""
        assert self.lifecycle is not None
        await self.lifecycle.register(self.registered_endpoints(), self.static_config.broker_rack)
        self._tasks.append(asyncio.ensure_future(self.lifecycle.heartbeat_periodically()))
        caught_up = getattr(self.controller, "caught_up", None)  # a quorum's controller is unfenced once caught up
        if caught_up is not None:
            await caught_up.wait()
        await self.lifecycle.unfenced.wait()
        await self._producer_ids.prime()

    async def _start_controller_listener(self) -> None:
        """A combined node whose quorum has voters serves the brokers of other processes."""
        names = {n.strip().upper() for n in (self.config.controller_listener_names or "").split(",") if n.strip()}
        for listener in self.config.listeners:
            name, host, port = parse_listener(listener)
            if name in names and self.config.controller_quorum_voters:
                self.controller_server = ControllerServer(self, host, port, self._security(self.config, name))
                await self.controller_server.start()
                if isinstance(self.quorum, QuorumController):
                    self.quorum.driver.start()
                return

    # a controller of a quorum of several voters (process.roles=controller, or broker,controller)
    def _join_the_quorum(self, cluster_id: str) -> None:
        """The metadata log under Raft: this node votes, and controls while it leads."""
        voters = _parse_voters(self.config.controller_quorum_voters)
        files = FileMetadataLog(self.logs, segment_bytes=self.config.metadata_log_segment_bytes)
        node = RaftNode(self.node_id, voters, FileRaftLog(files), FileQuorumStateStore(files.directory,
                                                                                       frozenset(voters)),
                        config=raft_config(self.config), now_ms=raft_now_ms())
        driver = RaftDriver(node, cluster_id, voters, security=self.controller_security)
        self._snapshot_writer = ThreadPoolExecutor(1, thread_name_prefix="klamm-metadata-snapshot")
        self.controller = Controller(
            RaftMetadataLog(files, driver), self.node_id, cluster_id,  # type: ignore[arg-type]
            snapshots=snapshot_policy(self.config), executor=self._snapshot_writer,
            unclean_leader_election=self.config.unclean_leader_election_enable)
        self.controller.load(bootstrap=False)
        names = [n.strip().upper() for n in (self.config.controller_listener_names or "").split(",") if n.strip()]
        endpoints = {v: [(names[0], host, port)] for v, (host, port) in voters.items()}
        self.quorum = QuorumController(self.controller, driver, files, endpoints)  # type: ignore[assignment]
        driver.on_step = self.quorum.step  # type: ignore[union-attr]
        self.controller_client = LocalControllerClient(self.controller, self, self.quorum)  # type: ignore[arg-type]

    def controller_active(self) -> bool:
        """Whether this node's controller may write: a single controller always, a quorum's while it leads."""
        return not isinstance(self.quorum, QuorumController) or self.quorum.active

    def _voter_endpoints(self) -> list[tuple[str, str, int]]:
        """The voter's endpoint as Kafka has it for a static quorum: controller.quorum.voters' address
        under the first of controller.listener.names."""
        names = [n.strip().upper() for n in (self.config.controller_listener_names or "").split(",") if n.strip()]
        if not names or not self.config.controller_quorum_voters:
            return []
        host, port = next(iter(_parse_voters(self.config.controller_quorum_voters).values()))
        return [(names[0], host, port)]

    async def handle_as_controller(self, request: Request) -> Any:
        """A request the controller listener passes on to this node's own handler (CreateTopics)."""
        return await self._apis[request.api_key].handle(self._as_controller or self, request)

    def _listen(self, listener: Callable[[Any, Any], None]) -> None:
        """Follow metadata changes until stop (a shared controller outlives this broker)."""
        self._unsubscribe.append(self.controller.on_change(listener))

    def _start_replication(self) -> None:
        """Replica fetchers for the partitions followed, AlterPartition for the ISR of those led."""
        config = self.config
        settings = FetchSettings(self.node_id, config.replica_fetch_wait_max_ms, config.replica_fetch_min_bytes,
                                 config.replica_fetch_response_max_bytes, config.replica_fetch_max_bytes,
                                 config.replica_fetch_backoff_ms, config.request_timeout_ms, self.peer_security)
        self.fetchers = ReplicaFetcherManager(settings, self._endpoint_of)
        self.replicas.followers_changed = self.fetchers.update
        self.replicas.send_isr_proposal = self._send_isr_proposal
        self.fetchers.update(self.replicas.followers())
        self._tasks.append(asyncio.ensure_future(self.replicas.check_isr_periodically()))
        if isinstance(self.controller, Controller) and self.controller.node_id == self.node_id:
            self._tasks.append(asyncio.ensure_future(self._adjust_leaders_periodically()))
            self._tasks.append(asyncio.ensure_future(self._sweep_tokens_periodically()))

    async def _adjust_leaders_periodically(self) -> None:
        """Every leader.imbalance.check.interval.seconds, as KRaft's controller: leadership back to preferred
        replicas (auto.leader.rebalance.enable), and unclean elections a config change now allows."""
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_seconds)
            if not self.controller_active():
                continue
            if self.config.auto_leader_rebalance_enable:
                self.controller.balance_leaders()
            self.controller.elect_leaderless()

    async def _sweep_tokens_periodically(self) -> None:
        """Every delegation.token.expiry.check.interval.ms, as KRaft's controller: expired tokens removed."""
        while True:
            await asyncio.sleep(self.config.delegation_token_expiry_check_interval_ms / 1000)
            if self.controller_active() and self.controller.image.delegation_tokens:
                self.controller.sweep_expired_delegation_tokens()

    def _endpoint_of(self, node_id: int) -> tuple[str, int] | None:
        """Where this broker reaches another (replica fetchers, transaction markers, the verifier): its
        endpoint of the inter-broker listener."""
        registration = self.controller.image.brokers.get(node_id)
        if registration is None:
            return None
        endpoint = registration.endpoint(self.inter_broker_listener)
        return (registration.host, registration.port) if endpoint is None else (endpoint.host, endpoint.port)

    def _send_isr_proposal(self, partition: Any, proposal: Any) -> None:
        task = asyncio.ensure_future(self._alter_partition(partition, proposal))
        self._requests_in_flight.add(task)
        task.add_done_callback(self._requests_in_flight.discard)

    async def _alter_partition(self, partition: Any, proposal: Any) -> None:
        registration = self.controller.image.brokers.get(self.node_id)
        if registration is None:
            partition.on_proposal_failed(ErrorCode.stale_broker_epoch)
            return
        try:
            error = await self.controller_client.alter_partition(
                self.node_id, registration.epoch, partition.topic_id, partition.index, proposal.leader_epoch,
                proposal.partition_epoch, proposal.isr)
        except KafkaError as exc:
            # The controller could not be reached, so the outcome is unknown: the proposal stays in flight
            # (in the HW's maximal ISR) and the periodic ISR check sends it again.
            log.info("AlterPartition of %s-%d to ISR %s: %s", partition.topic, partition.index, list(proposal.isr),
                     exc)
            return
        if error != ErrorCode.none:
            log.info("AlterPartition of %s-%d to ISR %s: %s", partition.topic, partition.index, list(proposal.isr),
                     error.name)
            partition.on_proposal_failed(error)

    async def _start_metrics(self) -> None:
        if self.config.metrics_port < 0:
            return
        self._metrics_server = MetricsServer(self.metrics, self.config.metrics_host, self.config.metrics_port)
        await self._metrics_server.start()
        self._tasks.append(asyncio.ensure_future(self.metrics.watch_loop_lag()))
        self.metrics_port = self._metrics_server.port
        log.info("metrics endpoint on http://%s:%d/metrics", self.config.metrics_host or "0.0.0.0", self.metrics_port)

    async def _checkpoint_periodically(self) -> None:
        """Recovery points and log start offsets reach disk every log.flush.offset.checkpoint.interval.ms
        (snapshotted here, written off the loop by the LogManager's checkpoint thread)."""
        interval = self.config.log_flush_offset_checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            assert self.logs is not None
            await self.logs.checkpoint_in_slices()
            if isinstance(self.controller, Controller):
                self.controller.maybe_snapshot()  # the time trigger, when no commit comes to check it
                self.controller.clean()

    async def stop(self, *, controlled: bool = True) -> None:
        """Stop serving; `controlled` (SIGTERM) moves this broker's leaderships away first."""
        if controlled and self._shared_controller and self.controller.image.brokers.get(self.node_id) is not None:
            # Controlled shutdown: leaderships move to other ISR members before this broker goes.
            self.controller.controlled_shutdown(self.node_id)
        if controlled and self.controller_server is not None and not self.in_quorum \
                and self.node_id in self.controller.image.brokers:
            # The combined node of a cluster: its broker shuts down as any other, and the brokers learn of it
            # before its controller goes, since they could not learn anything while it is down.
            self.controller.controlled_shutdown(self.node_id)
            await self.controller_server.wait_for_brokers_to_catch_up(self.config.broker_session_timeout_ms / 1000)
        if controlled and self.lifecycle is not None and self.lifecycle.broker_epoch >= 0:
            await self.lifecycle.controlled_shutdown(self.config.request_timeout_ms / 1000)
        if isinstance(self.quorum, QuorumController):
            await self.quorum.driver.stop()  # resigns first, so another controller stands at once
        if self.controller_server is not None:
            await self.controller_server.stop()
        for task in [*self._tasks, *self._requests_in_flight]:
            task.cancel()
        for unsubscribe in self._unsubscribe:
            unsubscribe()
        self._unsubscribe.clear()
        if self.fetchers is not None:
            await self.fetchers.stop()
        self.txn_markers.close()
        self.txn_verifier.close()
        for closing in (self.lifecycle, self.controller_client):
            if hasattr(closing, "close") and not isinstance(closing, Controller):
                closing.close()
        for acceptor in self._acceptors:
            await acceptor.stop()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
        for processor in self._processors:
            processor.close_all()
        if self.transactions is not None:
            await self.transactions.stop()
        if self.group_coordinator is not None:  # group coordinator
            await self.group_coordinator.stop()
        if self._metadata_flusher is not None:  # before the log closes: a write's flush job may be running
            self._metadata_flusher.shutdown(wait=True)
        if isinstance(self.controller, Controller) and not self._shared_controller:
            self.controller.close()
        if self._snapshot_writer is not None:
            self._snapshot_writer.shutdown(wait=True)
        if self._log_creator is not None:
            self._log_creator.shutdown(wait=True)
        await self.retention.stop()
        await self.log_cleaner.stop()
        await self.delayed_deletes.stop()
        if self.replicas is not None:
            await self.replicas.flusher.stop()
            self.replicas.shutdown()
        self._stopped.set()
        log.info("klamm stopped: node %d", self.node_id)

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # request dispatch
    def supported_versions(self) -> dict[int, tuple[int, int]]:
        return self._supported

    async def handle(self, request: Request, connection: ClientConnection) -> Any:
        self.bytes_in += request.size
        api = self._apis[request.api_key]
        started = time.perf_counter()
        try:
            response = await api.handle(self, request)
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.request_done(request.api_key, request.api_version, elapsed)
        if self.quotas.any and response is not None:
            response = self._throttle(request, response, elapsed, connection)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("api %d v%d corr %d from %s: %.2f ms", request.api_key, request.api_version,
                      request.correlation_id, connection.peer, elapsed * 1000)
        return response  # a dict (or kio entity) the connection encodes in the request's version

    def _throttle(self, request: Request, response: Any, elapsed: float, connection: ClientConnection) -> Any:
        """Client quotas: the response says how long to back off, and the connection reads nothing until then."""
        throttle_ms = self.quotas.throttle_ms(request, response, elapsed, int(time.time() * 1000))
        if not throttle_ms:
            return response
        connection.mute(throttle_ms / 1000)
        if isinstance(response, dict):
            response["throttle_time"] = max(throttle_ms, _ms(response.get("throttle_time", 0)))
        elif dataclasses.is_dataclass(response) and hasattr(response, "throttle_time"):  # a kio entity
            response = dataclasses.replace(response, throttle_time=datetime.timedelta(
                milliseconds=max(throttle_ms, _ms(response.throttle_time))))
        return response

    # services for handlers
    def broker_endpoints(self, listener: str = "") -> list[dict[str, Any]]:
        """The live brokers at their endpoints of `listener` (the one a request came in on; empty: each
        broker's first). A broker without that listener is left out, as Kafka's metadata cache does."""
        endpoints = []
        for b in sorted(self.controller.image.brokers.values(), key=lambda b: b.node_id):
            if b.fenced:
                continue
            endpoint = self.endpoint_for(b.node_id, listener)
            if endpoint is not None:
                endpoints.append({"node_id": b.node_id, "host": endpoint[0], "port": endpoint[1], "rack": b.rack})
        return endpoints

    def endpoint_for(self, node_id: int, listener: str = "") -> tuple[str, int] | None:
        """A broker's (host, port) on `listener` (empty: its first endpoint); None when it has no such listener."""
        registration = self.controller.image.brokers.get(node_id)
        if registration is None:
            return None
        if not listener:
            return registration.host, registration.port
        endpoint = registration.endpoint(listener)
        if endpoint is None:
            _warn_once(f"broker {node_id} has no listener {listener}: left out of the answers to clients on it")
            return None
        return endpoint.host, endpoint.port

    def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                              configs: dict[str, str], *, deferred: bool = False) -> None:
        """Create a coordinator's compacted topic, its replication factor capped at the live brokers.

        Kafka refuses the topic while fewer brokers run than asked for; a single-node
        klamm caps instead, so its coordinators work out of the box.

        A cluster's node asks its controller, and the coordinator is not available
        meanwhile. So does a single node when the caller can wait for the topic
        (`deferred`: FindCoordinator): its logs are then made off the loop, where
        making them inline held it ~1 ms a partition (50 for __consumer_offsets).
        """
        live = max(1, len(self.broker_endpoints()))
        spec = CreateTopicSpec(name=name, num_partitions=partitions, replication_factor=min(replication_factor, live),
                               assignments=None, configs={"cleanup.policy": "compact", **configs})
        if self.broker_only or self.in_quorum or deferred:
            self._create_internal_topic_later(spec)
            raise KafkaError(ErrorCode.coordinator_not_available, f"{name} is being created")
        # Synchronous: the caller serves the topic within its request's synchronous part.
        [result] = self.controller.create_topics(
            [spec], default_partitions=self.config.num_partitions,
            default_replication_factor=self.config.default_replication_factor,
            validate_config=lambda configs: TopicConfig.resolve(self.config, configs))
        if result.error not in (ErrorCode.none, ErrorCode.topic_already_exists):
            raise KafkaError(ErrorCode.coordinator_not_available, result.message)
        log.info("created %s with %d partitions", name, partitions)

    def _create_internal_topic_later(self, spec: CreateTopicSpec) -> None:
        if spec.name in self._internal_topics_requested:
            return
        self._internal_topics_requested.add(spec.name)

        async def create() -> None:
            try:
                [result] = await self.controller_client.create_topics([spec], validate_only=False)
                if result.error == ErrorCode.none:
                    log.info("created %s with %d partitions", spec.name, spec.num_partitions)
                elif result.error != ErrorCode.topic_already_exists:
                    log.warning("creating %s: %s", spec.name, result.error.name)
            except KafkaError as exc:
                log.warning("creating %s: %s", spec.name, exc)
            finally:
                self._internal_topics_requested.discard(spec.name)
        task = asyncio.ensure_future(create())
        self._requests_in_flight.add(task)
        task.add_done_callback(self._requests_in_flight.discard)

    def allocate_producer_id(self) -> int:
        if self.broker_only or (self.in_quorum and not self.controller_only):
            return self._producer_ids.take()
        return self.controller.allocate_producer_id()


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """Kafka warns of a broker missing a listener at each request; once per process is enough to see it."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def snapshot_policy(config: BrokerConfig) -> SnapshotPolicy:
    return SnapshotPolicy(max_bytes_between=config.metadata_log_max_record_bytes_between_snapshots,
                          max_interval_ms=config.metadata_log_max_snapshot_interval_ms,
                          retention_bytes=config.metadata_max_retention_bytes,
                          retention_ms=config.metadata_max_retention_ms)


def _loop_has_native_sendfile(loop: asyncio.AbstractEventLoop) -> bool:
    """The stock selector loop sends files with os.sendfile; uvloop has no loop.sendfile."""
    return isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop)


def _parse_voters(voters: list[str]) -> dict[int, tuple[str, int]]:
    """controller.quorum.voters' id@host:port entries."""
    parsed = {}
    for voter in voters:
        voter_id, address = voter.strip().split("@", 1)
        host, _, port = address.strip().rpartition(":")
        parsed[int(voter_id)] = (host.strip("[]"), int(port))
    return parsed


class _ControllerSide:
    """The broker as its controller listener's handlers see it: writes go to this node's own controller."""

    def __init__(self, broker: Broker, controller_client: ControllerClient) -> None:
        self._broker = broker
        self.controller_client = controller_client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)
