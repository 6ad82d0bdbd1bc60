"""ElectLeaders (43): preferred and unclean leader election, as admin tools request it.

A partition whose leader is already its preferred replica (the first in its
replica list) needs no election: ELECTION_NOT_NEEDED, as Kafka answers. A
request naming no partitions asks for every partition, and Kafka reports only
those it elected; with every leader preferred, that is none. Moving leadership
between brokers comes with replication.
"""

from __future__ import annotations

from typing import Any

from klamm.broker.handlers import Api
from klamm.protocol.errors import ErrorCode

PREFERRED, UNCLEAN = 0, 1


async def handle(broker: Any, request: Any) -> dict[str, Any]:
    body = request.body
    if body.topic_partitions is None:
        return {"error_code": ErrorCode.none, "replica_election_results": []}
    election = getattr(body, "election_type", PREFERRED)
    image = broker.controller.image
    results = []
    for entry in body.topic_partitions:
        topic = image.topics_by_name.get(entry.topic)
        outcomes = [_outcome(topic, index, election) for index in entry.partitions]
        results.append({"topic": entry.topic, "partition_result": [
            {"partition_id": index, "error_code": code, "error_message": message}
            for index, (code, message) in zip(entry.partitions, outcomes, strict=True)]})
    return {"error_code": ErrorCode.none, "replica_election_results": results}


def _outcome(topic: Any, index: int, election: int) -> tuple[ErrorCode, str | None]:
    partition = topic.partitions.get(index) if topic is not None else None
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
    has_leader = partition.leader >= 0
    if (election == PREFERRED and has_leader and partition.leader == partition.replicas[0]) or \
            (election == UNCLEAN and has_leader):
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    return ErrorCode.preferred_leader_not_available, "The preferred leader was not available."


APIS = [Api(43, 0, 2, handle)]
