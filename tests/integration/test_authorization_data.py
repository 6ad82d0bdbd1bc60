"""Authorization of the data and topic/cluster admin APIs, as Kafka's KafkaApis and ControllerApis check
them, against a SASL broker with the StandardAuthorizer (tests/integration/secured.py).

A matrix runs every API case the same ways: alice without ACLs is refused with Kafka's error; alice with
exactly the ACLs the case needs passes, and so with them PREFIXED or as the wildcard; a DENY of the same
operation beats those ALLOWs; the super user (admin) passes without any. Raw requests show the codes;
further tests check what Kafka decides beyond one check (hidden topics, the order of errors, topic ids,
authorized operations, followers) and what real clients (confluent-kafka, kafka-python) make of it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import AclPermissionType, AdminClient, ConfigResource, NewPartitions, NewTopic
from confluent_kafka.admin import ResourcePatternType
from confluent_kafka.admin import ResourceType as Res

from klamm.protocol.records import build_batch
from tests.integration.conftest import (CREATE_TOPICS, DELETE_TOPICS, FETCH, INIT_PRODUCER_ID, LIST_OFFSETS, METADATA,
                                        PRODUCE, BrokerThread, RawClient, fetch_body, metadata_request, wait_for)
from tests.integration.secured import acl, conf, grant, kafka_python_conf, secured_broker, sasl_client

pytestmark = pytest.mark.timeout(180)

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
DELETE_RECORDS, OFFSET_FOR_LEADER_EPOCH, DESCRIBE_CONFIGS, ALTER_CONFIGS = 21, 23, 32, 33
ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS, CREATE_PARTITIONS, ELECT_LEADERS = 34, 35, 37, 43
INCREMENTAL_ALTER_CONFIGS, ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS, DESCRIBE_QUORUM = 44, 45, 46, 55
DESCRIBE_CLUSTER, DESCRIBE_PRODUCERS, LIST_CONFIG_RESOURCES, DESCRIBE_TOPIC_PARTITIONS = 60, 61, 74, 75

NONE, UNKNOWN_TOPIC, LEADER_NOT_AVAILABLE, TOPIC_DENIED, CLUSTER_DENIED = 0, 3, 5, 29, 31
ELECTION_NOT_NEEDED, TXN_DENIED, UNKNOWN_TOPIC_ID = 84, 53, 100
CONFIG_TOPIC, CONFIG_BROKER = 2, 4
NOT_INCLUDED = -2147483648
ZERO_IDS = (None, uuid.UUID(int=0))  # kio reads the zero uuid as None
DENY, PREFIXED = AclPermissionType.DENY, ResourcePatternType.PREFIXED

TOPIC = "orders-1"  # every case's topic: PREFIXED ACLs name "orders-"
NEW_TOPIC = "orders-new"  # one a case creates
TXN_ID = "txn-1"
PREFIXES = {Res.TOPIC: "orders-", Res.BROKER: "kafka-", Res.TRANSACTIONAL_ID: "txn-"}
NAMES = {Res.BROKER: "kafka-cluster", Res.TRANSACTIONAL_ID: TXN_ID}




@pytest.fixture
def broker(broker_factory: Any) -> BrokerThread:
    return secured_broker(broker_factory)


@pytest.fixture
def admin(broker: BrokerThread) -> Iterator[RawClient]:
    with sasl_client(broker, "admin") as client:
        yield client


@pytest.fixture
def alice(broker: BrokerThread) -> Iterator[RawClient]:
    with sasl_client(broker, "alice") as client:
        yield client


def create(client: RawClient, *names: str, partitions: int = 1) -> None:
    response = client.request(CREATE_TOPICS, 7, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [], "configs": []}
        for name in names], "timeout": 10_000})
    assert [t.error_code for t in response.topics] == [NONE] * len(names), response


def produce_to(client: RawClient, topic: str = TOPIC, acks: int = -1, transactional_id: str | None = None,
               records: bytes | None = None) -> Any:
    """One Produce to partition 0 of each topic named (comma-separated); returns the partition responses."""
    response = client.request(PRODUCE, 9, {"acks": acks, "timeout": 10_000, "transactional_id": transactional_id,
                                           "topic_data": [{"name": name, "partition_data": [
                                               {"index": 0, "records": records or build_batch([(None, b"v")])}]}
                                               for name in topic.split(",")]})
    return [p for t in response.responses for p in t.partition_responses]


# ------------------------------------------------------------------------------------- the case matrix ---
@dataclass(frozen=True)
class Case:
    """One API call: the ACLs it needs (resource type, operation; the resource is the case's own),
    the call (the code that tells whether it was authorized), Kafka's refusal, and the code of success."""

    name: str
    needs: tuple[tuple[Res, Op], ...]
    call: Callable[[RawClient, BrokerThread], int]
    refused: int
    ok: int = NONE
    setup: Callable[[RawClient], None] = field(default=lambda admin: create(admin, TOPIC))


def one(partitions: Any) -> int:
    [partition] = partitions
    return partition.error_code


def _produce(c: RawClient, b: BrokerThread) -> int:
    return one(produce_to(c))


def _fetch(c: RawClient, b: BrokerThread) -> int:
    response = c.request(FETCH, 12, fetch_body(TOPIC, 0))
    return one(p for t in response.responses for p in t.partitions)


def _list_offsets(c: RawClient, b: BrokerThread) -> int:
    response = c.request(LIST_OFFSETS, 8, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    return one(p for t in response.topics for p in t.partitions)


def _metadata(c: RawClient, b: BrokerThread) -> int:
    [topic] = c.request(METADATA, 12, metadata_request(12, [TOPIC])).topics
    return topic.error_code


def _auto_create(c: RawClient, b: BrokerThread) -> int:
    [topic] = c.request(METADATA, 12, metadata_request(12, [NEW_TOPIC], auto_create=True)).topics
    if topic.error_code != LEADER_NOT_AVAILABLE:  # refused
        return topic.error_code
    [topic] = c.request(METADATA, 12, metadata_request(12, [NEW_TOPIC])).topics  # created: there now
    return topic.error_code


def _describe_topic_partitions(c: RawClient, b: BrokerThread) -> int:
    response = c.request(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": TOPIC}], "response_partition_limit": 100,
                                                        "cursor": None})
    [topic] = response.topics
    return topic.error_code


def _create_topics(c: RawClient, b: BrokerThread) -> int:
    response = c.request(CREATE_TOPICS, 7, {"topics": [{"name": NEW_TOPIC, "num_partitions": 1,
                                                        "replication_factor": 1, "assignments": [], "configs": []}],
                                            "timeout": 10_000, "validate_only": False})
    [topic] = response.topics
    return topic.error_code


def _delete_topics(c: RawClient, b: BrokerThread) -> int:
    [topic] = c.request(DELETE_TOPICS, 6, {"topics": [{"name": TOPIC, "topic_id": None}], "timeout": 10_000}).responses
    return topic.error_code


def _create_partitions(c: RawClient, b: BrokerThread) -> int:
    [result] = c.request(CREATE_PARTITIONS, 3, {"topics": [{"name": TOPIC, "count": 2, "assignments": None}],
                                                "timeout": 10_000, "validate_only": False}).results
    return result.error_code


def _describe_configs(resource_type: int, name: str) -> Callable[[RawClient, BrokerThread], int]:
    def call(c: RawClient, b: BrokerThread) -> int:
        [result] = c.request(DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False}).results
        return result.error_code
    return call


