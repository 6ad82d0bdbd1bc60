"""Produce (0): append record batches; acks 0, 1 and -1.

v0-2 carry message sets (magic 0 and 1), converted up to one v2 batch each
before the checks below (klamm.protocol.message_set): the log holds v2 only.

Each partition's batches are validated from their headers and submitted
before the handler first awaits: appended at once, or queued in the
partition behind a batch whose record checks or recompression run in a worker
thread (Partition.submit). Either way pipelined requests of a connection, and
requests of several connections, append to a partition in arrival order
(idempotent producers depend on that). Where flush.messages asks for an fsync
before the ack, the response waits, after every append, for the flush job
covering each such partition's batch (group commit, klamm.broker.log_flush).
A transactional batch is accepted
only for a partition already added to the producer's ongoing transaction
(Kafka's transaction.partition.verification.enable): the batch that opens the
producer's transaction on a partition is checked with its transaction
coordinator, this broker's or another's (klamm.broker.txn_verification). Per-partition failures are error
codes; with acks=0 there is no response, and a failure closes the connection
as Kafka does, so the producer notices.

acks=all: NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than
min.insync.replicas; after it the answer waits (Kafka's delayed produce) until
the high watermark passes the batch — the ISR's followers fetched it — or the
request's timeout (REQUEST_TIMED_OUT), and is NOT_ENOUGH_REPLICAS_AFTER_APPEND
if the ISR shrank below min.insync.replicas meanwhile. A follower answers
NOT_LEADER_OR_FOLLOWER.

With an authorizer (Kafka's KafkaApis.handleProduceRequest): a request carrying
transactional batches needs WRITE on its transactional id, else every partition
answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED; each topic needs WRITE, else its
partitions answer TOPIC_AUTHORIZATION_FAILED, which comes before
UNKNOWN_TOPIC_OR_PARTITION. With acks=0 either failure closes the connection.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Container
from typing import TYPE_CHECKING, Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.leader_hints import LeaderHints
from klamm.broker.metrics import batch_records_count
from klamm.broker.network import CloseConnection
from klamm.broker.services import BrokerServices
from klamm.broker.txn_verification import produce_error
from klamm.controller.acls import ResourceType
from klamm.protocol import message_set
from klamm.protocol.acl import AclOperation
from klamm.protocol.batch import ATTR_TRANSACTIONAL
from klamm.protocol.errors import ErrorCode, KafkaError
from klamm.protocol.topics import is_internal
from klamm.storage.log import AppendResult

if TYPE_CHECKING:
    from klamm.broker.partition import Partition

_MAGIC_BYTE, _ATTRIBUTES_LOW_BYTE = 16, 22  # in a batch header (klamm.protocol.batch): attributes are int16 at 21


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any] | None:
    body = request.body
    acks = body.acks
    timeout_s = _seconds(body.timeout)
    # Every partition's append is submitted before the first await: see the module docstring.
    durable: list[tuple[dict[str, Any], Any]] = []  # (response, its flush job) where the ack waits for an fsync
    transactional_id = getattr(body, "transactional_id", None)  # v3+
    upconvert = request.api_version < 3
    denied: Container[str] = ()
    if broker.authorizer.enabled:
        refusal = _authorize(broker, request, transactional_id)
        if isinstance(refusal, KafkaError):  # the whole request: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            if acks == 0:
                raise CloseConnection()
            return {"responses": [{"name": topic.name, "partition_responses": [
                _failed(data.index, refusal) for data in topic.partition_data]} for topic in body.topic_data]}
        denied = refusal
    submitted = [(topic.name, [_submit(broker, topic.name, data.index, data.records, acks, transactional_id,
                                       durable, timeout_s, upconvert)
                               for data in topic.partition_data] if topic.name not in denied
                  else [_failed(data.index, KafkaError(ErrorCode.topic_authorization_failed))
                        for data in topic.partition_data])
                 for topic in body.topic_data]
    responses = []
    failed = False
    hints = LeaderHints(broker, request.listener)
    try:
        for name, results in submitted:
            partitions = []
            for result in results:
                response = await result.response(durable) if isinstance(result, _Pending) else result
                failed = failed or response["error_code"] != ErrorCode.none
                partitions.append(response)
            responses.append({"name": name, "partition_responses": partitions})
        let_go_of_frames(body)  # every append is done: nothing reads the records again
        if acks != 0 and durable:
            request.leave_queue()  # waiting for an fsync or the ISR, Kafka's delayed produce: out of the request queue
            for response, waiting in durable:
                try:
                    await waiting
                except KafkaError as exc:
                    if response["error_code"] == ErrorCode.none:  # the first failure of a partition is its answer
                        response.update(_failed(response["index"], exc))
    finally:
        # cancelled (the connection went) or failed midway: the waits never awaited are closed, not left to the
        # garbage collector's "never awaited" warning; closing one that ran is a no-op
        for _, waiting in durable:
            waiting.close()
    if acks == 0:
        if failed:
            raise CloseConnection()
        return None
    for topic in responses:
        for partition in topic["partition_responses"]:
            hints.add(partition, topic["name"], partition["index"])
    return {"responses": responses, "node_endpoints": hints.node_endpoints()}


def let_go_of_frames(body: Any) -> None:
    """Release the records views into the request's frame (a large produce, klamm.protocol.connection), so the
    network layer reuses its buffer now rather than once the ISR has the batch: with acks=all many requests
    wait at once, each holding 1 MB. A view still being read (BufferError) keeps it, as does any slice of it."""
    for topic in body.topic_data:
        for data in topic.partition_data:
            if isinstance(data.records, memoryview):
                try:
                    data.records.release()
                except BufferError:
                    pass


def _authorize(broker: BrokerServices, request: Any, transactional_id: str | None) -> KafkaError | set[str]:
    """Kafka's checks before any append: transactional batches need WRITE on their transactional id
    (else the whole request fails), every topic WRITE (else its partitions answer
    TOPIC_AUTHORIZATION_FAILED, before they are looked up). Returns the refused topics."""
    authorizer = broker.authorizer
    topics = request.body.topic_data
    if any(_transactional(data.records) for topic in topics for data in topic.partition_data) and (
            transactional_id is None
            or not authorizer.allowed(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)):
        return KafkaError(ErrorCode.transactional_id_authorization_failed, "Transactional Id authorization failed.")
    names = {topic.name for topic in topics}
    return names - authorizer.allowed_names(request, AclOperation.WRITE, ResourceType.TOPIC, names)


def _transactional(records: Any) -> bool:
    """Whether the partition's first batch is a transactional v2 batch (Kafka's hasTransactionalRecords)."""
    return (records is not None and len(records) > _ATTRIBUTES_LOW_BYTE and records[_MAGIC_BYTE] == 2
            and bool(records[_ATTRIBUTES_LOW_BYTE] & ATTR_TRANSACTIONAL))


def _seconds(value: Any) -> float:
    return value.total_seconds() if hasattr(value, "total_seconds") else value / 1000


def _submit(broker: BrokerServices, topic: str, index: int, records: Any, acks: int, transactional_id: str | None,
            durable: list[tuple[dict[str, Any], Any]], timeout_s: float, upconvert: bool) -> dict[str, Any] | _Pending:
    """The partition's response, or a _Pending one when its append waits (worker thread, queue)."""
    try:
        if acks not in (0, 1, -1):
            raise KafkaError(ErrorCode.invalid_required_acks)
        partition = broker.replicas.get(topic, index)  # an unknown topic is UNKNOWN_TOPIC_OR_PARTITION first
        if is_internal(topic):
            raise KafkaError(ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {topic}")
        partition.check_leader()
        if acks == -1:
            partition.check_min_insync()
        if records is None:
            raise KafkaError(ErrorCode.invalid_record, "null records")
        if upconvert:
            bound = partition.batch_rules().records.max_inflated
            records = message_set.to_batch(records, int(time.time() * 1000), bound)
        verify = None
        if transactional_id is not None and broker.config.transaction_partition_verification_enable:
            def verify(header: Any) -> asyncio.Future[ErrorCode] | None:
                try:
                    return broker.transactions.verify_produce(transactional_id, header.producer_id,
                                                              header.producer_epoch, (topic, index))
                except KafkaError as exc:
                    raise KafkaError(produce_error(exc.code), exc.message) from None
        result = partition.submit(records, verify)
    except KafkaError as exc:
        return _failed(index, exc)
    if isinstance(result, asyncio.Future):
        return _Pending(broker, partition, topic, index, records, acks, result, timeout_s)
    return _appended(broker, partition, topic, index, records, acks, result, durable, timeout_s)


class _Pending:
    """An append waiting its turn in its partition (Partition.submit)."""

    def __init__(self, broker: BrokerServices, partition: Partition, topic: str, index: int, records: Any, acks: int,
                 future: asyncio.Future[AppendResult], timeout_s: float) -> None:
        self.broker, self.partition, self.topic, self.index = broker, partition, topic, index
        self.records, self.acks, self.future, self.timeout_s = records, acks, future, timeout_s

    async def response(self, durable: list[tuple[dict[str, Any], Any]]) -> dict[str, Any]:
        try:
            result = await self.future
        except KafkaError as exc:
            return _failed(self.index, exc)
        except Exception:
            if self.broker.replicas.partitions.get((self.topic, self.index)) is not self.partition:
                # deleted (or moved) while the batch was prepared: its writes went nowhere visible
                return _failed(self.index, KafkaError(ErrorCode.not_leader_or_follower))
            raise
        return _appended(self.broker, self.partition, self.topic, self.index, self.records, self.acks, result,
                         durable, self.timeout_s)


def _appended(broker: BrokerServices, partition: Partition, topic: str, index: int, records: Any, acks: int,
              result: AppendResult, durable: list[tuple[dict[str, Any], Any]], timeout_s: float) -> dict[str, Any]:
    # records_count from the batch header; a producer retry (duplicate) appended nothing
    broker.metrics.produced(topic, len(records), 0 if result.duplicate else batch_records_count(records))
    response = {
        "index": index,
        "error_code": ErrorCode.none,
        "base_offset": result.first_offset,
        "log_append_time": result.log_append_time,
        "log_start_offset": result.log_start_offset,
    }
    if result.flush_due and acks != 0:
        durable.append((response, partition.wait_durable(result)))
    if acks == -1 and partition.high_watermark <= result.last_offset:  # else committed already (an ISR of one)
        durable.append((response, _replicated(partition, result.last_offset + 1, timeout_s)))
    return response


async def _replicated(partition: Partition, end_offset: int, timeout_s: float) -> None:
    """acks=all: wait until the ISR has the records (the high watermark passed them)."""
    error = await partition.wait_for_replication(end_offset, timeout_s)
    if error != ErrorCode.none:
        raise KafkaError(error)


def _failed(index: int, exc: KafkaError) -> dict[str, Any]:
    return {"index": index, "error_code": exc.code, "base_offset": -1, "log_append_time": -1,
            "log_start_offset": -1, "error_message": exc.message,
            "record_errors": [{"batch_index": i, "batch_index_error_message": m} for i, m in exc.record_errors]}


APIS = [Api(0, 0, 11, handle)]
