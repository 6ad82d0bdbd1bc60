"""Transactions: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27),
TxnOffsetCommit (28), DescribeTransactions (65), ListTransactions (66).

The work is the transaction coordinator's (klamm/coordinator/transactions); these
handlers translate versions. WriteTxnMarkers is how another broker's coordinator
ends a transaction on partitions led here (a coordinator writes the markers of
partitions it leads itself). Clients before the version that introduced
PRODUCER_FENCED get INVALID_PRODUCER_EPOCH instead, as Kafka answers them.

Authorization (Kafka's KafkaApis):
  AddPartitionsToTxn  v0-3 (clients): WRITE on the transactional id, WRITE on each topic (an internal
                      topic is never authorized); v4+ (brokers): CLUSTER_ACTION on the cluster
  AddOffsetsToTxn     WRITE on the transactional id, READ on the group
  EndTxn              WRITE on the transactional id
  TxnOffsetCommit     WRITE on the transactional id, READ on the group, READ on each topic
  WriteTxnMarkers     ALTER or CLUSTER_ACTION on the cluster (brokers)
  DescribeTransactions  DESCRIBE on each transactional id; partitions of topics the principal may not
                      DESCRIBE are left out
  ListTransactions    only the transactional ids the principal may DESCRIBE
Requests between klamm's brokers (verification, markers) come in as whoever the inter-broker
connection is (User:ANONYMOUS on a PLAINTEXT listener), which needs CLUSTER_ACTION, as in Kafka.
"""

from __future__ import annotations

import asyncio
from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.groups import DESCRIBE, GROUP, READ, TRANSACTIONAL_ID, WRITE, denied, denied_topics
from klamm.broker.handlers.groups_offsets import every_partition, partition_exists, replicated_errors, \
    requested_offsets
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import CONSUMER_OFFSETS, is_internal

_TXN_DENIED, _GROUP_DENIED = ErrorCode.transactional_id_authorization_failed, ErrorCode.group_authorization_failed


def _compat(error: ErrorCode, version: int, fenced_since: int = 2) -> ErrorCode:
    if error == ErrorCode.producer_fenced and version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return error


