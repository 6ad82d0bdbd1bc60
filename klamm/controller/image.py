"""The immutable cluster metadata image and the replay of metadata records into it.

Like Kafka's MetadataImage/MetadataDelta: an image is never modified; replaying a
batch of records goes through an `ImageBuilder` that copies only what changes
(the topic maps, and the partition map of each touched topic) and then freezes
a new image. Readers can keep any image they hold for as long as they like.

Building an image walks no topic in Python: the builder starts from C-level
copies of the base's maps (`dict.copy`, no key hashed again: about 6 µs per
1,000 topics, where `dict(mapping_proxy)` rehashed every topic id through
`UUID.__hash__`, 0.2-0.4 ms), keeps the name map and the collision-name index
beside the id map as records change them, and hands its maps to the image it
builds. Kafka shares untouched topics between images with persistent maps;
these copies are what is left of a cost per topic hosted in each image. And
like Kafka's MetadataDelta, an image says which topics its build added,
changed or removed (`changed_topics`, relative to `changed_since`, its base's
name map), so a listener handed the image it saw last and this one looks at
those topics only (`topics_changed`).

SCRAM credentials (UserScramCredentialRecord, RemoveUserScramCredentialRecord)
are kept by (user name, mechanism name), e.g. ("alice", "SCRAM-SHA-256"): what
the server needs to check a SCRAM login (salt, stored key, server key,
iterations), never the password; `MetadataImage.scram_credential` looks one up.

Client quotas (ClientQuotaRecord) are kept by entity, a tuple of (entity type,
name or None for the default) pairs (klamm/controller/client_quotas.py):
`MetadataImage.client_quotas(entity)` gives an entity's {key: value}, and
`MetadataImage.applicable_client_quota(user, client_id, key)` the quota Kafka's
precedence gives a client.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, NamedTuple

from klamm.controller.acls import Acl, AclIndex
from klamm.controller.client_quotas import AppliedQuota, QuotaEntity, applicable_quota, quota_entity
from klamm.controller.records import MetadataRecord
from klamm.protocol.sasl import SCRAM_MECHANISMS, ScramCredential
from klamm.protocol.topics import has_collision_chars, unify_collision_chars

__all__ = [
    "BROKER_RESOURCE",
    "GROUP_RESOURCE",
    "SCRAM_MECHANISM_NAMES",
    "TOPIC_RESOURCE",
    "BrokerRegistration",
    "Endpoint",
    "ImageBuilder",
    "MetadataImage",
    "PartitionImage",
    "TopicImage",
    "apply",
    "apply_batch",
    "empty_image",
]

log = logging.getLogger(__name__)

# ConfigResource.Type codes used in ConfigRecord.resource_type.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32

NO_LEADER = -1
NO_LEADER_CHANGE = -2  # PartitionChangeRecord.leader: unchanged

_EMPTY: Mapping = MappingProxyType({})
# ScramMechanism type codes (UserScramCredentialRecord.mechanism) -> names.
SCRAM_MECHANISM_NAMES: Mapping[int, str] = MappingProxyType({code: name for name, code in SCRAM_MECHANISMS.items()})


def _empty() -> Mapping:
    return _EMPTY


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage] = field(default_factory=_empty)
    configs: Mapping[str, str] = field(default_factory=_empty)


class Endpoint(NamedTuple):
    """One listener of a registered broker (RegisterBrokerRecord's end_points)."""

    name: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker as registered. `host`, `port`, `listener` and `security_protocol` are its first endpoint:
    a klamm broker registers its inter-broker listener first; `endpoints` holds every listener."""

    node_id: int
    host: str
    port: int
    rack: str | None
    listener: str
    fenced: bool
    epoch: int = -1
    incarnation_id: uuid.UUID = uuid.UUID(int=0)
    security_protocol: int = 0
    in_controlled_shutdown: bool = False
    endpoints: tuple[Endpoint, ...] = ()

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint of listener `listener` (names compare case-insensitively), None when it has none."""
        name = listener.upper()
        for endpoint in self.endpoints or (Endpoint(self.listener, self.host, self.port, self.security_protocol),):
            if endpoint.name.upper() == name:
                return endpoint
        return None


@dataclass(frozen=True, slots=True)
class DelegationToken:
    """A delegation token (DelegationTokenRecord; klamm/controller/delegation_tokens.py). Principals are
    Kafka's strings, "User:alice"; times are ms since the epoch. Its HMAC is never stored."""

    token_id: str
    owner: str
    requester: str
    renewers: tuple[str, ...]
    issue_ms: int
    max_ms: int
    expiry_ms: int

    def owned_or_renewed_by(self, principal: str) -> bool:
        return principal == self.owner or principal in self.renewers


@dataclass(frozen=True, slots=True)
class MetadataImage:
    cluster_id: str
    controller_id: int
    offset: int = -1  # last applied metadata log offset
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=_empty)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=_empty)
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=_empty)
    features: Mapping[str, int] = field(default_factory=_empty)
    # Non-topic config resources, keyed by (resource type, resource name); a
    # broker's name is its id as a string and "" is the cluster-wide default.
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=_empty)
    next_producer_id: int = 0
    # SCRAM credentials by (user name, mechanism name).
    scram_credentials: Mapping[tuple[str, str], ScramCredential] = field(default_factory=_empty)
    # ACLs (AccessControlEntryRecord) by id, and the index the authorizer asks (built once per image)
    acls: Mapping[uuid.UUID, Acl] = field(default_factory=_empty)
    acl_index: AclIndex = field(default_factory=lambda: AclIndex(()), compare=False, repr=False)
    # Client quotas (ClientQuotaRecord) by entity: {((type, name or None), ...): {key: value}}
    quotas_by_entity: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=_empty)
    # Delegation tokens (DelegationTokenRecord) by id
    delegation_tokens: Mapping[str, DelegationToken] = field(default_factory=_empty)
    # The names of the topics this image's build added, changed or removed, relative to `changed_since` (the
    # topics_by_name of the image it was built on); None when unknown.
    changed_topics: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    changed_since: Mapping[str, TopicImage] | None = field(default=None, compare=False, repr=False)
    # The names with '.' or '_' by their unified form (Kafka's topicsWithCollisionChars): what CreateTopics checks a
    # new name against, without walking every topic.
    collision_names: Mapping[str, str] = field(default_factory=_empty, compare=False, repr=False)

    def topics_changed(self, before: Mapping[str, TopicImage]) -> Iterable[str] | None:
        """The names of the topics that may differ between `before` (an earlier image's topics_by_name) and this
        image, or None when this image cannot tell (it was not built on `before`): walk them all then."""
        return self.changed_topics if self.changed_since is before else None

    def topic(self, name_or_id: str | uuid.UUID) -> TopicImage | None:
        if isinstance(name_or_id, uuid.UUID):
            return self.topics_by_id.get(name_or_id)
        return self.topics_by_name.get(name_or_id)

    def live_brokers(self) -> list[int]:
        """Ids of registered, unfenced brokers, sorted."""
        return sorted(b.node_id for b in self.brokers.values() if not b.fenced)

    def broker_configs(self, node_id: int | None) -> Mapping[str, str]:
        """Dynamic configs of one broker, or the cluster default with node_id None."""
        return self.configs.get((BROKER_RESOURCE, "" if node_id is None else str(node_id)), _EMPTY)

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        """A group's dynamic configs (KIP-848), as set by IncrementalAlterConfigs on the GROUP resource."""
        return self.configs.get((GROUP_RESOURCE, group_id), _EMPTY)

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """The SCRAM credential of `user` for `mechanism` ("SCRAM-SHA-256" or "SCRAM-SHA-512"), if any."""
        return self.scram_credentials.get((user, mechanism))

    def scram_users(self) -> dict[str, dict[str, int]]:
        """Every user with a SCRAM credential: {user: {mechanism name: iterations}}, users and mechanisms sorted."""
        users: dict[str, dict[str, int]] = {}
        for (user, mechanism), credential in sorted(self.scram_credentials.items(),
                                                    key=lambda item: (item[0][0], SCRAM_MECHANISMS[item[0][1]])):
            users.setdefault(user, {})[mechanism] = credential.iterations
        return users

    def client_quotas(self, entity: QuotaEntity | Mapping[str, str | None]) -> Mapping[str, float]:
        """The quotas set on `entity` ((type, name or None) pairs in any order, or a map): {key: value}."""
        return self.quotas_by_entity.get(quota_entity(entity), _EMPTY)

    def applicable_client_quota(self, user: str, client_id: str, key: str) -> AppliedQuota | None:
        """The `key` quota a client of principal name `user` and `client_id` is held to (Kafka's
        precedence, klamm.controller.client_quotas.applicable_quota); None: no quota."""
        return applicable_quota(self.quotas_by_entity, user, client_id, key)


