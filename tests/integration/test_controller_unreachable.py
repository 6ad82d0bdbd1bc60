"""Admin writes while the controller cannot be reached (a broker-only node whose controller just lost its
leadership): every item of the request answers the error, NOT_CONTROLLER, which clients retry; the connection
stays open. A quorum's election under load closed the client's connection instead (handler failed)."""

from __future__ import annotations

from typing import Any

import pytest

from klamm.protocol.errors import ErrorCode, KafkaError

from tests.integration.conftest import API_VERSIONS, BrokerThread, RawClient, create_topic

CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, ELECT_LEADERS, ALTER_REASSIGNMENTS = 19, 20, 37, 43, 45
NOT_CONTROLLER = ErrorCode.not_controller


@pytest.fixture
def unreachable(broker: BrokerThread, client: RawClient, monkeypatch: pytest.MonkeyPatch) -> RawClient:
    create_topic(client, "t")

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise KafkaError(NOT_CONTROLLER, "127.0.0.1:9093: ConnectionResetError('connection closed')")

    controller_client = broker.broker.controller_client
    for method in ("create_topics", "delete_topics", "create_partitions", "elect_leaders",
                   "alter_partition_reassignments"):
        monkeypatch.setattr(controller_client, method, refuse)
    return client


def test_every_item_answers_not_controller_and_the_connection_stays(unreachable: RawClient) -> None:
    client = unreachable
    created = client.request(CREATE_TOPICS, 7, {"timeout": 5000, "validate_only": False, "topics": [
        {"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
        for name in ("a", "b")]})
    assert [(t.name, t.error_code) for t in created.topics] == [("a", NOT_CONTROLLER), ("b", NOT_CONTROLLER)]
    deleted = client.request(DELETE_TOPICS, 5, {"topic_names": ["t"], "timeout": 5000})
    assert [(r.name, r.error_code) for r in deleted.responses] == [("t", NOT_CONTROLLER)]
    grown = client.request(CREATE_PARTITIONS, 3, {"timeout_ms": 5000, "validate_only": False, "topics": [
        {"name": "t", "count": 2, "assignments": None}]})
    assert [(r.name, r.error_code) for r in grown.results] == [("t", NOT_CONTROLLER)]
    elected = client.request(ELECT_LEADERS, 2, {"election_type": 0, "timeout_ms": 5000, "topic_partitions": [
        {"topic": "t", "partitions": [0]}]})
    assert elected.error_code == NOT_CONTROLLER
    assert [[p.error_code for p in r.partition_result] for r in elected.replica_election_results] == [
        [NOT_CONTROLLER]]
    moved = client.request(ALTER_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "replicas": [1]}]}]})
    assert moved.error_code == NOT_CONTROLLER
    assert [[p.error_code for p in r.partitions] for r in moved.responses] == [[NOT_CONTROLLER]]
    assert client.request(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
                          ).error_code == 0  # still connected
