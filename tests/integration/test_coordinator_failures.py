"""Coordinator writes that fail: a failed append to __consumer_offsets or __transaction_state
answers the request with Kafka's error and leaves the coordinator's state exactly as it was;
transaction markers and timed-out aborts that fail are retried until the last stable offset moves.

Failures are injected by making the internal partitions' appends raise OSError (a disk error),
which Kafka reports as KAFKA_STORAGE_ERROR and clients hear as NOT_COORDINATOR.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.records import build_batch
from klamm.protocol.topics import CONSUMER_OFFSETS, TRANSACTION_STATE

from tests.integration.conftest import INIT_PRODUCER_ID, LIST_OFFSETS, PRODUCE, BrokerThread, RawClient, create_topic

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP = 8, 9, 10, 11, 14
ADD_PARTITIONS, END_TXN, TXN_OFFSET_COMMIT, DELETE_GROUPS, OFFSET_DELETE = 24, 26, 28, 42, 47
DESCRIBE_TXNS = 65
NOT_COORDINATOR = ErrorCode.not_coordinator.value


@pytest.fixture
def broker(broker_factory: Any) -> BrokerThread:
    return broker_factory(**{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
                             "transaction.state.log.num.partitions": "3"})


@contextmanager
def failing(broker: BrokerThread, topic: str, method: str = "append",
            error: Exception | None = None) -> Iterator[None]:
    """Every partition of `topic` fails `method` with `error` (an OSError by default) while inside."""
    def install() -> list[Any]:
        partitions = [broker.broker.replicas.get(topic, i)
                      for i in broker.broker.controller.image.topics_by_name[topic].partitions]
        for partition in partitions:
            def fail(*args: Any, **kwargs: Any) -> Any:
                raise error or OSError(5, "Input/output error (injected)")
            setattr(partition, method, fail)
        return partitions

    patched = broker.call(install)
    try:
        yield
    finally:
        def remove() -> None:
            for partition in patched:
                delattr(partition, method)
        broker.call(remove)


def find(client: RawClient, key: str, key_type: int = 0) -> None:
    response = client.request(FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})
    assert response.error_code == 0


def commit(client: RawClient, group: str, topic: str, offset: int, generation: int = -1, member: str = "") -> int:
    response = client.request(OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
    return response.topics[0].partitions[0].error_code


def committed(client: RawClient, group: str, topic: str) -> int:
    response = client.request(OFFSET_FETCH, 7, {"group_id": group, "require_stable": False,
                                                "topics": [{"name": topic, "partition_indexes": [0]}]})
    return response.topics[0].partitions[0].committed_offset


def groups_state(broker: BrokerThread) -> dict[str, tuple[str, int, dict]]:
    def snapshot() -> dict[str, tuple[str, int, dict]]:
        coordinator = broker.broker.group_coordinator.coordinator
        return {g.group_id: (g.state.value, g.generation, dict(g.offsets)) for g in coordinator.groups.values()}
    return broker.call(snapshot)


def txn_state(broker: BrokerThread) -> dict[str, Any]:
    return broker.call(lambda: dict(broker.broker.transactions.coordinator.txns))


# ------------------------------------------------------------------ groups ---
def test_a_broker_without_consumer_offsets_is_not_the_coordinator(broker: BrokerThread, client: RawClient) -> None:
    """Until __consumer_offsets exists here a group request is NOT_COORDINATOR (Kafka's coordinator runtime, for a
    partition it does not host), which sends a client back to FindCoordinator; ListGroups lists none."""
    create_topic(client, "t")
    joined = client.request(JOIN_GROUP, 5, {
        "group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
        "group_instance_id": None, "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
    assert joined.error_code == NOT_COORDINATOR
    assert commit(client, "g", "t", 5) == NOT_COORDINATOR
    described = client.request(15, 5, {"groups": ["g"], "include_authorized_operations": False})
    assert [(g.group_id, g.error_code) for g in described.groups] == [("g", NOT_COORDINATOR)]
    listed = client.request(16, 4, {"states_filter": []})
    assert (listed.error_code, listed.groups) == (0, ())
    find(client, "g")  # creates __consumer_offsets: this broker coordinates every group
    assert commit(client, "g", "t", 5) == 0


def test_offset_commit_failure_changes_nothing(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "t")
    find(client, "g")
    assert commit(client, "g", "t", 5) == 0
    before = groups_state(broker)
    with failing(broker, CONSUMER_OFFSETS):
        assert commit(client, "g", "t", 9) == NOT_COORDINATOR
        assert commit(client, "new-group", "t", 1) == NOT_COORDINATOR
    assert groups_state(broker) == before  # no new group, no new offset
    assert committed(client, "g", "t") == 5
    assert commit(client, "g", "t", 9) == 0 and committed(client, "g", "t") == 9


@pytest.mark.parametrize("error", [None, KafkaError(ErrorCode.not_leader_or_follower)], ids=["oserror", "kafka"])
def test_delete_groups_failure_keeps_the_group(broker: BrokerThread, client: RawClient,
                                               error: Exception | None) -> None:
    create_topic(client, "t")
    find(client, "g")
    assert commit(client, "g", "t", 5) == 0
    before = groups_state(broker)
    with failing(broker, CONSUMER_OFFSETS, error=error):
        response = client.request(DELETE_GROUPS, 2, {"groups_names": ["g"]})
        assert response.results[0].error_code == NOT_COORDINATOR
    assert groups_state(broker) == before and before["g"][0] == "Empty"
    assert committed(client, "g", "t") == 5
    response = client.request(DELETE_GROUPS, 2, {"groups_names": ["g"]})
    assert response.results[0].error_code == 0
    assert "g" not in groups_state(broker)


def test_offset_delete_failure_keeps_the_offsets(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "t")
    find(client, "g")
    assert commit(client, "g", "t", 5) == 0
    body = {"group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    with failing(broker, CONSUMER_OFFSETS):
        assert client.request(OFFSET_DELETE, 0, body).error_code == NOT_COORDINATOR
    assert committed(client, "g", "t") == 5
    assert client.request(OFFSET_DELETE, 0, body).error_code == 0
    assert committed(client, "g", "t") == -1


def join(client: RawClient, group: str, member: str = "") -> Any:
    return client.request(JOIN_GROUP, 3, {
        "group_id": group, "session_timeout": 30000, "rebalance_timeout": 30000, "member_id": member,
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\x00\x01"}]})


def sync(client: RawClient, group: str, member: str, generation: int) -> Any:
    return client.request(SYNC_GROUP, 3, {"group_id": group, "generation_id": generation, "member_id": member,
                                          "assignments": [{"member_id": member, "assignment": b"mine"}]})


def test_sync_group_failure_answers_error_and_stores_no_assignment(broker: BrokerThread, client: RawClient) -> None:
    find(client, "g")
    joined = join(client, "g")
    assert joined.error_code == 0 and joined.leader == joined.member_id
    with failing(broker, CONSUMER_OFFSETS):
        assert sync(client, "g", joined.member_id, joined.generation_id).error_code == NOT_COORDINATOR
    state, generation, _ = groups_state(broker)["g"]
    assert state == "PreparingRebalance" and generation == joined.generation_id  # Kafka: rebalance again
    member = broker.call(lambda: broker.broker.group_coordinator.coordinator.groups["g"].members[joined.member_id])
    assert member.assignment == b""
    rejoined = join(client, "g", joined.member_id)
    assert rejoined.error_code == 0
    synced = sync(client, "g", joined.member_id, rejoined.generation_id)
    assert synced.error_code == 0 and synced.assignment == b"mine"


# ------------------------------------------------------------ transactions ---
def init(client: RawClient, txn_id: str, timeout_ms: int = 60000) -> Any:
    return client.request(INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout": timeout_ms,
                                                "producer_id": -1, "producer_epoch": -1})


def add_partition(client: RawClient, txn_id: str, topic: str, pid: int, epoch: int = 0) -> int:
    response = client.request(ADD_PARTITIONS, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def end_txn(client: RawClient, txn_id: str, pid: int, commit_: bool, epoch: int = 0) -> int:
    return client.request(END_TXN, 3, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                       "committed": commit_}).error_code


def txn_produce(client: RawClient, txn_id: str, topic: str, pid: int, value: bytes) -> int:
    records = build_batch([(None, value)], producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    response = client.request(PRODUCE, 9, {
        "acks": -1, "timeout": 10_000, "transactional_id": txn_id,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0].error_code


def last_stable_offset(client: RawClient, topic: str) -> int:
    response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 1, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return response.topics[0].partitions[0].offset


def eventually(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def open_transaction(client: RawClient, txn_id: str, topic: str, timeout_ms: int = 60000) -> int:
    create_topic(client, topic)
    response = init(client, txn_id, timeout_ms)
    assert response.error_code == 0
    assert add_partition(client, txn_id, topic, response.producer_id) == 0
    assert txn_produce(client, txn_id, topic, response.producer_id, b"v") == 0
    return response.producer_id


def test_a_broker_without_transaction_state_is_not_the_coordinator(broker: BrokerThread, client: RawClient,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """While the creation of __transaction_state is under way elsewhere (a broker-only node forwards it), the
    transactional requests are NOT_COORDINATOR, which sends a client back to FindCoordinator."""
    create_topic(client, "t")
    monkeypatch.setattr(broker.broker, "create_internal_topic", lambda *args, **kwargs: None)
    assert init(client, "tid").error_code == NOT_COORDINATOR
    assert add_partition(client, "tid", "t", 7) == NOT_COORDINATOR
    assert end_txn(client, "tid", 7, True) == NOT_COORDINATOR
    monkeypatch.undo()
    find(client, "tid", 1)
    assert init(client, "tid").error_code == 0


def test_init_producer_id_failure_changes_nothing(broker: BrokerThread, client: RawClient) -> None:
    find(client, "tid", 1)
    first = init(client, "tid")
    assert first.error_code == 0 and first.producer_epoch == 0
    before = txn_state(broker)
    with failing(broker, TRANSACTION_STATE):
        assert init(client, "tid").error_code == NOT_COORDINATOR  # an epoch bump
        assert init(client, "other").error_code == NOT_COORDINATOR  # a new id
    assert txn_state(broker) == before
    again = init(client, "tid")
    assert again.error_code == 0 and (again.producer_id, again.producer_epoch) == (first.producer_id, 1)


def test_add_partitions_and_end_txn_failures_change_nothing(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "tx")
    pid = init(client, "tid").producer_id
    before = txn_state(broker)
    with failing(broker, TRANSACTION_STATE):
        assert add_partition(client, "tid", "tx", pid) == NOT_COORDINATOR
    assert txn_state(broker) == before and before["tid"].state.display == "Empty"
    assert add_partition(client, "tid", "tx", pid) == 0
    assert txn_produce(client, "tid", "tx", pid, b"v") == 0
    before = txn_state(broker)
    with failing(broker, TRANSACTION_STATE):
        assert end_txn(client, "tid", pid, True) == NOT_COORDINATOR
    assert txn_state(broker) == before and before["tid"].state.display == "Ongoing"
    assert last_stable_offset(client, "tx") == 0
    assert end_txn(client, "tid", pid, True) == 0
    assert last_stable_offset(client, "tx") == 2  # the record and the commit marker


def test_txn_offset_commit_failure_leaves_nothing_pending(broker: BrokerThread, client: RawClient) -> None:
    create_topic(client, "t")
    find(client, "g")
    pid = init(client, "tid").producer_id
    body = {"transactional_id": "tid", "group_id": "g", "producer_id": pid, "producer_epoch": 0,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    with failing(broker, CONSUMER_OFFSETS):
        response = client.request(TXN_OFFSET_COMMIT, 2, body)
        assert response.topics[0].partitions[0].error_code == NOT_COORDINATOR
    assert not broker.call(lambda: broker.broker.group_coordinator.coordinator.has_pending_offset("g", "t", 0))
    assert "g" not in groups_state(broker)


def test_failed_abort_markers_are_retried_until_the_lso_moves(broker: BrokerThread, client: RawClient) -> None:
    pid = open_transaction(client, "tid", "tx")
    assert last_stable_offset(client, "tx") == 0
    with failing(broker, "tx", "append_marker"):
        assert end_txn(client, "tid", pid, False) == 0  # the PrepareAbort is written: the abort will happen
        assert txn_state(broker)["tid"].state.display == "PrepareAbort"
        eventually(lambda: failed_attempts(broker, "tid") >= 2)  # the retries fail meanwhile
        assert last_stable_offset(client, "tx") == 0
    eventually(lambda: last_stable_offset(client, "tx") == 2)
    assert txn_state(broker)["tid"].state.display == "CompleteAbort"


def test_a_transaction_left_prepared_is_finished_when_its_coordinator_starts_again(broker: BrokerThread,
                                                                                   client: RawClient) -> None:
    """A PrepareCommit stored, its markers not written (the broker stopped first): loading the partition at the
    next start writes them, once the record is stored there too."""
    pid = open_transaction(client, "tid", "tx")
    with failing(broker, "tx", "append_marker"):
        assert end_txn(client, "tid", pid, True) == 0
        assert txn_state(broker)["tid"].state.display == "PrepareCommit"
        broker.restart()
    with RawClient(broker.port) as again:
        eventually(lambda: last_stable_offset(again, "tx") == 2)  # the record and its marker
    assert txn_state(broker)["tid"].state.display == "CompleteCommit"


def time_passes(broker: BrokerThread, ms: int) -> None:
    """The transaction coordinator's clock jumps `ms` ahead (its timers run on an injected clock)."""
    def jump() -> None:
        runtime = broker.broker.transactions
        clock = runtime.timer.clock
        runtime.timer.clock = lambda: clock() + ms
        runtime._wake.set()
    broker.call(jump)