def _alter_configs(resource_type: int, name: str, key: str, value: str) -> Callable[[RawClient, BrokerThread], int]:
    def call(c: RawClient, b: BrokerThread) -> int:
        [result] = c.request(ALTER_CONFIGS, 2, {"resources": [{"resource_type": resource_type, "resource_name": name,
                                                               "configs": [{"name": key, "value": value}]}],
                                                "validate_only": False}).responses
        return result.error_code
    return call


def _incremental_alter_configs(resource_type: int, name: str, key: str,
                               value: str) -> Callable[[RawClient, BrokerThread], int]:
    def call(c: RawClient, b: BrokerThread) -> int:
        [result] = c.request(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
            {"resource_type": resource_type, "resource_name": name,
             "configs": [{"name": key, "config_operation": 0, "value": value}]}], "validate_only": False}).responses
        return result.error_code
    return call


def _list_config_resources(c: RawClient, b: BrokerThread) -> int:
    return c.request(LIST_CONFIG_RESOURCES, 1, {"resource_types": []}).error_code


def _delete_records(c: RawClient, b: BrokerThread) -> int:
    response = c.request(DELETE_RECORDS, 2, {"topics": [{"name": TOPIC, "partitions": [
        {"partition_index": 0, "offset": 0}]}], "timeout": 10_000})
    return one(p for t in response.topics for p in t.partitions)


def _offset_for_leader_epoch(c: RawClient, b: BrokerThread) -> int:
    response = c.request(OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [{"topic": TOPIC, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
    return one(p for t in response.topics for p in t.partitions)


def _describe_log_dirs(c: RawClient, b: BrokerThread) -> int:
    return c.request(DESCRIBE_LOG_DIRS, 4, {"topics": None}).error_code


def _alter_replica_log_dirs(c: RawClient, b: BrokerThread) -> int:
    response = c.request(ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
        {"path": str(b.log_dir), "topics": [{"name": TOPIC, "partitions": [0]}]}]})
    return one(p for t in response.results for p in t.partitions)


def _describe_producers(c: RawClient, b: BrokerThread) -> int:
    response = c.request(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    return one(p for t in response.topics for p in t.partitions)


def _elect_leaders(c: RawClient, b: BrokerThread) -> int:
    response = c.request(ELECT_LEADERS, 2, {"election_type": 0, "timeout": 10_000,
                                            "topic_partitions": [{"topic": TOPIC, "partitions": [0]}]})
    if response.error_code != NONE:
        return response.error_code
    return one(p for t in response.replica_election_results for p in t.partition_result)


def _alter_reassignments(c: RawClient, b: BrokerThread) -> int:
    response = c.request(ALTER_REASSIGNMENTS, 0, {"timeout": 10_000, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [1]}]}]})
    if response.error_code != NONE:
        return response.error_code
    return one(p for t in response.responses for p in t.partitions)


def _list_reassignments(c: RawClient, b: BrokerThread) -> int:
    return c.request(LIST_REASSIGNMENTS, 0, {"timeout": 10_000, "topics": None}).error_code


def _describe_quorum(c: RawClient, b: BrokerThread) -> int:
    return c.request(DESCRIBE_QUORUM, 2, {"topics": [{"topic_name": "__cluster_metadata",
                                                      "partitions": [{"partition_index": 0}]}]}).error_code


def _init_producer_id(transactional_id: str | None) -> Callable[[RawClient, BrokerThread], int]:
    def call(c: RawClient, b: BrokerThread) -> int:
        return c.request(INIT_PRODUCER_ID, 5, {"transactional_id": transactional_id, "transaction_timeout": 60_000,
                                               "producer_id": -1, "producer_epoch": -1}).error_code
    return call


