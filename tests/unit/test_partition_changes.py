"""The controller's partition decisions: fencing, controlled shutdown, unfencing, AlterPartition, ElectLeaders."""

from __future__ import annotations

import uuid

from hypothesis import example, given, settings
from hypothesis import strategies as st

from klamm.controller.elections import PREFERRED, UNCLEAN, decide_elect_leaders
from klamm.controller.image import MetadataImage, apply_batch, empty_image
from klamm.controller.partition_changes import (RECOVERING, decide_alter_partition, decide_controlled_shutdown,
                                                decide_fence_broker, decide_reassignments, decide_unfence_broker)
from klamm.controller.records import MetadataRecord, decode_record, encode_record
from klamm.protocol.errors import ErrorCode

TOPIC_ID = uuid.UUID(int=7)


def replay(image: MetadataImage, records: list[MetadataRecord]) -> MetadataImage:
    """Records as the log replays them: encoded, decoded (defaults filled) and applied."""
    return apply_batch(image, enumerate((decode_record(encode_record(r)) for r in records), start=image.offset + 1))


def cluster(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, brokers=(1, 2, 3), unclean=False,
            partitions: int = 1) -> MetadataImage:
    records = [MetadataRecord("RegisterBrokerRecord", {
        "broker_id": b, "incarnation_id": uuid.UUID(int=b), "broker_epoch": 10 + b, "end_points": [],
        "features": [], "rack": None, "fenced": False}) for b in brokers]
    records.append(MetadataRecord("TopicRecord", {"name": "t", "topic_id": TOPIC_ID}))
    records += [MetadataRecord("PartitionRecord", {
        "partition_id": p, "topic_id": TOPIC_ID, "replicas": list(replicas), "isr": list(isr), "leader": leader,
        "leader_epoch": 0, "partition_epoch": 0}) for p in range(partitions)]
    if unclean:
        records.append(MetadataRecord("ConfigRecord", {"resource_type": 2, "resource_name": "t",
                                                       "name": "unclean.leader.election.enable", "value": "true"}))
    return replay(empty_image("c", 1), records)


def part(image: MetadataImage, index: int = 0):
    return image.topics_by_name["t"].partitions[index]


def test_fencing_the_leader_elects_the_next_isr_member_and_bumps_the_epoch():
    image = replay(cluster(), decide_fence_broker(cluster(), 1))
    p = part(image)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (2, (2, 3), 1, 1)
    assert image.brokers[1].fenced


def test_fencing_a_follower_shrinks_the_isr_without_a_leader_epoch_bump():
    image = replay(cluster(), decide_fence_broker(cluster(), 3))
    p = part(image)
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2), 0, 1)


def test_the_last_isr_member_stays_and_the_partition_goes_offline_then_comes_back_with_it():
    image = cluster(isr=(1,))
    image = replay(image, decide_fence_broker(image, 1))
    assert (part(image).leader, part(image).isr) == (-1, (1,))
    # another replica coming back cannot lead: it is not in the ISR (no unclean election)
    image = replay(image, decide_fence_broker(image, 2))
    image = replay(image, decide_unfence_broker(image, 2))
    assert part(image).leader == -1
    image = replay(image, decide_unfence_broker(image, 1))
    assert (part(image).leader, part(image).isr, part(image).leader_epoch) == (1, (1,), 2)


def test_unclean_election_when_the_topic_allows_it():
    image = cluster(isr=(1,), unclean=True)
    image = replay(image, decide_fence_broker(image, 1))
    p = part(image)
    assert (p.leader, p.isr, p.leader_recovery_state) == (2, (2,), RECOVERING)


def test_controlled_shutdown_moves_leadership_and_marks_the_broker():
    image = cluster(partitions=2)
    image = replay(image, decide_controlled_shutdown(image, 1))
    assert image.brokers[1].in_controlled_shutdown and not image.brokers[1].fenced
    assert all(part(image, i).leader == 2 and 1 not in part(image, i).isr for i in range(2))


def test_alter_partition_checks_as_kafka():
    image = cluster()
    ok = decide_alter_partition(image, 1, 11, TOPIC_ID, 0, 0, 0, [1, 2])
    assert ok[0] == ErrorCode.none
    assert part(replay(image, ok[1])).isr == (1, 2)
    assert decide_alter_partition(image, 1, 99, TOPIC_ID, 0, 0, 0, [1])[0] == ErrorCode.stale_broker_epoch
    assert decide_alter_partition(image, 1, 11, uuid.uuid4(), 0, 0, 0, [1])[0] == ErrorCode.unknown_topic_id
    assert decide_alter_partition(image, 1, 11, TOPIC_ID, 5, 0, 0, [1])[0] == ErrorCode.unknown_topic_or_partition
    assert decide_alter_partition(image, 2, 12, TOPIC_ID, 0, 0, 0, [1, 2])[0] == ErrorCode.invalid_request
    assert decide_alter_partition(image, 1, 11, TOPIC_ID, 0, 0, 0, [2, 3])[0] == ErrorCode.invalid_request
    assert decide_alter_partition(image, 1, 11, TOPIC_ID, 0, 0, 0, [1, 4])[0] == ErrorCode.invalid_request
    assert decide_alter_partition(image, 1, 11, TOPIC_ID, 0, 1, 0, [1])[0] == ErrorCode.not_controller
    moved = replay(image, decide_fence_broker(image, 3))  # partition epoch 1
    assert decide_alter_partition(moved, 1, 11, TOPIC_ID, 0, 0, 0, [1])[0] == ErrorCode.invalid_update_version
    assert decide_alter_partition(moved, 1, 11, TOPIC_ID, 0, 0, 1, [1, 2, 3])[0] == ErrorCode.ineligible_replica
    elected = replay(image, decide_fence_broker(image, 1))  # leader 2, epoch 1
    assert decide_alter_partition(elected, 1, 11, TOPIC_ID, 0, 0, 0, [1])[0] in (ErrorCode.fenced_leader_epoch,
                                                                                ErrorCode.stale_broker_epoch)


