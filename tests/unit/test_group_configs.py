"""Per-group configs (KIP-848): Kafka's GroupConfig checks, and the coordinator using a group's values.

A group's consumer.session.timeout.ms and consumer.heartbeat.interval.ms replace the
broker's for that group's members from their next heartbeat; other groups keep the
broker's.
"""

from __future__ import annotations

import pytest

from klamm.config.broker import BrokerConfig
from klamm.config.errors import ConfigError
from klamm.config.group import effective_group_configs, validate_group_configs
from klamm.coordinator.consumer_heartbeat import HeartbeatRequest
from tests.unit.test_consumer_group_coordinator import SESSION, Harness

# group.consumer.*: session 45000 in [45000, 60000], heartbeat 5000 in [5000, 15000]
BROKER = BrokerConfig.from_properties({})


@pytest.mark.parametrize("overrides, message", [
    ({"share.session.timeout.ms": "50000"}, "Unknown group config name: share.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "x"},
     "Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT"),
    ({"consumer.heartbeat.interval.ms": "0"},
     "Invalid value 0 for configuration consumer.heartbeat.interval.ms: Value must be at least 1"),
    ({"consumer.heartbeat.interval.ms": "4999"},
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({"consumer.heartbeat.interval.ms": "15001"},
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ({"consumer.session.timeout.ms": "44999"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "60001"},
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
])
def test_group_config_refusals_are_kafkas(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_group_configs(BROKER, overrides)
    assert str(refused.value) == message


def test_session_must_exceed_heartbeat() -> None:
    broker = BrokerConfig.from_properties({"group.consumer.min.session.timeout.ms": "6000",
                                           "group.consumer.session.timeout.ms": "10000"})
    validate_group_configs(broker, {"consumer.session.timeout.ms": "6000", "consumer.heartbeat.interval.ms": "5999"})
    with pytest.raises(ConfigError, match="^consumer.session.timeout.ms must be greater than "
                                          "consumer.heartbeat.interval.ms$"):
        validate_group_configs(broker, {"consumer.session.timeout.ms": "6000",
                                        "consumer.heartbeat.interval.ms": "6000"})


def test_effective_values_fall_back_to_the_broker() -> None:
    assert effective_group_configs(BROKER, {"consumer.heartbeat.interval.ms": "7000"}) == {
        "consumer.session.timeout.ms": 45000, "consumer.heartbeat.interval.ms": 7000}


def test_coordinator_uses_the_groups_session_and_heartbeat_interval() -> None:
    h = Harness()
    configs: dict[str, dict[str, str]] = {}
    h.coordinator.consumer.group_configs = lambda group_id: configs.get(group_id, {})
    first = h.beat("m1", 0)
    assert first["heartbeat_interval"] == 5000  # the broker's
    epoch = first["member_epoch"]
    configs["g"] = {"consumer.heartbeat.interval.ms": "7000", "consumer.session.timeout.ms": str(SESSION + 10_000)}
    # in force from the member's next heartbeat: its interval, and a session timer of the group's length
    response = h.beat("m1", epoch)
    assert response["heartbeat_interval"] == 7000
    h.advance(SESSION + 5_000)  # past the broker's session, within the group's
    assert "m1" in h.coordinator.consumer.groups["g"].members
    h.advance(5_001)
    assert "m1" not in h.coordinator.consumer.groups["g"].members
    # another group keeps the broker's values
    other = h.apply(h.coordinator.consumer.heartbeat(_join("other")))
    assert other["heartbeat_interval"] == 5000


def _join(group_id: str) -> HeartbeatRequest:
    return HeartbeatRequest(group_id, "m9", 0, owned={}, client_id="c", client_host="/127.0.0.1",
                            rebalance_timeout_ms=30_000, topic_names=("t",))
