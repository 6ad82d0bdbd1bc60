"""Replication between brokers: three in-process brokers sharing one controller (klamm.testing.run_cluster).

Followers fetch from leaders over loopback, the HW moves with the ISR, acks=all
waits for it, leadership moves when the controller fences a broker, and a
follower whose log diverged truncates it by leader epoch. A stopped broker is
fenced by the test (what the controller's session timeout does in a cluster).
"""

from __future__ import annotations

import gc
import threading
import time
import warnings
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from klamm.protocol.batch import split_batches
from klamm.protocol.errors import ErrorCode
from klamm.protocol.records import build_batch
from klamm.testing import EmbeddedCluster, run_cluster

from tests.integration.conftest import CREATE_TOPICS, FETCH, LIST_OFFSETS, PRODUCE, RawClient, fetch, fetch_body
from tests.integration.conftest import produce as produce_raw

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture
def cluster():
    # fast ISR expiry and retries, so that fail-overs take tenths of seconds
    with run_cluster(3, replica_lag_time_max_ms=1000, replica_fetch_backoff_ms=50,
                     replica_fetch_wait_max_ms=200) as running:
        yield running


def create(c: EmbeddedCluster, topic: str, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    admin.create_topics([NewTopic(topic, 1, 3, config=configs)])[topic].result(15)


def eventually(condition: Any, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def batches(c: EmbeddedCluster, node: int, topic: str) -> list[bytes]:
    """Every batch of the replica's log, as bytes (offsets, epochs and CRCs included)."""
    def read() -> list[bytes]:
        partition = c.brokers[node].replicas.partitions[(topic, 0)]
        out, offset = [], partition.log_start_offset
        while offset < partition.log_end_offset:
            buf = bytearray(partition.log.read_bytes(offset, 1 << 20))
            for header in split_batches(buf):
                out.append(bytes(buf[header.position:header.position + header.size]))
                offset = header.next_offset
        return out
    return c.call(_on_loop(read))


async def _on_loop(fn: Any) -> Any:
    return fn()


def replica(c: EmbeddedCluster, node: int, topic: str) -> Any:
    return c.brokers[node].replicas.partitions[(topic, 0)]


def produce(c: EmbeddedCluster, topic: str, count: int, prefix: str = "v", **conf: Any) -> dict[bytes, int]:
    """Produce `count` records acks=all; value -> acknowledged offset."""
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all", "linger.ms": 2, **conf})
    acked: dict[bytes, int] = {}
    errors: list[Any] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is None:
            acked[msg.value()] = msg.offset()
        else:
            errors.append(err)
    for i in range(count):
        producer.produce(topic, value=f"{prefix}{i}".encode(), on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]
    return acked


def consume_all(c: EmbeddedCluster, topic: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    return values


def test_acks_all_replicates_every_batch_byte_for_byte(cluster: EmbeddedCluster) -> None:
    create(cluster, "r", **{"min.insync.replicas": "2"})
    acked = produce(cluster, "r", 500)
    assert sorted(acked.values()) == list(range(500))
    leader = cluster.partition("r").leader
    eventually(lambda: all(replica(cluster, n, "r").high_watermark == 500 for n in cluster.brokers))
    copies = {n: batches(cluster, n, "r") for n in cluster.brokers}
    assert all(copy == copies[leader] for copy in copies.values())
    assert cluster.partition("r").isr == (1, 2, 3) or set(cluster.partition("r").isr) == {1, 2, 3}


def test_a_follower_answers_not_leader_and_names_the_leader(cluster: EmbeddedCluster) -> None:
    create(cluster, "r")
    leader = cluster.partition("r")
    follower = next(n for n in cluster.brokers if n != leader.leader)
    client = RawClient(cluster.brokers[follower].port)
    response = client.request(PRODUCE, 11, {"acks": -1, "timeout": 5000, "topic_data": [
        {"name": "r", "partition_data": [{"index": 0, "records": build_batch([(None, b"x")])}]}]})
    answer = response.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.not_leader_or_follower
    # KIP-951: where the leader is, so the client need not ask for metadata
    assert (answer.current_leader.leader_id, answer.current_leader.leader_epoch) == (leader.leader, leader.leader_epoch)
    [endpoint] = response.node_endpoints
    assert (endpoint.node_id, endpoint.port) == (leader.leader, cluster.brokers[leader.leader].port)
    # a consumer's fetch before v11 is the leader's only (from v11 a follower serves it: KIP-392)
    assert fetch(client, "r", 0, version=10).error_code == ErrorCode.not_leader_or_follower


def produce_one(client: RawClient, topic: str, partition: int = 0) -> Any:
    return produce_raw(client, topic, build_batch([(None, b"x")]), partition=partition)


def test_a_broker_without_a_replica_answers_not_leader_for_a_partition_of_the_cluster(cluster: EmbeddedCluster) -> None:
    # Kafka's ReplicaManager.getPartitionOrError: a partition the cluster has but this broker does not
    # host is NOT_LEADER_OR_FOLLOWER (the client refreshes its metadata), not UNKNOWN_TOPIC_OR_PARTITION.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("one", 1, 1)])["one"].result(15)
    leader = cluster.partition("one").leader
    other = next(n for n in cluster.brokers if n != leader)
    eventually(lambda: ("one", 0) in cluster.brokers[leader].replicas.partitions)
    client = RawClient(cluster.brokers[other].port)
    assert fetch(client, "one", 0, version=12).error_code == ErrorCode.not_leader_or_follower
    assert produce_one(client, "one").error_code == ErrorCode.not_leader_or_follower
    listed = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": "one", "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
    assert listed.topics[0].partitions[0].error_code == ErrorCode.not_leader_or_follower
    # a partition the cluster lacks stays unknown
    assert fetch(client, "one", 0, partition=1, version=12).error_code == ErrorCode.unknown_topic_or_partition
    assert produce_one(client, "one", partition=1).error_code == ErrorCode.unknown_topic_or_partition


def test_a_consumer_fetches_from_a_follower_from_v11(cluster: EmbeddedCluster) -> None:
    # Kafka's FetchParams.fetchOnlyLeader: a consumer's fetch from v11 reads a follower's log, up to
    # that follower's high watermark, and a long poll there is answered when that HW moves.
    create(cluster, "r")
    assert len(produce(cluster, "r", 4)) == 4
    follower = next(n for n in cluster.brokers if n != cluster.partition("r").leader)
    eventually(lambda: replica(cluster, follower, "r").high_watermark == 4)
    client = RawClient(cluster.brokers[follower].port)
    answer = fetch(client, "r", 0, version=11)
    assert (answer.error_code, answer.high_watermark) == (ErrorCode.none, 4)
    read = split_batches(bytearray(answer.records))
    assert read[0].base_offset == 0 and sum(h.records_count for h in read) == 4
    client.send(FETCH, 12, fetch_body("r", 4, max_wait_ms=30_000))  # parked at the follower's HW
    time.sleep(0.2)
    started = time.monotonic()
    produce(cluster, "r", 1, prefix="late")
    _, fetched = client.receive()
    late = fetched.responses[0].partitions[0]
    assert late.error_code == ErrorCode.none and split_batches(bytearray(late.records))[0].base_offset == 4
    assert time.monotonic() - started < 10


def test_acks_all_waits_for_the_isr_and_min_insync_replicas_refuses(cluster: EmbeddedCluster) -> None:
    create(cluster, "r", **{"min.insync.replicas": "3"})
    assert len(produce(cluster, "r", 10)) == 10
    leader = cluster.partition("r").leader
    follower = next(n for n in cluster.brokers if n != leader)
    cluster.call(cluster.kill_broker(follower, fence=False))  # gone, but still in the ISR
    client = RawClient(cluster.brokers[leader].port)
    response = client.request(PRODUCE, 9, {"acks": -1, "timeout": 30_000, "topic_data": [
        {"name": "r", "partition_data": [{"index": 0, "records": build_batch([(None, b"late")])}]}]})
    # answered once the lagging follower left the ISR (replica.lag.time.max.ms), below min.insync.replicas
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.not_enough_replicas_after_append
    assert follower not in cluster.partition("r").isr
    response = client.request(PRODUCE, 9, {"acks": -1, "timeout": 30_000, "topic_data": [
        {"name": "r", "partition_data": [{"index": 0, "records": build_batch([(None, b"refused")])}]}]})
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.not_enough_replicas
    # acks=1 still goes, and the follower back catches up and rejoins the ISR
    response = client.request(PRODUCE, 9, {"acks": 1, "timeout": 30_000, "topic_data": [
        {"name": "r", "partition_data": [{"index": 0, "records": build_batch([(None, b"one")])}]}]})
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    cluster.call(cluster.start_broker(follower))
    eventually(lambda: set(cluster.partition("r").isr) == {1, 2, 3})
    assert len(produce(cluster, "r", 5, prefix="after")) == 5


def test_an_acks_all_produce_whose_client_leaves_while_it_waits_leaves_no_wait_unawaited(
        cluster: EmbeddedCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("w", 2, replica_assignment=[[1, 2, 3], [1, 2, 3]])])["w"].result(15)
    eventually(lambda: cluster.partition("w", 0).leader == cluster.partition("w", 1).leader == 1)
    for node in (2, 3):
        cluster.call(cluster.kill_broker(node, fence=False))  # gone, still in the ISR: acks=all waits
    client = RawClient(cluster.brokers[1].port)
    partitions = cluster.brokers[1].replicas.partitions
    with warnings.catch_warnings(record=True) as caught:  # the brokers' thread warns into this list too
        warnings.simplefilter("always")
        client.send(PRODUCE, 9, {"acks": -1, "timeout": 30_000, "topic_data": [
            {"name": "w", "partition_data": [{"index": i, "records": build_batch([(None, b"x")])}
                                             for i in (0, 1)]}]})
        eventually(lambda: partitions[("w", 0)].log_end_offset == partitions[("w", 1)].log_end_offset == 1)
        client.sock.close()  # the handler is cancelled waiting for the first partition's ISR
        time.sleep(0.5)
        cluster.call(_on_loop(gc.collect))
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_fail_over_keeps_every_acknowledged_record_in_order(cluster: EmbeddedCluster) -> None:
    create(cluster, "r", **{"min.insync.replicas": "2"})
    acked = produce(cluster, "r", 300, prefix="a", **{"enable.idempotence": True})
    old_leader = cluster.partition("r").leader
    cluster.call(cluster.kill_broker(old_leader))
    assert cluster.partition("r").leader not in (old_leader, -1)
    acked.update(produce(cluster, "r", 300, prefix="b", **{"enable.idempotence": True}))
    cluster.call(cluster.start_broker(old_leader))
    eventually(lambda: set(cluster.partition("r").isr) == {1, 2, 3})
    values = consume_all(cluster, "r", 600)
    assert values == [f"a{i}".encode() for i in range(300)] + [f"b{i}".encode() for i in range(300)]
    assert all(values[offset] == value for value, offset in acked.items())
    leader = cluster.partition("r").leader
    eventually(lambda: all(replica(cluster, n, "r").log_end_offset == 600 for n in cluster.brokers))
    assert all(batches(cluster, n, "r") == batches(cluster, leader, "r") for n in cluster.brokers)


def test_a_divergent_tail_is_truncated_by_leader_epoch(cluster: EmbeddedCluster) -> None:
    create(cluster, "r")
    assert len(produce(cluster, "r", 20)) == 20
    old_leader = cluster.partition("r").leader
    followers = [n for n in cluster.brokers if n != old_leader]
    eventually(lambda: all(replica(cluster, n, "r").log_end_offset == 20 for n in followers))
    for node in followers:
        cluster.call(cluster.kill_broker(node, fence=False))
    client = RawClient(cluster.brokers[old_leader].port)
    for value in (b"lost-1", b"lost-2"):  # acks=1: written on the leader only
        response = client.request(PRODUCE, 9, {"acks": 1, "timeout": 5000, "topic_data": [
            {"name": "r", "partition_data": [{"index": 0, "records": build_batch([(None, value)])}]}]})
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert replica(cluster, old_leader, "r").log_end_offset == 22
    assert replica(cluster, old_leader, "r").high_watermark == 20  # consumers cannot see them
    cluster.call(cluster.kill_broker(old_leader))  # fenced: a follower (still registered) is elected
    new_leader = cluster.partition("r").leader
    assert new_leader in followers
    for node in followers:
        cluster.call(cluster.start_broker(node))
    assert len(produce(cluster, "r", 3, prefix="new")) == 3
    cluster.call(cluster.start_broker(old_leader))
    eventually(lambda: set(cluster.partition("r").isr) == {1, 2, 3})
    eventually(lambda: replica(cluster, old_leader, "r").log_end_offset == 23)
    assert batches(cluster, old_leader, "r") == batches(cluster, new_leader, "r")
    values = consume_all(cluster, "r", 23)
    assert b"lost-1" not in values and values[-3:] == [b"new0", b"new1", b"new2"]


# ------------------------------------------------------------------ coordinators
from tests.integration.test_coordinator_failures import FIND_COORDINATOR, commit, committed, init  # noqa: E402


def coordinator_of(c: EmbeddedCluster, key: str, key_type: int = 0) -> int:
    client = RawClient(next(iter(c.brokers.values())).port)
    deadline = time.monotonic() + 20
    while True:
        found = client.request(FIND_COORDINATOR, 3, {"key": key, "key_type": key_type})
        if found.error_code == 0:
            return found.node_id
        assert time.monotonic() < deadline, found
        time.sleep(0.05)


def test_an_offset_commit_waits_for_the_isr_and_survives_its_coordinator(cluster: EmbeddedCluster) -> None:
    create(cluster, "t")
    node = coordinator_of(cluster, "g")
    client = RawClient(cluster.brokers[node].port)
    assert commit(client, "g", "t", 42) == 0
    cluster.call(cluster.kill_broker(node))  # the coordinator dies: another replica of its partition leads
    node = coordinator_of(cluster, "g")
    client = RawClient(cluster.brokers[node].port)
    eventually(lambda: committed(client, "g", "t") == 42)


def test_a_commit_the_isr_does_not_take_in_time_is_not_acknowledged() -> None:
    with run_cluster(3, replica_lag_time_max_ms=1500, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=50,
                     offsets_commit_timeout_ms=500) as c:
        create(c, "t")
        node = coordinator_of(c, "g")
        client = RawClient(c.brokers[node].port)
        eventually(lambda: commit(client, "g", "t", 1) == 0)  # once the followers fetch the new partition
        follower = next(n for n in c.brokers if n != node)
        c.call(c.kill_broker(follower, fence=False))  # still in the ISR until replica.lag.time.max.ms
        assert commit(client, "g", "t", 2) == ErrorCode.coordinator_not_available  # offsets.commit.timeout.ms
        eventually(lambda: follower not in c.partition("__consumer_offsets").isr)
        assert commit(client, "g", "t", 3) == 0


def test_transactional_state_is_replicated_before_the_answer(cluster: EmbeddedCluster) -> None:
    node = coordinator_of(cluster, "tid", key_type=1)
    client = RawClient(cluster.brokers[node].port)
    first = init(client, "tid")
    assert first.error_code == 0
    cluster.call(cluster.kill_broker(node))
    node = coordinator_of(cluster, "tid", key_type=1)
    client = RawClient(cluster.brokers[node].port)
    again = init(client, "tid")  # the new coordinator knows the producer id: it bumps its epoch
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id, 1)


def test_transactions_span_partitions_led_by_other_brokers(cluster: EmbeddedCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("tx", 3, 3)])["tx"].result(15)
    leaders = {cluster.partition("tx", i).leader for i in range(3)}
    assert len(leaders) == 3  # one partition led by each broker, so two are not the coordinator's
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "spread",
                         "acks": "all"})
    producer.init_transactions(30)
    for commit_ in (True, False, True):
        producer.begin_transaction()
        for partition in range(3):
            producer.produce("tx", value=b"committed" if commit_ else b"aborted", partition=partition)
        producer.commit_transaction(30) if commit_ else producer.abort_transaction(30)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": "tx-check",
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("tx", p, 0) for p in range(3)])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 6 and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            seen.append(message.value())
    consumer.close()
    assert seen == [b"committed"] * 6
    # no transaction left open anywhere: every partition's last stable offset is its log end
    for partition in range(3):
        leader = cluster.brokers[cluster.partition("tx", partition).leader]
        stable = leader.replicas.partitions[("tx", partition)]
        eventually(lambda: stable.last_stable_offset == stable.log_end_offset >= 4)


