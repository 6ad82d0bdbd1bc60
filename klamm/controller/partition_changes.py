"""Partition leadership and ISR decisions: pure functions of (image, event) -> metadata records.

Kafka's ReplicationControlManager and PartitionChangeBuilder, without eligible
leader replicas (KIP-966 is off by default in Kafka 3.9):

- A leader is elected from the target ISR, in replica order, among acceptable
  brokers: registered, unfenced, not in controlled shutdown. The current leader
  stays while it is acceptable and in the ISR. With unclean election allowed for
  the topic, and no clean candidate, the first acceptable replica leads and the
  ISR becomes that replica alone (leader recovery state RECOVERING). Otherwise
  the partition has no leader (-1).
- The ISR never becomes empty: when the last member is fenced it stays in the
  ISR, so that it is the one to lead again once it comes back.
- A leader change bumps the leader epoch; every change bumps the partition
  epoch (both are done by the image's replay of PartitionChangeRecord).
- Fencing, controlled shutdown and unfencing of a broker are the events that move
  leadership; AlterPartition is how a leader changes its ISR.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from klamm.controller.image import MetadataImage, PartitionImage, TopicImage
from klamm.controller.records import MetadataRecord
from klamm.protocol.errors import ErrorCode, KafkaError

__all__ = [
    "RECOVERED",
    "RECOVERING",
    "decide_alter_partition",
    "decide_balance_leaders",
    "decide_reassignments",
    "decide_controlled_shutdown",
    "decide_fence_broker",
    "decide_leaderless_elections",
    "decide_unfence_broker",
    "elect_leader",
    "is_acceptable_leader",
    "unclean_allowed",
]

NO_LEADER = -1
RECOVERED, RECOVERING = 0, 1  # LeaderRecoveryState
UNCLEAN_KEY = "unclean.leader.election.enable"


def is_acceptable_leader(image: MetadataImage, broker_id: int) -> bool:
    """Kafka's ClusterControlManager.isActive: registered, unfenced, not shutting down."""
    broker = image.brokers.get(broker_id)
    return broker is not None and not broker.fenced and not broker.in_controlled_shutdown


def unclean_allowed(topic: TopicImage, default: bool = False) -> bool:
    value = topic.configs.get(UNCLEAN_KEY)
    return default if value is None else value.strip().lower() == "true"


def elect_leader(partition: PartitionImage, target_isr: Sequence[int], acceptable: Callable[[int], bool], *,
                 preferred: bool = False, unclean: bool = False) -> tuple[int, bool]:
    """(leader, whether the election was unclean) for the target ISR (Kafka's electLeader)."""
    def valid(replica: int) -> bool:
        return replica in target_isr and acceptable(replica)

    if preferred and partition.replicas and valid(partition.replicas[0]):
        return partition.replicas[0], False
    if valid(partition.leader):
        return partition.leader, False
    clean = next((r for r in partition.replicas if valid(r)), None)
    if clean is not None:
        return clean, False
    if unclean and not preferred:
        forced = next((r for r in partition.replicas if acceptable(r)), None)
        if forced is not None:
            return forced, True
    return NO_LEADER, False


