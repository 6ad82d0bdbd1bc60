"""What request handlers may use of the broker: one narrow interface.

Handlers are typed against `BrokerServices`, not the `Broker` class, so the
surface they depend on is written down here and nowhere else. Reads of cluster
metadata go through `controller.image` (a `MetadataView`); every metadata
write a handler makes (create, delete and grow topics, elect leaders, alter
configs and SCRAM credentials, create and delete ACLs) goes through
`controller_client`, the one seam that the cluster work turns into a remote
call to the active controller. Today `LocalControllerClient` runs it against
the in-process controller.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from klamm.config.topic import TopicConfig
from klamm.controller.client_quotas import ip_hosts
from klamm.controller.controller import Decided
from klamm.controller.delegation_tokens import TokenResult, TokenSettings
from klamm.controller.topics import decide_create_partitions_steps, decide_create_topics_steps
from klamm.steps import Steps, in_slices
from klamm.protocol.errors import ErrorCode

T = TypeVar("T")
# How long encoding new topics' records ahead of their commit holds the loop at a time (Decided.encode)
ENCODE_SLICE_S = 0.0005

if TYPE_CHECKING:
    from klamm.broker.authorizer import AllowAll
    from klamm.broker.cleaner_tasks import LogCleanerService
    from klamm.broker.fetch_session import FetchSessionCache
    from klamm.broker.metadata_entries import TopicEntries
    from klamm.broker.metrics import BrokerMetrics
    from klamm.broker.replica_manager import ReplicaManager
    from klamm.config.broker import BrokerConfig
    from klamm.controller.acl_changes import AclCreateResult, AclDeleteResult
    from klamm.controller.acls import Acl, AclFilter
    from klamm.controller.client_quotas import ClientQuotaAlteration, ClientQuotaResult
    from klamm.controller.configs import ConfigValidator
    from klamm.controller.controller import Controller
    from klamm.controller.flushed_commits import FlushedCommits
    from klamm.controller.elections import ElectionOutcome
    from klamm.controller.features import FeatureUpdate
    from klamm.controller.image import MetadataImage
    from klamm.controller.quorum_info import QuorumDescriber, QuorumInfo
    from klamm.controller.records import MetadataRecord
    from klamm.controller.scram import ScramAlterResult, ScramDeletion, ScramUpsertion
    from klamm.controller.topics import (CreatePartitionsResult, CreatePartitionsSpec, CreateTopicSpec,
                                         DeleteTopicResult, TopicResult)
    from klamm.coordinator.runtime import GroupCoordinatorRuntime
    from klamm.coordinator.transactions.runtime import TransactionCoordinatorRuntime
    from klamm.storage.log_manager import LogManager

__all__ = ["BrokerServices", "ControllerClient", "LocalControllerClient", "MetadataConfigSource", "MetadataView"]


class MetadataView(Protocol):
    """The latest metadata image this broker has applied (read-only)."""

    @property
    def image(self) -> MetadataImage: ...

    def on_change(self, listener: Callable[[MetadataImage, MetadataImage], None]) -> Callable[[], None]:
        """Call `listener(old, new)` after each change of the image; returns the unsubscribe function."""
        ...


class ControllerClient(Protocol):
    """Every metadata write a handler asks for. Async: in a cluster it is a request to the controller."""

    async def create_topics(self, specs: Sequence[CreateTopicSpec], *, validate_only: bool) -> list[TopicResult]: ...

    async def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]: ...

    async def create_partitions(self, specs: Sequence[CreatePartitionsSpec], *,
                                validate_only: bool) -> list[CreatePartitionsResult]: ...

    async def elect_leaders(self, election: int, partitions: Mapping[str, Sequence[int]] | None
                            ) -> dict[str, list[tuple[int, ElectionOutcome]]]: ...

    async def alter_partition(self, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                              leader_epoch: int, partition_epoch: int, isr: Sequence[int]) -> ErrorCode: ...

    async def alter_partition_reassignments(self, targets: Mapping[str, Mapping[int, Sequence[int] | None]]
                                            ) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]: ...

    async def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete_configs: Iterable[str],
                                  *, replace: bool, validate_only: bool,
                                  validate_config: ConfigValidator | None) -> dict[str, str]: ...

    async def alter_broker_configs(self, node_id: int | None, set_configs: Mapping[str, str],
                                   delete_configs: Iterable[str], *, replace: bool, validate_only: bool,
                                   validate_config: ConfigValidator | None) -> dict[str, str]: ...

    async def alter_group_configs(self, group_id: str, set_configs: Mapping[str, str], delete_configs: Iterable[str],
                                  *, replace: bool, validate_only: bool,
                                  validate_config: ConfigValidator | None) -> dict[str, str]: ...

    async def alter_client_quotas(self, alterations: Sequence[ClientQuotaAlteration], *,
                                  validate_only: bool) -> list[ClientQuotaResult]: ...

    async def update_features(self, updates: Sequence[FeatureUpdate], *,
                              validate_only: bool) -> tuple[ErrorCode, str | None]: ...

    async def alter_user_scram_credentials(self, deletions: Sequence[ScramDeletion],
                                           upsertions: Sequence[ScramUpsertion]) -> list[ScramAlterResult]: ...

    async def create_acls(self, acls: Sequence[Acl]) -> list[AclCreateResult]: ...

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclDeleteResult]: ...

    async def unregister_broker(self, node_id: int) -> None: ...

    async def create_delegation_token(self, owner: str, requester: str, renewers: Sequence[tuple[str, str]],
                                      max_lifetime_ms: int) -> TokenResult: ...

    async def renew_delegation_token(self, principal: str, hmac: bytes, renew_period_ms: int) -> TokenResult: ...

    async def expire_delegation_token(self, principal: str, hmac: bytes, expiry_period_ms: int) -> TokenResult: ...

    async def describe_quorum(self) -> QuorumInfo: ...


class BrokerServices(Protocol):
    """Exactly what the handlers in klamm/broker/handlers use of a broker."""

    node_id: int
    config: BrokerConfig  # static overlaid with dynamic configs; replaced when they change
    static_config: BrokerConfig
    log_dirs: list[Path]
    advertised_host: str
    advertised_port: int
    advertised: dict[str, tuple[str, int]]  # this broker's endpoint per client listener
    logs: LogManager | None
    controller_client: ControllerClient
    replicas: ReplicaManager
    group_coordinator: GroupCoordinatorRuntime
    transactions: TransactionCoordinatorRuntime
    metrics: BrokerMetrics
    fetch_sessions: FetchSessionCache
    metadata_entries: TopicEntries
    authorizer: AllowAll  # ALLOW_ALL without authorizer.class.name
    log_cleaner: LogCleanerService

    @property
    def controller(self) -> MetadataView:
        """Read-only here: handlers read the image through it and write only through controller_client."""
        ...

    def supported_versions(self) -> dict[int, tuple[int, int]]: ...

    def broker_endpoints(self, listener: str = "") -> list[dict[str, Any]]: ...

    def endpoint_for(self, node_id: int, listener: str = "") -> tuple[str, int] | None: ...

    def allocate_producer_id(self) -> int: ...


class MetadataConfigSource(Protocol):
    """Where the client reads the broker's current defaults (num.partitions, ...) at each call."""

    config: BrokerConfig


