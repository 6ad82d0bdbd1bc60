"""DescribeQuorum (55) of a single controller, on the broker listener and on the controller listener.

A combined node with a CONTROLLER listener is started in-process; fetches of
`__cluster_metadata` sent to that listener with a replica id stand in for
broker-only nodes (the cluster of processes does it for real in
tests/interop/test_cluster_quorum.py). `klamm metadata-quorum` runs against both
listeners here too, its output compared line by line with Kafka's layout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from klamm.cli.main import main as klamm_main
from klamm.controller.quorum_info import SINGLE_VOTER_EPOCH

from tests.conftest import free_port
from tests.integration.conftest import FETCH, BrokerThread, RawClient, create_topic

DESCRIBE_QUORUM, DESCRIBE_CLUSTER = 55, 60
METADATA_TOPIC = "__cluster_metadata"
UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST, MISMATCHED_ENDPOINT_TYPE = 3, 42, 114


@pytest.fixture
def combined(tmp_path: Path) -> Iterator[tuple[BrokerThread, int]]:
    """A combined node (id 1) with its controller listener, as node 1 of a cluster: (broker, controller port)."""
    controller_port = free_port()
    broker = BrokerThread(tmp_path / "data", {
        "listeners": f"PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:{controller_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER", "controller.quorum.voters": f"1@127.0.0.1:{controller_port}"})
    broker.start()
    yield broker, controller_port
    broker.close()


def describe(port: int, version: int = 2, topics: list[dict[str, Any]] | None = None) -> Any:
    wanted = topics if topics is not None else [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}]}]
    with RawClient(port) as client:
        return client.request(DESCRIBE_QUORUM, version, {"topics": wanted})


def the_partition(response: Any) -> Any:
    assert response.error_code == 0
    [topic] = response.topics
    assert topic.topic_name == METADATA_TOPIC
    [partition] = topic.partitions
    assert partition.partition_index == 0 and partition.error_code == 0
    return partition


def log_end(broker: BrokerThread) -> int:
    return broker.call(lambda: broker.broker.controller.log.end_offset)


def fetch_metadata(port: int, replica_id: int, offset: int) -> Any:
    """One metadata fetch as a broker-only node sends it (Fetch v12 with its replica id), no long poll."""
    with RawClient(port) as client:
        return client.request(FETCH, 12, {
            "replica_id": replica_id, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": METADATA_TOPIC, "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})


def test_a_single_node_is_the_leader_and_only_voter(broker: BrokerThread) -> None:
    before = int(time.time() * 1000)
    partition = the_partition(describe(broker.port))
    end = log_end(broker)
    assert (partition.leader_id, partition.leader_epoch) == (1, SINGLE_VOTER_EPOCH)
    assert partition.high_watermark == end > 0  # a single voter commits on append
    [voter] = partition.current_voters
    assert (voter.replica_id, voter.log_end_offset, voter.replica_directory_id) == (1, end, None)
    assert before <= voter.last_fetch_timestamp == voter.last_caught_up_timestamp <= int(time.time() * 1000)
    assert partition.observers == ()
    [node] = describe(broker.port).nodes
    assert (node.node_id, node.listeners) == (1, ())  # no controller listener configured

    with broker.connect() as client:
        create_topic(client, "grows-the-log")
    assert the_partition(describe(broker.port)).high_watermark == log_end(broker) > end


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_version_reads_its_own_fields(broker: BrokerThread, version: int) -> None:
    partition = the_partition(describe(broker.port, version))
    [voter] = partition.current_voters
    assert voter.replica_id == 1 and voter.log_end_offset == partition.high_watermark
    assert hasattr(voter, "last_fetch_timestamp") == (version >= 1)
    assert hasattr(voter, "replica_directory_id") == (version >= 2)


def test_another_partition_is_unknown(broker: BrokerThread) -> None:
    # Kafka's KafkaRaftClient: anything but exactly __cluster_metadata-0 answers each partition named
    # UNKNOWN_TOPIC_OR_PARTITION, with no top-level error.
    for topics in ([{"topic_name": "other", "partitions": [{"partition_index": 0}]}],
                   [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 1}]}],
                   [{"topic_name": METADATA_TOPIC, "partitions": [{"partition_index": 0}, {"partition_index": 1}]}]):
        response = describe(broker.port, 2, topics)
        assert response.error_code == 0
        assert [(t.topic_name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions] == [
            (t["topic_name"], p["partition_index"], UNKNOWN_TOPIC_OR_PARTITION)
            for t in topics for p in t["partitions"]]
        assert all(p.error_message == "This server does not host this topic-partition."
                   for t in response.topics for p in t.partitions)
    assert describe(broker.port, 2, []).topics == ()


def test_the_controller_listener_reports_the_brokers_fetching_as_observers(
        combined: tuple[BrokerThread, int]) -> None:
    broker, controller_port = combined
    end = log_end(broker)
    start = int(time.time() * 1000)
    fetch_metadata(controller_port, 7, 0)  # behind: fetched, not caught up
    fetch_metadata(controller_port, 8, end)  # at the log end: caught up
    fetch_metadata(controller_port, -1, 0)  # not a replica: no observer
    response = describe(controller_port)
    partition = the_partition(response)
    assert partition.high_watermark == end
    observers = {o.replica_id: o for o in partition.observers}
    assert sorted(observers) == [7, 8]
    assert observers[7].log_end_offset == 0 and observers[7].last_caught_up_timestamp == -1
    assert observers[8].log_end_offset == end
    assert start <= observers[7].last_fetch_timestamp <= observers[8].last_caught_up_timestamp
    [node] = response.nodes
    assert (node.node_id, [(e.name, e.host, e.port) for e in node.listeners]) == (
        1, [("CONTROLLER", "127.0.0.1", controller_port)])

    fetch_metadata(controller_port, 7, end)  # 7 caught up with the log end
    observer = {o.replica_id: o for o in the_partition(describe(controller_port)).observers}[7]
    assert observer.log_end_offset == end and observer.last_caught_up_timestamp >= observers[7].last_fetch_timestamp
    # the broker listener answers the same quorum (a combined node answers itself)
    assert [o.replica_id for o in the_partition(describe(broker.port)).observers] == [7, 8]


def test_metadata_fetches_name_the_leader_and_its_epoch(combined: tuple[BrokerThread, int]) -> None:
    _, controller_port = combined
    entry = fetch_metadata(controller_port, 7, 0).responses[0].partitions[0]
    assert (entry.current_leader.leader_id, entry.current_leader.leader_epoch) == (1, SINGLE_VOTER_EPOCH)
    assert the_partition(describe(controller_port)).leader_epoch == SINGLE_VOTER_EPOCH


def test_describe_cluster_at_the_controller_names_the_controllers(combined: tuple[BrokerThread, int]) -> None:
    broker, controller_port = combined
    with RawClient(controller_port) as client:
        response = client.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                        "endpoint_type": 2})
        brokers_type = client.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                                            "endpoint_type": 1})
        v0 = client.request(DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
    assert response.error_code == 0 and response.endpoint_type == 2
    assert response.cluster_id == broker.broker.controller.cluster_id and response.controller_id == 1
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(1, "127.0.0.1", controller_port)]
    assert brokers_type.error_code == MISMATCHED_ENDPOINT_TYPE  # Kafka's controller answers that
    assert v0.error_code == INVALID_REQUEST


# ----------------------------------------------------------------- the tool


def klamm_quorum(capsys: pytest.CaptureFixture[str], target: str, address: str, *options: str) -> list[str]:
    code = klamm_main(["metadata-quorum", target, address, "describe", *options])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out.splitlines()


@pytest.mark.parametrize("target", ["--bootstrap-server", "--bootstrap-controller"])
def test_the_tool_describes_status_and_replication(combined: tuple[BrokerThread, int], target: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    broker, controller_port = combined
    address = f"127.0.0.1:{controller_port if target == '--bootstrap-controller' else broker.port}"
    end = log_end(broker)
    fetch_metadata(controller_port, 2, end - 1)
    status = klamm_quorum(capsys, target, address, "--status")
    assert status == [
        f"ClusterId:              {broker.broker.controller.cluster_id}",
        "LeaderId:               1",
        f"LeaderEpoch:            {SINGLE_VOTER_EPOCH}",
        f"HighWatermark:          {end}",
        "MaxFollowerLag:         0",
        "MaxFollowerLagTimeMs:   0",
        ('CurrentVoters:          [{"id": 1, "directoryId": null, "endpoints": '
         f'["CONTROLLER://127.0.0.1:{controller_port}"]}}]'),
        'CurrentObservers:       [{"id": 2, "directoryId": null}]']

    table = [line.split("\t") for line in klamm_quorum(capsys, target, address, "--replication")]
    assert [c.strip() for c in table[0]] == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                             "LastCaughtUpTimestamp", "Status", ""]
    rows = {row[0].strip(): [c.strip() for c in row] for row in table[1:]}
    zero = "AAAAAAAAAAAAAAAAAAAAAA"
    assert rows["1"][1:4] + rows["1"][6:] == [zero, str(end), "0", "Leader", ""]
    assert rows["2"][1:4] + [rows["2"][5]] + rows["2"][6:] == [zero, str(end - 1), "1", "-1", "Observer", ""]
    assert len(rows) == 2

    readable = [line.split("\t") for line in klamm_quorum(capsys, target, address, "--replication",
                                                           "--human-readable")]
    assert readable[1][4].strip().endswith(" ms ago") and readable[2][5].strip() == "-1"