def empty_image(cluster_id: str, controller_id: int) -> MetadataImage:
    return MetadataImage(cluster_id=cluster_id, controller_id=controller_id)


class ImageBuilder:
    """Accumulates the records of one or more batches on top of a base image, and builds one image: the image
    takes the builder's maps (no copy of them again), so the builder is done then."""

    def __init__(self, base: MetadataImage) -> None:
        self.base = base
        self.offset = base.offset
        self.topics: dict[uuid.UUID, TopicImage] = _copy(base.topics_by_id)
        self.topics_by_name: dict[str, TopicImage] = _copy(base.topics_by_name)
        self.changed_topics: dict[str, None] = {}  # an ordered set: replay order, for a deterministic walk
        self.collision_names: dict[str, str] = _copy(base.collision_names)
        self.brokers: dict[int, BrokerRegistration] = _copy(base.brokers)
        self.features: dict[str, int] = _copy(base.features)
        self.configs: dict[tuple[int, str], Mapping[str, str]] = _copy(base.configs)
        self.next_producer_id = base.next_producer_id
        self.scram_credentials: dict[tuple[str, str], ScramCredential] = _copy(base.scram_credentials)
        self.acls: dict[uuid.UUID, Acl] = _copy(base.acls)
        self._base = base
        self.acls_changed = False
        self._quotas: dict[QuotaEntity, Mapping[str, float]] | None = None  # copied on the first change
        self._tokens: dict[str, DelegationToken] | None = None  # copied on the first change
        # Partition maps copied on first change, per topic id.
        self._partitions: dict[uuid.UUID, dict[int, PartitionImage]] = {}
        self._built = False

    def apply(self, record: MetadataRecord, offset: int | None = None) -> None:
        if self._built:
            raise RuntimeError("this ImageBuilder has built its image: its maps are that image's now")
        handler = _HANDLERS.get(record.type)
        if handler is None:
            log.debug("ignoring metadata record %s", record.type)
        else:
            handler(self, record.data)
        if offset is not None:
            self.offset = offset

    def build(self) -> MetadataImage:
        if self._built:
            raise RuntimeError("an ImageBuilder builds one image")
        self._built = True
        for topic_id, partitions in self._partitions.items():
            topic = self.topics.get(topic_id)
            if topic is not None:
                self.put_topic(replace(topic, partitions=MappingProxyType(dict(partitions))))
        self._partitions.clear()
        return MetadataImage(
            cluster_id=self.base.cluster_id,
            controller_id=self.base.controller_id,
            offset=self.offset,
            topics_by_name=MappingProxyType(self.topics_by_name),
            topics_by_id=MappingProxyType(self.topics),
            brokers=MappingProxyType(self.brokers),
            features=MappingProxyType(self.features),
            configs=MappingProxyType(self.configs),
            next_producer_id=self.next_producer_id,
            scram_credentials=MappingProxyType(self.scram_credentials),
            acls=MappingProxyType(self.acls) if self.acls_changed else self._base.acls,
            acl_index=AclIndex(self.acls.values()) if self.acls_changed else self._base.acl_index,
            quotas_by_entity=self._base.quotas_by_entity if self._quotas is None else MappingProxyType(
                dict(self._quotas)),
            delegation_tokens=self._base.delegation_tokens if self._tokens is None else MappingProxyType(
                dict(self._tokens)),
            changed_topics=tuple(self.changed_topics),
            collision_names=MappingProxyType(self.collision_names),
            changed_since=self._base.topics_by_name,
        )

    # -- helpers used by the handlers

    def put_topic(self, topic: TopicImage) -> None:
        """Add or replace a topic in both topic maps."""
        self.topics[topic.topic_id] = topic
        self.topics_by_name[topic.name] = topic
        self.changed_topics[topic.name] = None
        if has_collision_chars(topic.name):
            self.collision_names[unify_collision_chars(topic.name)] = topic.name

    def remove_topic(self, topic_id: uuid.UUID) -> None:
        topic = self.topics.pop(topic_id, None)
        if topic is not None:
            if self.topics_by_name.get(topic.name) is topic:
                del self.topics_by_name[topic.name]
                if self.collision_names.get(unify_collision_chars(topic.name)) == topic.name:
                    del self.collision_names[unify_collision_chars(topic.name)]
            self.changed_topics[topic.name] = None
        self._partitions.pop(topic_id, None)

    def partitions_of(self, topic_id: uuid.UUID) -> dict[int, PartitionImage] | None:
        topic = self.topics.get(topic_id)
        if topic is None:
            return None
        partitions = self._partitions.get(topic_id)
        if partitions is None:
            partitions = dict(topic.partitions)
            self._partitions[topic_id] = partitions  # build() puts the topic back, changed
        return partitions

    def client_quotas(self) -> dict[QuotaEntity, Mapping[str, float]]:
        """The quotas by entity, to change (copied from the base image on first use)."""
        if self._quotas is None:
            self._quotas = dict(self._base.quotas_by_entity)
        return self._quotas

    def delegation_tokens(self) -> dict[str, DelegationToken]:
        """The delegation tokens by id, to change (copied from the base image on first use)."""
        if self._tokens is None:
            self._tokens = dict(self._base.delegation_tokens)
        return self._tokens

    def topic_named(self, name: str) -> TopicImage | None:
        return self.topics_by_name.get(name)