def _nothing(admin: RawClient) -> None:
    pass


CASES = [
    Case("produce", ((Res.TOPIC, Op.WRITE),), _produce, TOPIC_DENIED),
    Case("fetch", ((Res.TOPIC, Op.READ),), _fetch, TOPIC_DENIED),
    Case("list_offsets", ((Res.TOPIC, Op.DESCRIBE),), _list_offsets, TOPIC_DENIED),
    Case("metadata", ((Res.TOPIC, Op.DESCRIBE),), _metadata, TOPIC_DENIED),
    Case("metadata_auto_create", ((Res.TOPIC, Op.DESCRIBE), (Res.TOPIC, Op.CREATE)), _auto_create, TOPIC_DENIED),
    Case("describe_topic_partitions", ((Res.TOPIC, Op.DESCRIBE),), _describe_topic_partitions, TOPIC_DENIED),
    Case("create_topics", ((Res.TOPIC, Op.CREATE),), _create_topics, TOPIC_DENIED, setup=_nothing),
    Case("delete_topics", ((Res.TOPIC, Op.DELETE),), _delete_topics, TOPIC_DENIED),
    Case("create_partitions", ((Res.TOPIC, Op.ALTER),), _create_partitions, TOPIC_DENIED),
    Case("describe_topic_configs", ((Res.TOPIC, Op.DESCRIBE_CONFIGS),), _describe_configs(CONFIG_TOPIC, TOPIC),
         TOPIC_DENIED),
    Case("describe_broker_configs", ((Res.BROKER, Op.DESCRIBE_CONFIGS),), _describe_configs(CONFIG_BROKER, "1"),
         CLUSTER_DENIED),
    Case("alter_topic_configs", ((Res.TOPIC, Op.ALTER_CONFIGS),),
         _alter_configs(CONFIG_TOPIC, TOPIC, "retention.ms", "60000"), TOPIC_DENIED),
    Case("alter_broker_configs", ((Res.BROKER, Op.ALTER_CONFIGS),),
         _alter_configs(CONFIG_BROKER, "", "log.retention.ms", "600000"), CLUSTER_DENIED),
    Case("incremental_alter_topic_configs", ((Res.TOPIC, Op.ALTER_CONFIGS),),
         _incremental_alter_configs(CONFIG_TOPIC, TOPIC, "retention.ms", "60000"), TOPIC_DENIED),
    Case("incremental_alter_broker_configs", ((Res.BROKER, Op.ALTER_CONFIGS),),
         _incremental_alter_configs(CONFIG_BROKER, "1", "log.retention.ms", "600000"), CLUSTER_DENIED),
    Case("list_config_resources", ((Res.BROKER, Op.DESCRIBE_CONFIGS),), _list_config_resources, CLUSTER_DENIED),
    Case("delete_records", ((Res.TOPIC, Op.DELETE),), _delete_records, TOPIC_DENIED),
    Case("offset_for_leader_epoch", ((Res.TOPIC, Op.DESCRIBE),), _offset_for_leader_epoch, TOPIC_DENIED),
    Case("describe_log_dirs", ((Res.BROKER, Op.DESCRIBE),), _describe_log_dirs, CLUSTER_DENIED),
    Case("alter_replica_log_dirs", ((Res.BROKER, Op.ALTER),), _alter_replica_log_dirs, CLUSTER_DENIED),
    Case("describe_producers", ((Res.TOPIC, Op.READ),), _describe_producers, TOPIC_DENIED),
    Case("elect_leaders", ((Res.BROKER, Op.ALTER),), _elect_leaders, CLUSTER_DENIED, ok=ELECTION_NOT_NEEDED),
    Case("alter_partition_reassignments", ((Res.BROKER, Op.ALTER),), _alter_reassignments, CLUSTER_DENIED),
    Case("list_partition_reassignments", ((Res.BROKER, Op.DESCRIBE),), _list_reassignments, CLUSTER_DENIED),
    Case("describe_quorum", ((Res.BROKER, Op.DESCRIBE),), _describe_quorum, CLUSTER_DENIED),
    Case("init_producer_id_transactional", ((Res.TRANSACTIONAL_ID, Op.WRITE),), _init_producer_id(TXN_ID),
         TXN_DENIED, setup=_nothing),
    Case("init_producer_id_idempotent", ((Res.BROKER, Op.IDEMPOTENT_WRITE),), _init_producer_id(None),
         CLUSTER_DENIED, setup=_nothing),
]


def allow(case: Case, user: str = "alice", pattern: str = "literal") -> list[Any]:
    """The ACLs allowing the case to `user`: on its resources, PREFIXED on a prefix of them, or on '*'.

    The cluster (confluent-kafka's ResourceType.BROKER) has one name: its "wildcard" ACL is for every principal (User:*) instead, and its
    PREFIXED one is literal (klamm's CreateAcls takes no other name for the cluster)."""
    bindings = []
    for resource_type, operation in case.needs:
        name = _resource(case, resource_type)
        if resource_type == Res.BROKER:
            bindings.append(acl("*" if pattern == "wildcard" else user, resource_type, name, operation))
        elif pattern == "prefixed":
            bindings.append(acl(user, resource_type, PREFIXES[resource_type], operation, pattern=PREFIXED))
        else:
            bindings.append(acl(user, resource_type, "*" if pattern == "wildcard" else name, operation))
    return bindings