def partition_change(topic: TopicImage, partition: PartitionImage, target_isr: Sequence[int],
                     acceptable: Callable[[int], bool], *, preferred: bool = False, unclean: bool = False,
                     recovery_state: int | None = None, target_replicas: Sequence[int] | None = None,
                     target_adding: Sequence[int] | None = None,
                     target_removing: Sequence[int] | None = None) -> MetadataRecord | None:
    """The PartitionChangeRecord moving `partition` to the target state; None if nothing changes.

    As Kafka's PartitionChangeBuilder: a reassignment completes as soon as the target ISR holds every
    target replica (the removed ones leave replicas and ISR), then the leader is elected among the
    result; a change that drops replicas bumps the leader epoch even when the leader stays.
    """
    replicas = list(partition.replicas if target_replicas is None else target_replicas)
    adding = list(partition.adding_replicas if target_adding is None else target_adding)
    removing = list(partition.removing_replicas if target_removing is None else target_removing)
    isr = list(target_isr)
    completed = _complete_reassignment(replicas, adding, removing, isr)
    if completed is not None:
        (replicas, isr), adding, removing = completed, [], []
    target = replace(partition, replicas=tuple(replicas))
    leader, was_unclean = elect_leader(target, isr, acceptable, preferred=preferred, unclean=unclean)
    fields: dict = {"topic_id": topic.topic_id, "partition_id": partition.partition}
    if leader != partition.leader or not set(partition.replicas) <= set(replicas):
        fields["leader"] = leader
        if was_unclean:
            isr = [leader]
            if partition.leader_recovery_state != RECOVERING:
                fields["leader_recovery_state"] = RECOVERING
    if isr and tuple(isr) != partition.isr:
        fields["isr"] = isr
    for key, value, current in (("replicas", replicas, partition.replicas),
                                ("adding_replicas", adding, partition.adding_replicas),
                                ("removing_replicas", removing, partition.removing_replicas)):
        if tuple(value) != current:
            fields[key] = value
    if recovery_state is not None and recovery_state != partition.leader_recovery_state:
        fields["leader_recovery_state"] = recovery_state
    if len(fields) == 2:
        return None
    return MetadataRecord("PartitionChangeRecord", fields)


def _complete_reassignment(replicas: list[int], adding: list[int], removing: list[int],
                           isr: list[int]) -> tuple[list[int], list[int]] | None:
    """(replicas, ISR) once a reassignment can finish (Kafka's maybeCompleteReassignment), else None."""
    if not adding and not removing:
        return None
    new_isr = [r for r in isr if r not in removing]
    new_replicas = [r for r in replicas if r not in removing]
    if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
        return None
    return new_replicas, new_isr


def decide_fence_broker(image: MetadataImage, broker_id: int, *, unclean_default: bool = False) -> list[MetadataRecord]:
    """Fence a broker (missed heartbeats): out of every ISR, leaders moved; then the fence itself."""
    broker = image.brokers.get(broker_id)
    if broker is None or broker.fenced:
        return []
    records = _updates(image, lambda p: broker_id in p.isr, remove=broker_id, unclean_default=unclean_default)
    records.append(MetadataRecord("BrokerRegistrationChangeRecord",
                                  {"broker_id": broker_id, "broker_epoch": broker.epoch, "fenced": 1}))
    return records


def decide_unregister_broker(image: MetadataImage, broker_id: int, *,
                             unclean_default: bool = False) -> list[MetadataRecord]:
    """UnregisterBroker (Kafka's ReplicationControlManager.unregisterBroker): out of every ISR, leaders moved,
    then the registration removed. BROKER_ID_NOT_REGISTERED (a KafkaError) for a broker without one."""
    broker = image.brokers.get(broker_id)
    if broker is None:
        raise KafkaError(ErrorCode.broker_id_not_registered, f"Broker ID {broker_id} is not currently registered")
    records = _updates(image, lambda p: broker_id in p.isr, remove=broker_id, unclean_default=unclean_default)
    records.append(MetadataRecord("UnregisterBrokerRecord", {"broker_id": broker_id, "broker_epoch": broker.epoch}))
    return records


def decide_controlled_shutdown(image: MetadataImage, broker_id: int, *,
                               unclean_default: bool = False) -> list[MetadataRecord]:
    """A broker asked to shut down: it is marked so, and leaves every ISR and leadership it can."""
    broker = image.brokers.get(broker_id)
    if broker is None or broker.in_controlled_shutdown:
        return []
    records = [MetadataRecord("BrokerRegistrationChangeRecord",
                              {"broker_id": broker_id, "broker_epoch": broker.epoch, "in_controlled_shutdown": 1})]
    records += _updates(image, lambda p: broker_id in p.isr, remove=broker_id, unclean_default=unclean_default)
    return records