def _copy(mapping: Mapping) -> dict:
    """A dict of `mapping`: a C-level clone for an image's maps (no key hashed again)."""
    return mapping.copy() if isinstance(mapping, (dict, MappingProxyType)) else dict(mapping)


def apply(image: MetadataImage, record: MetadataRecord, offset: int | None = None) -> MetadataImage:
    """The image after one record (`offset` becomes image.offset when given)."""
    builder = ImageBuilder(image)
    builder.apply(record, offset)
    return builder.build()


def apply_batch(image: MetadataImage, records: Iterable[tuple[int, MetadataRecord]]) -> MetadataImage:
    """The image after a batch of (offset, record) pairs."""
    builder = ImageBuilder(image)
    for offset, record in records:
        builder.apply(record, offset)
    return builder.build()


# ---------------------------------------------------------------------------
# Record handlers: one per record type, each mutating only the builder.


def _register_broker(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    endpoints = d["end_points"]
    first = endpoints[0] if endpoints else {"name": "", "host": "", "port": 0, "security_protocol": 0}
    b.brokers[d["broker_id"]] = BrokerRegistration(
        node_id=d["broker_id"],
        host=first["host"],
        port=first["port"],
        rack=d["rack"],
        listener=first["name"],
        fenced=d["fenced"],
        epoch=d["broker_epoch"],
        incarnation_id=d["incarnation_id"],
        security_protocol=first["security_protocol"],
        in_controlled_shutdown=d.get("in_controlled_shutdown", False),
        endpoints=tuple(Endpoint(e["name"], e["host"], e["port"], e["security_protocol"]) for e in endpoints),
    )


def _unregister_broker(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    b.brokers.pop(d["broker_id"], None)


def _set_fenced(b: ImageBuilder, broker_id: int, fenced: bool) -> None:
    broker = b.brokers.get(broker_id)
    if broker is not None:
        b.brokers[broker_id] = replace(broker, fenced=fenced)


def _fence_broker(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    _set_fenced(b, d["id"], True)


def _unfence_broker(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    _set_fenced(b, d["id"], False)


def _broker_registration_change(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    # Fenced: -1 unfenced, 0 no change, 1 fenced.
    if d["fenced"] != 0:
        _set_fenced(b, d["broker_id"], d["fenced"] > 0)
    broker = b.brokers.get(d["broker_id"])
    if broker is not None and d.get("in_controlled_shutdown", 0) == 1:
        b.brokers[broker.node_id] = replace(broker, in_controlled_shutdown=True)


def _topic(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    b.put_topic(TopicImage(name=d["name"], topic_id=d["topic_id"]))


def _remove_topic(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    b.remove_topic(d["topic_id"])


def _partition(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    partitions = b.partitions_of(d["topic_id"])
    if partitions is None:
        log.warning("PartitionRecord for unknown topic id %s", d["topic_id"])
        return
    partitions[d["partition_id"]] = PartitionImage(
        partition=d["partition_id"],
        replicas=tuple(d["replicas"]),
        isr=tuple(d["isr"]),
        leader=d["leader"],
        leader_epoch=d["leader_epoch"],
        partition_epoch=d["partition_epoch"],
        removing_replicas=tuple(d["removing_replicas"]),
        adding_replicas=tuple(d["adding_replicas"]),
        leader_recovery_state=d["leader_recovery_state"],
    )


def _partition_change(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    partitions = b.partitions_of(d["topic_id"])
    current = None if partitions is None else partitions.get(d["partition_id"])
    if current is None:
        log.warning("PartitionChangeRecord for unknown partition %s-%s", d["topic_id"], d["partition_id"])
        return
    changes: dict[str, Any] = {"partition_epoch": current.partition_epoch + 1}
    for key in ("isr", "replicas", "removing_replicas", "adding_replicas"):
        if d[key] is not None:
            changes[key] = tuple(d[key])
    # As in Kafka's PartitionRegistration.merge: a leader change bumps the leader epoch.
    if d["leader"] != NO_LEADER_CHANGE:
        changes["leader"] = d["leader"]
        changes["leader_epoch"] = current.leader_epoch + 1
    if d["leader_recovery_state"] != -1:
        changes["leader_recovery_state"] = d["leader_recovery_state"]
    partitions[current.partition] = replace(current, **changes)


def _config(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    resource_type, resource_name, name, value = d["resource_type"], d["resource_name"], d["name"], d["value"]
    if resource_type == TOPIC_RESOURCE:
        topic = b.topic_named(resource_name)
        if topic is None:
            log.warning("ConfigRecord for unknown topic %s", resource_name)
            return
        b.put_topic(replace(topic, configs=_with_config(topic.configs, name, value)))
        return
    key = (resource_type, resource_name)
    configs = _with_config(b.configs.get(key, _EMPTY), name, value)
    if configs:
        b.configs[key] = configs
    else:
        b.configs.pop(key, None)


def _with_config(configs: Mapping[str, str], name: str, value: str | None) -> Mapping[str, str]:
    updated = dict(configs)
    if value is None:  # a null value deletes the config
        updated.pop(name, None)
    else:
        updated[name] = value
    return MappingProxyType(updated)


def _feature_level(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    if d["feature_level"] == 0:  # level 0: the feature is disabled
        b.features.pop(d["name"], None)
    else:
        b.features[d["name"]] = d["feature_level"]


def _producer_ids(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    b.next_producer_id = d["next_producer_id"]


def _scram_key(d: Mapping[str, Any]) -> tuple[str, str] | None:
    mechanism = SCRAM_MECHANISM_NAMES.get(d["mechanism"])
    if mechanism is None:
        log.warning("SCRAM credential record of user %r with unknown mechanism %d", d["name"], d["mechanism"])
        return None
    return d["name"], mechanism


def _user_scram_credential(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    key = _scram_key(d)
    if key is not None:
        b.scram_credentials[key] = ScramCredential(salt=bytes(d["salt"]), stored_key=bytes(d["stored_key"]),
                                                   server_key=bytes(d["server_key"]), iterations=d["iterations"])


def _remove_user_scram_credential(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    key = _scram_key(d)
    if key is not None and b.scram_credentials.pop(key, None) is None:
        log.warning("RemoveUserScramCredentialRecord for %s of user %r, which has none", key[1], key[0])


def _access_control_entry(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    b.acls[d["id"]] = Acl(d["resource_type"], d["resource_name"], d["pattern_type"], d["principal"], d["host"],
                          d["operation"], d["permission_type"])
    b.acls_changed = True


def _remove_access_control_entry(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    if b.acls.pop(d["id"], None) is None:
        log.warning("RemoveAccessControlEntryRecord for ACL %s, which does not exist", d["id"])
    b.acls_changed = True


def _client_quota(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    entity = quota_entity((e["entity_type"], e["entity_name"]) for e in d["entity"])
    quotas = b.client_quotas()
    values = dict(quotas.get(entity, _EMPTY))
    if d["remove"]:
        values.pop(d["key"], None)
    else:
        values[d["key"]] = d["value"]
    if values:
        quotas[entity] = MappingProxyType(values)
    else:
        quotas.pop(entity, None)

def _delegation_token(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    b.delegation_tokens()[d["token_id"]] = DelegationToken(
        d["token_id"], d["owner"], d["requester"], tuple(d["renewers"]), d["issue_timestamp"], d["max_timestamp"],
        d["expiration_timestamp"])


def _remove_delegation_token(b: ImageBuilder, d: Mapping[str, Any]) -> None:
    b.delegation_tokens().pop(d["token_id"], None)


_HANDLERS = {
    "RegisterBrokerRecord": _register_broker,
    "UnregisterBrokerRecord": _unregister_broker,
    "FenceBrokerRecord": _fence_broker,
    "UnfenceBrokerRecord": _unfence_broker,
    "BrokerRegistrationChangeRecord": _broker_registration_change,
    "TopicRecord": _topic,
    "RemoveTopicRecord": _remove_topic,
    "PartitionRecord": _partition,
    "PartitionChangeRecord": _partition_change,
    "ConfigRecord": _config,
    "FeatureLevelRecord": _feature_level,
    "ProducerIdsRecord": _producer_ids,
    "UserScramCredentialRecord": _user_scram_credential,
    "RemoveUserScramCredentialRecord": _remove_user_scram_credential,
    "AccessControlEntryRecord": _access_control_entry,
    "RemoveAccessControlEntryRecord": _remove_access_control_entry,
    "ClientQuotaRecord": _client_quota,
    "DelegationTokenRecord": _delegation_token,
    "RemoveDelegationTokenRecord": _remove_delegation_token,
}
