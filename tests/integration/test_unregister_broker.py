"""UnregisterBroker (64): a decommissioned broker's registration removed, as Kafka's controller does: the broker
leaves every ISR (its leaderships move), then it is gone from the metadata (DescribeCluster, Metadata)."""

from __future__ import annotations

from typing import Any

import pytest

from klamm.cli.main import main as klamm_main
from klamm.protocol.errors import ErrorCode
from klamm.testing import run_cluster

from tests.integration.conftest import BrokerThread, RawClient
from tests.integration.secured import sasl_client, secured_broker
from tests.integration.test_describe_quorum import combined  # noqa: F401  (a fixture)
from tests.integration.test_replication import create, eventually

pytestmark = [pytest.mark.timeout(120)]

UNREGISTER_BROKER, DESCRIBE_CLUSTER = 64, 60


def unregister(client: RawClient, node_id: int) -> Any:
    return client.request(UNREGISTER_BROKER, 0, {"broker_id": node_id})


def described_brokers(client: RawClient) -> list[int]:
    response = client.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
    return sorted(b.broker_id for b in response.brokers)


def test_a_stopped_broker_is_unregistered_and_leaves_every_isr() -> None:
    with run_cluster(3, replica_lag_time_max_ms=1000, replica_fetch_backoff_ms=50,
                     replica_fetch_wait_max_ms=200) as cluster:
        create(cluster, "t")
        eventually(lambda: len(cluster.partition("t").isr) == 3)
        gone = cluster.partition("t").leader
        cluster.call(cluster.stop_broker(gone, fence=False))
        client = RawClient(cluster.brokers[next(iter(cluster.brokers))].port)
        answer = unregister(client, gone)
        assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
        partition = cluster.partition("t")
        assert gone not in partition.isr and partition.leader not in (gone, -1)
        eventually(lambda: described_brokers(client) == sorted(n for n in (1, 2, 3) if n != gone))
        again = unregister(client, gone)
        assert again.error_code == ErrorCode.broker_id_not_registered
        assert again.error_message == f"Broker ID {gone} is not currently registered"
        assert unregister(client, 42).error_code == ErrorCode.broker_id_not_registered


def test_unregister_broker_needs_alter_on_the_cluster(broker_factory: Any) -> None:
    broker: BrokerThread = secured_broker(broker_factory)
    answer = unregister(sasl_client(broker, "alice"), 1)
    assert answer.error_code == ErrorCode.cluster_authorization_failed
    assert described_brokers(sasl_client(broker, "admin")) == [1]
    # a super user may: the node itself is unregistered, as Kafka's controller allows
    assert unregister(sasl_client(broker, "admin"), 2).error_code == ErrorCode.broker_id_not_registered


# ----------------------------------------------------------------- the tool


def klamm_cluster(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = klamm_main(["cluster", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cluster_tool_prints_the_id_and_unregisters(capsys: pytest.CaptureFixture[str]) -> None:
    with run_cluster(3, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=200) as cluster:
        bootstrap = cluster.bootstrap_servers
        assert klamm_cluster(capsys, "cluster-id", "--bootstrap-server", bootstrap) == (
            0, f"Cluster ID: {cluster.controller.cluster_id}\n", "")
        cluster.call(cluster.stop_broker(3))
        assert klamm_cluster(capsys, "unregister", "-b", bootstrap, "--id", "3") == (
            0, "Broker 3 is no longer registered.\n", "")
        assert klamm_cluster(capsys, "unregister", "-b", bootstrap, "--id", "3") == (
            1, "", "BROKER_ID_NOT_REGISTERED: Broker ID 3 is not currently registered\n")


def test_the_cluster_tool_at_the_controller(combined: tuple[BrokerThread, int],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    broker, controller_port = combined
    address = f"127.0.0.1:{controller_port}"
    assert klamm_cluster(capsys, "cluster-id", "--bootstrap-controller", address) == (
        0, f"Cluster ID: {broker.broker.controller.cluster_id}\n", "")
    assert klamm_cluster(capsys, "unregister", "-C", address, "-i", "2") == (
        1, "", "BROKER_ID_NOT_REGISTERED: Broker ID 2 is not currently registered\n")
