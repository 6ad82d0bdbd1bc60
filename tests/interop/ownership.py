"""Group members under load that prove, from their own callbacks, exactly-once consumption and single ownership.

Every member is a confluent-kafka consumer polled from one thread (the test's),
so its assign and revoke callbacks (which librdkafka runs only inside poll and
close) land in the shared Ledger in the order they happened. A member commits
synchronously, in its revoke callback, the position of every partition it
gives up (with `commit_interval`, also every so often, to have commits acknowledged
at any time). So, with no member fenced:
- no partition is assigned to a member while another one holds it;
- a member taking a partition over starts exactly where the last owner stopped:
  per partition, the consumed offsets over time are 0, 1, 2, ... without a gap
  or a repeat, up to the end.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


class Load:
    """A producer writing round-robin to every partition until stopped."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all",
                                  "enable.idempotence": True, "message.timeout.ms": 60000})
        self.delivered = [0] * partitions
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _report(self, err, msg) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.delivered[msg.partition()] += 1

    def _run(self) -> None:
        for i in itertools.count():
            if self._stop.is_set():
                return
            self.producer.produce(self.topic, value=str(i).encode(), partition=i % self.partitions,
                                  on_delivery=self._report)
            self.producer.poll(0.01)

    def halt(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def stop(self) -> list[int]:
        """Stop writing; what every partition got (each record acknowledged once: idempotent)."""
        self.halt()
        assert self.producer.flush(60) == 0 and not self.errors, self.errors[:5]
        return list(self.delivered)


@dataclass
class Ledger:
    """What every member consumed, and who owned which partition when, in the order it happened."""

    partitions: int
    owner: dict[int, int] = field(default_factory=dict)  # partition -> member index
    double_owned: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    failed_commits: list[str] = field(default_factory=list)
    consumed: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # partition -> [(member, offset)]
    acked: dict[int, int] = field(default_factory=dict)  # partition -> highest commit acknowledged
    changes: int = 0  # assignments and revocations so far
    history: list[str] = field(default_factory=list)
    start: float = field(default_factory=time.monotonic)

    def _note(self, text: str) -> None:
        self.history.append(f"{time.monotonic() - self.start:7.3f}s {text}")

    def assigned(self, member: int, partitions: list[int]) -> None:
        self.changes += bool(partitions)
        self._note(f"member {member} assigned {sorted(partitions)}")
        for p in partitions:
            holder = self.owner.get(p)
            if holder is not None and holder != member:
                self.double_owned.append(f"{time.monotonic() - self.start:.3f}s partition {p} assigned to member "
                                         f"{member} while member {holder} holds it")
            self.owner[p] = member

    def revoked(self, member: int, partitions: list[int], lost: bool) -> None:
        self.changes += bool(partitions)
        self._note(f"member {member} {'lost' if lost else 'revoked'} {sorted(partitions)}")
        if lost:
            self.lost.append(f"member {member} lost {sorted(partitions)}")
        for p in partitions:
            if self.owner.get(p) == member:
                del self.owner[p]

    def committed(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            self.acked[tp.partition] = max(self.acked.get(tp.partition, 0), tp.offset)

    def record(self, member: int, partition: int, offset: int) -> None:
        self.consumed.setdefault(partition, []).append((member, offset))

    def count(self) -> int:
        return sum(len(v) for v in self.consumed.values())

    def check(self, produced: list[int]) -> None:
        """Single ownership throughout, no member fenced, each record consumed exactly once in order."""
        context = "\n".join(self.history[-40:])
        assert not self.double_owned, f"{self.double_owned[:5]}\n{context}"
        assert not self.lost, f"{self.lost}\n{context}"
        assert not self.failed_commits, f"{self.failed_commits}\n{context}"
        for partition in range(self.partitions):
            offsets = [offset for _, offset in self.consumed.get(partition, [])]
            expected = list(range(produced[partition]))
            if offsets != expected:
                repeated = len(offsets) - len(set(offsets))
                missing = sorted(set(expected) - set(offsets))
                first = next((i for i, (a, b) in enumerate(zip(offsets, expected)) if a != b), None)
                around = self.consumed[partition][max(0, (first or 0) - 3):(first or 0) + 3]
                raise AssertionError(f"partition {partition}: {len(offsets)} consumed of {produced[partition]}, "
                                     f"{repeated} twice, {len(missing)} missing (first {missing[:3]}); first "
                                     f"difference at {first}: (member, offset) {around}\n{context}")


class Member:
    """One consumer instance; commits synchronously what it consumed of the partitions it gives up."""

    ids = itertools.count()

    def __init__(self, bootstrap: str, group: str, topic: str, ledger: Ledger, protocol: str,
                 extra: dict | None = None, commit_interval: float | None = None) -> None:
        self.index = next(Member.ids)
        self.protocol = protocol
        self.topic = topic
        self.ledger = ledger
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                "auto.offset.reset": "earliest", "enable.auto.commit": False,
                "topic.metadata.refresh.interval.ms": 1000, "client.id": f"member-{self.index}"}
        if protocol == "classic":
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                         "partition.assignment.strategy": "cooperative-sticky"})
        conf.update(extra or {})
        self.consumer = Consumer(conf)
        self.assigned: set[int] = set()
        self.positions: dict[int, int] = {}  # partition -> next offset, for what was consumed since assigned
        self.consumed = 0
        self.closed = False
        self.commit_interval = commit_interval
        self.next_commit = time.monotonic()
        self.failed_periodic_commits = 0
        self.last_commit = 0.0  # when a commit of this member was last acknowledged (monotonic)
        # revocations of part of what it held, and of all of it (an eager-style revocation) before closing
        self.partial_revocations = self.full_revocations = 0
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        got = [p.partition for p in partitions]
        self.ledger.assigned(self.index, got)
        self.assigned |= set(got)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = [p.partition for p in partitions]
        if gone and not self.closed:
            if set(gone) == self.assigned:
                self.full_revocations += 1
            else:
                self.partial_revocations += 1
        failure = self._commit([p for p in gone if p in self.positions])
        if failure:
            self.ledger.failed_commits.append(failure)
        self._drop(gone, lost=False)

    def _commit(self, partitions: list[int]) -> str | None:
        """Commit the positions of `partitions` synchronously; what failed, if anything."""
        offsets = [TopicPartition(self.topic, p, self.positions[p]) for p in partitions]
        if not offsets:
            return None
        try:
            result = self.consumer.commit(offsets=offsets, asynchronous=False) or []
        except KafkaException as exc:
            return f"member {self.index} {offsets}: {exc}"
        failed = [tp for tp in result if tp.error is not None]
        self.ledger.committed([tp for tp in result if tp.error is None])
        if not failed:
            self.last_commit = time.monotonic()
        return f"member {self.index} {failed}" if failed else None

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._drop([p.partition for p in partitions], lost=True)

    def _drop(self, gone: list[int], lost: bool) -> None:
        self.ledger.revoked(self.index, gone, lost)
        self.assigned -= set(gone)
        for p in gone:
            self.positions.pop(p, None)

    def poll(self) -> None:
        msg = self.consumer.poll(0.02)
        if msg is None or msg.error():
            return
        self.consumed += 1
        self.ledger.record(self.index, msg.partition(), msg.offset())
        self.positions[msg.partition()] = msg.offset() + 1
        if self.commit_interval is not None and time.monotonic() >= self.next_commit:
            self.next_commit = time.monotonic() + self.commit_interval
            if self._commit(sorted(self.positions)):  # a coordinator moving: the revoke callback's commit counts
                self.failed_periodic_commits += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()  # revokes (and so commits) what it holds, then leaves


def poll_until(members: list[Member], cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll every member in turn until `cond` holds (bounded)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, \
            f"timed out after {timeout}s waiting for {what}: {[(m.protocol, sorted(m.assigned)) for m in members]}"
        for m in members:
            if not m.closed:
                m.poll()


def shared(members: list[Member], partitions: int) -> bool:
    """Every live member holds a fair share, none twice, all partitions."""
    live = [m.assigned for m in members if not m.closed]
    share = partitions // len(live)
    return all(share <= len(s) <= share + 1 for s in live) and sum(map(len, live)) == partitions \
        and set().union(*live) == set(range(partitions))


def all_consumed(ledger: Ledger, produced: list[int]) -> Callable[[], bool]:
    def done() -> bool:
        return all(len(ledger.consumed.get(p, [])) >= n for p, n in enumerate(produced))
    return done


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                         timeout=30)]
    finally:
        consumer.close()