def _resource(case: Case, resource_type: Res) -> str:
    if resource_type == Res.TOPIC:
        return NEW_TOPIC if case.name in ("create_topics", "metadata_auto_create") else TOPIC
    return NAMES[resource_type]


def run(case: Case, broker: BrokerThread, user: str) -> int:
    with sasl_client(broker, user) as client:
        return case.call(client, broker)


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def case(request: Any, broker: BrokerThread, admin: RawClient) -> Case:
    request.param.setup(admin)
    return request.param


def test_refused_without_acls(case: Case, broker: BrokerThread) -> None:
    assert run(case, broker, "alice") == case.refused


def test_allowed_with_exactly_the_acls_needed(case: Case, broker: BrokerThread) -> None:
    grant(broker, *allow(case))
    assert run(case, broker, "alice") == case.ok
    assert run(case, broker, "bob") == case.refused  # they are alice's alone


def test_super_user_needs_no_acl(case: Case, broker: BrokerThread) -> None:
    assert run(case, broker, "admin") == case.ok


@pytest.mark.parametrize("pattern", ["prefixed", "wildcard"])
def test_prefixed_and_wildcard_acls(case: Case, broker: BrokerThread, pattern: str) -> None:
    grant(broker, *allow(case, pattern=pattern))
    assert run(case, broker, "alice") == case.ok


def test_deny_beats_allow(case: Case, broker: BrokerThread) -> None:
    resource_type, operation = case.needs[0]
    grant(broker, *allow(case, pattern="wildcard"), *allow(case, pattern="prefixed"),
          acl("alice", resource_type, _resource(case, resource_type), operation, permission=DENY))
    assert run(case, broker, "alice") == case.refused


# ------------------------------------------------------------------------------------------------ Produce ---
def test_produce_refuses_before_looking_for_the_topic(broker: BrokerThread, admin: RawClient,
                                                      alice: RawClient) -> None:
    """Kafka's order: an unauthorized topic is TOPIC_AUTHORIZATION_FAILED whether it exists or not; an
    authorized one that does not exist is UNKNOWN_TOPIC_OR_PARTITION."""
    create(admin, TOPIC, "secret")
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.WRITE), acl("alice", Res.TOPIC, "maybe-", Op.WRITE,
                                                                pattern=PREFIXED))
    codes = [p.error_code for p in produce_to(alice, f"{TOPIC},secret,absent,maybe-absent")]
    assert codes == [NONE, TOPIC_DENIED, TOPIC_DENIED, UNKNOWN_TOPIC]


def test_produce_with_acks_0_refused_closes_the_connection(broker: BrokerThread, admin: RawClient,
                                                           alice: RawClient) -> None:
    create(admin, TOPIC)
    alice.send(PRODUCE, 9, {"acks": 0, "timeout": 10_000, "transactional_id": None, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": build_batch([(None, b"v")])}]}]})
    alice.expect_disconnect()


def test_transactional_batches_need_write_on_the_transactional_id(broker: BrokerThread, admin: RawClient,
                                                                  alice: RawClient) -> None:
    create(admin, TOPIC, "orders-2")
    grant(broker, acl("alice", Res.TOPIC, "orders-", Op.WRITE, pattern=PREFIXED))
    transactional = build_batch([(None, b"t")], producer_id=1000, producer_epoch=0, base_sequence=0,
                                transactional=True)
    # every partition of the request, the authorized topics' too
    refused = produce_to(alice, f"{TOPIC},orders-2", transactional_id=TXN_ID, records=transactional)
    assert [(p.error_code, p.base_offset) for p in refused] == [(TXN_DENIED, -1), (TXN_DENIED, -1)]
    assert [p.error_code for p in produce_to(alice, records=transactional)] == [TXN_DENIED]  # no transactional id
    # a transactional id on plain batches asks nothing of it (Kafka looks at the batches)
    assert [p.error_code for p in produce_to(alice, transactional_id=TXN_ID)] == [NONE]
    grant(broker, acl("alice", Res.TRANSACTIONAL_ID, TXN_ID, Op.WRITE))
    [answer] = produce_to(alice, transactional_id=TXN_ID, records=transactional)
    assert answer.error_code not in (NONE, TXN_DENIED, TOPIC_DENIED)  # authorized; the coordinator knows no such txn
    with sasl_client(broker, "bob") as bob:
        bob.send(PRODUCE, 9, {"acks": 0, "timeout": 10_000, "transactional_id": TXN_ID, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": 0, "records": transactional}]}]})
        bob.expect_disconnect()


def test_confluent_producer_sees_topic_authorization_failed(broker: BrokerThread, admin: RawClient) -> None:
    create(admin, TOPIC, "secret")
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.WRITE))
    results: dict[str, Any] = {}
    producer = Producer({**conf(broker, "alice"), "message.timeout.ms": 5000})
    for topic in (TOPIC, "secret"):
        producer.produce(topic, b"v", on_delivery=lambda err, msg: results.__setitem__(msg.topic(), err))
    producer.flush(15)
    assert results[TOPIC] is None
    assert results["secret"] is not None and results["secret"].code() == TOPIC_DENIED


def test_idempotent_producer_with_write_on_a_topic(broker: BrokerThread, admin: RawClient) -> None:
    """KIP-679: WRITE on any topic is enough for an idempotent producer's InitProducerId."""
    create(admin, TOPIC)
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.WRITE))
    producer = Producer({**conf(broker, "alice"), "enable.idempotence": True, "message.timeout.ms": 10000})
    errors: list[Any] = []
    producer.produce(TOPIC, b"v", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors == [None]


def test_transactional_producer_needs_write_on_its_id(broker: BrokerThread, admin: RawClient) -> None:
    create(admin, TOPIC)
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.WRITE))
    producer = Producer({**conf(broker, "alice"), "transactional.id": "txn-alice"})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(15)
    assert refused.value.args[0].code() == TXN_DENIED
    grant(broker, acl("alice", Res.TRANSACTIONAL_ID, "txn-", Op.WRITE, pattern=PREFIXED))
    producer = Producer({**conf(broker, "alice"), "transactional.id": "txn-alice"})
    producer.init_transactions(15)