def test_a_transaction_completes_once_the_isr_of_each_partition_has_its_marker() -> None:
    """A marker is appended with acks=all, as Kafka's WriteTxnMarkers does: one only its leader had would be
    lost with that leadership, leaving the transaction open on the partition for good (and the next
    transaction's marker deciding it). With a follower dead but still in the ISR, a transaction stays
    PrepareCommit until the ISR shrinks, whether its partition is led by the coordinator (the marker written
    there) or by another broker (WriteTxnMarkers)."""
    with run_cluster(3, replica_lag_time_max_ms=8000, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=50,
                     transaction_state_log_replication_factor=1) as c:
        by_coordinator: dict[int, list[str]] = {}
        for n in range(20):  # two transactional ids with one coordinator
            by_coordinator.setdefault(coordinator_of(c, f"tid-{n}", key_type=1), []).append(f"tid-{n}")
        coordinator, (here, elsewhere) = next((node, ids[:2]) for node, ids in by_coordinator.items() if len(ids) > 1)
        other, down = [n for n in c.brokers if n != coordinator]
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        assignment = [[coordinator, down], [other, down]]
        admin.create_topics([NewTopic("tx", 2, replica_assignment=assignment)])["tx"].result(15)
        eventually(lambda: all(len(c.partition("tx", p).isr) == 2 for p in (0, 1)))
        producers = {}
        for transactional_id, partition in ((here, 0), (elsewhere, 1)):
            producer = producers[transactional_id] = Producer({
                "bootstrap.servers": c.bootstrap_servers, "transactional.id": transactional_id, "acks": "all"})
            producer.init_transactions(30)
            producer.begin_transaction()
            producer.produce("tx", value=b"v", partition=partition)
            producer.flush(30)
        c.call(c.kill_broker(down, fence=False))  # in the ISR until replica.lag.time.max.ms
        for producer in producers.values():
            producer.commit_transaction(30)

        def state(transactional_id: str) -> str:
            txns = c.brokers[coordinator].transactions.coordinator.txns
            return c.call(_on_loop(lambda: txns[transactional_id].state.name))

        leaders = [c.brokers[node].replicas.partitions[("tx", p)] for p, node in ((0, coordinator), (1, other))]
        eventually(lambda: [leader.log_end_offset for leader in leaders] == [2, 2])  # a record, then its marker
        time.sleep(0.5)  # what an answer from the partition's leader (WriteTxnMarkers) would take, and more
        assert (state(here), state(elsewhere)) == ("PREPARE_COMMIT", "PREPARE_COMMIT")
        eventually(lambda: state(here) == state(elsewhere) == "COMPLETE_COMMIT")
        assert all(down not in c.partition("tx", p).isr for p in (0, 1))


