"""InitProducerId (22): producer ids for idempotent producers.

Without a transactional id Kafka hands out a fresh producer id with epoch 0,
whatever id the client had (KafkaApis does the same). Transactional ids need the
transaction coordinator, which klamm does not have yet: those requests get
COORDINATOR_NOT_AVAILABLE rather than a fake success.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.protocol.errors import ErrorCode


async def handle(broker: Any, request: Any) -> dict[str, Any]:
    if request.body.transactional_id is not None:
        return {"error_code": ErrorCode.coordinator_not_available, "producer_id": -1, "producer_epoch": -1}
    return {"error_code": ErrorCode.none, "producer_id": broker.allocate_producer_id(), "producer_epoch": 0}


APIS = [Api(22, 0, 5, handle)]
