"""Leader election decisions: a pure function of (image, request) -> results.

Mirrors the outcomes of Kafka's ReplicationControlManager.electLeaders. A
partition whose leader is already its preferred replica (the first in its
replica list) needs no election: ELECTION_NOT_NEEDED. On one node there is
never another replica to move leadership to, so no records are written yet;
moving leadership between brokers comes with replication.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from klamm.controller.image import MetadataImage
from klamm.protocol.errors import ErrorCode

__all__ = ["PREFERRED", "UNCLEAN", "ElectionOutcome", "decide_elect_leaders"]

PREFERRED, UNCLEAN = 0, 1

ElectionOutcome = tuple[ErrorCode, str | None]


def decide_elect_leaders(image: MetadataImage, election: int,
                         partitions: Mapping[str, Sequence[int]]) -> dict[str, list[ElectionOutcome]]:
    """topic -> one (error, message) per requested partition, in request order."""
    return {name: [_outcome(image, name, index, election) for index in indexes]
            for name, indexes in partitions.items()}


def _outcome(image: MetadataImage, name: str, index: int, election: int) -> ElectionOutcome:
    topic = image.topics_by_name.get(name)
    partition = topic.partitions.get(index) if topic is not None else None
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
    has_leader = partition.leader >= 0
    if (election == PREFERRED and has_leader and partition.leader == partition.replicas[0]) or \
            (election == UNCLEAN and has_leader):
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    return ErrorCode.preferred_leader_not_available, "The preferred leader was not available."
