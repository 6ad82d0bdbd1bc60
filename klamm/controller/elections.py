"""Leader election decisions (ElectLeaders): a pure function of (image, request) -> (results, records).

Mirrors Kafka's ReplicationControlManager.electLeaders. A preferred election
moves leadership to the first replica of the list when it is in the ISR and
acceptable (registered, unfenced, not shutting down): ELECTION_NOT_NEEDED when it
leads already, PREFERRED_LEADER_NOT_AVAILABLE when it cannot. An unclean election
gives a leaderless partition a leader, from outside the ISR if it must:
ELECTION_NOT_NEEDED when the partition has a leader, ELIGIBLE_LEADERS_NOT_AVAILABLE
when no replica can lead. A request naming no partitions asks for every partition,
and the answer leaves out those whose election was not needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from klamm.controller.image import MetadataImage
from klamm.controller.partition_changes import is_acceptable_leader, partition_change
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode

__all__ = ["PREFERRED", "UNCLEAN", "ElectionOutcome", "decide_elect_leaders"]

PREFERRED, UNCLEAN = 0, 1

ElectionOutcome = tuple[ErrorCode, str | None]


def decide_elect_leaders(image: MetadataImage, election: int, partitions: Mapping[str, Sequence[int]] | None
                         ) -> tuple[dict[str, list[tuple[int, ElectionOutcome]]], list[MetadataRecord]]:
    """(topic -> [(partition, (error, message))], the records electing them), in request order."""
    records: list[MetadataRecord] = []
    results: dict[str, list[tuple[int, ElectionOutcome]]] = {}
    if partitions is None:
        for name, topic in image.topics_by_name.items():
            outcomes = [(index, _elect(image, name, index, election, records)) for index in sorted(topic.partitions)]
            results[name] = [(i, o) for i, o in outcomes if o[0] != ErrorCode.election_not_needed]
        return results, records
    for name, indexes in partitions.items():
        results.setdefault(name, []).extend(
            (index, _elect(image, name, index, election, records)) for index in indexes)
    return results, records


def _elect(image: MetadataImage, name: str, index: int, election: int, records: list[MetadataRecord]) -> ElectionOutcome:
    topic = image.topics_by_name.get(name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {name}"
    partition = topic.partitions.get(index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {name}-{index}"
    has_leader = partition.leader >= 0
    if (election == PREFERRED and has_leader and partition.replicas and partition.leader == partition.replicas[0]) \
            or (election == UNCLEAN and has_leader):
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    record = partition_change(topic, partition, list(partition.isr), lambda r: is_acceptable_leader(image, r),
                              preferred=election == PREFERRED, unclean=election == UNCLEAN)
    if record is None or record.data.get("leader", partition.leader) == partition.leader:
        if election == PREFERRED:
            return ErrorCode.preferred_leader_not_available, "The preferred leader was not available."
        return ErrorCode.eligible_leaders_not_available, "Eligible topic partition leaders are not available."
    records.append(record)
    return ErrorCode.none, None
