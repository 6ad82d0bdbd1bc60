"""ElectLeaders (43): preferred and unclean leader election, as admin tools request it.

The controller decides and commits (klamm/controller/elections.py), reached
through the controller client. A request naming no partitions asks for every
partition, and Kafka reports only those whose election was needed. With an
authorizer it needs ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.broker.services import BrokerServices
from klamm.controller.elections import PREFERRED
from klamm.protocol.acl import AclOperation
from klamm.protocol.errors import ErrorCode, KafkaError


async def handle(broker: BrokerServices, request: Any) -> dict[str, Any]:
    body = request.body
    election = getattr(body, "election_type", PREFERRED)
    wanted = None
    if body.topic_partitions is not None:
        wanted = {}
        for entry in body.topic_partitions:
            wanted.setdefault(entry.topic, []).extend(entry.partitions)
    try:
        broker.authorizer.require_cluster(request, AclOperation.ALTER)
        outcomes = await broker.controller_client.elect_leaders(election, wanted)
    except KafkaError as exc:  # Kafka's error response: at the top and for each partition asked for
        return {"error_code": exc.code, "replica_election_results": [{"topic": topic, "partition_result": [
            {"partition_id": index, "error_code": exc.code, "error_message": exc.message} for index in indexes]}
            for topic, indexes in (wanted or {}).items()]}
    results = [{"topic": topic, "partition_result": [
        {"partition_id": index, "error_code": code, "error_message": message}
        for index, (code, message) in partitions]} for topic, partitions in outcomes.items()]
    return {"error_code": ErrorCode.none, "replica_election_results": results}


APIS = [Api(43, 0, 2, handle)]
