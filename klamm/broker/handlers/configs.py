"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44): topic, broker and group configs.

Answers as Kafka's ConfigHelper (describe), ConfigAdminManager (the broker's
checks of broker resources) and ConfigurationControlManager (the controller's
decision) do. Topic overrides and dynamic broker configs are ConfigRecords in
the metadata log; every image change re-resolves the running topics' configs
(ReplicaManager.apply_image) and the broker's effective config
(`apply_dynamic_broker_configs`), so an accepted change is in force when the
response leaves.

Dynamic broker configs: klamm applies live exactly the broker defaults of topic
configs (Kafka's DynamicLogConfig set: log.retention.ms, message.max.bytes,
log.segment.bytes, ...). Other known broker configs are refused as Kafka refuses
its non-dynamic ones, so no change is reported that is not in force. Unknown
names are stored, as Kafka stores them (custom plugin configs), with no effect.

Group configs (KIP-848): consumer.session.timeout.ms and consumer.heartbeat.interval.ms
of one group, checked as Kafka's GroupConfig (klamm/config/group.py) and stored as
GROUP ConfigRecords; the group coordinator reads them from the image at each member's
heartbeat. A group need not exist to have configs. Described as Kafka's ConfigHelper:
every key, GROUP_CONFIG when the group sets it, else the broker's value as DEFAULT_CONFIG.

With an authorizer: describing needs DESCRIBE_CONFIGS, altering ALTER_CONFIGS, on
the topic for a topic's configs, on the group for a group's and on the cluster for a
broker's, else TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED for that resource.
An alteration is authorized after the broker's own checks of the request (as
Kafka's broker checks it before its controller authorizes it). ListConfigResources
needs DESCRIBE_CONFIGS on the cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from klamm.broker.cleaner_tasks import RECONFIGURABLE, check_cleaner_threads
from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.config.broker import BrokerConfig
from klamm.config.broker_keys import BROKER_CONFIG_DEF
from klamm.config.definition import ConfigKey, ConfigSource, ConfigType, format_value
from klamm.config.errors import ConfigError
from klamm.config.group import GROUP_CONFIG_BROKER_KEYS, effective_group_configs, validate_group_configs
from klamm.config.topic import TopicConfig
from klamm.config.topic_keys import TOPIC_CONFIG_DEF
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {APPEND: "APPEND", SUBTRACT: "SUBTRACT"}

# Broker configs klamm can change live: those that supply topic defaults, and the log cleaner's.
DYNAMIC_BROKER_CONFIGS: frozenset[str] = frozenset(s.name for key in TOPIC_CONFIG_DEF for s in key.synonyms) | \
    frozenset(RECONFIGURABLE)
# Kafka's brokerConfigSynonyms: a millisecond config and its coarser fallbacks, most specific first.
_BROKER_SYNONYMS: dict[str, list[str]] = {
    key.synonyms[0].name: [s.name for s in key.synonyms] for key in TOPIC_CONFIG_DEF if len(key.synonyms) > 1}


# -- the effective broker config ----------------------------------------------------------


def static_properties(static: BrokerConfig) -> dict[str, str]:
    """The operator's server.properties values, in Kafka's string form."""
    props = {name: format_value(BROKER_CONFIG_DEF[name].type, static.value_of(name)) for name in static.explicit_keys}
    return {name: value for name, value in props.items() if value is not None}


def effective_broker_config(static: BrokerConfig, image: Any) -> BrokerConfig:
    """Static configs overlaid with the cluster-wide then the per-broker dynamic configs (Kafka's order)."""
    dynamic = {**image.broker_configs(None), **image.broker_configs(static.node_id)}
    known = {name: value for name, value in dynamic.items() if name in BROKER_CONFIG_DEF}
    if not known:
        return static
    # Both layers were checked for support when they were set (start-up, AlterConfigs).
    return BrokerConfig.from_properties({**static_properties(static), **static.listener_properties, **known},
                                        check_support=False)


