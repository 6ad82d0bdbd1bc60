"""Property: random joins, leaves, heartbeats, crashes and topic changes never give a partition to two members.

Clients are modelled as librdkafka behaves: a heartbeat reports what the client
owns; an assignment in a response is taken on the client's next `reconcile`
step (revoking what it lost, adding what it got); FENCED_MEMBER_EPOCH or
UNKNOWN_MEMBER_ID make it drop everything and rejoin with epoch 0. A crashed
client does nothing until its session expires (the member is fenced); a slow
one may be fenced by its rebalance timeout while it still believes it owns
partitions (a zombie, as in Kafka), so the client-side check covers the
clients the group still counts as members.

At every step: the group's replay never sees a partition owned twice (it
raises), a member client owns nothing the group does not count as its own
(assigned or pending revocation), so no two member clients own a partition. Once heartbeats
quiesce: every partition of every subscribed topic is owned by exactly one
client subscribed to it, and the group is Stable.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klamm.coordinator.assignors import ASSIGNORS
from klamm.coordinator.consumer_group import ConsumerGroup, GroupState, MemberState, TopicMetadata
from klamm.coordinator.consumer_heartbeat import (GroupSettings, HeartbeatRequest, fence, heartbeat, leave,
                                                  subscribed_topics, validate)
from klamm.protocol.errors import ErrorCode, KafkaError

TOPIC_NAMES = ("a", "b", "c")
Owned = dict[uuid.UUID, frozenset[int]]


@dataclass
class Client:
    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    epoch: int = 0
    owned: Owned = field(default_factory=dict)
    received: Owned | None = None
    crashed: bool = False


class World:
    def __init__(self, assignor: str) -> None:
        self.group = ConsumerGroup("g", 0)
        self.settings = GroupSettings({assignor: ASSIGNORS[assignor]})
        self.topics: dict[str, TopicMetadata] = {"a": TopicMetadata(uuid.UUID(int=1), "a", 3)}
        self.clients: dict[str, Client] = {}
        self.next_id = 0
        self.next_topic_id = 10

    def apply(self, records: list) -> None:  # type: ignore[type-arg]
        for record in records:
            self.group.replay(record)

    # client actions
    def join(self, topics: tuple[str, ...], static: bool) -> None:
        self.next_id += 1
        member_id = f"m{self.next_id}"
        self.clients[member_id] = Client(member_id, topics, f"i{self.next_id}" if static else None)
        self.heartbeat(member_id)

    def heartbeat(self, member_id: str) -> None:
        client = self.clients[member_id]
        joining = client.epoch == 0
        req = HeartbeatRequest("g", member_id, client.epoch, instance_id=client.instance_id,
                               rebalance_timeout_ms=30_000 if joining else -1,
                               topic_names=client.topics if joining else None,
                               owned={} if joining else dict(client.owned))
        validate(req, self.settings)
        try:
            out = heartbeat(self.group, req, self.topics, self.settings)
        except KafkaError as exc:
            assert exc.code in (ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id), exc
            client.owned, client.received, client.epoch = {}, None, 0
            return
        self.apply(out.records)
        client.epoch = out.response["member_epoch"]
        if out.response["assignment"] is not None:
            client.received = {tp["topic_id"]: frozenset(tp["partitions"])
                               for tp in out.response["assignment"]["topic_partitions"]}

    def reconcile(self, member_id: str) -> None:
        client = self.clients[member_id]
        if client.received is not None:
            client.owned, client.received = client.received, None

    def leave(self, member_id: str) -> None:
        client = self.clients.pop(member_id)
        req = HeartbeatRequest("g", member_id, -1, instance_id=client.instance_id)
        try:
            self.apply(leave(self.group, req, self.topics).records)
        except KafkaError as exc:
            assert exc.code == ErrorCode.unknown_member_id  # fenced meanwhile

    def expire(self, member_id: str) -> None:
        """The member's session or rebalance timeout: the coordinator fences it."""
        if member_id in self.group.members:
            self.apply(fence(self.group, member_id, self.topics))

    # topic changes
    def create_topic(self, name: str, partitions: int) -> None:
        if name not in self.topics:
            self.next_topic_id += 1
            self.topics[name] = TopicMetadata(uuid.UUID(int=self.next_topic_id), name, partitions)

    def grow_topic(self, name: str) -> None:
        if name in self.topics:
            topic = self.topics[name]
            self.topics[name] = TopicMetadata(topic.topic_id, name, topic.partitions + 1)

    def delete_topic(self, name: str) -> None:
        self.topics.pop(name, None)

    # checks
    def live(self) -> list[Client]:
        return [c for c in self.clients.values() if not c.crashed]

    def check_exclusive(self) -> None:
        """No two member clients own a partition; each owns only what the group counts as its own."""
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.clients.values():
            member = self.group.members.get(client.member_id)
            if member is None:
                continue  # fenced without knowing it yet (a zombie)
            mine = {(t, p) for t, parts in client.owned.items() for p in parts}
            assert mine <= member.current.owned(), f"{client.member_id} owns {mine - member.current.owned()}"
            for topic, partitions in client.owned.items():
                for partition in partitions:
                    pair = (topic, partition)
                    assert pair not in seen, f"{pair} owned by {seen[pair]} and {client.member_id}"
                    seen[pair] = client.member_id

    def quiesce(self) -> None:
        for client in list(self.clients.values()):
            if client.crashed:
                self.expire(client.member_id)
                del self.clients[client.member_id]
        for _ in range(40):
            before = (self.group.group_epoch, self.group.assignment_epoch,
                      {m: (c.epoch, c.owned) for m, c in self.clients.items()},
                      {m: member.current for m, member in self.group.members.items()})
            for client in self.live():
                self.reconcile(client.member_id)
                self.heartbeat(client.member_id)
                self.check_exclusive()
            after = (self.group.group_epoch, self.group.assignment_epoch,
                     {m: (c.epoch, c.owned) for m, c in self.clients.items()},
                     {m: member.current for m, member in self.group.members.items()})
            if before == after and all(c.received is None for c in self.live()):
                break
        else:
            raise AssertionError("heartbeats did not quiesce")
        self.check_covering()

    def check_covering(self) -> None:
        by_id = {t.topic_id: t for t in self.topics.values()}
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for client in self.clients.values():
            member = self.group.members[client.member_id]
            assert member.current.state is MemberState.STABLE
            assert member.current.assigned == client.owned
            mine = subscribed_topics(member.subscription, self.topics)
            for topic, partitions in client.owned.items():
                assert by_id[topic].name in mine
                for partition in partitions:
                    assert (topic, partition) not in owners
                    owners[(topic, partition)] = client.member_id
        wanted = {(self.topics[name].topic_id, p)
                  for client in self.clients.values()
                  for name in subscribed_topics(self.group.members[client.member_id].subscription, self.topics)
                  for p in range(self.topics[name].partitions)}
        assert set(owners) == wanted
        if self.clients:
            assert self.group.state is GroupState.STABLE


