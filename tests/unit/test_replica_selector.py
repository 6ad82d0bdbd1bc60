"""The preferred read replica (KIP-392): Kafka's RackAwareReplicaSelector, and which followers the leader offers."""

from __future__ import annotations

from hypothesis import given, strategies as st

from klamm.broker.replica_selector import ReplicaView, preferred_read_replica, select_rack_aware
from klamm.broker.replication import LeaderState

LEADER = ReplicaView(1, "a", 100, 0)


def test_the_leader_serves_a_client_without_a_rack_or_in_its_rack() -> None:
    followers = [ReplicaView(2, "b", 100, 0)]
    assert select_rack_aware(None, LEADER, followers) is LEADER
    assert select_rack_aware("", LEADER, followers) is LEADER
    assert select_rack_aware("a", LEADER, [ReplicaView(2, "a", 100, 0)]) is LEADER
    assert select_rack_aware("c", LEADER, followers) is LEADER  # no replica in the client's rack
    assert preferred_read_replica("a", LEADER, followers) == -1


def test_the_most_caught_up_replica_in_the_clients_rack() -> None:
    behind, ahead = ReplicaView(2, "b", 90, 0), ReplicaView(3, "b", 100, 5000)
    assert preferred_read_replica("b", LEADER, [behind, ahead, ReplicaView(4, "c", 100, 0)]) == 3
    # the same log end: the one caught up most recently, then the largest id (Kafka's ReplicaView.comparator)
    assert preferred_read_replica("b", LEADER, [ReplicaView(2, "b", 100, 10), ReplicaView(3, "b", 100, 20)]) == 2
    assert preferred_read_replica("b", LEADER, [ReplicaView(3, "b", 100, 10), ReplicaView(2, "b", 100, 10)]) == 3


@given(st.lists(st.tuples(st.integers(2, 9), st.sampled_from(["a", "b", "c", None]), st.integers(0, 200),
                          st.integers(0, 10_000)), max_size=6, unique_by=lambda f: f[0]),
       st.sampled_from(["a", "b", "c", "", None]))
def test_the_choice_is_in_the_clients_rack_or_the_leader(followers: list, rack: str | None) -> None:
    views = [ReplicaView(*f) for f in followers]
    chosen = preferred_read_replica(rack, LEADER, views)
    if chosen == -1:
        assert not rack or rack == LEADER.rack or all(v.rack != rack for v in views)
    else:
        assert rack and rack != LEADER.rack
        view = next(v for v in views if v.node_id == chosen and v.rack == rack)
        assert all(v.log_end_offset <= view.log_end_offset for v in views if v.rack == rack)


def leader_state(now_ms: int = 1000) -> LeaderState:
    return LeaderState(1, 0, 0, (1, 2, 3, 4), (1, 2, 3), 0, 100, 100, now_ms, 30_000)


def test_the_leader_offers_isr_followers_whose_log_holds_the_offset() -> None:
    state = leader_state()
    state.on_follower_fetch(2, 100, 100, 2000, log_start_offset=0)
    state.on_follower_fetch(3, 60, 100, 2000, log_start_offset=50)
    state.on_follower_fetch(4, 100, 100, 2000, log_start_offset=0)  # caught up, but not in the ISR yet
    assert state.readable_followers(55, 3000) == [(2, 100, 1000), (3, 60, 2000)]
    assert state.readable_followers(80, 3000) == [(2, 100, 1000)]  # past follower 3's log end
    assert state.readable_followers(40, 3000) == [(2, 100, 1000)]  # before follower 3's log start
    # a follower that has not fetched in this leadership: its log is unknown, it is offered for offset -1 only
    assert [f[0] for f in leader_state().readable_followers(0, 3000)] == []