def test_markers_wait_until_the_isr_has_the_prepare_commit() -> None:
    """Kafka sends a transaction's markers from the callback of its PrepareCommit's acks=all append. A marker
    written while only the coordinator had the PrepareCommit would stay committed on its partition if that
    coordinator failed: the next one, finding the transaction Ongoing, would abort it on the others. With the
    follower of the transaction's __transaction_state partition dead but still in the ISR, no marker is written
    until the ISR shrinks."""
    with run_cluster(3, replica_lag_time_max_ms=5000, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=50,
                     transaction_state_log_replication_factor=2, transaction_state_log_min_isr=1) as c:
        coordinator = coordinator_of(c, "tid", key_type=1)
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("tx", 1, replica_assignment=[[coordinator]])])["tx"].result(15)
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "tid", "acks": "all"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tx", value=b"v")
        producer.flush(30)
        index = c.call(_on_loop(lambda: c.brokers[coordinator].transactions.coordinator.partition_for("tid")))
        state_follower = next(n for n in c.partition("__transaction_state", index).isr if n != coordinator)
        c.call(c.kill_broker(state_follower, fence=False))  # in the ISR until replica.lag.time.max.ms
        committing = threading.Thread(target=producer.commit_transaction, args=(30,))
        committing.start()

        def state() -> str:
            txns = c.brokers[coordinator].transactions.coordinator.txns
            return c.call(_on_loop(lambda: txns["tid"].state.name))

        eventually(lambda: state() != "ONGOING")  # EndTxn is in
        time.sleep(1)
        leader = replica(c, coordinator, "tx")
        assert (state(), leader.log_end_offset) == ("PREPARE_COMMIT", 1)  # the record, no marker yet
        eventually(lambda: state() == "COMPLETE_COMMIT")
        assert state_follower not in c.partition("__transaction_state", index).isr
        assert leader.log_end_offset == 2
        committing.join(30)
        assert not committing.is_alive()