def decide_unfence_broker(image: MetadataImage, broker_id: int, *, unclean_default: bool = False) -> list[MetadataRecord]:
    """Unfence a caught-up broker, and elect leaders for the partitions that had none."""
    broker = image.brokers.get(broker_id)
    if broker is None or not broker.fenced or broker.in_controlled_shutdown:
        return []  # a broker that shut down comes back by registering again
    records = [MetadataRecord("BrokerRegistrationChangeRecord",
                              {"broker_id": broker_id, "broker_epoch": broker.epoch, "fenced": -1})]
    return records + decide_leaderless_elections(image, broker_id, unclean_default=unclean_default)


def decide_leaderless_elections(image: MetadataImage, broker_id: int, *,
                                unclean_default: bool = False) -> list[MetadataRecord]:
    """A broker (re)joined: elect leaders for the partitions that have none, counting it as acceptable."""
    return _updates(image, lambda p: p.leader == NO_LEADER, add=broker_id, unclean_default=unclean_default)


def _updates(image: MetadataImage, selected: Callable[[PartitionImage], bool], *, remove: int = NO_LEADER,
             add: int = NO_LEADER, unclean_default: bool) -> list[MetadataRecord]:
    """Kafka's generateLeaderAndIsrUpdates: `remove` leaves the ISRs and may not lead; `add` may lead."""
    def acceptable(replica: int) -> bool:
        return replica != remove and (replica == add or is_acceptable_leader(image, replica))

    records = []
    for topic in image.topics_by_name.values():
        for partition in topic.partitions.values():
            if not selected(partition):
                continue
            target_isr = [r for r in partition.isr if r != remove] or list(partition.isr)
            record = partition_change(topic, partition, target_isr, acceptable,
                                      unclean=unclean_allowed(topic, unclean_default))
            if record is not None:
                records.append(record)
    return records


def decide_balance_leaders(image: MetadataImage) -> list[MetadataRecord]:
    """auto.leader.rebalance.enable: leadership back to each partition's preferred replica where it can lead
    (Kafka's KRaft controller balances every such partition; leader.imbalance.per.broker.percentage is not used)."""
    records = []
    for topic in image.topics_by_name.values():
        for partition in topic.partitions.values():
            if not partition.replicas or partition.leader == partition.replicas[0]:
                continue
            record = partition_change(topic, partition, list(partition.isr),
                                      lambda replica: is_acceptable_leader(image, replica), preferred=True)
            if record is not None and record.data.get("leader") == partition.replicas[0]:
                records.append(record)
    return records


def decide_alter_partition(image: MetadataImage, broker_id: int, broker_epoch: int, topic_id: uuid.UUID,
                           partition_id: int, leader_epoch: int, partition_epoch: int, new_isr: Iterable[int],
                           leader_recovery_state: int = RECOVERED) -> tuple[ErrorCode, list[MetadataRecord]]:
    """A leader's AlterPartition for one partition: Kafka's checks, then the ISR change."""
    registration = image.brokers.get(broker_id)
    if registration is None or registration.epoch != broker_epoch:
        return ErrorCode.stale_broker_epoch, []
    topic = image.topics_by_id.get(topic_id)
    if topic is None:
        return ErrorCode.unknown_topic_id, []
    partition = topic.partitions.get(partition_id)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition, []
    isr = list(new_isr)
    error = _check_alter_partition(image, partition, broker_id, leader_epoch, partition_epoch, isr,
                                   leader_recovery_state)
    if error != ErrorCode.none:
        return error, []
    record = partition_change(topic, partition, isr, lambda replica: is_acceptable_leader(image, replica),
                              recovery_state=leader_recovery_state)
    # Even an unchanged ISR is written: the leader waits for the new partition epoch to settle its proposal.
    return ErrorCode.none, [record or MetadataRecord("PartitionChangeRecord",
                                                     {"topic_id": topic_id, "partition_id": partition_id})]


