"""Produce (0), v3+: append record batches; acks 0, 1 and -1.

Each partition's batches are validated from their headers and appended before
the handler first awaits, so pipelined requests of a connection append in
order (idempotent producers depend on that). A transactional batch is accepted
only for a partition already added to the producer's ongoing transaction
(Kafka's transaction.partition.verification.enable), asked of the local
transaction coordinator. Per-partition failures are error
codes; with acks=0 there is no response, and a failure closes the connection
as Kafka does, so the producer notices.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.broker.metrics import batch_records_count
from klamm.broker.network import CloseConnection
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import is_internal


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any] | None:
    body = request.body
    acks = body.acks
    responses = []
    failed = False
    for topic in body.topic_data:
        partitions = []
        for data in topic.partition_data:
            result = _append(broker, topic.name, data.index, data.records, acks, body.transactional_id)
            failed = failed or result["error_code"] != ErrorCode.none
            partitions.append(result)
        responses.append({"name": topic.name, "partition_responses": partitions})
    if acks == 0:
        if failed:
            raise CloseConnection()
        return None
    return {"responses": responses}


def _append(broker: BrokerServices, topic: str, index: int, records: Any, acks: int, transactional_id: str | None) -> dict[str, Any]:
    try:
        if acks not in (0, 1, -1):
            raise KafkaError(ErrorCode.invalid_required_acks)
        partition = broker.replicas.get(topic, index)  # an unknown topic is UNKNOWN_TOPIC_OR_PARTITION first
        if is_internal(topic):
            raise KafkaError(ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic}")
        if acks == -1 and len(partition.isr) < partition.config.min_insync_replicas:
            raise KafkaError(ErrorCode.not_enough_replicas)
        if records is None:
            raise KafkaError(ErrorCode.invalid_record, "null records")
        verify = None
        if transactional_id is not None and broker.config.transaction_partition_verification_enable:
            def verify(header: Any) -> None:
                broker.transactions.check_produce(transactional_id, header.producer_id, header.producer_epoch,
                                                  (topic, index))
        result = partition.append(records, verify)
        # records_count from the batch header; a producer retry (duplicate) appended nothing
        broker.metrics.produced(topic, len(records), 0 if result.duplicate else batch_records_count(records))
    except KafkaError as exc:
        return {"index": index, "error_code": exc.code, "base_offset": -1, "log_append_time": -1,
                "log_start_offset": -1, "error_message": exc.message,
                "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in exc.record_errors]}
    return {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": result.first_offset,
        "log_append_time": result.log_append_time,
        "log_start_offset": result.log_start_offset,
    }


APIS = [Api(0, 3, 11, handle)]