def test_init_producer_id_idempotent_by_topic_write(broker: BrokerThread, alice: RawClient) -> None:
    idempotent = _init_producer_id(None)
    grant(broker, acl("alice", Res.TOPIC, "orders-", Op.WRITE, pattern=PREFIXED),
          acl("alice", Res.TOPIC, "orders-", Op.READ, permission=DENY, pattern=PREFIXED))
    assert idempotent(alice, broker) == NONE  # a DENY of another operation does not matter
    grant(broker, acl("alice", Res.TOPIC, "ord", Op.WRITE, permission=DENY, pattern=PREFIXED))
    assert idempotent(alice, broker) == CLUSTER_DENIED  # a shorter prefix denies all its ALLOW covers
    grant(broker, acl("alice", Res.TOPIC, "audit", Op.ALL))
    assert idempotent(alice, broker) == NONE  # ALL is WRITE too
    grant(broker, acl("alice", Res.TOPIC, "*", Op.WRITE, permission=DENY))
    assert idempotent(alice, broker) == CLUSTER_DENIED  # a wildcard DENY denies all
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    assert idempotent(alice, broker) == NONE
    with sasl_client(broker, "bob") as bob:
        grant(broker, acl("bob", Res.TOPIC, "orders-1", Op.DESCRIBE))
        assert idempotent(bob, broker) == CLUSTER_DENIED  # implied operations do not count


# -------------------------------------------------------------------------------------------------- Fetch ---
def topic_id(admin: RawClient, name: str = TOPIC) -> uuid.UUID:
    [topic] = admin.request(METADATA, 12, metadata_request(12, [name])).topics
    return topic.topic_id


def fetch_codes(client: RawClient, version: int, *keys: str | uuid.UUID, replica_id: int = -1,
                session: tuple[int, int] = (0, -1)) -> Any:
    body = fetch_body(keys[0], 0)
    body.update(replica_id=replica_id, session_id=session[0], session_epoch=session[1],
                topics=[fetch_body(key, 0)["topics"][0] for key in keys])
    response = client.request(FETCH, version, body)
    assert response.error_code == NONE
    return response, [p.error_code for t in response.responses for p in t.partitions]


def test_fetch_refuses_before_looking_for_the_topic(broker: BrokerThread, admin: RawClient,
                                                    alice: RawClient) -> None:
    create(admin, TOPIC, "secret")
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.READ), acl("alice", Res.TOPIC, "maybe-", Op.READ,
                                                               pattern=PREFIXED))
    _, codes = fetch_codes(alice, 12, TOPIC, "secret", "absent", "maybe-absent")
    assert codes == [NONE, TOPIC_DENIED, TOPIC_DENIED, UNKNOWN_TOPIC]
    grant(broker, acl("bob", Res.TOPIC, TOPIC, Op.WRITE))
    with sasl_client(broker, "bob") as bob:
        assert fetch_codes(bob, 12, TOPIC)[1] == [TOPIC_DENIED]  # WRITE is no READ


def test_fetch_by_topic_id(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    """v13+: an unknown id is UNKNOWN_TOPIC_ID whoever asks; a known one unauthorized TOPIC_AUTHORIZATION_FAILED."""
    create(admin, TOPIC, "secret")
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.READ))
    _, codes = fetch_codes(alice, 13, topic_id(admin), topic_id(admin, "secret"), uuid.uuid4())
    assert codes == [NONE, TOPIC_DENIED, UNKNOWN_TOPIC_ID]


def test_fetch_session_partitions_are_checked_at_every_fetch(broker: BrokerThread, admin: RawClient,
                                                            alice: RawClient) -> None:
    create(admin, TOPIC)
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.READ))
    response, codes = fetch_codes(alice, 12, TOPIC, session=(0, 0))  # opens a session
    assert codes == [NONE] and response.session_id != 0
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.READ, permission=DENY))
    body = fetch_body(TOPIC, 0)
    body.update(session_id=response.session_id, session_epoch=1, topics=[])  # incremental: the session's partition
    again = alice.request(FETCH, 12, body)
    assert [p.error_code for t in again.responses for p in t.partitions] == [TOPIC_DENIED]


def test_follower_fetch_needs_cluster_action(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    create(admin, TOPIC)
    grant(broker, acl("alice", Res.TOPIC, "*", Op.ALL))
    # a replica id makes it a follower's: every partition refused, an unknown topic id too
    assert fetch_codes(alice, 12, TOPIC, replica_id=1)[1] == [TOPIC_DENIED]
    assert fetch_codes(alice, 13, topic_id(admin), uuid.uuid4(), replica_id=1)[1] == [TOPIC_DENIED, TOPIC_DENIED]
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.CLUSTER_ACTION))
    assert fetch_codes(alice, 13, topic_id(admin), uuid.uuid4(), replica_id=1)[1] == [NONE, UNKNOWN_TOPIC_ID]
    # CLUSTER_ACTION is no READ for a consumer
    with sasl_client(broker, "bob") as bob:
        grant(broker, acl("bob", Res.BROKER, "kafka-cluster", Op.CLUSTER_ACTION))
        assert fetch_codes(bob, 12, TOPIC)[1] == [TOPIC_DENIED]