def decide_reassignments(image: MetadataImage, targets: Mapping[str, Mapping[int, Sequence[int] | None]]
                         ) -> tuple[dict[str, dict[int, tuple[ErrorCode, str | None]]], list[MetadataRecord]]:
    """AlterPartitionReassignments: per partition (error, message), and the records (KIP-455)."""
    results: dict[str, dict[int, tuple[ErrorCode, str | None]]] = {}
    records: list[MetadataRecord] = []
    for name, partitions in targets.items():
        answers = results.setdefault(name, {})
        for index, target in partitions.items():
            try:
                record = _reassign(image, name, index, target)
            except _Refused as refused:
                answers[index] = (refused.code, refused.message)
                continue
            if record is not None:
                records.append(record)
            answers[index] = (ErrorCode.none, None)
    return results, records


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _reassign(image: MetadataImage, name: str, index: int, target: Sequence[int] | None) -> MetadataRecord | None:
    topic = image.topics_by_name.get(name)
    if topic is None:
        raise _Refused(ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {name}.")
    partition = topic.partitions.get(index)
    if partition is None:
        raise _Refused(ErrorCode.unknown_topic_or_partition, f"Unable to find partition {name}:{index}.")
    def acceptable(replica: int) -> bool:
        return is_acceptable_leader(image, replica)
    in_progress = bool(partition.adding_replicas or partition.removing_replicas)
    if target is None:  # cancel: back to the replicas before the reassignment
        if not in_progress:
            raise _Refused(ErrorCode.no_reassignment_in_progress, "No partition reassignment is in progress.")
        original = [r for r in partition.replicas if r not in partition.adding_replicas]
        isr = [r for r in partition.isr if r in original]
        if not isr and (not unclean_allowed(topic) or not any(acceptable(r) for r in original)):
            # Only added replicas are in sync: going back means electing one that is not (Kafka refuses).
            raise _Refused(ErrorCode.invalid_replica_assignment, f"Unable to revert partition assignment for "
                           f"{name}:{index} because it would require an unclean leader election.")
        return partition_change(topic, partition, isr, acceptable, unclean=unclean_allowed(topic),
                                target_replicas=original, target_adding=[], target_removing=[])
    _check_assignment(image, list(target))
    current = list(partition.replicas)  # as Kafka: a new target replaces one in progress, from all replicas now
    removing = sorted(set(current) - set(target))
    adding = sorted(set(target) - set(current))
    return partition_change(topic, partition, list(partition.isr), acceptable,
                            target_replicas=list(target) + removing, target_adding=adding,
                            target_removing=removing)


def _check_assignment(image: MetadataImage, replicas: list[int]) -> None:
    if not replicas:
        raise _Refused(ErrorCode.invalid_replica_assignment,
                       "The manual partition assignment includes an empty replica list.")
    for broker_id in sorted(replicas):
        if broker_id not in image.brokers:
            raise _Refused(ErrorCode.invalid_replica_assignment, f"The manual partition assignment includes "
                           f"broker {broker_id}, but no such broker is registered.")
    if len(set(replicas)) != len(replicas):
        duplicate = next(r for r in sorted(replicas) if replicas.count(r) > 1)
        raise _Refused(ErrorCode.invalid_replica_assignment,
                       f"The manual partition assignment includes the broker {duplicate} more than once.")


def _check_alter_partition(image: MetadataImage, partition: PartitionImage, broker_id: int, leader_epoch: int,
                           partition_epoch: int, isr: list[int], recovery_state: int) -> ErrorCode:
    if leader_epoch > partition.leader_epoch or partition_epoch > partition.partition_epoch:
        return ErrorCode.not_controller  # the controller is behind: the leader should find another
    if leader_epoch < partition.leader_epoch:
        return ErrorCode.fenced_leader_epoch
    if broker_id != partition.leader:
        return ErrorCode.invalid_request
    if partition_epoch < partition.partition_epoch:
        return ErrorCode.invalid_update_version
    if len(set(isr)) != len(isr) or not set(isr) <= set(partition.replicas) or partition.leader not in isr:
        return ErrorCode.invalid_request
    if recovery_state == RECOVERING and len(isr) > 1:
        return ErrorCode.invalid_request
    if partition.leader_recovery_state == RECOVERED and recovery_state == RECOVERING:
        return ErrorCode.invalid_request
    if any(not is_acceptable_leader(image, replica) for replica in isr):
        return ErrorCode.ineligible_replica
    return ErrorCode.none
