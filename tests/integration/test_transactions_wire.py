"""Transactions over the wire with the raw client: InitProducerId, AddPartitionsToTxn, a
transactional Produce, the LSO in Fetch and ListOffsets, EndTxn, aborted transactions in
read_committed fetches, and the admin APIs."""

from __future__ import annotations

from typing import Any

from klamm.protocol.records import build_batch

from tests.integration.conftest import FETCH, INIT_PRODUCER_ID, LIST_OFFSETS, PRODUCE, RawClient, create_topic, fetch_body

ADD_PARTITIONS, END_TXN, DESCRIBE_TXNS, LIST_TXNS = 24, 26, 65, 66


def txn_produce(client: RawClient, txn_id: str, topic: str, producer_id: int, seq: int, value: bytes) -> Any:
    records = build_batch([(None, value)], producer_id=producer_id, producer_epoch=0, base_sequence=seq,
                          transactional=True)
    response = client.request(PRODUCE, 9, {
        "acks": -1, "timeout": 10_000, "transactional_id": txn_id,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return response.responses[0].partition_responses[0]


def read_committed(client: RawClient, topic: str, offset: int = 0) -> Any:
    body = fetch_body(topic, offset)
    body["isolation_level"] = 1
    return client.request(FETCH, 11, body).responses[0].partitions[0]


def latest(client: RawClient, topic: str, isolation: int) -> int:
    response = client.request(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": isolation, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    return response.topics[0].partitions[0].offset


def add_partition(client: RawClient, txn_id: str, topic: str, producer_id: int) -> int:
    response = client.request(ADD_PARTITIONS, 3, {
        "v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": 0, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    return response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code


def test_transaction_over_the_wire(client: RawClient) -> None:
    create_topic(client, "tx")
    init = client.request(INIT_PRODUCER_ID, 4, {"transactional_id": "tid", "transaction_timeout": 60000,
                                                "producer_id": -1, "producer_epoch": -1})
    assert init.error_code == 0 and init.producer_epoch == 0
    pid = init.producer_id
    # not yet in the transaction: refused
    assert txn_produce(client, "tid", "tx", pid, 0, b"early").error_code == 48  # INVALID_TXN_STATE
    assert add_partition(client, "tid", "tx", pid) == 0
    assert txn_produce(client, "tid", "tx", pid, 0, b"v1").error_code == 0
    assert latest(client, "tx", 0) == 1 and latest(client, "tx", 1) == 0
    pending = read_committed(client, "tx")
    assert pending.last_stable_offset == 0 and pending.high_watermark == 1
    described = client.request(DESCRIBE_TXNS, 0, {"transactional_ids": ["tid"]}).transaction_states[0]
    assert described.transaction_state == "Ongoing" and described.producer_id == pid
    listed = client.request(LIST_TXNS, 1, {"state_filters": ["Ongoing"], "producer_id_filters": [],
                                           "duration_filter": -1})
    assert [t.transactional_id for t in listed.transaction_states] == ["tid"]
    end = client.request(END_TXN, 3, {"transactional_id": "tid", "producer_id": pid, "producer_epoch": 0,
                                      "committed": False})
    assert end.error_code == 0
    aborted = read_committed(client, "tx")
    assert aborted.last_stable_offset == 2
    assert [(t.producer_id, t.first_offset) for t in aborted.aborted_transactions] == [(pid, 0)]
    assert latest(client, "tx", 1) == 2


def test_a_new_incarnation_aborts_the_ongoing_transaction_and_gets_its_epoch_in_one_round_trip(
        client: RawClient) -> None:
    """InitProducerId while the previous incarnation's transaction is ongoing: the coordinator aborts it with a
    bumped epoch (fencing that producer) and, the abort stored and its marker written here, answers the new
    incarnation at once rather than with CONCURRENT_TRANSACTIONS for the client to retry."""
    create_topic(client, "fenced")
    request = {"transactional_id": "tid-fenced", "transaction_timeout": 60000, "producer_id": -1,
               "producer_epoch": -1}
    first = client.request(INIT_PRODUCER_ID, 4, request)
    assert (first.error_code, first.producer_epoch) == (0, 0)
    assert add_partition(client, "tid-fenced", "fenced", first.producer_id) == 0
    assert txn_produce(client, "tid-fenced", "fenced", first.producer_id, 0, b"v1").error_code == 0
    again = client.request(INIT_PRODUCER_ID, 4, request)
    # epoch 1 went to the abort, 2 to the new incarnation
    assert (again.error_code, again.producer_id, again.producer_epoch) == (0, first.producer_id, 2)
    aborted = read_committed(client, "fenced")
    assert aborted.last_stable_offset == 2  # the record and the abort marker
    assert [(t.producer_id, t.first_offset) for t in aborted.aborted_transactions] == [(first.producer_id, 0)]
