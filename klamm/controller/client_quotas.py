"""Client quotas: AlterClientQuotas as metadata records, DescribeClientQuotas, and the quota a client gets.

An entity is a user, a client id, a user and a client id together, or an IP
address; a name of None is that type's default ("<default>" in kafka-configs.sh).
klamm keys the quotas of an entity by `QuotaEntity`, a tuple of
(entity type, name or None) pairs in the order user, client-id, ip:

    (("user", "alice"),)                      /config/users/alice
    (("user", "alice"), ("client-id", None))  /config/users/alice/clients/<default>
    (("client-id", "c1"),)                    /config/clients/c1
    (("ip", None),)                           /config/ips/<default>

Every quota is a float (ClientQuotaRecord: entity, key, value, remove). The
image keeps {QuotaEntity: {key: value}}; an entity without quotas is dropped.

AlterClientQuotas follows Kafka's ClientQuotaControlManager, per entry of the
request (its entity collapsed to a map, as Kafka's request does: a type named
twice keeps its last name), one result per distinct entity:

- a key named twice in an entry, or an entity altered by an earlier entry:
  INVALID_REQUEST "Ignoring duplicate entity ClientQuotaEntity(entries={...})"
  (Kafka sets "Duplicate quota key ..." and then overwrites it with this); an
  earlier entry's records for the entity stay, as in Kafka;
- an empty entity: "Invalid empty client quota entity"; a type other than user,
  client-id, ip: "Unhandled client quota entity type: <t>"; an empty name:
  "Empty <t> not supported"; ip with user or client-id: "Invalid quota entity
  combination, IP entity shouldnot be combined with User or ClientId" (sic); an
  ip name that is neither an address nor a resolvable host: "<ip> is not a valid
  IP or resolvable host.";
- a key set on the wrong kind of entity: "Invalid configuration key <k>" (user
  and client-id entities take producer_byte_rate, consumer_byte_rate (longs),
  request_percentage and controller_mutation_rate (doubles); ip entities take
  connection_creation_rate (an int)); a value <= 0: "Quota <k> must be greater
  than 0"; a long or int above its range: "Proposed value for <k> is too large
  for a LONG." / "... for an INT."; a fraction for a long or int: "<k> cannot be
  a fractional value.";
- removing a key the entity lacks (whatever the key) succeeds and writes
  nothing; a value equal to the current one writes nothing.

The records of every successful entity form one atomic batch; validate_only
writes none. DescribeClientQuotas filters the image (ClientQuotasImage.describe):
components of match type exact (0, a name), default (1) or specified (2, any
name), each type at most once, ip not with user or client-id; strict keeps only
entities of exactly the filtered types.

`applicable_quota` is the quota a client's requests are held to: Kafka's
DefaultQuotaCallback precedence for one key (/config/users/<user>/clients/<client-id>,
/config/users/<user>/clients/<default>, /config/users/<user>,
/config/users/<default>/clients/<client-id>, /config/users/<default>/clients/<default>,
/config/users/<default>, /config/clients/<client-id>, /config/clients/<default>).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from klamm.controller.image import MetadataImage

__all__ = [
    "CLIENT_ID",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "IP",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "MATCH_SPECIFIED",
    "PRODUCER_BYTE_RATE",
    "REQUEST_PERCENTAGE",
    "USER",
    "AppliedQuota",
    "ClientQuotaAlteration",
    "ClientQuotaResult",
    "QuotaEntity",
    "QuotaFilterComponent",
    "applicable_quota",
    "decide_alter_client_quotas",
    "describe_client_quotas",
    "ip_hosts",
    "java_entity",
    "quota_entity",
]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE = "request_percentage", "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotas match types

QuotaEntity = tuple[tuple[str, "str | None"], ...]

_LONG, _INT, _DOUBLE = "LONG", "INT", "DOUBLE"
# QuotaConfig.userAndClientQuotaConfigs() and ipConfigs(): the keys each kind of entity takes, and their types.
USER_AND_CLIENT_KEYS: Mapping[str, str] = {PRODUCER_BYTE_RATE: _LONG, CONSUMER_BYTE_RATE: _LONG,
                                           REQUEST_PERCENTAGE: _DOUBLE, CONTROLLER_MUTATION_RATE: _DOUBLE}
IP_KEYS: Mapping[str, str] = {CONNECTION_CREATION_RATE: _INT}
_LIMITS = {_LONG: (float(2**63 - 1), "a LONG"), _INT: (float(2**31 - 1), "an INT")}
_ORDER = {USER: 0, CLIENT_ID: 1, IP: 2}
_JAVA_ORDER = {CLIENT_ID: 0, USER: 1, IP: 2}  # how Java's HashMap lists these keys (their hash buckets)


def quota_entity(entries: Mapping[str, str | None] | Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The canonical QuotaEntity of a map or of (type, name) pairs (a type given twice keeps its last name)."""
    pairs = dict(entries.items() if isinstance(entries, Mapping) else entries)
    return tuple(sorted(pairs.items(), key=lambda pair: (_ORDER.get(pair[0], len(_ORDER)), pair[0])))


