"""Authorization of the group and transaction APIs, as Kafka's KafkaApis checks them, against a SASL broker
with the StandardAuthorizer (tests/integration/secured.py): FindCoordinator, the group membership APIs,
offsets, group administration, transactions and their admin APIs. Raw requests show the error codes;
confluent-kafka shows what a client makes of them. User:admin is a super user."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import AclPermissionType, ResourcePatternType
from confluent_kafka.admin import ResourceType as Res

from klamm.protocol.records import build_batch
from tests.integration.conftest import INIT_PRODUCER_ID, PRODUCE, BrokerThread, RawClient, create_topic, wait_for
from tests.integration.secured import acl, conf, grant, secured_broker, sasl_client

pytestmark = pytest.mark.timeout(180)

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 42, 47
ADD_PARTITIONS, ADD_OFFSETS, END_TXN, WRITE_MARKERS, TXN_OFFSET_COMMIT = 24, 25, 26, 27, 28
DESCRIBE_TXNS, LIST_TXNS = 65, 66
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36

NONE, UNKNOWN_TOPIC, TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED = 0, 3, 29, 30, 31
NOT_ATTEMPTED, TXN_DENIED, INCONSISTENT_PROTOCOL, MEMBER_ID_REQUIRED = 55, 53, 23, 79
DENY, PREFIXED = AclPermissionType.DENY, ResourcePatternType.PREFIXED


@pytest.fixture
def broker(broker_factory: Any) -> BrokerThread:
    """A secured broker whose group and transaction coordinators are up (their topics created)."""
    broker = secured_broker(broker_factory)
    with sasl_client(broker, "admin") as admin:
        for key_type in (0, 1):
            wait_for(lambda: admin.request(FIND_COORDINATOR, 3, {"key": "any", "key_type": key_type}).error_code
                     == NONE)
    return broker




@pytest.fixture
def admin(broker: BrokerThread) -> Iterator[RawClient]:
    with sasl_client(broker, "admin") as client:
        yield client


@pytest.fixture
def alice(broker: BrokerThread) -> Iterator[RawClient]:
    with sasl_client(broker, "alice") as client:
        yield client


def codes(topics: Any, field: str = "error_code") -> dict[tuple[str, int], int]:
    return {(t.name, p.partition_index): getattr(p, field) for t in topics for p in t.partitions}


# ----------------------------------------------------------------------------------------- FindCoordinator ---
def test_find_coordinator_needs_describe_on_the_group_or_transactional_id(broker: BrokerThread, alice: RawClient,
                                                                         admin: RawClient) -> None:
    grant(broker, acl("alice", Res.GROUP, "seen", Op.DESCRIBE), acl("alice", Res.TRANSACTIONAL_ID, "tx-", Op.WRITE,
                                                                  pattern=PREFIXED))
    old = alice.request(FIND_COORDINATOR, 3, {"key": "hidden", "key_type": 0})
    assert (old.error_code, old.node_id, old.error_message) == (GROUP_DENIED, -1, "Group authorization failed.")
    batch = alice.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["seen", "hidden"]}).coordinators
    assert [(c.key, c.error_code) for c in batch] == [("seen", NONE), ("hidden", GROUP_DENIED)]
    assert batch[0].port == broker.port
    txns = alice.request(FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["tx-1", "other"]}).coordinators
    assert [(c.key, c.error_code) for c in txns] == [("tx-1", NONE), ("other", TXN_DENIED)]  # WRITE implies DESCRIBE
    assert admin.request(FIND_COORDINATOR, 3, {"key": "hidden", "key_type": 1}).error_code == NONE  # a super user


# ------------------------------------------------------------------------------------------ group members ---
def join(client: RawClient, group: str, member_id: str = "", version: int = 5) -> Any:
    return client.request(JOIN_GROUP, version, {
        "group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": member_id,
        "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})


def test_join_sync_heartbeat_leave_need_read_on_the_group(broker: BrokerThread, alice: RawClient) -> None:
    denied = join(alice, "members")
    assert (denied.error_code, denied.member_id, denied.generation_id) == (GROUP_DENIED, "", -1)
    grant(broker, acl("alice", Res.GROUP, "members", Op.READ))
    first = join(alice, "members")  # v4+: a new member gets its id first
    assert first.error_code == MEMBER_ID_REQUIRED
    joined = join(alice, "members", first.member_id)
    assert joined.error_code == NONE
    member, generation = joined.member_id, joined.generation_id
    for group, expected in (("other", GROUP_DENIED), ("members", NONE)):
        sync = alice.request(SYNC_GROUP, 5, {"group_id": group, "generation_id": generation, "member_id": member,
                                             "protocol_type": "consumer", "protocol_name": "range",
                                             "assignments": [{"member_id": member, "assignment": b"a"}]})
        assert sync.error_code == expected
        beat = alice.request(HEARTBEAT, 4, {"group_id": group, "generation_id": generation, "member_id": member})
        assert beat.error_code == expected
    # SyncGroup v5 without its protocol type: INCONSISTENT_GROUP_PROTOCOL before authorization, as Kafka
    missing = alice.request(SYNC_GROUP, 5, {"group_id": "other", "generation_id": generation, "member_id": member,
                                            "protocol_type": None, "protocol_name": "range", "assignments": []})
    assert missing.error_code == INCONSISTENT_PROTOCOL
    leave = alice.request(LEAVE_GROUP, 4, {"group_id": "other", "members": [{"member_id": member}]})
    assert (leave.error_code, leave.members) == (GROUP_DENIED, ())
    assert alice.request(LEAVE_GROUP, 0, {"group_id": "other", "member_id": member}).error_code == GROUP_DENIED
    leave = alice.request(LEAVE_GROUP, 4, {"group_id": "members", "members": [{"member_id": member}]})
    assert leave.error_code == NONE and leave.members[0].error_code == NONE


def consumer_errors(config: dict[str, Any], topic: str, timeout_s: float = 15) -> tuple[list[bytes], set[int]]:
    consumer = Consumer({**config, "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    errors: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not got and not errors:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                errors.add(message.error().code())
            else:
                got.append(message.value())
    finally:
        consumer.close()
    return got, errors


def test_a_consumer_group_needs_read_on_the_group_and_the_topic(broker: BrokerThread, admin: RawClient) -> None:
    create_topic(admin, "orders")
    producer = Producer(conf(broker, "admin"))
    producer.produce("orders", b"o-1", partition=0)
    assert producer.flush(10) == 0
    alice = {**conf(broker, "alice"), "group.id": "billing"}
    grant(broker, acl("alice", Res.TOPIC, "orders", Op.READ))
    assert consumer_errors(alice, "orders") == ([], {KafkaError.GROUP_AUTHORIZATION_FAILED})
    grant(broker, acl("alice", Res.GROUP, "billing", Op.READ))
    assert consumer_errors(alice, "orders") == ([b"o-1"], set())


def test_a_consumer_without_read_on_the_topic_gets_topic_authorization_failed(broker: BrokerThread,
                                                                               admin: RawClient) -> None:
    """READ on the group is not enough: the topic needs READ too (Fetch refuses it)."""
    create_topic(admin, "orders")
    producer = Producer(conf(broker, "admin"))
    producer.produce("orders", b"o-1", partition=0)
    assert producer.flush(10) == 0
    bob = {**conf(broker, "bob"), "group.id": "bobs"}
    grant(broker, acl("bob", Res.GROUP, "bobs", Op.READ), acl("bob", Res.TOPIC, "orders", Op.DESCRIBE))
    got, errors = consumer_errors(bob, "orders")
    assert got == [] and KafkaError.TOPIC_AUTHORIZATION_FAILED in errors


# ----------------------------------------------------------------------------------------------- offsets ---
def commit(client: RawClient, group: str, offsets: dict[tuple[str, int], int], version: int = 8) -> dict:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                               "committed_leader_epoch": -1, "committed_metadata": ""})
    response = client.request(OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "retention_time": -1,
        "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]})
    return codes(response.topics)


def fetch_offsets(client: RawClient, groups: dict[str, list[tuple[str, int]] | None], version: int = 8) -> Any:
    def topics(wanted: list[tuple[str, int]] | None) -> Any:
        if wanted is None:
            return None
        return [{"name": t, "partition_indexes": [p for q, p in wanted if q == t]} for t in dict.fromkeys(
            t for t, _ in wanted)]
    if version >= 8:
        return client.request(OFFSET_FETCH, version, {"groups": [
            {"group_id": g, "topics": topics(w)} for g, w in groups.items()], "require_stable": False}).groups
    [(group, wanted)] = groups.items()
    return client.request(OFFSET_FETCH, version, {"group_id": group, "topics": topics(wanted)})


def test_offset_commit_needs_read_on_the_group_and_each_topic(broker: BrokerThread, admin: RawClient,
                                                               alice: RawClient) -> None:
    create_topic(admin, "open")
    create_topic(admin, "closed")
    wanted = {("open", 0): 5, ("closed", 0): 6, ("missing", 0): 7, ("gone", 0): 8, ("open", 9): 9}
    assert commit(alice, "ledger", wanted) == dict.fromkeys(wanted, GROUP_DENIED)
    assert commit(alice, "ledger", wanted, version=2) == dict.fromkeys(wanted, GROUP_DENIED)
    grant(broker, acl("alice", Res.GROUP, "ledger", Op.READ), acl("alice", Res.TOPIC, "open", Op.READ),
          acl("alice", Res.TOPIC, "gone", Op.READ))
    # an unknown topic the principal may not read is TOPIC_AUTHORIZATION_FAILED: its existence stays hidden
    assert commit(alice, "ledger", wanted) == {("open", 0): NONE, ("closed", 0): TOPIC_DENIED,
                                               ("missing", 0): TOPIC_DENIED, ("gone", 0): UNKNOWN_TOPIC,
                                               ("open", 9): UNKNOWN_TOPIC}
    assert commit(admin, "ledger", {("closed", 0): 3}) == {("closed", 0): NONE}  # the super user


def test_offset_fetch_needs_describe_on_the_group_and_hides_topics(broker: BrokerThread, admin: RawClient,
                                                                    alice: RawClient) -> None:
    for topic in ("t-open", "t-closed"):
        create_topic(admin, topic)
    for group in ("ledger", "secret"):
        assert set(commit(admin, group, {("t-open", 0): 5, ("t-closed", 0): 6}).values()) == {NONE}
    # DESCRIBE on the group and topic; DENY on "t-closed" beats the PREFIXED ALLOW of both
    grant(broker, acl("alice", Res.GROUP, "ledger", Op.DESCRIBE), acl("alice", Res.TOPIC, "t-", Op.DESCRIBE,
                                                                    pattern=PREFIXED),
          acl("alice", Res.TOPIC, "t-closed", Op.DESCRIBE, DENY))
    # v8: each group checked; all offsets leave the hidden topic out, named ones are TOPIC_AUTHORIZATION_FAILED
    fetched = fetch_offsets(alice, {"ledger": None, "secret": None})
    assert [(g.group_id, g.error_code) for g in fetched] == [("ledger", NONE), ("secret", GROUP_DENIED)]
    assert codes(fetched[0].topics, "committed_offset") == {("t-open", 0): 5}
    assert fetched[1].topics == ()
    [named] = fetch_offsets(alice, {"ledger": [("t-closed", 0), ("t-open", 0)]})
    assert codes(named.topics) == {("t-open", 0): NONE, ("t-closed", 0): TOPIC_DENIED}
    assert codes(named.topics, "committed_offset") == {("t-open", 0): 5, ("t-closed", 0): -1}
    assert [t.name for t in named.topics] == ["t-open", "t-closed"]  # the denied ones last, as Kafka
    # before v8: one group
    old = fetch_offsets(alice, {"ledger": None}, version=7)
    assert old.error_code == NONE and codes(old.topics, "committed_offset") == {("t-open", 0): 5}
    assert fetch_offsets(alice, {"secret": None}, version=7).error_code == GROUP_DENIED
    v1 = fetch_offsets(alice, {"secret": [("t-open", 0)]}, version=1)  # no group error field: per partition
    assert codes(v1.topics) == {("t-open", 0): GROUP_DENIED}
    everything = fetch_offsets(admin, {"secret": None})
    assert codes(everything[0].topics, "committed_offset") == {("t-open", 0): 5, ("t-closed", 0): 6}


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic(broker: BrokerThread, admin: RawClient,
                                                                         alice: RawClient) -> None:
    for topic in ("open", "closed"):
        create_topic(admin, topic)
    commit(admin, "ledger", {("open", 0): 5, ("closed", 0): 6})

    def delete(topics: list[str]) -> Any:
        return alice.request(OFFSET_DELETE, 0, {"group_id": "ledger", "topics": [
            {"name": t, "partitions": [{"partition_index": 0}]} for t in topics]})

    grant(broker, acl("alice", Res.GROUP, "ledger", Op.READ))
    assert (delete(["open"]).error_code, delete(["open"]).topics) == (GROUP_DENIED, ())
    grant(broker, acl("alice", Res.GROUP, "ledger", Op.DELETE), acl("alice", Res.TOPIC, "open", Op.READ))
    answer = delete(["open", "closed", "missing"])
    assert answer.error_code == NONE
    assert codes(answer.topics) == {("open", 0): NONE, ("closed", 0): TOPIC_DENIED, ("missing", 0): TOPIC_DENIED}
    left = fetch_offsets(admin, {"ledger": None})
    assert codes(left[0].topics, "committed_offset") == {("closed", 0): 6}


# ------------------------------------------------------------------------------------ group administration ---
def list_groups(client: RawClient) -> set[str]:
    answer = client.request(LIST_GROUPS, 4, {"states_filter": []})
    assert answer.error_code == NONE
    return {g.group_id for g in answer.groups}


def test_describe_list_and_delete_groups(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    create_topic(admin, "t")
    for group in ("team-a", "team-b", "ops"):
        commit(admin, group, {("t", 0): 1})  # an empty group with offsets
    assert list_groups(admin) == {"team-a", "team-b", "ops"}
    assert list_groups(alice) == set()
    # PREFIXED ALLOW, and a DENY that beats it
    grant(broker, acl("alice", Res.GROUP, "team-", Op.DESCRIBE, pattern=PREFIXED),
          acl("alice", Res.GROUP, "team-b", Op.DESCRIBE, DENY))
    assert list_groups(alice) == {"team-a"}
    described = alice.request(DESCRIBE_GROUPS, 5, {"groups": ["ops", "team-a", "team-b"],
                                                    "include_authorized_operations": True}).groups
    # the refused ones come first, as Kafka answers them
    assert [(g.group_id, g.error_code) for g in described] == [("ops", GROUP_DENIED), ("team-b", GROUP_DENIED),
                                                                ("team-a", NONE)]
    assert described[2].group_state == "Empty" and described[2].authorized_operations == 1 << 8  # DESCRIBE
    assert described[0].authorized_operations == -2147483648
    mine = admin.request(DESCRIBE_GROUPS, 5, {"groups": ["ops"], "include_authorized_operations": True}).groups[0]
    assert mine.authorized_operations == sum(1 << op for op in (3, 6, 8, 10, 11))  # every group operation
    # DESCRIBE on the cluster lists every group
    with sasl_client(broker, "bob") as bob:
        grant(broker, acl("bob", Res.BROKER, "kafka-cluster", Op.DESCRIBE))
        assert list_groups(bob) == {"team-a", "team-b", "ops"}
    # DeleteGroups: DELETE on each group
    grant(broker, acl("alice", Res.GROUP, "team-a", Op.DELETE))
    deleted = alice.request(DELETE_GROUPS, 2, {"groups_names": ["team-a", "ops"]}).results
    assert {(r.group_id, r.error_code) for r in deleted} == {("team-a", NONE), ("ops", GROUP_DENIED)}
    assert list_groups(admin) == {"team-b", "ops"}


# ------------------------------------------------------------------------------------------ transactions ---
def init_pid(client: RawClient, txn_id: str) -> int:
    init = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout": 60000,
                                                "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == NONE, init
    return init.producer_id


def add_partitions(client: RawClient, txn_id: str, pid: int, topics: dict[str, list[int]], version: int = 3) -> Any:
    answer = client.request(ADD_PARTITIONS, version, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": t, "partitions": p} for t, p in topics.items()]})
    return {(t.name, p.partition_index): p.partition_error_code
            for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}


def test_add_partitions_and_end_txn_need_write_on_the_transactional_id(broker: BrokerThread, admin: RawClient,
                                                                        alice: RawClient) -> None:
    for topic in ("mine", "theirs"):
        create_topic(admin, topic)
    pid = init_pid(admin, "tx-alice")
    wanted = {"mine": [0], "theirs": [0]}
    assert add_partitions(alice, "tx-alice", pid, wanted) == {("mine", 0): TXN_DENIED, ("theirs", 0): TXN_DENIED}
    end = {"transactional_id": "tx-alice", "producer_id": pid, "producer_epoch": 0, "committed": True}
    assert alice.request(END_TXN, 3, end).error_code == TXN_DENIED
    grant(broker, acl("alice", Res.TRANSACTIONAL_ID, "tx-alice", Op.WRITE), acl("alice", Res.TOPIC, "mine", Op.WRITE))
    # a topic not writable, and an internal topic a client may never add itself: nothing is added
    assert add_partitions(alice, "tx-alice", pid, {**wanted, "__consumer_offsets": [0], "nope": [0]}) == {
        ("mine", 0): NOT_ATTEMPTED, ("theirs", 0): TOPIC_DENIED, ("__consumer_offsets", 0): TOPIC_DENIED,
        ("nope", 0): TOPIC_DENIED}
    assert add_partitions(alice, "tx-alice", pid, {"mine": [0, 7]}) == {("mine", 0): NOT_ATTEMPTED,
                                                                         ("mine", 7): UNKNOWN_TOPIC}
    assert add_partitions(alice, "tx-alice", pid, {"mine": [0]}, version=1) == {("mine", 0): NONE}
    assert alice.request(END_TXN, 3, end).error_code == NONE
    # v4+ is for brokers: CLUSTER_ACTION on the cluster
    batch = {"transactions": [{"transactional_id": "tx-alice", "producer_id": pid, "producer_epoch": 0,
                               "verify_only": True, "topics": [{"name": "mine", "partitions": [0]}]}]}
    refused = alice.request(ADD_PARTITIONS, 4, batch)
    assert (refused.error_code, refused.results_by_transaction) == (CLUSTER_DENIED, ())
    verified = admin.request(ADD_PARTITIONS, 5, batch)
    assert verified.error_code == NONE and len(verified.results_by_transaction) == 1


def test_write_txn_markers_need_cluster_action_or_alter(broker: BrokerThread, admin: RawClient,
                                                        alice: RawClient) -> None:
    create_topic(admin, "m")
    markers = {"markers": [{"producer_id": 99, "producer_epoch": 0, "transaction_result": False,
                            "coordinator_epoch": 0, "topics": [{"name": "m", "partition_indexes": [0]}]}]}

    def answer(client: RawClient) -> int:
        return client.request(WRITE_MARKERS, 1, markers).markers[0].topics[0].partitions[0].error_code

    assert answer(alice) == CLUSTER_DENIED
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.ALTER))
    assert answer(alice) == NONE
    with sasl_client(broker, "bob") as bob:
        grant(broker, acl("bob", Res.BROKER, "kafka-cluster", Op.CLUSTER_ACTION))
        assert answer(bob) == NONE
    assert answer(admin) == NONE


def test_add_offsets_and_txn_offset_commit_need_read_on_the_group(broker: BrokerThread, admin: RawClient,
                                                                 alice: RawClient) -> None:
    for topic in ("in", "out"):
        create_topic(admin, topic)
    pid = init_pid(admin, "tx-off")
    add = {"transactional_id": "tx-off", "producer_id": pid, "producer_epoch": 0, "group_id": "readers"}
    assert alice.request(ADD_OFFSETS, 3, add).error_code == TXN_DENIED
    grant(broker, acl("alice", Res.TRANSACTIONAL_ID, "tx-off", Op.WRITE))
    assert alice.request(ADD_OFFSETS, 3, add).error_code == GROUP_DENIED
    commit_body = {"transactional_id": "tx-off", "group_id": "readers", "producer_id": pid, "producer_epoch": 0,
                   "generation_id": -1, "member_id": "", "topics": [
                       {"name": t, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                       for t in ("in", "out")]}
    assert codes(alice.request(TXN_OFFSET_COMMIT, 3, commit_body).topics) == {("in", 0): GROUP_DENIED,
                                                                             ("out", 0): GROUP_DENIED}
    grant(broker, acl("alice", Res.GROUP, "readers", Op.READ), acl("alice", Res.TOPIC, "in", Op.READ))
    assert alice.request(ADD_OFFSETS, 3, add).error_code == NONE
    assert codes(alice.request(TXN_OFFSET_COMMIT, 3, commit_body).topics) == {("in", 0): NONE,
                                                                             ("out", 0): TOPIC_DENIED}
    with sasl_client(broker, "bob") as bob:  # READ on the group, but no WRITE on the transactional id
        grant(broker, acl("bob", Res.GROUP, "readers", Op.READ))
        assert codes(bob.request(TXN_OFFSET_COMMIT, 3, commit_body).topics) == {("in", 0): TXN_DENIED,
                                                                              ("out", 0): TXN_DENIED}


def test_a_transactional_producer_needs_write_on_its_transactional_id(broker: BrokerThread,
                                                                       admin: RawClient) -> None:
    create_topic(admin, "payments")
    alice = {**conf(broker, "alice"), "transactional.id": "pay-1", "message.timeout.ms": 10000}
    with pytest.raises(KafkaException) as refused:
        Producer(alice).init_transactions(10)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(broker, acl("alice", Res.TRANSACTIONAL_ID, "pay-", Op.WRITE, pattern=PREFIXED),
          acl("alice", Res.TOPIC, "payments", Op.WRITE), acl("alice", Res.TOPIC, "payments", Op.READ))
    producer = Producer(alice)
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce("payments", b"p-1", partition=0)
    metadata = Consumer({**conf(broker, "alice"), "group.id": "settlement"}).consumer_group_metadata()
    offsets = [TopicPartition("payments", 0, 1)]
    with pytest.raises(KafkaException) as no_group:  # READ on the group is missing
        producer.send_offsets_to_transaction(offsets, metadata, 10)
    assert no_group.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    producer.abort_transaction(10)
    grant(broker, acl("alice", Res.GROUP, "settlement", Op.READ))
    producer.begin_transaction()
    producer.produce("payments", b"p-2", partition=0)
    producer.send_offsets_to_transaction(offsets, metadata, 10)
    producer.commit_transaction(10)
    [fetched] = fetch_offsets(admin, {"settlement": [("payments", 0)]})
    assert codes(fetched.topics, "committed_offset") == {("payments", 0): 1}


def ongoing(admin: RawClient, txn_id: str, topic: str) -> int:
    pid = init_pid(admin, txn_id)
    assert add_partitions(admin, txn_id, pid, {topic: [0]}) == {(topic, 0): NONE}
    batch = build_batch([(None, b"x")], producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    produced = admin.request(PRODUCE, 9, {"acks": -1, "timeout": 10_000, "transactional_id": txn_id, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}]}]})
    assert produced.responses[0].partition_responses[0].error_code == NONE
    return pid


def test_describe_and_list_transactions_show_only_describable_ids(broker: BrokerThread, admin: RawClient,
                                                                  alice: RawClient) -> None:
    for topic in ("public", "private"):
        create_topic(admin, topic)
    ongoing(admin, "tx-a", "public")
    ongoing(admin, "tx-b", "public")
    pid_c = ongoing(admin, "tx-c", "private")
    add_partitions(admin, "tx-c", pid_c, {"public": [0]})

    def listed(client: RawClient) -> set[str]:
        answer = client.request(LIST_TXNS, 1, {"state_filters": [], "producer_id_filters": [], "duration_filter": -1})
        assert answer.error_code == NONE
        return {t.transactional_id for t in answer.transaction_states}

    assert listed(admin) == {"tx-a", "tx-b", "tx-c"}
    assert listed(alice) == set()
    grant(broker, acl("alice", Res.TRANSACTIONAL_ID, "tx-", Op.DESCRIBE, pattern=PREFIXED),
          acl("alice", Res.TRANSACTIONAL_ID, "tx-b", Op.DESCRIBE, DENY), acl("alice", Res.TOPIC, "public", Op.READ))
    assert listed(alice) == {"tx-a", "tx-c"}
    states = alice.request(DESCRIBE_TXNS, 0, {"transactional_ids": ["tx-a", "tx-b", "tx-c"]}).transaction_states
    assert [(s.transactional_id, s.error_code) for s in states] == [("tx-a", NONE), ("tx-b", TXN_DENIED),
                                                                    ("tx-c", NONE)]
    assert states[0].transaction_state == "Ongoing" and [t.topic for t in states[0].topics] == ["public"]
    assert (states[1].transaction_state, states[1].producer_id, states[1].topics) == ("", 0, ())
    assert [t.topic for t in states[2].topics] == ["public"]  # "private" is not describable by alice
    everything = admin.request(DESCRIBE_TXNS, 0, {"transactional_ids": ["tx-c"]}).transaction_states[0]
    assert {t.topic for t in everything.topics} == {"public", "private"}


# ----------------------------------------------------------------------- markers between klamm's brokers ---
def test_markers_between_brokers_pass_the_authorizer_as_the_inter_broker_principal() -> None:
    """WriteTxnMarkers and AddPartitionsToTxn verification between klamm's brokers come in on the PLAINTEXT
    listener as User:ANONYMOUS, which needs CLUSTER_ACTION as Kafka's inter-broker principal does: here through
    allow.everyone.if.no.acl.found, the cluster having no ACLs."""
    from klamm.testing import run_cluster

    properties = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                  "allow.everyone.if.no.acl.found": "true", "num.partitions": 3,
                  "transaction.state.log.num.partitions": 1, "offsets.topic.num.partitions": 1}
    with run_cluster(3, properties) as cluster:
        servers = cluster.bootstrap_servers
        topic = f"spread-{uuid.uuid4().hex[:6]}"
        admin = RawClient(next(iter(cluster.brokers.values())).port)
        create_topic(admin, topic, partitions=3)
        admin.close()
        leaders = {cluster.partition(topic, i).leader for i in range(3)}
        assert len(leaders) > 1
        producer = Producer({"bootstrap.servers": servers, "transactional.id": "spread", "message.timeout.ms": 20000})
        producer.init_transactions(20)
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, b"v%d" % i, partition=i)
        producer.commit_transaction(20)
        consumer = Consumer({"bootstrap.servers": servers, "group.id": "spread", "isolation.level": "read_committed",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, i, 0) for i in range(3)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]
        consumer.close()
        assert sorted(got) == [b"v0", b"v1", b"v2"]