def test_a_marker_is_not_appended_while_the_isr_is_below_min_insync_replicas() -> None:
    """Kafka's acks=all append refuses a marker while the ISR is short (NOT_ENOUGH_REPLICAS): the transaction
    stays prepared, the coordinator retrying, with no marker appended per retry; it completes once the ISR
    has grown back."""
    with run_cluster(3, replica_lag_time_max_ms=1000, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=50,
                     transaction_state_log_replication_factor=1) as c:
        coordinator = coordinator_of(c, "tid", key_type=1)
        follower = next(n for n in c.brokers if n != coordinator)
        admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
        admin.create_topics([NewTopic("tx", 1, replica_assignment=[[coordinator, follower]],
                                      config={"min.insync.replicas": "2"})])["tx"].result(15)
        eventually(lambda: len(c.partition("tx").isr) == 2)
        producer = Producer({"bootstrap.servers": c.bootstrap_servers, "transactional.id": "tid", "acks": "all"})
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce("tx", value=b"v")
        producer.flush(30)
        c.call(c.kill_broker(follower))  # fenced: the ISR shrinks to the leader alone
        eventually(lambda: list(c.partition("tx").isr) == [coordinator])
        producer.commit_transaction(30)

        def state() -> str:
            return c.call(_on_loop(lambda: c.brokers[coordinator].transactions.coordinator.txns["tid"].state.name))

        leader = replica(c, coordinator, "tx")
        time.sleep(1)  # the coordinator's retries, 100 ms apart and doubling
        assert (state(), leader.log_end_offset) == ("PREPARE_COMMIT", 1)
        c.call(c.start_broker(follower))
        eventually(lambda: state() == "COMPLETE_COMMIT")
        assert leader.log_end_offset == 2  # the record, one marker