def failed_attempts(broker: BrokerThread, txn_id: str) -> int:
    return broker.call(lambda: broker.broker.transactions._failures.get(txn_id, 0))


def test_failed_timeout_abort_is_retried_until_the_lso_moves(broker: BrokerThread, client: RawClient) -> None:
    pid = open_transaction(client, "tid", "tx", timeout_ms=60000)
    with failing(broker, TRANSACTION_STATE):
        time_passes(broker, 61000)  # the transaction times out; its PrepareAbort fails to be written
        eventually(lambda: failed_attempts(broker, "tid") >= 2)  # and again
        assert txn_state(broker)["tid"].state.display == "Ongoing"
        assert last_stable_offset(client, "tx") == 0
    eventually(lambda: last_stable_offset(client, "tx") == 2)
    md = txn_state(broker)["tid"]
    assert md.state.display == "CompleteAbort" and (md.producer_id, md.producer_epoch) == (pid, 1)


def test_failed_timeout_abort_markers_are_retried(broker: BrokerThread, client: RawClient) -> None:
    pid = open_transaction(client, "tid", "tx", timeout_ms=60000)
    with failing(broker, "tx", "append_marker"):
        time_passes(broker, 61000)
        eventually(lambda: failed_attempts(broker, "tid") >= 2)
        assert txn_state(broker)["tid"].state.display == "PrepareAbort"
        assert last_stable_offset(client, "tx") == 0
    eventually(lambda: last_stable_offset(client, "tx") == 2)
    assert txn_state(broker)["tid"].state.display == "CompleteAbort"
    assert pid == txn_state(broker)["tid"].producer_id


def test_records_too_large_map_per_api(broker: BrokerThread, client: RawClient) -> None:
    """Kafka: an offset commit too large is INVALID_COMMIT_OFFSET_SIZE; a group's metadata, UNKNOWN_SERVER_ERROR."""
    create_topic(client, "t")
    find(client, "g")
    with failing(broker, CONSUMER_OFFSETS, error=KafkaError(ErrorCode.record_list_too_large)):
        assert commit(client, "g", "t", 1) == ErrorCode.invalid_commit_offset_size.value
        joined = join(client, "g")
        synced = sync(client, "g", joined.member_id, joined.generation_id)
        assert synced.error_code == ErrorCode.unknown_server_error.value