class LocalControllerClient:
    """The controller client of a single node: calls the in-process controller directly.

    A write returns once what it committed is fsynced and published: a single controller's metadata log
    is fsynced in a worker thread (`flushed`, klamm.controller.flushed_commits), so the write suspends
    meanwhile, and a request pipelined behind it on the connection may be handled first (as on a Kafka
    broker, whose metadata follows the controller's commit a moment later). Creating topics or partitions
    that give this node many new logs also waits for them to be made in another thread before the
    commit (`prepare`), as Kafka's brokers make theirs after the controller answered.
    """

    def __init__(self, controller: Controller, config: MetadataConfigSource, quorum: QuorumDescriber,
                 prepare: Callable[[Sequence[MetadataRecord], MetadataImage], AbstractAsyncContextManager[None]]
                 | None = None, flushed: FlushedCommits | None = None) -> None:
        self._controller = controller
        self._config = config
        self._quorum = quorum
        self._flushed = flushed
        # Entered with the records of new topics and partitions before they are committed: this node's logs for
        # them made off the loop (ReplicaManager.logs_made_for); it suspends only for many new logs.
        self._prepare = prepare

    async def _write(self, call: Callable[[], T]) -> T:
        return call() if self._flushed is None else await self._flushed.write(call)

    async def create_topics(self, specs: Sequence[CreateTopicSpec], *, validate_only: bool) -> list[TopicResult]:
        config = self._config.config
        arguments = {"default_partitions": config.num_partitions,
                     "default_replication_factor": config.default_replication_factor,
                     "validate_config": lambda configs: TopicConfig.validate(self._config.config, configs)}
        decided = await self._decided(lambda image: decide_create_topics_steps(image, specs, **arguments),
                                      validate_only)
        if decided is not None:
            await asyncio.sleep(0)  # the loop's turn between deciding and finding the logs to make
        async with self._prepared(decided):
            if decided is not None:
                await decided.encode(ENCODE_SLICE_S)
            return await self._write(lambda: self._controller.create_topics(specs, validate_only=validate_only,
                                                                            decided=decided, **arguments))

    async def delete_topics(self, topics: Sequence[str | uuid.UUID]) -> list[DeleteTopicResult]:
        return await self._write(lambda: self._controller.delete_topics(topics))

    async def _decided(self, decide: Callable[[MetadataImage], Steps[tuple[list[Any], list[MetadataRecord]]]],
                       validate_only: bool) -> Decided | None:
        """The controller's decision on the image now, made ahead of the commit for `prepare` (none for a
        validation, or without `prepare`: the commit decides), ENCODE_SLICE_S of the loop a turn. The commit
        decides again if another changed the image meanwhile."""
        if self._prepare is None or validate_only:
            return None
        image = self._controller.image
        return Decided(image, *await in_slices(decide(image), ENCODE_SLICE_S))

    def _prepared(self, decided: Decided | None) -> AbstractAsyncContextManager[None]:
        """What to commit inside: `prepare` entered with the records decided ahead."""
        return nullcontext() if decided is None else self._prepare(decided.records, decided.image)  # type: ignore[misc]

    async def create_partitions(self, specs: Sequence[CreatePartitionsSpec], *,
                                validate_only: bool) -> list[CreatePartitionsResult]:
        decided = await self._decided(lambda image: decide_create_partitions_steps(image, specs), validate_only)
        if decided is not None:
            await asyncio.sleep(0)
        async with self._prepared(decided):
            if decided is not None:
                await decided.encode(ENCODE_SLICE_S)
            return await self._write(lambda: self._controller.create_partitions(specs, validate_only=validate_only,
                                                                                decided=decided))

    async def elect_leaders(self, election: int, partitions: Mapping[str, Sequence[int]] | None
                            ) -> dict[str, list[tuple[int, ElectionOutcome]]]:
        return await self._write(lambda: self._controller.elect_leaders(election, partitions))

    async def alter_partition(self, broker_id: int, broker_epoch: int, topic_id: uuid.UUID, partition: int,
                              leader_epoch: int, partition_epoch: int, isr: Sequence[int]) -> ErrorCode:
        error, _ = await self._write(lambda: self._controller.alter_partition(
            broker_id, broker_epoch, topic_id, partition, leader_epoch, partition_epoch, isr))
        return error

    async def alter_partition_reassignments(self, targets: Mapping[str, Mapping[int, Sequence[int] | None]]
                                            ) -> dict[str, dict[int, tuple[ErrorCode, str | None]]]:
        return await self._write(lambda: self._controller.alter_partition_reassignments(targets))

    async def alter_topic_configs(self, topic: str, set_configs: Mapping[str, str], delete_configs: Iterable[str],
                                  *, replace: bool, validate_only: bool,
                                  validate_config: ConfigValidator | None) -> dict[str, str]:
        return await self._write(lambda: self._controller.alter_topic_configs(
            topic, set_configs, delete_configs, replace=replace, validate_only=validate_only,
            validate_config=validate_config))

    async def alter_broker_configs(self, node_id: int | None, set_configs: Mapping[str, str],
                                   delete_configs: Iterable[str], *, replace: bool, validate_only: bool,
                                   validate_config: ConfigValidator | None) -> dict[str, str]:
        return await self._write(lambda: self._controller.alter_broker_configs(
            node_id, set_configs, delete_configs, replace=replace, validate_only=validate_only,
            validate_config=validate_config))

    async def alter_group_configs(self, group_id: str, set_configs: Mapping[str, str], delete_configs: Iterable[str],
                                  *, replace: bool, validate_only: bool,
                                  validate_config: ConfigValidator | None) -> dict[str, str]:
        return await self._write(lambda: self._controller.alter_group_configs(
            group_id, set_configs, delete_configs, replace=replace, validate_only=validate_only,
            validate_config=validate_config))

    async def update_features(self, updates: Sequence[FeatureUpdate], *,
                              validate_only: bool) -> tuple[ErrorCode, str | None]:
        return await self._write(lambda: self._controller.update_features(updates, validate_only=validate_only))

    async def alter_client_quotas(self, alterations: Sequence[ClientQuotaAlteration], *,
                                  validate_only: bool) -> list[ClientQuotaResult]:
        # An ip entity named by a host name must resolve (Kafka's InetAddress.getByName): looked up here,
        # off the loop, so that only such a request suspends before the controller decides.
        resolvable = [host for host in ip_hosts(alterations) if await _resolves(host)]
        return await self._write(lambda: self._controller.alter_client_quotas(
            alterations, validate_only=validate_only, resolvable_hosts=resolvable))

    async def alter_user_scram_credentials(self, deletions: Sequence[ScramDeletion],
                                           upsertions: Sequence[ScramUpsertion]) -> list[ScramAlterResult]:
        return await self._write(lambda: self._controller.alter_user_scram_credentials(deletions, upsertions))

    async def create_acls(self, acls: Sequence[Acl]) -> list[AclCreateResult]:
        return await self._write(lambda: self._controller.create_acls(acls))

    async def delete_acls(self, filters: Sequence[AclFilter]) -> list[AclDeleteResult]:
        return await self._write(lambda: self._controller.delete_acls(filters))

    async def unregister_broker(self, node_id: int) -> None:
        await self._write(lambda: self._controller.unregister_broker(node_id))

    async def create_delegation_token(self, owner: str, requester: str, renewers: Sequence[tuple[str, str]],
                                      max_lifetime_ms: int) -> TokenResult:
        settings = TokenSettings.of(self._config.config)
        return await self._write(lambda: self._controller.create_delegation_token(settings, owner, requester, renewers,
                                                                                  max_lifetime_ms))

    async def renew_delegation_token(self, principal: str, hmac: bytes, renew_period_ms: int) -> TokenResult:
        settings = TokenSettings.of(self._config.config)
        return await self._write(lambda: self._controller.renew_delegation_token(settings, principal, hmac,
                                                                                 renew_period_ms))

    async def expire_delegation_token(self, principal: str, hmac: bytes, expiry_period_ms: int) -> TokenResult:
        settings = TokenSettings.of(self._config.config)
        return await self._write(lambda: self._controller.expire_delegation_token(settings, principal, hmac,
                                                                                  expiry_period_ms))

    async def describe_quorum(self) -> QuorumInfo:
        return self._quorum.describe_quorum()


async def _resolves(host: str) -> bool:
    try:
        await asyncio.get_running_loop().getaddrinfo(host, None)
    except (OSError, UnicodeError):
        return False
    return True