def test_a_partition_leader_verifies_transactions_with_a_coordinator_on_another_broker(cluster: EmbeddedCluster) -> None:
    """KIP-890: a transactional batch for a partition not in the ongoing transaction is refused by its
    leader, which asks the coordinator (another broker) with AddPartitionsToTxn verify_only."""
    from tests.integration.test_coordinator_failures import ADD_PARTITIONS, END_TXN

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic("vt", 3, 3)])["vt"].result(15)
    coordinator = coordinator_of(cluster, "vtid", key_type=1)
    index = next(i for i in range(3) if cluster.partition("vt", i).leader != coordinator)
    at_coordinator = RawClient(cluster.brokers[coordinator].port)
    at_leader = RawClient(cluster.brokers[cluster.partition("vt", index).leader].port)
    pid = init(at_coordinator, "vtid").producer_id

    def produce(seq: int) -> int:
        records = build_batch([(None, b"v%d" % seq)], producer_id=pid, producer_epoch=0, base_sequence=seq,
                              transactional=True)
        return at_leader.request(PRODUCE, 9, {"acks": -1, "timeout": 10_000, "transactional_id": "vtid", "topic_data": [
            {"name": "vt", "partition_data": [{"index": index, "records": records}]}]}
                                 ).responses[0].partition_responses[0].error_code

    def add() -> int:
        return at_coordinator.request(ADD_PARTITIONS, 3, {
            "v3_and_below_transactional_id": "vtid", "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": "vt", "partitions": [index]}]}
        ).results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code

    assert produce(0) == ErrorCode.invalid_txn_state  # not added: no transaction may start here
    assert add() == 0
    assert produce(0) == 0 and produce(1) == 0
    assert at_coordinator.request(END_TXN, 3, {"transactional_id": "vtid", "producer_id": pid, "producer_epoch": 0,
                                               "committed": False}).error_code == 0
    leader = cluster.brokers[cluster.partition("vt", index).leader].replicas.partitions[("vt", index)]
    eventually(lambda: leader.last_stable_offset == leader.log_end_offset == 3)  # two batches and the marker
    assert produce(2) == ErrorCode.invalid_txn_state  # the transaction ended: a late batch opens none
    assert leader.last_stable_offset == leader.log_end_offset == 3


