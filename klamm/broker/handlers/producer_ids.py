"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional id Kafka hands out a fresh producer id with epoch 0,
whatever id the client had (KafkaApis does the same). With one, the transaction
coordinator owns the id: it bumps the epoch (fencing older incarnations), and
aborts their ongoing transaction first.

With an authorizer (Kafka's KafkaApis.handleInitProducerIdRequest): a
transactional id needs WRITE on it, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some
topic (KIP-679), else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.handlers.groups import millis
from klamm.broker.services import BrokerServices
from klamm.controller.acls import CLUSTER_NAME, ResourceType
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body, version = request.body, request.api_version
    authorizer = broker.authorizer
    if authorizer.enabled:
        if body.transactional_id is not None:
            if not authorizer.allowed(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                      body.transactional_id):
                return _refused(ErrorCode.transactional_id_authorization_failed)
        elif not (authorizer.allowed(request, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME)
                  or authorizer.allowed_any(request, AclOperation.WRITE, ResourceType.TOPIC)):
            return _refused(ErrorCode.cluster_authorization_failed)
    if body.transactional_id is None:
        return {"error_code": ErrorCode.none, "producer_id": broker.allocate_producer_id(), "producer_epoch": 0}
    try:
        error, producer_id, epoch = await broker.transactions.run_init(
            body.transactional_id, millis(body.transaction_timeout), getattr(body, "producer_id", -1),
            getattr(body, "producer_epoch", -1))
        if error == ErrorCode.none:
            error = await broker.transactions.replicated(body.transactional_id)
    except KafkaError as exc:
        error, producer_id, epoch = exc.code, -1, -1
    if error == ErrorCode.producer_fenced and version < 4:
        error = ErrorCode.invalid_producer_epoch  # older clients do not know PRODUCER_FENCED
    return {"error_code": error, "producer_id": producer_id, "producer_epoch": epoch}


def _refused(code: ErrorCode) -> dict[str, Any]:
    return {"error_code": code, "producer_id": -1, "producer_epoch": -1}


APIS = [Api(22, 0, 5, handle)]
