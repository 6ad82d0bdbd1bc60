"""ElectLeaders (43): preferred and unclean leader election, as admin tools request it.

The controller decides (klamm/controller/elections.py), reached through the
controller client. A request naming no partitions asks for every partition,
and Kafka reports only those it elected; with every leader preferred, that is
none.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.elections import PREFERRED
from klamm.protocol.errors import ErrorCode


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    if body.topic_partitions is None:
        return {"error_code": ErrorCode.none, "replica_election_results": []}
    election = getattr(body, "election_type", PREFERRED)
    results = []
    for entry in body.topic_partitions:
        [outcomes] = (await broker.controller_client.elect_leaders(election, {entry.topic: entry.partitions})).values()
        results.append({"topic": entry.topic, "partition_result": [
            {"partition_id": index, "error_code": code, "error_message": message}
            for index, (code, message) in zip(entry.partitions, outcomes, strict=True)]})
    return {"error_code": ErrorCode.none, "replica_election_results": results}


APIS = [Api(43, 0, 2, handle)]