def test_an_append_answers_a_follower_long_poll_at_once() -> None:
    # A follower's fetch parked at the log end must be answered by the next append, not by its
    # max_wait: acks=all completes only when the followers fetch again. Every follower here parks
    # for a minute, so only the append can answer them before the client's socket timeout.
    with run_cluster(3, replica_fetch_wait_max_ms=60_000) as cluster:
        _long_poll_answered(cluster)


def _long_poll_answered(cluster: EmbeddedCluster) -> None:
    create(cluster, "r")
    assert len(produce(cluster, "r", 3, acks="1")) == 3
    partition = cluster.partition("r")
    follower = next(n for n in cluster.brokers if n != partition.leader)
    leader_port = cluster.brokers[partition.leader].port
    fetcher = RawClient(leader_port)  # its socket timeout (10 s) is far below the fetch's max_wait
    fetcher.send(FETCH, 12, {"replica_id": follower, "max_wait": 120_000, "min_bytes": 1, "max_bytes": 1 << 20,
                             "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                             "topics": [{"topic": "r", "partitions": [
                                 {"partition": 0, "fetch_offset": 3, "partition_max_bytes": 1 << 20,
                                  "current_leader_epoch": partition.leader_epoch,
                                  "last_fetched_epoch": partition.leader_epoch, "log_start_offset": 0}]}],
                             "forgotten_topics_data": [], "rack_id": ""})
    time.sleep(0.2)  # parked
    response = RawClient(leader_port).request(PRODUCE, 9, {"acks": 1, "timeout": 5000, "topic_data": [
        {"name": "r", "partition_data": [{"index": 0, "records": build_batch([(None, b"wake")])}]}]})
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    _, fetched = fetcher.receive()
    answer = fetched.responses[0].partitions[0]
    assert answer.error_code == ErrorCode.none and split_batches(bytearray(answer.records))[0].base_offset == 3


def test_followers_fetch_in_incremental_sessions_and_survive_losing_them(cluster: EmbeddedCluster) -> None:
    create(cluster, "r", **{"min.insync.replicas": "3"})
    create(cluster, "quiet")
    assert len(produce(cluster, "r", 20)) == 20
    leader = cluster.brokers[cluster.partition("r").leader]
    followers = [n for n in cluster.brokers if cluster.brokers[n] is not leader]

    def sessions() -> list[Any]:  # read on the broker's loop, as its handlers change them there
        return cluster.call(_on_loop(lambda: list(leader.fetch_sessions._sessions.values())))
    # one session a follower, holding every partition that follower fetches from this leader
    eventually(lambda: len(sessions()) == 2 and all(("r", 0) in s.partitions for s in sessions()))
    epochs = [s.epoch for s in sessions()]
    assert len(produce(cluster, "r", 20, prefix="w")) == 20  # min.insync.replicas=3: both followers fetch it
    assert all(s.epoch > e for s, e in zip(sessions(), epochs))  # incremental fetches, one after another
    for session in sessions():  # the leader forgets them (evicted, say): the followers start over in full
        cluster.call(_on_loop(lambda: leader.fetch_sessions.remove(session.session_id)))
    assert len(produce(cluster, "r", 20, prefix="x")) == 20
    eventually(lambda: all(replica(cluster, n, "r").log_end_offset == 60 for n in followers))
    eventually(lambda: len(sessions()) == 2)
    copies = {n: batches(cluster, n, "r") for n in cluster.brokers}
    assert all(copy == copies[cluster.partition("r").leader] for copy in copies.values())