def test_kafka_python_consumer(broker: BrokerThread, admin: RawClient) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.errors import TopicAuthorizationFailedError

    create(admin, TOPIC)
    assert produce_to(admin)[0].error_code == NONE

    def consumer() -> Any:
        made = KafkaConsumer(**kafka_python_conf(broker, "alice"), group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=3000)
        made.assign([KafkaTopicPartition(TOPIC, 0)])
        return made

    hidden = consumer()  # not even DESCRIBE: the metadata refuses the topic
    assert hidden.poll(timeout_ms=1000) == {}
    assert TOPIC in hidden._client.cluster.unauthorized_topics
    hidden.close()
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.DESCRIBE))  # offsets, but no records
    described = consumer()
    with pytest.raises(TopicAuthorizationFailedError):
        for _ in range(10):
            described.poll(timeout_ms=500)
    described.close()
    grant(broker, acl("alice", Res.TOPIC, "orders-", Op.READ, pattern=PREFIXED))
    reader = consumer()
    assert [m.value for m in reader] == [b"v"]
    reader.close()


def test_confluent_consumer_reads_with_read_and_fails_without(broker: BrokerThread, admin: RawClient) -> None:
    create(admin, TOPIC, "secret")
    for topic in (TOPIC, "secret"):
        assert produce_to(admin, topic)[0].error_code == NONE
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.READ), acl("alice", Res.GROUP, "readers", Op.READ),
          acl("alice", Res.TOPIC, "secret", Op.DESCRIBE))  # its leader and offsets, but no records
    consumer = Consumer({**conf(broker, "alice"), "group.id": "readers", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0), TopicPartition("secret", 0, 0)])
    values, errors = [], []
    for _ in range(50):
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error():
            errors.append((message.topic(), message.error().code()))
        else:
            values.append((message.topic(), message.value()))
        if values and errors:
            break
    consumer.close()
    assert values == [(TOPIC, b"v")]
    assert [code for _, code in errors] == [TOPIC_DENIED], errors


def test_offset_for_leader_epoch_with_cluster_action(broker: BrokerThread, admin: RawClient,
                                                     alice: RawClient) -> None:
    """A follower's CLUSTER_ACTION stands for DESCRIBE on every topic (KIP-320)."""
    create(admin, TOPIC)
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.CLUSTER_ACTION))
    assert _offset_for_leader_epoch(alice, broker) == NONE


# ----------------------------------------------------------------------------------------------- Metadata ---
def test_metadata_of_every_topic_leaves_out_the_undescribable(broker: BrokerThread, admin: RawClient,
                                                              alice: RawClient) -> None:
    create(admin, TOPIC, "orders-2", "secret")
    grant(broker, acl("alice", Res.TOPIC, "orders-", Op.WRITE, pattern=PREFIXED))  # WRITE implies DESCRIBE
    assert {t.name for t in alice.request(METADATA, 12, metadata_request(12, None)).topics} == {TOPIC, "orders-2"}
    assert {t.name for t in alice.request(METADATA, 0, {"topics": []}).topics} == {TOPIC, "orders-2"}  # v0: all
    with sasl_client(broker, "bob") as bob:
        assert bob.request(METADATA, 12, metadata_request(12, None)).topics == ()
    assert {TOPIC, "orders-2", "secret"} <= {t.name for t in admin.request(METADATA, 12,
                                                                           metadata_request(12, None)).topics}
    admin_client = AdminClient(conf(broker, "alice"))
    assert set(admin_client.list_topics(timeout=10).topics) == {TOPIC, "orders-2"}