def apply_dynamic_broker_configs(broker: BrokerServices, image: Any) -> None:
    """Make the broker (and every topic default it supplies) follow the image's dynamic configs."""
    config = effective_broker_config(broker.static_config, image)
    if config == broker.config:
        return
    broker.config = config
    broker.replicas.reconfigure(config)
    broker.replicas.apply_image(image)
    broker.log_cleaner.reconfigure(config)


# -- DescribeConfigs ---------------------------------------------------------------------------


async def describe_configs(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    describer = _Describer(broker, getattr(body, "include_synonyms", False),  # v1+
                           getattr(body, "include_documentation", False))
    if not broker.authorizer.enabled:
        return {"results": [describer.resource(r) for r in body.resources]}
    results = []
    for resource in body.resources:
        refusal = _refusal(broker, request, AclOperation.DESCRIBE_CONFIGS, resource)
        if refusal is None:
            results.append(describer.resource(resource))
        else:
            results.append({"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                            "error_code": refusal.code, "error_message": refusal.message, "configs": []})
    return {"results": results}


# The resource an operation on a config resource is authorized on, and the error refusing it (Kafka's
# ConfigHelper and ControllerApis.authorizeAlterResource): broker (and broker logger, client metrics)
# configs are the cluster's, a topic's its own, a group's its own.
_CONFIG_RESOURCES = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed, "Topic authorization failed."),
    BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    BROKER_LOGGER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    16: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
    32: (ResourceType.GROUP, ErrorCode.group_authorization_failed, "Group authorization failed."),
}


def _refusal(broker: BrokerServices, request: Any, operation: AclOperation, resource: Any) -> KafkaError | None:
    """The error refusing `operation` on a config resource; None when allowed (or of no known type)."""
    known = _CONFIG_RESOURCES.get(resource.resource_type)
    if known is None:
        return None
    resource_type, code, message = known
    name = CLUSTER_NAME if resource_type == ResourceType.CLUSTER else resource.resource_name
    return None if broker.authorizer.allowed(request, operation, resource_type, name) else KafkaError(code, message)


def _authorize_alter(broker: BrokerServices, request: Any, resource: Any) -> None:
    refusal = _refusal(broker, request, AclOperation.ALTER_CONFIGS, resource)
    if refusal is not None:
        raise refusal


class _Describer:
    def __init__(self, broker: BrokerServices, include_synonyms: bool, include_documentation: bool) -> None:
        self.broker = broker
        self.include_synonyms = include_synonyms
        self.include_documentation = include_documentation
        image = broker.controller.image
        self.dynamic_broker = dict(image.broker_configs(broker.node_id))
        self.dynamic_default = dict(image.broker_configs(None))
        self.static = static_properties(broker.static_config)
        self.static_default = {key.name: format_value(key.type, key.default) for key in BROKER_CONFIG_DEF
                               if key.default is not None}

    def resource(self, resource: Any) -> dict[str, Any]:
        result: dict[str, Any] = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                                  "error_code": ErrorCode.none, "error_message": None, "configs": []}
        try:
            if resource.resource_type == TOPIC:
                entries = self.topic(resource.resource_name)
            elif resource.resource_type == BROKER:
                entries = self.broker_resource(resource.resource_name)
            elif resource.resource_type == GROUP:
                entries = self.group(resource.resource_name)
            else:
                raise KafkaError(ErrorCode.invalid_request, f"Unsupported resource type: {_type_name(resource.resource_type)}")
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=exc.message)
            return result
        if resource.resource_type != BROKER or resource.resource_name:
            entries = in_kafka_order(entries)
        wanted = resource.configuration_keys
        result["configs"] = [e for e in entries if not wanted or e["name"] in wanted]
        return result

    def topic(self, name: str) -> list[dict[str, Any]]:
        image_topic = self.broker.controller.image.topics_by_name.get(name)
        if image_topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, None)
        overrides = dict(image_topic.configs)
        config = TopicConfig.resolve(self.broker.config, overrides)
        return [self._topic_entry(key, config, overrides) for key in TOPIC_CONFIG_DEF
                if not key.internal or key.name in overrides]

    def _topic_entry(self, key: ConfigKey, config: Any, overrides: Mapping[str, str]) -> dict[str, Any]:
        value = None if key.sensitive else format_value(key.type, config.value_of(key.name))
        synonyms = []
        if key.synonyms:
            synonyms = self._synonyms(key.synonyms[0].name, [s.name for s in key.synonyms], key.sensitive)
        if key.name in overrides:
            synonyms.insert(0, _synonym(key.name, value, ConfigSource.TOPIC_CONFIG))
        return self._entry(key, value, synonyms, read_only=False)

    def broker_resource(self, name: str) -> list[dict[str, Any]]:
        if not name:
            # the cluster-wide defaults: only what is set dynamically at that level
            keys = [BROKER_CONFIG_DEF[n] for n in self.dynamic_default if n in BROKER_CONFIG_DEF]
            return [self._broker_entry(key, per_broker=False) for key in keys]
        if _broker_id(name, "Broker id must be an integer, but it is: ") != self.broker.node_id:
            raise KafkaError(ErrorCode.invalid_request, f"Unexpected broker id, expected {self.broker.node_id} "
                                                        f"or empty string, but received {name}")
        return [self._broker_entry(key, per_broker=True) for key in BROKER_CONFIG_DEF if not key.internal]

    def _broker_entry(self, key: ConfigKey, per_broker: bool) -> dict[str, Any]:
        if per_broker:
            value = format_value(key.type, self.broker.config.value_of(key.name))
        else:
            value = self.dynamic_default.get(key.name)
        value = None if key.sensitive else value
        synonyms = self._synonyms(key.name, _BROKER_SYNONYMS.get(key.name, [key.name]), key.sensitive)
        if not per_broker:
            synonyms = [s for s in synonyms if s["source"] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        return self._entry(key, value, synonyms, read_only=key.name not in DYNAMIC_BROKER_CONFIGS)

    def group(self, name: str) -> list[dict[str, Any]]:
        if not name:
            raise KafkaError(ErrorCode.invalid_request, "Group name must not be empty")
        overrides = self.broker.controller.image.group_configs(name)
        values = effective_group_configs(self.broker.config, overrides)
        entries = []
        for key_name, broker_key in GROUP_CONFIG_BROKER_KEYS.items():
            value = str(values[key_name])
            # Kafka's createGroupConfigEntry: one synonym, the group's own or the default (the broker's value)
            source = ConfigSource.GROUP_CONFIG if key_name in overrides else ConfigSource.DEFAULT_CONFIG
            key = BROKER_CONFIG_DEF[broker_key]
            entries.append({
                "name": key_name, "value": value, "read_only": False,
                "config_source": source, "is_default": source == ConfigSource.DEFAULT_CONFIG,
                "is_sensitive": False,
                "synonyms": [_synonym(key_name, value, source)] if self.include_synonyms else [],
                "config_type": key.type.value,
                "documentation": key.documentation if self.include_documentation else None,
            })
        return entries

    def _synonyms(self, name: str, names: list[str], sensitive: bool) -> list[dict[str, Any]]:
        """Kafka's configSynonyms: per source (dynamic broker, dynamic default, static, default), each
        name that is set; then everything before the first entry for `name` itself is dropped."""
        found = []
        for values, source in ((self.dynamic_broker, ConfigSource.DYNAMIC_BROKER_CONFIG),
                               (self.dynamic_default, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                               (self.static, ConfigSource.STATIC_BROKER_CONFIG),
                               (self.static_default, ConfigSource.DEFAULT_CONFIG)):
            found += [_synonym(n, None if sensitive else values[n], source) for n in names if n in values]
        while found and found[0]["name"] != name:
            found.pop(0)
        return found

    def _entry(self, key: ConfigKey, value: str | None, synonyms: list[dict[str, Any]], read_only: bool) -> dict[str, Any]:
        source = synonyms[0]["source"] if synonyms else ConfigSource.DEFAULT_CONFIG
        return {
            "name": key.name, "value": value, "read_only": read_only,
            "config_source": source, "is_default": source == ConfigSource.DEFAULT_CONFIG,  # v0 has is_default only
            "is_sensitive": key.sensitive,
            "synonyms": synonyms if self.include_synonyms else [],
            "config_type": key.type.value,
            "documentation": key.documentation if self.include_documentation else None,
        }


def _synonym(name: str, value: str | None, source: ConfigSource) -> dict[str, Any]:
    return {"name": name, "value": value, "source": int(source)}


def in_kafka_order(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`entries` in the order Kafka lists a topic's, a group's or one broker's configs: its ConfigHelper walks a
    Scala mutable.HashMap of every config name, so by bucket (the improved hash's low bits, for a table of
    16 doubled while the names fill three quarters of it), then by improved hash. The protocol leaves the order
    open, but clients' tests read it: kafkajs takes the first entry of a DescribeConfigs of two names."""
    size = 16
    while len(entries) >= int(size * 0.75):
        size *= 2
    return sorted(entries, key=lambda e: _bucket_order(e["name"], size))


def _bucket_order(name: str, size: int) -> tuple[int, int]:
    data = name.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):  # Java's String.hashCode over UTF-16 units, as an unsigned 32-bit value
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    improved = h ^ (h >> 16)  # Scala's improveHash (java.util.HashMap's)
    signed = improved - (1 << 32) if improved >= 1 << 31 else improved
    return improved & (size - 1), signed


def _type_name(resource_type: int) -> str:
    return {0: "UNKNOWN", 1: "UNKNOWN", 16: "CLIENT_METRICS", 32: "GROUP", 8: "BROKER_LOGGER"}.get(
        resource_type, "UNKNOWN")


def _broker_id(name: str, message: str) -> int:
    try:
        return int(name)
    except ValueError:
        raise KafkaError(ErrorCode.invalid_request, message + name) from None


# -- AlterConfigs / IncrementalAlterConfigs ----------------------------------------------------


async def alter_configs(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    return {"responses": await _each_resource(body.resources,
                                              lambda r: _alter_legacy(broker, request, r, body.validate_only))}


async def incremental_alter_configs(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    return {"responses": await _each_resource(body.resources,
                                              lambda r: _alter_incremental(broker, request, r, body.validate_only))}


async def _each_resource(resources: Iterable[Any], alter: Callable[[Any], Awaitable[None]]) -> list[dict[str, Any]]:
    resources = list(resources)
    counts = Counter((r.resource_type, r.resource_name) for r in resources)
    responses = []
    for resource in resources:
        response = {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
                    "error_code": ErrorCode.none, "error_message": None}
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise KafkaError(ErrorCode.invalid_request, "Each resource must appear at most once.")
            await alter(resource)
        except KafkaError as exc:
            response.update(error_code=exc.code, error_message=exc.message)
        responses.append(response)
    return responses


def _check_entries(resource: Any, incremental: bool) -> None:
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    nulls = [c.name for c in resource.configs if c.value is None and not (incremental and c.config_operation == DELETE)]
    if nulls:
        raise KafkaError(ErrorCode.invalid_request, "Null value not supported for : " + ", ".join(nulls))
    if resource.resource_type not in (TOPIC, BROKER, GROUP):
        raise KafkaError(ErrorCode.invalid_request, f"Unknown resource type {resource.resource_type}")


async def _alter_legacy(broker: BrokerServices, request: Any, resource: Any, validate_only: bool) -> None:
    _check_entries(resource, incremental=False)
    configs = {c.name: c.value for c in resource.configs}
    if resource.resource_type == TOPIC:
        _authorize_alter(broker, request, resource)
        await _alter_topic(broker, resource.resource_name, configs, [], replace=True, validate_only=validate_only)
    elif resource.resource_type == GROUP:
        _authorize_alter(broker, request, resource)
        await _alter_group(broker, resource.resource_name, configs, [], replace=True, validate_only=validate_only)
    else:
        await _alter_broker(broker, request, resource.resource_name, configs, [], replace=True,
                            validate_only=validate_only)


async def _alter_incremental(broker: BrokerServices, request: Any, resource: Any, validate_only: bool) -> None:
    _check_entries(resource, incremental=True)
    for config in resource.configs:
        if config.config_operation not in (SET, DELETE, APPEND, SUBTRACT):
            raise KafkaError(ErrorCode.invalid_request, f"Unknown operations type {config.config_operation}")
    name = resource.resource_name
    if resource.resource_type == TOPIC:
        _authorize_alter(broker, request, resource)
        image_topic = broker.controller.image.topics_by_name.get(name)
        current = dict(image_topic.configs) if image_topic is not None else {}
        set_configs, deletes = _incremental_changes(resource.configs, current, TOPIC_CONFIG_DEF.get, _topic_list_error)
        await _alter_topic(broker, name, set_configs, deletes, replace=False, validate_only=validate_only)
    elif resource.resource_type == GROUP:
        _authorize_alter(broker, request, resource)
        current = dict(broker.controller.image.group_configs(name))
        # no group key is a LIST, so APPEND and SUBTRACT are refused as for a topic's non-list key
        set_configs, deletes = _incremental_changes(resource.configs, current, lambda _name: None, _topic_list_error)
        await _alter_group(broker, name, set_configs, deletes, replace=False, validate_only=validate_only)
    else:
        node_id = _broker_node(broker, name)
        current = dict(broker.controller.image.broker_configs(node_id))
        set_configs, deletes = _incremental_changes(resource.configs, current, BROKER_CONFIG_DEF.get, _broker_list_error)
        await _alter_broker(broker, request, name, set_configs, deletes, replace=False, validate_only=validate_only)


def _topic_list_error(op: int, name: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_config, f"Can't {_OP_NAMES[op]} to key {name} because its type is not LIST.")


def _broker_list_error(op: int, name: str) -> KafkaError:
    if name not in BROKER_CONFIG_DEF:
        return KafkaError(ErrorCode.invalid_config, f"Unknown config name: {name}")
    return KafkaError(ErrorCode.invalid_config,
                      f"Config value {_OP_NAMES[op].lower()} is not allowed for config key: {name}")


def _incremental_changes(configs: Iterable[Any], current: Mapping[str, str],
                         lookup: Callable[[str], ConfigKey | None],
                         list_error: Callable[[int, str], KafkaError]) -> tuple[dict[str, str], list[str]]:
    """SET/DELETE/APPEND/SUBTRACT -> (keys to set, keys to delete), against the current explicit values."""
    set_configs: dict[str, str] = {}
    deletes: list[str] = []
    for config in configs:
        if config.config_operation == SET:
            set_configs[config.name] = config.value
        elif config.config_operation == DELETE:
            deletes.append(config.name)
        else:
            key = lookup(config.name)
            if key is None or key.type is not ConfigType.LIST:
                raise list_error(config.config_operation, config.name)
            old = current.get(config.name)
            if old is None:
                old = format_value(key.type, key.default) or ""
            items = [item for item in old.split(",") if item]
            change = config.value.split(",")
            if config.config_operation == APPEND:
                items += [item for item in change if item not in items]
            else:
                items = [item for item in items if item not in change]
            set_configs[config.name] = ",".join(items)
    return set_configs, deletes


async def _alter_topic(broker: BrokerServices, topic: str, set_configs: Mapping[str, str], deletes: list[str], *, replace: bool,
                 validate_only: bool) -> None:
    # Kafka validates the resulting override set as LogConfig.validate does (unknown names, values).
    await broker.controller_client.alter_topic_configs(
        topic, set_configs, deletes, replace=replace, validate_only=validate_only,
        validate_config=lambda configs: TopicConfig.validate(broker.config, configs))


async def _alter_group(broker: BrokerServices, group_id: str, set_configs: Mapping[str, str], deletes: list[str], *,
                       replace: bool, validate_only: bool) -> None:
    # Kafka's GroupConfigManager.validate: the resulting explicit set over the broker's group.consumer.* values
    await broker.controller_client.alter_group_configs(
        group_id, set_configs, deletes, replace=replace, validate_only=validate_only,
        validate_config=lambda configs: validate_group_configs(broker.config, configs))


def _broker_node(broker: BrokerServices, name: str) -> int | None:
    """None for the cluster-wide default (""), else this broker's id; another id is refused as Kafka does."""
    if not name:
        return None
    node_id = _broker_id(name, "Node id must be an integer, but it is: ")
    if node_id != broker.node_id:
        raise KafkaError(ErrorCode.invalid_request, f"Unexpected broker id, expected {broker.node_id}, but received {name}")
    return node_id


async def _alter_broker(broker: BrokerServices, request: Any, name: str, set_configs: Mapping[str, str],
                        deletes: list[str], *, replace: bool, validate_only: bool) -> None:
    node_id = _broker_node(broker, name)
    fixed = sorted(n for n in set_configs if n in BROKER_CONFIG_DEF and n not in DYNAMIC_BROKER_CONFIGS)
    if fixed:
        raise KafkaError(ErrorCode.invalid_request, f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    if broker.authorizer.enabled and not broker.authorizer.allowed(request, AclOperation.ALTER_CONFIGS,
                                                                   ResourceType.CLUSTER, CLUSTER_NAME):
        # after the broker's own checks, as Kafka's controller authorizes what the broker forwards
        raise KafkaError(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")

    def validate(configs: dict[str, str]) -> None:
        # KAFKA-13609: a value the broker cannot take is INVALID_REQUEST, not INVALID_CONFIG.
        base = static_properties(broker.static_config)
        if node_id is not None:
            base.update(broker.controller.image.broker_configs(None))
        try:
            changed = BrokerConfig.from_properties({**base, **configs})
            if changed.log_cleaner_threads != broker.config.log_cleaner_threads:
                check_cleaner_threads(broker.config.log_cleaner_threads, changed.log_cleaner_threads)
        except (ConfigError, ValueError) as exc:
            raise KafkaError(ErrorCode.invalid_request, str(exc)) from None

    await broker.controller_client.alter_broker_configs(node_id, set_configs, deletes, replace=replace,
                                                        validate_only=validate_only, validate_config=validate)


# ListConfigResources (74; v0 was ListClientMetricsResources)


async def list_config_resources(broker: BrokerServices, request: Any) -> dict[str, Any]:
    """The resources DescribeConfigs can describe (KIP-1142), all of the supported types for an empty list.

    v0 knows client metrics resources only. klamm has no client metrics subscriptions, so
    that type lists nothing; the groups listed are those with configs (existing or not);
    broker loggers are not served (DescribeConfigs refuses them), so asking for them is
    UNSUPPORTED_VERSION, as Kafka answers a type it does not support.
    """
    if broker.authorizer.enabled and not broker.authorizer.allowed(request, AclOperation.DESCRIBE_CONFIGS,
                                                                   ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": ErrorCode.cluster_authorization_failed, "config_resources": []}  # Kafka's KafkaApis
    supported = (TOPIC, BROKER, CLIENT_METRICS, GROUP) if request.api_version >= 1 else (CLIENT_METRICS,)
    wanted = set(getattr(request.body, "resource_types", ()) or supported)
    if not wanted <= set(supported):
        return {"error_code": ErrorCode.unsupported_version, "config_resources": []}
    image = broker.controller.image
    resources: list[dict[str, Any]] = []
    if TOPIC in wanted:
        resources += [{"resource_name": name, "resource_type": TOPIC} for name in sorted(image.topics_by_name)]
    if BROKER in wanted:
        resources += [{"resource_name": str(node_id), "resource_type": BROKER} for node_id in sorted(image.brokers)]
    if GROUP in wanted:
        resources += [{"resource_name": name, "resource_type": GROUP}
                      for resource_type, name in sorted(image.configs) if resource_type == GROUP]
    return {"error_code": ErrorCode.none, "config_resources": resources}


APIS = [
    Api(74, 0, 1, list_config_resources),
    Api(32, 0, 4, describe_configs),
    Api(33, 0, 2, alter_configs),
    Api(44, 0, 1, incremental_alter_configs),
]