def test_a_caught_up_follower_reads_nothing_and_a_divergent_one_is_told(cluster: EmbeddedCluster) -> None:
    """The leader skips the read and the divergence check of a follower at its log end whose last epoch is the
    leader's latest (most partitions of a follower's fetch session, on every fetch); one at the log end with
    an older last epoch is checked, and told where its epoch ended."""
    create(cluster, "r")
    assert len(produce(cluster, "r", 5)) == 5
    first_leader = cluster.partition("r").leader
    cluster.call(cluster.kill_broker(first_leader))  # fenced: another replica leads, at a new epoch
    assert len(produce(cluster, "r", 2, prefix="w")) == 2
    partition = cluster.partition("r")
    cache = replica(cluster, partition.leader, "r").log.leader_epoch_cache
    old_epoch, new_epoch = cache.entries[0].epoch, cache.latest_epoch
    assert old_epoch < new_epoch and replica(cluster, partition.leader, "r").log_end_offset == 7
    follower = next(n for n in partition.isr if n != partition.leader)
    leader = RawClient(cluster.brokers[partition.leader].port)

    def answer(offset: int, last_fetched_epoch: int) -> Any:
        response = leader.request(FETCH, 12, {
            "replica_id": follower, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "r", "partitions": [{
                "partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "log_start_offset": 0,
                "current_leader_epoch": partition.leader_epoch, "last_fetched_epoch": last_fetched_epoch}]}]})
        return response.responses[0].partitions[0]
    caught_up = answer(7, new_epoch)
    assert caught_up.error_code == ErrorCode.none and not caught_up.records and caught_up.diverging_epoch.epoch == -1
    diverged = answer(7, old_epoch)  # at the log end, but its last batch of the epoch that ended at 5
    assert not diverged.records
    assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (old_epoch, 5)
    behind = answer(5, old_epoch)
    assert split_batches(bytearray(behind.records))[0].base_offset == 5 and behind.diverging_epoch.epoch == -1


def test_a_stopping_broker_hands_over_its_leaderships_first(cluster: EmbeddedCluster) -> None:
    create(cluster, "r", **{"min.insync.replicas": "2"})
    assert len(produce(cluster, "r", 50)) == 50
    before = cluster.partition("r")
    cluster.call(cluster.stop_broker(before.leader, fence=False))  # no fencing: only the controlled shutdown
    after = cluster.partition("r")
    assert after.leader not in (before.leader, -1) and before.leader not in after.isr
    assert after.leader_epoch == before.leader_epoch + 1
    assert len(produce(cluster, "r", 50, prefix="after")) == 50
    cluster.call(cluster.start_broker(before.leader))
    eventually(lambda: set(cluster.partition("r").isr) == {1, 2, 3})


def test_leadership_returns_to_the_preferred_replica() -> None:
    with run_cluster(3, replica_lag_time_max_ms=1000, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=200,
                     leader_imbalance_check_interval_seconds=1) as cluster:
        create(cluster, "r")
        preferred = cluster.partition("r").replicas[0]
        assert cluster.partition("r").leader == preferred
        cluster.call(cluster.stop_broker(preferred))
        assert cluster.partition("r").leader != preferred
        cluster.call(cluster.start_broker(preferred))
        eventually(lambda: cluster.partition("r").leader == preferred)  # once back in the ISR
        assert len(produce(cluster, "r", 10)) == 10


# ------------------------------------------------------------------ reassignment
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46


def create_assigned(client: RawClient, topic: str, replicas: list[int]) -> None:
    response = client.request(CREATE_TOPICS, 7, {"timeout": 10_000, "topics": [
        {"name": topic, "num_partitions": -1, "replication_factor": -1, "configs": [],
         "assignments": [{"partition_index": 0, "broker_ids": replicas}]}]})
    assert response.topics[0].error_code == 0, response.topics[0]


def reassign(client: RawClient, topic: str, replicas: list[int] | None) -> Any:
    response = client.request(ALTER_REASSIGNMENTS, 0, {"timeout": 30_000, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "replicas": replicas}]}]})
    return response.responses[0].partitions[0]