def _topic_results(errors: dict[tuple[str, int], ErrorCode]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in errors.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": error})
    return [{"name": name, "results_by_partition": results} for name, results in topics.items()]


# AddPartitionsToTxn
async def add_partitions_to_txn(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    if version <= 3:  # from a client
        transactional_id, topics = body.v3_and_below_transactional_id, body.v3_and_below_topics
        if denied(broker, request, WRITE, TRANSACTIONAL_ID, transactional_id):
            errors = {(t.name, p): _TXN_DENIED for t in topics for p in t.partitions}
        else:
            # Kafka never authorizes a client to add an internal topic's partitions itself
            unauthorized = denied_topics(broker, request, WRITE, (t.name for t in topics if not is_internal(t.name)))
            unauthorized |= {t.name for t in topics if is_internal(t.name)}
            errors = await _add_partitions(broker, transactional_id, body.v3_and_below_producer_id,
                                           body.v3_and_below_producer_epoch, topics, False, unauthorized)
        errors = {tp: _compat(error, version) for tp, error in errors.items()}
        return {"results_by_topic_v3_and_below": _topic_results(errors)}
    # From v4 only brokers send it (verification, KIP-890)
    if denied(broker, request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return {"error_code": ErrorCode.cluster_authorization_failed, "results_by_transaction": []}
    results = []
    for txn in body.transactions:
        errors = await _add_partitions(broker, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                                       txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _topic_results(errors)})
    return {"error_code": ErrorCode.none, "results_by_transaction": results}


async def _add_partitions(broker: BrokerServices, transactional_id: str, producer_id: int, epoch: int, topics: Any,
                          verify_only: bool, unauthorized: frozenset[str] | set[str] = frozenset()
                          ) -> dict[tuple[str, int], ErrorCode]:
    wanted = [(t.name, p) for t in topics for p in t.partitions]
    refused = {tp: ErrorCode.topic_authorization_failed if tp[0] in unauthorized
               else ErrorCode.unknown_topic_or_partition
               for tp in wanted if tp[0] in unauthorized or not partition_exists(broker, *tp)}
    if refused:  # Kafka adds none of them then
        return {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    try:
        coordinator = broker.transactions.ready()
        if verify_only:
            return coordinator.verify_partitions(transactional_id, producer_id, epoch, wanted)
        error = broker.transactions.run(coordinator.add_partitions(transactional_id, producer_id, epoch, wanted))
        error = await _replicated(broker, transactional_id, error)
    except KafkaError as exc:
        error = exc.code
    return {tp: error for tp in wanted}


async def _replicated(broker: BrokerServices, transactional_id: str, error: ErrorCode) -> ErrorCode:
    """A successful write's answer waits until the transaction state is on the ISR."""
    if error != ErrorCode.none:
        return error
    return await broker.transactions.replicated(transactional_id)


# AddOffsetsToTxn
async def add_offsets_to_txn(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if denied(broker, request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return {"error_code": _TXN_DENIED}
    if denied(broker, request, READ, GROUP, body.group_id):
        return {"error_code": _GROUP_DENIED}
    try:
        broker.group_coordinator.ensure_topic()
        offsets_partition = broker.group_coordinator.ready().partition_for(body.group_id)
        coordinator = broker.transactions.ready()
        error = broker.transactions.run(coordinator.add_partitions(
            body.transactional_id, body.producer_id, body.producer_epoch, [(CONSUMER_OFFSETS, offsets_partition)]))
        error = await _replicated(broker, body.transactional_id, error)
    except KafkaError as exc:
        error = exc.code
    return {"error_code": _compat(error, request.api_version)}


# EndTxn
async def end_txn(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if denied(broker, request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return {"error_code": _TXN_DENIED}
    try:
        coordinator = broker.transactions.ready()
        error = broker.transactions.run(coordinator.end_txn(body.transactional_id, body.producer_id,
                                                            body.producer_epoch, body.committed))
        error = await _replicated(broker, body.transactional_id, error)
    except KafkaError as exc:
        error = exc.code
    return {"error_code": _compat(error, request.api_version)}


# TxnOffsetCommit
async def txn_offset_commit(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    if denied(broker, request, WRITE, TRANSACTIONAL_ID, body.transactional_id):
        return {"topics": every_partition(body, _TXN_DENIED)}
    if denied(broker, request, READ, GROUP, body.group_id):
        return {"topics": every_partition(body, _GROUP_DENIED)}
    requested, offsets, refused = requested_offsets(
        broker, body, denied_topics(broker, request, READ, (t.name for t in body.topics)))
    try:
        coordinator = broker.group_coordinator.ready()
        result = coordinator.commit_txn_offsets(
            body.group_id, body.producer_id, body.producer_epoch, getattr(body, "generation_id", -1),
            getattr(body, "member_id", ""), getattr(body, "group_instance_id", None), offsets)
        errors = broker.group_coordinator.apply(result)
        errors = await replicated_errors(broker, body.group_id, errors)
    except KafkaError as exc:
        errors = {(o.topic, o.partition): exc.code for o in offsets}
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in requested:
        error = refused.get(tp) or _compat(errors[tp], version)
        topics.setdefault(tp[0], []).append({"partition_index": tp[1], "error_code": error})
    return {"topics": [{"name": name, "partitions": partitions} for name, partitions in topics.items()]}


# WriteTxnMarkers
async def write_txn_markers(broker: BrokerServices, request: Any) -> dict[str, Any]:
    markers = request.body.markers
    wanted = [(marker, topic.name, index) for marker in markers for topic in marker.topics
              for index in topic.partition_indexes]
    if denied(broker, request, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME) and \
            denied(broker, request, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        errors = [ErrorCode.cluster_authorization_failed] * len(wanted)
    else:  # every marker is appended at once; each is answered once the ISR of its partition has it
        errors = await asyncio.gather(*(
            broker.transactions.write_marker(name, index, marker.producer_id, marker.producer_epoch,
                                             marker.coordinator_epoch, marker.transaction_result)
            for marker, name, index in wanted))
    answers = iter(errors)
    return {"markers": [{"producer_id": marker.producer_id, "topics": [
        {"name": topic.name, "partitions": [{"partition_index": index, "error_code": next(answers)}
                                            for index in topic.partition_indexes]}
        for topic in marker.topics]} for marker in markers]}


# DescribeTransactions
async def describe_transactions(broker: BrokerServices, request: Any) -> dict[str, Any]:
    ids, authorizer = list(request.body.transactional_ids), broker.authorizer
    allowed = authorizer.allowed_names(request, DESCRIBE, TRANSACTIONAL_ID, ids) if authorizer.enabled else None
    error = ErrorCode.none
    try:
        coordinator = broker.transactions.ready()
    except KafkaError as exc:
        coordinator, error = None, exc.code
    states = []
    for tid in ids:
        if allowed is not None and tid not in allowed:
            # Kafka's answer: the error and the schema's zeros
            states.append({"error_code": _TXN_DENIED, "transactional_id": tid, "transaction_state": "",
                           "transaction_timeout": 0, "transaction_start_time": 0, "producer_id": 0,
                           "producer_epoch": 0, "topics": []})
        elif coordinator is None:
            states.append({"error_code": error, "transactional_id": tid, "transaction_state": "",
                           "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1})
        else:
            states.append(coordinator.describe(tid))
    if allowed is not None:  # only the partitions of topics the principal may describe
        topics = {t["topic"] for state in states for t in state.get("topics", ())}
        hidden = denied_topics(broker, request, DESCRIBE, topics)
        if hidden:
            for state in states:
                if state.get("topics"):
                    state["topics"] = [t for t in state["topics"] if t["topic"] not in hidden]
    return {"transaction_states": states}


# ListTransactions
async def list_transactions(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    try:
        coordinator = broker.transactions.ready()
    except KafkaError as exc:
        return {"error_code": exc.code, "unknown_state_filters": [], "transaction_states": []}
    error, unknown, listed = coordinator.list_transactions(list(body.state_filters), list(body.producer_id_filters),
                                                           getattr(body, "duration_filter", -1))
    authorizer = broker.authorizer
    if authorizer.enabled and listed:
        allowed = authorizer.allowed_names(request, DESCRIBE, TRANSACTIONAL_ID, [t["transactional_id"] for t in listed])
        listed = [t for t in listed if t["transactional_id"] in allowed]
    return {"error_code": error, "unknown_state_filters": unknown, "transaction_states": listed}


# WriteTxnMarkers v0 is not in kio; v2 (KIP-890's transaction version 2) is not served yet.
APIS = [Api(24, 0, 5, add_partitions_to_txn), Api(25, 0, 4, add_offsets_to_txn), Api(26, 0, 4, end_txn),
        Api(27, 0, 1, write_txn_markers), Api(28, 0, 4, txn_offset_commit), Api(65, 0, 0, describe_transactions), Api(66, 0, 1, list_transactions)]
