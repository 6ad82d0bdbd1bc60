"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional id Kafka hands out a fresh producer id with epoch 0,
whatever id the client had (KafkaApis does the same). With one, the transaction
coordinator owns the id: it bumps the epoch (fencing older incarnations), and
aborts their ongoing transaction first.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.broker.handlers.groups import millis
from klamm.protocol.errors import ErrorCode, KafkaError


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    if body.transactional_id is None:
        return {"error_code": ErrorCode.none, "producer_id": broker.allocate_producer_id(), "producer_epoch": 0}
    try:
        error, producer_id, epoch = broker.transactions.run_init(
            body.transactional_id, millis(body.transaction_timeout), getattr(body, "producer_id", -1),
            getattr(body, "producer_epoch", -1))
        if error == ErrorCode.none:
            error = await broker.transactions.replicated(body.transactional_id)
    except KafkaError as exc:
        error, producer_id, epoch = exc.code, -1, -1
    if error == ErrorCode.producer_fenced and version < 4:
        error = ErrorCode.invalid_producer_epoch  # older clients do not know PRODUCER_FENCED
    return {"error_code": error, "producer_id": producer_id, "producer_epoch": epoch}


APIS = [Api(22, 0, 5, handle)]