def test_metadata_of_named_topics(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    """Undescribable topics answer TOPIC_AUTHORIZATION_FAILED without their id (asked by id, without
    their name), whether they exist or not; an unknown id is UNKNOWN_TOPIC_ID."""
    create(admin, TOPIC, "secret")
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.DESCRIBE))
    topics = alice.request(METADATA, 12, metadata_request(12, [TOPIC, "secret", "absent"])).topics
    assert [(t.name, t.error_code, t.topic_id in ZERO_IDS) for t in topics] == [
        (TOPIC, NONE, False), ("secret", TOPIC_DENIED, True), ("absent", TOPIC_DENIED, True)]
    secret_id, unknown_id = topic_id(admin, "secret"), uuid.uuid4()
    by_id = alice.request(METADATA, 12, {"topics": [{"name": None, "topic_id": secret_id},
                                                    {"name": None, "topic_id": unknown_id}],
                                         "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False}).topics
    assert [(t.name, t.topic_id, t.error_code) for t in by_id] == [(None, secret_id, TOPIC_DENIED),
                                                                   (None, unknown_id, UNKNOWN_TOPIC_ID)]


def test_auto_creation_needs_create(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    grant(broker, acl("alice", Res.TOPIC, "*", Op.DESCRIBE))
    [topic] = alice.request(METADATA, 12, metadata_request(12, ["made-by-alice"], auto_create=True)).topics
    assert (topic.name, topic.error_code) == ("made-by-alice", TOPIC_DENIED)
    [seen] = admin.request(METADATA, 12, metadata_request(12, ["made-by-alice"])).topics
    assert seen.error_code == UNKNOWN_TOPIC  # not created
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.CREATE))  # CREATE on the cluster: any topic
    [topic] = alice.request(METADATA, 12, metadata_request(12, ["made-by-alice"], auto_create=True)).topics
    assert topic.error_code == LEADER_NOT_AVAILABLE  # created by this request, as from Kafka
    [seen] = admin.request(METADATA, 12, metadata_request(12, ["made-by-alice"])).topics
    assert seen.error_code == NONE and len(seen.partitions) >= 1


def bits(*operations: int) -> int:
    """An authorized-operations field: bit `code` per operation (READ 3, DESCRIBE 8, ...)."""
    return sum(1 << op for op in operations)


ALL_TOPIC_OPERATIONS = bits(3, 4, 5, 6, 7, 8, 10, 11)  # READ .. ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
ALL_CLUSTER_OPERATIONS = bits(5, 7, 8, 9, 10, 11, 12)  # CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, .., IDEMPOTENT_WRITE


def test_authorized_operations_are_the_principals(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    create(admin, TOPIC)
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.READ), acl("alice", Res.TOPIC, TOPIC, Op.ALTER_CONFIGS))

    def metadata(client: RawClient, version: int) -> Any:
        return client.request(METADATA, version, {"topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}],
                                                  "allow_auto_topic_creation": False,
                                                  "include_cluster_authorized_operations": True,
                                                  "include_topic_authorized_operations": True})

    # READ implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS
    expected = bits(3, 8, 10, 11)
    for version in (8, 10, 12):
        [topic] = metadata(alice, version).topics
        assert topic.topic_authorized_operations == expected
    assert metadata(alice, 10).cluster_authorized_operations == 0  # no DESCRIBE on the cluster
    [topic] = metadata(admin, 12).topics
    assert topic.topic_authorized_operations == ALL_TOPIC_OPERATIONS
    assert metadata(admin, 10).cluster_authorized_operations == ALL_CLUSTER_OPERATIONS
    [partitions] = alice.request(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": TOPIC}],
                                                                "response_partition_limit": 10, "cursor": None}).topics
    assert partitions.topic_authorized_operations == expected

    def cluster(client: RawClient) -> int:
        return client.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True,
                                                    "endpoint_type": 1}).cluster_authorized_operations

    assert cluster(alice) == 0
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.DESCRIBE),
          acl("alice", Res.BROKER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    assert cluster(alice) == bits(8, 12) == metadata(alice, 10).cluster_authorized_operations
    assert cluster(admin) == ALL_CLUSTER_OPERATIONS
    assert alice.request(DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False,
                                               "endpoint_type": 1}).cluster_authorized_operations == NOT_INCLUDED


def test_describe_topic_partitions_hides_or_refuses(broker: BrokerThread, admin: RawClient,
                                                    alice: RawClient) -> None:
    create(admin, TOPIC, "secret")
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.DESCRIBE))

    def names(topics: list[str]) -> list[tuple[str, int]]:
        response = alice.request(DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": n} for n in topics],
                                                                "response_partition_limit": 100, "cursor": None})
        return [(t.name, t.error_code) for t in response.topics]

    assert names([]) == [(TOPIC, NONE)]  # every topic: the others left out
    assert names(["secret", TOPIC, "absent"]) == [(TOPIC, NONE), ("absent", TOPIC_DENIED), ("secret", TOPIC_DENIED)]


# ------------------------------------------------------------------------------------------ Topic admin ---
def test_created_topic_configs_need_describe_configs(broker: BrokerThread, alice: RawClient) -> None:
    grant(broker, acl("alice", Res.TOPIC, "orders-", Op.CREATE, pattern=PREFIXED),
          acl("alice", Res.TOPIC, "orders-b", Op.DESCRIBE_CONFIGS))

    def create_as_alice(name: str) -> Any:
        [topic] = alice.request(CREATE_TOPICS, 7, {"topics": [{"name": name, "num_partitions": 2,
                                                               "replication_factor": 1, "assignments": [],
                                                               "configs": [{"name": "retention.ms", "value": "1000"}]}],
                                                   "timeout": 10_000, "validate_only": False}).topics
        return topic

    hidden = create_as_alice("orders-a")
    assert (hidden.error_code, hidden.topic_config_error_code, hidden.configs) == (NONE, TOPIC_DENIED, ())
    assert (hidden.num_partitions, hidden.replication_factor) == (-1, -1)
    shown = create_as_alice("orders-b")
    assert (shown.error_code, shown.topic_config_error_code, shown.num_partitions) == (NONE, NONE, 2)
    assert ("retention.ms", "1000") in {(c.name, c.value) for c in shown.configs}


def test_create_topics_with_create_on_the_cluster(broker: BrokerThread, alice: RawClient) -> None:
    admin_client = AdminClient(conf(broker, "alice"))
    with pytest.raises(KafkaException) as refused:
        admin_client.create_topics([NewTopic("anything", 1, 1)])["anything"].result(10)
    assert refused.value.args[0].code() == TOPIC_DENIED
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.CREATE))
    admin_client.create_topics([NewTopic("anything", 1, 1)])["anything"].result(10)
    with pytest.raises(KafkaException) as refused:  # creating is no ALTER
        admin_client.create_partitions([NewPartitions("anything", 2)])["anything"].result(10)
    assert refused.value.args[0].code() == TOPIC_DENIED