def java_entity(entity: Iterable[tuple[str, str | None]]) -> str:
    """Kafka's ClientQuotaEntity.toString, e.g. "ClientQuotaEntity(entries={client-id=c1, user=null})"."""
    pairs = sorted(dict(entity).items(), key=lambda pair: (_JAVA_ORDER.get(pair[0], len(_JAVA_ORDER)), pair[0]))
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={'null' if n is None else n}" for t, n in pairs) + "})"


# ----------------------------------------------------------------------- the quota a client gets


@dataclass(frozen=True, slots=True)
class AppliedQuota:
    """The quota of one key that applies to a (user, client id) pair, and where it comes from.

    `metric_tags` is Kafka's (user, client-id) pair naming the quota's sensor: the clients that share
    the quota have the same tags ("" for a level the quota is not per: a quota of /config/users/<user>
    is shared by every client id of that user, tags (user, ""))."""

    value: float
    entity: QuotaEntity
    metric_tags: tuple[str, str]


def applicable_quota(quotas: Mapping[QuotaEntity, Mapping[str, float]], user: str, client_id: str,
                     key: str) -> AppliedQuota | None:
    """The `key` quota (producer_byte_rate, consumer_byte_rate, request_percentage, ...) of a client
    connected as principal name `user` with `client_id`, by Kafka's precedence; None: unlimited.

    Kafka's DefaultQuotaCallback: quotaMetricTags picks the tags from the most specific entity that has
    the key, then quotaLimit looks the quota up from those tags (see the module docstring)."""
    def has(*entity: tuple[str, str | None]) -> bool:
        values = quotas.get(entity)
        return values is not None and key in values

    u, du, c, dc = (USER, user), (USER, None), (CLIENT_ID, client_id), (CLIENT_ID, None)
    if has(u, c) or has(u, dc):
        tags = (user, client_id)
    elif has(u):
        tags = (user, "")
    elif has(du, c) or has(du, dc):
        tags = (user, client_id)
    elif has(du):
        tags = (user, "")
    else:
        tags = ("", client_id)
    user_tag, client_tag = tags
    if user_tag and client_tag:
        candidates: tuple[QuotaEntity, ...] = (((USER, user_tag), (CLIENT_ID, client_tag)), (u, dc),
                                               (du, (CLIENT_ID, client_tag)), (du, dc))
    elif user_tag:
        candidates = ((u,), (du,))
    elif client_tag:
        candidates = (((CLIENT_ID, client_tag),), (dc,))
    else:
        candidates = ()
    for entity in candidates:
        values = quotas.get(entity)
        if values is not None and key in values:
            return AppliedQuota(values[key], entity, tags)
    return None


# ----------------------------------------------------------------------- AlterClientQuotas


@dataclass(frozen=True)
class ClientQuotaAlteration:
    """One entry of AlterClientQuotas: the entity's (type, name) pairs as sent, and (key, value) ops,
    a value of None removing the key."""

    entity: tuple[tuple[str, str | None], ...]
    ops: tuple[tuple[str, float | None], ...]


@dataclass(frozen=True)
class ClientQuotaResult:
    entity: tuple[tuple[str, str | None], ...]  # the entity as a map: each type once
    error: ErrorCode = ErrorCode.none
    message: str | None = None


def ip_hosts(alterations: Iterable[ClientQuotaAlteration]) -> set[str]:
    """The ip entity names that are not IP addresses: the host names to resolve before deciding."""
    hosts = set()
    for alteration in alterations:
        for entity_type, name in alteration.entity:
            if entity_type == IP and name and not _is_ip_address(name):
                hosts.add(name)
    return hosts


def _is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def decide_alter_client_quotas(image: MetadataImage, alterations: Iterable[ClientQuotaAlteration],
                               resolvable_hosts: Iterable[str] = ()) -> tuple[list[ClientQuotaResult],
                                                                              list[MetadataRecord]]:
    """One result per distinct entity (request order) and the records of the successful ones.

    An ip entity named by a host name is valid when the name is in `resolvable_hosts` (the caller
    resolves them, so that deciding never waits for DNS)."""
    resolvable = frozenset(resolvable_hosts)
    results: dict[QuotaEntity, ClientQuotaResult] = {}
    records: list[MetadataRecord] = []
    for alteration in alterations:
        entries = dict(alteration.entity)
        key = quota_entity(entries)
        as_map = tuple(entries.items())
        changes: dict[str, float | None] = {}
        for name, value in alteration.ops:
            if name in changes:
                results[key] = ClientQuotaResult(as_map, ErrorCode.invalid_request,
                                                 f"Duplicate quota key {name} not updating quota for this entity "
                                                 f"{java_entity(as_map)}")
            else:
                changes[name] = value
        if key in results:
            results[key] = ClientQuotaResult(as_map, ErrorCode.invalid_request,
                                             f"Ignoring duplicate entity {java_entity(as_map)}")
            continue
        message, entity_records = _alter_entity(image, entries, key, changes, resolvable)
        if message is None:
            records.extend(entity_records)
            results[key] = ClientQuotaResult(as_map)
        else:
            results[key] = ClientQuotaResult(as_map, ErrorCode.invalid_request, message)
    return list(results.values()), records