def test_preferred_and_unclean_elections():
    image = cluster(leader=2)
    results, records = decide_elect_leaders(image, PREFERRED, {"t": [0, 3]})
    assert results == {"t": [(0, (ErrorCode.none, None)), (3, (ErrorCode.unknown_topic_or_partition,
                                                                 "No such partition as t-3"))]}
    image = replay(image, records)
    assert (part(image).leader, part(image).leader_epoch) == (1, 1)
    assert decide_elect_leaders(image, PREFERRED, {"t": [0]})[0]["t"][0][1][0] == ErrorCode.election_not_needed
    assert decide_elect_leaders(image, PREFERRED, None) == ({"t": []}, [])
    # the preferred replica out of the ISR cannot lead
    image = cluster(leader=2, isr=(2, 3))
    assert decide_elect_leaders(image, PREFERRED, {"t": [0]})[0]["t"][0][1][0] == ErrorCode.preferred_leader_not_available
    # unclean: only a leaderless partition, from any live replica
    image = cluster(isr=(1,))
    image = replay(image, decide_fence_broker(image, 1))
    assert decide_elect_leaders(cluster(), UNCLEAN, {"t": [0]})[0]["t"][0][1][0] == ErrorCode.election_not_needed
    results, records = decide_elect_leaders(image, UNCLEAN, {"t": [0]})
    assert results["t"][0][1][0] == ErrorCode.none
    assert (part(replay(image, records)).leader, part(replay(image, records)).isr) == (2, (2,))


events = st.lists(st.tuples(st.sampled_from(["fence", "unfence", "shutdown", "alter", "preferred", "unclean",
                                              "reassign", "cancel"]),
                            st.integers(1, 4), st.lists(st.integers(1, 4), max_size=4)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(events, st.booleans())
@example([("fence", 1, []), ("fence", 2, []), ("reassign", 1, [4]), ("fence", 3, []), ("cancel", 1, [])], True)
@example([("reassign", 1, [1]), ("reassign", 1, [2]), ("fence", 1, []), ("reassign", 1, [1])], True)
def test_any_sequence_of_decisions_keeps_the_partition_well_formed(sequence, unclean):
    image = cluster(replicas=(1, 2, 3), isr=(1, 2, 3), brokers=(1, 2, 3, 4), unclean=unclean)
    for kind, broker, isr in sequence:
        before = part(image)
        if kind == "fence":
            records = decide_fence_broker(image, broker)
        elif kind == "unfence":
            records = decide_unfence_broker(image, broker)
        elif kind == "shutdown":
            records = decide_controlled_shutdown(image, broker)
        elif kind == "alter":
            reg = image.brokers[broker]
            records = decide_alter_partition(image, broker, reg.epoch, TOPIC_ID, 0, before.leader_epoch,
                                             before.partition_epoch, sorted(set(isr)))[1]
        elif kind in ("reassign", "cancel"):
            target = list(dict.fromkeys(isr)) if kind == "reassign" else None
            records = decide_reassignments(image, {"t": {0: target}})[1]
        else:
            records = decide_elect_leaders(image, PREFERRED if kind == "preferred" else UNCLEAN, {"t": [0]})[1]
        image = replay(image, records)
        after = part(image)
        assert set(after.adding_replicas) <= set(after.replicas) and set(after.removing_replicas) <= set(after.replicas)
        assert after.leader == -1 or after.leader in after.isr
        assert after.isr and set(after.isr) <= set(after.replicas)
        assert after.leader_epoch >= before.leader_epoch and after.partition_epoch >= before.partition_epoch
        if after.leader != before.leader:
            assert after.leader_epoch == before.leader_epoch + 1
        if after.leader >= 0 and after.leader != before.leader:
            broker_state = image.brokers[after.leader]
            assert not broker_state.fenced and not broker_state.in_controlled_shutdown
        if not unclean and kind not in ("unclean", "cancel") and after.leader >= 0 and after.leader != before.leader:
            assert after.leader in before.isr  # clean: only an explicit unclean ElectLeaders leaves the ISR