def test_delete_topics_by_name_and_id(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    """Kafka's ControllerApis.deleteTopics: an undescribable name is refused before it is looked for; a
    topic named by id is refused with its name only when describable; an unknown id is UNKNOWN_TOPIC_ID."""
    create(admin, "seen-1", "seen-2", "secret", "doomed")
    grant(broker, acl("alice", Res.TOPIC, "seen-", Op.DESCRIBE, pattern=PREFIXED),
          acl("alice", Res.TOPIC, "doomed", Op.DELETE), acl("alice", Res.TOPIC, "absent-", Op.DELETE,
                                                              pattern=PREFIXED))
    ids = {name: topic_id(admin, name) for name in ("seen-1", "seen-2", "secret", "doomed")}
    unknown = uuid.uuid4()
    zero = None  # the zero uuid, as kio reads it
    response = alice.request(DELETE_TOPICS, 6, {"timeout": 10_000, "topics": [
        {"name": "seen-1", "topic_id": None}, {"name": None, "topic_id": ids["seen-2"]},
        {"name": None, "topic_id": ids["secret"]}, {"name": "secret", "topic_id": None},
        {"name": "absent", "topic_id": None}, {"name": "absent-1", "topic_id": None},
        {"name": None, "topic_id": unknown}, {"name": None, "topic_id": ids["doomed"]}]}).responses
    assert [(r.name, r.topic_id, r.error_code) for r in response] == [
        ("seen-1", zero, TOPIC_DENIED), ("seen-2", ids["seen-2"], TOPIC_DENIED), (None, ids["secret"], TOPIC_DENIED),
        ("secret", zero, TOPIC_DENIED), ("absent", zero, TOPIC_DENIED), ("absent-1", zero, UNKNOWN_TOPIC),
        (None, unknown, UNKNOWN_TOPIC_ID), ("doomed", ids["doomed"], NONE)]
    grant(broker, acl("alice", Res.BROKER, "kafka-cluster", Op.DELETE))  # DELETE on the cluster: every topic
    v5 = alice.request(DELETE_TOPICS, 5, {"timeout": 10_000, "topic_names": ["secret"]}).responses
    assert [(r.name, r.error_code) for r in v5] == [("secret", NONE)]


# ------------------------------------------------------------------------------------------------ Configs ---
def test_describe_configs_per_resource(broker: BrokerThread, admin: RawClient, alice: RawClient) -> None:
    create(admin, TOPIC, "secret")
    grant(broker, acl("alice", Res.TOPIC, TOPIC, Op.ALTER_CONFIGS))  # implies DESCRIBE_CONFIGS
    response = alice.request(DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": CONFIG_TOPIC, "resource_name": name, "configuration_keys": None}
        for name in (TOPIC, "secret")] + [{"resource_type": CONFIG_BROKER, "resource_name": "1",
                                           "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False}).results
    assert [(r.resource_name, r.error_code, bool(r.configs)) for r in response] == [
        (TOPIC, NONE, True), ("secret", TOPIC_DENIED, False), ("1", CLUSTER_DENIED, False)]
    assert response[1].error_message == "Topic authorization failed."
    admin_client = AdminClient(conf(broker, "alice"))
    with pytest.raises(KafkaException) as refused:
        admin_client.describe_configs([ConfigResource("topic", "secret")])[ConfigResource("topic", "secret")].result(10)
    assert refused.value.args[0].code() == TOPIC_DENIED


def test_broker_config_checks_come_before_authorization(broker: BrokerThread, alice: RawClient) -> None:
    """Kafka's broker checks a broker resource before its controller authorizes the change."""
    assert _alter_configs(CONFIG_BROKER, "7", "log.retention.ms", "1")(alice, broker) == 42  # INVALID_REQUEST
    assert _alter_configs(CONFIG_BROKER, "", "log.retention.ms", "1")(alice, broker) == CLUSTER_DENIED


# ------------------------------------------------------------------------------------------- Replication ---
def test_followers_fetch_as_their_listeners_principal() -> None:
    """klamm's followers fetch over the first listener: on PLAINTEXT they are User:ANONYMOUS, which needs
    CLUSTER_ACTION as Kafka's inter-broker principal does. Without it the followers are refused and
    leave the ISR; granted, they catch up."""
    from klamm.controller.acls import Acl, PatternType, Permission
    from klamm.controller.acls import ResourceType as Kind
    from klamm.protocol.acl import AclOperation
    from klamm.testing import run_cluster

    settings = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:admin"}
    with run_cluster(2, settings, replica_lag_time_max_ms=500, replica_fetch_backoff_ms=50,
                     replica_fetch_wait_max_ms=100) as cluster:
        def add(operation: int, resource_type: int, name: str) -> None:
            async def commit() -> None:
                cluster.controller.create_acls([Acl(resource_type, name, PatternType.LITERAL, "User:ANONYMOUS", "*",
                                                    operation, Permission.ALLOW)])
            cluster.call(commit())

        add(AclOperation.ALL, Kind.TOPIC, "*")
        client = RawClient(next(iter(cluster.brokers.values())).port)
        assert client.request(CREATE_TOPICS, 7, {"topics": [{"name": TOPIC, "num_partitions": 1,
                                                             "replication_factor": 2, "assignments": [],
                                                             "configs": []}],
                                                 "timeout": 10_000}).topics[0].error_code == NONE
        wait_for(lambda: len(cluster.partition(TOPIC).isr) == 1, timeout=20)  # the follower was refused
        add(AclOperation.CLUSTER_ACTION, Kind.CLUSTER, "kafka-cluster")
        wait_for(lambda: len(cluster.partition(TOPIC).isr) == 2, timeout=20)
        client.close()