def _alter_entity(image: MetadataImage, entries: Mapping[str, str | None], key: QuotaEntity,
                  changes: Mapping[str, float | None], resolvable: frozenset[str]
                  ) -> tuple[str | None, list[MetadataRecord]]:
    """(None, records) for a valid alteration of one entity, else (its error message, [])."""
    message = _entity_error(entries)
    if message is not None:
        return message, []
    valid_keys, message = _keys_for(entries, resolvable)
    if message is not None:
        return message, []
    current = image.quotas_by_entity.get(key, {})
    record_entity = [{"entity_type": t, "entity_name": n} for t, n in key]
    records = []
    for name, value in changes.items():
        if value is None:
            if name in current:
                records.append(MetadataRecord("ClientQuotaRecord", {
                    "entity": record_entity, "key": name, "value": 0.0, "remove": True}))
            continue
        message = _value_error(valid_keys, name, value)
        if message is not None:
            return message, []
        if not _same(current.get(name), value):
            records.append(MetadataRecord("ClientQuotaRecord", {
                "entity": record_entity, "key": name, "value": value, "remove": False}))
    return None, records


def _entity_error(entries: Mapping[str, str | None]) -> str | None:
    if not entries:
        return "Invalid empty client quota entity"
    for entity_type, name in entries.items():
        if entity_type not in _ORDER:
            return f"Unhandled client quota entity type: {entity_type}"
        if name == "":
            return f"Empty {entity_type} not supported"
    return None


def _keys_for(entries: Mapping[str, str | None], resolvable: frozenset[str]) -> tuple[Mapping[str, str], str | None]:
    if IP in entries:
        if USER in entries or CLIENT_ID in entries:
            return {}, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        ip = entries[IP]
        if ip is not None and not _is_ip_address(ip) and ip not in resolvable:
            return {}, f"{ip} is not a valid IP or resolvable host."
        return IP_KEYS, None
    return USER_AND_CLIENT_KEYS, None


def _value_error(valid_keys: Mapping[str, str], name: str, value: float) -> str | None:
    """ClientQuotaControlManager.validateQuotaKeyValue (a NaN passes, as in Java)."""
    kind = valid_keys.get(name)
    if kind is None:
        return f"Invalid configuration key {name}"
    if value <= 0.0:
        return f"Quota {name} must be greater than 0"
    if kind == _DOUBLE:
        return None
    limit, what = _LIMITS[kind]
    if value > limit:
        return f"Proposed value for {name} is too large for {what}."
    if abs(math.fmod(value, 1.0)) > 1e-6:
        return f"{name} cannot be a fractional value."
    return None


def _same(current: float | None, value: float) -> bool:
    """Java's Objects.equals of two Doubles (NaN equals NaN)."""
    if current is None:
        return False
    return current == value or (math.isnan(current) and math.isnan(value))


# ----------------------------------------------------------------------- DescribeClientQuotas


@dataclass(frozen=True)
class QuotaFilterComponent:
    entity_type: str
    match_type: int  # MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED
    match: str | None = None


def describe_client_quotas(image: MetadataImage, components: Sequence[QuotaFilterComponent],
                           strict: bool) -> list[tuple[QuotaEntity, Mapping[str, float]]]:
    """The entities the filter matches with their quotas, sorted; KafkaError INVALID_REQUEST (or
    UNSUPPORTED_VERSION for an unknown entity type) for a filter Kafka refuses."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for component in components:
        entity_type = component.entity_type
        if not entity_type:
            raise KafkaError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if entity_type in exact or entity_type in specified:
            raise KafkaError(ErrorCode.invalid_request,
                             f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in _ORDER:
            raise KafkaError(ErrorCode.unsupported_version, f"Unsupported entity type {entity_type}")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                raise KafkaError(ErrorCode.invalid_request,
                                 "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = component.match
        elif component.match_type == MATCH_DEFAULT:
            if component.match is not None:
                raise KafkaError(ErrorCode.invalid_request,
                                 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif component.match_type == MATCH_SPECIFIED:
            if component.match is not None:
                raise KafkaError(ErrorCode.invalid_request,
                                 "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(entity_type)
        else:
            raise KafkaError(ErrorCode.invalid_request, f"Unknown match type {component.match_type}")
    if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (exact.keys() | specified)):
        raise KafkaError(ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter "
                                                    "component should not be used with user or clientId filter "
                                                    "component.")
    matched = []
    for entity, values in image.quotas_by_entity.items():
        entries = dict(entity)
        if strict and len(entries) != len(exact) + len(specified):
            continue
        if any(t not in entries or entries[t] != name for t, name in exact.items()):
            continue
        if any(t not in entries for t in specified):
            continue
        matched.append((entity, values))
    return sorted(matched, key=lambda item: _sort_key(item[0]))


def _sort_key(entity: QuotaEntity) -> tuple:
    return tuple((_ORDER.get(t, len(_ORDER)), t, name is not None, name or "") for t, name in entity)