def test_a_reassignment_moves_the_replicas_and_completes_when_the_new_ones_caught_up() -> None:
    with run_cluster(4, replica_lag_time_max_ms=1000, replica_fetch_backoff_ms=50,
                     replica_fetch_wait_max_ms=100) as c:
        client = RawClient(c.brokers[2].port)
        create_assigned(client, "m", [1, 2, 3])
        assert len(produce(c, "m", 200)) == 200
        assert reassign(client, "m", [9, 2, 3]).error_code == ErrorCode.invalid_replica_assignment
        assert reassign(client, "m", [2, 2, 3]).error_code == ErrorCode.invalid_replica_assignment
        assert reassign(client, "m", None).error_code == ErrorCode.no_reassignment_in_progress
        c.call(c.kill_broker(4, fence=False))  # the new replica cannot catch up yet: the move stays in progress
        assert reassign(client, "m", [2, 3, 4]).error_code == ErrorCode.none
        listed = client.request(LIST_REASSIGNMENTS, 0, {"timeout": 30_000, "topics": None}).topics
        [moving] = listed[0].partitions
        assert (list(moving.replicas), list(moving.adding_replicas), list(moving.removing_replicas)) == \
            ([2, 3, 4, 1], [4], [1])
        c.call(c.start_broker(4))
        eventually(lambda: c.partition("m").replicas == (2, 3, 4) and not c.partition("m").adding_replicas)
        assert set(c.partition("m").isr) == {2, 3, 4} and c.partition("m").leader in (2, 3, 4)
        eventually(lambda: ("m", 0) not in c.brokers[1].replicas.partitions)  # the removed replica's log goes
        leader = c.partition("m").leader
        eventually(lambda: batches(c, 4, "m") == batches(c, leader, "m"))
        assert client.request(LIST_REASSIGNMENTS, 0, {"timeout": 30_000, "topics": None}).topics == ()
        assert len(produce(c, "m", 10, prefix="after")) == 10


def test_a_reassignment_in_progress_can_be_cancelled(cluster: EmbeddedCluster) -> None:
    client = RawClient(cluster.brokers[1].port)
    create_assigned(client, "m", [1, 2])
    cluster.call(cluster.kill_broker(3, fence=False))
    assert reassign(client, "m", [1, 3]).error_code == ErrorCode.none
    assert cluster.partition("m").adding_replicas == (3,)
    assert reassign(client, "m", None).error_code == ErrorCode.none
    partition = cluster.partition("m")
    assert (partition.replicas, partition.adding_replicas, partition.removing_replicas) == ((1, 2), (), ())


def test_the_reassign_partitions_tool(tmp_path: Any, capsys: Any) -> None:
    from klamm.cli.main import main

    with run_cluster(4, replica_lag_time_max_ms=1000, replica_fetch_backoff_ms=50,
                     replica_fetch_wait_max_ms=100) as c:
        create_assigned(RawClient(c.brokers[1].port), "m", [1, 2, 3])
        plan = tmp_path / "plan.json"
        plan.write_text('{"version": 1, "partitions": [{"topic": "m", "partition": 0, "replicas": [2, 3, 4]}]}')
        b = c.bootstrap_servers
        assert main(["reassign-partitions", "--bootstrap-server", b, "--list"]) == 0
        assert capsys.readouterr().out == "No partition reassignments found.\n"
        c.call(c.kill_broker(4, fence=False))  # keeps the move in progress until it is back
        assert main(["reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file", str(plan),
                     "--execute"]) == 0
        out = capsys.readouterr().out
        assert out.startswith("Current partition replica assignment\n\n"
                              '{"version":1,"partitions":[{"topic":"m","partition":0,"replicas":[1,2,3],'
                              '"log_dirs":["any","any","any"]}]}\n')
        assert out.endswith("Successfully started partition reassignment for m-0\n")
        assert main(["reassign-partitions", "--bootstrap-server", b, "--list"]) == 0
        assert capsys.readouterr().out == ("Current partition reassignments:\n"
                                           "m-0: replicas: 2,3,4,1. adding: 4. removing: 1.\n")
        assert main(["reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file", str(plan),
                     "--verify"]) == 0
        assert capsys.readouterr().out.endswith("Reassignment of partition m-0 is still in progress.\n")
        c.call(c.start_broker(4))
        eventually(lambda: c.partition("m").replicas == (2, 3, 4))
        assert main(["reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file", str(plan),
                     "--verify"]) == 0
        assert capsys.readouterr().out == ("Status of partition reassignment:\n"
                                           "Reassignment of partition m-0 is completed.\n")
        assert main(["reassign-partitions", "--bootstrap-server", b, "--reassignment-json-file", str(plan),
                     "--cancel"]) == 0
        assert capsys.readouterr().out == "None of the specified partition reassignments are active.\n"
        assert main(["reassign-partitions", "--bootstrap-server", b, "--verify"]) == 1
