"""Config decisions: topic, broker and group config changes as ConfigRecords.

Mirrors Kafka's ConfigurationControlManager: a change is validated against the
resulting explicit config set (the callback raises KafkaError(invalid_config))
and written as one ConfigRecord per key that actually changes; a null value
deletes a key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from klamm.controller.image import BROKER_RESOURCE, GROUP_RESOURCE, TOPIC_RESOURCE, MetadataImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode, KafkaError

__all__ = ["ConfigValidator", "decide_alter_broker_configs", "decide_alter_group_configs", "decide_alter_topic_configs",
           "resulting_configs", "run_validator"]

# Raises KafkaError(invalid_config) or ValueError (e.g. klamm.config's ConfigError) to refuse.
ConfigValidator = Callable[[dict[str, str]], object]


def run_validator(validate_config: ConfigValidator | None, configs: Mapping[str, str]) -> None:
    """Run the validator on a copy; a ValueError becomes INVALID_CONFIG with its text."""
    if validate_config is None:
        return
    try:
        validate_config(dict(configs))
    except KafkaError:
        raise
    except ValueError as exc:
        raise KafkaError(ErrorCode.invalid_config, str(exc)) from exc


def resulting_configs(current: Mapping[str, str], set_configs: Mapping[str, str], delete_configs: Iterable[str],
                      replace: bool = False) -> dict[str, str]:
    """The explicit configs after the change; `replace` drops every key not set (AlterConfigs)."""
    result = {} if replace else dict(current)
    for key in delete_configs:
        result.pop(key, None)
    result.update(set_configs)
    return result


def _diff_records(resource_type: int, resource_name: str, current: Mapping[str, str],
                  target: Mapping[str, str]) -> list[MetadataRecord]:
    records = []
    for key in sorted(set(current) | set(target)):
        value = target.get(key)
        if current.get(key) != value:
            records.append(MetadataRecord("ConfigRecord", {
                "resource_type": resource_type, "resource_name": resource_name, "name": key, "value": value}))
    return records


def _decide(resource_type: int, resource_name: str, current: Mapping[str, str], set_configs: Mapping[str, str],
            delete_configs: Iterable[str], replace: bool,
            validate_config: ConfigValidator | None) -> tuple[dict[str, str], list[MetadataRecord]]:
    null_names = [key for key, value in set_configs.items() if value is None]
    if null_names:
        raise KafkaError(ErrorCode.invalid_config, "Null value not supported for : " + ",".join(null_names))
    target = resulting_configs(current, set_configs, delete_configs, replace)
    run_validator(validate_config, target)
    return target, _diff_records(resource_type, resource_name, current, target)


def decide_alter_topic_configs(
    image: MetadataImage, topic: str, set_configs: Mapping[str, str], delete_configs: Iterable[str] = (), *,
    replace: bool = False, validate_config: ConfigValidator | None = None,
) -> tuple[dict[str, str], list[MetadataRecord]]:
    """The topic's resulting explicit configs and the records; unknown topic -> UNKNOWN_TOPIC_OR_PARTITION."""
    current = image.topics_by_name.get(topic)
    if current is None:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"The topic '{topic}' does not exist.")
    return _decide(TOPIC_RESOURCE, topic, current.configs, set_configs, delete_configs, replace, validate_config)


def decide_alter_broker_configs(
    image: MetadataImage, node_id: int | None, set_configs: Mapping[str, str], delete_configs: Iterable[str] = (),
    *, replace: bool = False, validate_config: ConfigValidator | None = None,
) -> tuple[dict[str, str], list[MetadataRecord]]:
    """Dynamic configs of one broker, or of the cluster default when node_id is None."""
    name = "" if node_id is None else str(node_id)
    current = image.broker_configs(node_id)
    return _decide(BROKER_RESOURCE, name, current, set_configs, delete_configs, replace, validate_config)


def decide_alter_group_configs(
    image: MetadataImage, group_id: str, set_configs: Mapping[str, str], delete_configs: Iterable[str] = (), *,
    replace: bool = False, validate_config: ConfigValidator | None = None,
) -> tuple[dict[str, str], list[MetadataRecord]]:
    """A group's dynamic configs (KIP-848); the group need not exist, and there is no default group."""
    if not group_id:
        raise KafkaError(ErrorCode.invalid_request, "Default group resources are not allowed.")
    return _decide(GROUP_RESOURCE, group_id, image.group_configs(group_id), set_configs, delete_configs, replace,
                   validate_config)