topic_sets = st.lists(st.sampled_from(TOPIC_NAMES), min_size=1, max_size=3, unique=True).map(tuple)
pick = st.integers(0, 5)
steps = st.one_of(
    st.tuples(st.just("join"), topic_sets, st.booleans()),
    st.tuples(st.just("beat"), pick),  # reconcile, then heartbeat: librdkafka acks right after reconciling
    st.tuples(st.just("beat"), pick),
    st.tuples(st.just("beat"), pick),
    st.tuples(st.just("heartbeat"), pick),  # a slow client: heartbeats before it has reconciled
    st.tuples(st.just("reconcile"), pick),
    st.tuples(st.just("leave"), pick),
    st.tuples(st.just("crash"), pick),
    st.tuples(st.just("expire"), pick),
    st.tuples(st.just("create"), st.sampled_from(TOPIC_NAMES), st.integers(1, 4)),
    st.tuples(st.just("grow"), st.sampled_from(TOPIC_NAMES)),
    st.tuples(st.just("delete"), st.sampled_from(TOPIC_NAMES)),
)


def run(world: World, step: tuple) -> None:  # type: ignore[type-arg]
    kind = step[0]
    live = sorted(c.member_id for c in world.live())
    pick = live[step[1] % len(live)] if live and isinstance(step[1], int) else None
    if kind == "join":
        world.join(step[1], step[2])
    elif kind == "create":
        world.create_topic(step[1], step[2])
    elif kind == "grow":
        world.grow_topic(step[1])
    elif kind == "delete":
        world.delete_topic(step[1])
    elif pick is None:
        return
    elif kind == "beat":
        world.reconcile(pick)
        world.heartbeat(pick)
    elif kind == "heartbeat":
        world.heartbeat(pick)
    elif kind == "reconcile":
        world.reconcile(pick)
    elif kind == "leave":
        world.leave(pick)
    elif kind == "crash":
        world.clients[pick].crashed = True
    elif kind == "expire":  # a slow member's rebalance timeout, or a crashed one's session
        world.expire(pick)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(assignor=st.sampled_from(sorted(ASSIGNORS)), plan=st.lists(steps, min_size=10, max_size=80))
def test_no_partition_is_owned_twice_and_all_are_owned_once_quiet(assignor: str, plan: list) -> None:  # type: ignore[type-arg]
    world = World(assignor)
    for step in plan:
        run(world, step)
        world.check_exclusive()
    world.quiesce()
