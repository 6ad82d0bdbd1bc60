"""Group members under load that prove, from their own callbacks, exactly-once consumption and single ownership.

Every member is a confluent-kafka consumer polled from one thread (the test's),
so its assign and revoke callbacks (which librdkafka runs only inside poll and
close) land in the shared Ledger in the order they happened. A member commits
synchronously, in its revoke callback, the position of every partition it
gives up (with `commit_interval`, also every so often, asynchronously, to have commits acknowledged
at any time). So, with no member fenced:
- no partition is assigned to a member while another one holds it;
- a member taking a partition over starts exactly where the last owner stopped:
  per partition, the consumed offsets over time are 0, 1, 2, ... without a gap
  or a repeat, up to the end.
"""

from __future__ import annotations

import itertools
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition

from .helpers import admin


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


def start_at_zero(bootstrap: str, group: str, topic: str, partitions: int) -> None:
    """Commit offset 0 of every partition for `group` (still without members), so that its members start from a
    committed offset rather than by auto.offset.reset. librdkafka 2.16 resolves a reset with ListOffsets; a
    rebalance pausing the partition meanwhile makes that answer outdated, and an outdated answer arms a retry
    timer (rd_kafka_toppar_handle_Offset) that nothing disarms when the newer answer starts the fetch: it fires
    later, asks for the earliest offset again and moves the fetch position back to it, so the member consumes
    the records since then a second time (seen with a ListOffsets answered in 0.4 s on a loaded machine)."""
    client = admin(bootstrap)
    offsets = [TopicPartition(topic, p, 0) for p in range(partitions)]
    for future in client.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, offsets)],
                                                      request_timeout=15).values():
        future.result(30)


# A revoke callback's commit refused because the group's generation moved on under the member (stale_generation_ok
# below): ILLEGAL_GENERATION, or REBALANCE_IN_PROGRESS when the member already joined the next generation and the
# classic group waits for its leader's assignment (CompletingRebalance; Kafka's ClassicGroup.validateOffsetCommit
# refuses a commit then, as klamm's does). The Java client's names for them.
GENERATION_MOVED = ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")
GENERATION_MOVED_JAVA = ("CommitFailed", "RebalanceInProgress")


@dataclass
class Ledger:
    """What every member consumed, and who owned which partition when, each stamped with the wall clock when it
    happened (a member in another process reports its events late: the checks sort by time)."""

    partitions: int
    # (wall time, arrival, member, partitions, assigned?) of every assignment and revocation
    changes_seen: list[tuple[float, int, int, tuple[int, ...], bool]] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    failed_commits: list[str] = field(default_factory=list)
    # With stale_generation_ok, a revoke callback's commit refused as GENERATION_MOVED says, or partitions lost
    # (the group changed generation under the member, as a downgrade does in Kafka to a classic member that has
    # not caught up with the consumer group's epoch) is no failure: the partition goes over uncommitted, and what
    # was consumed before that position may be consumed again (at-least-once).
    stale_generation_ok: bool = False
    uncommitted: dict[int, int] = field(default_factory=dict)  # partition -> position whose commit was refused
    # partition -> [(wall time, arrival, member, offset)]
    consumed: dict[int, list[tuple[float, int, int, int]]] = field(default_factory=dict)
    acked: dict[int, int] = field(default_factory=dict)  # partition -> highest commit acknowledged
    changes: int = 0  # assignments and revocations so far
    history: list[str] = field(default_factory=list)
    start: float = field(default_factory=time.time)
    _arrivals: itertools.count = field(default_factory=itertools.count)

    def _note(self, t: float, text: str) -> None:
        self.history.append(f"{t - self.start:7.3f}s {text}")

    def note(self, text: str) -> None:
        self._note(time.time(), text)

    def assigned(self, member: int, partitions: list[int], t: float | None = None) -> None:
        t = time.time() if t is None else t
        self.changes += bool(partitions)
        self._note(t, f"member {member} assigned {sorted(partitions)}")
        self.changes_seen.append((t, next(self._arrivals), member, tuple(partitions), True))

    def revoked(self, member: int, partitions: list[int], lost: bool, t: float | None = None) -> None:
        t = time.time() if t is None else t
        self.changes += bool(partitions)
        self._note(t, f"member {member} {'lost' if lost else 'revoked'} {sorted(partitions)}")
        if lost and not self.stale_generation_ok:
            self.lost.append(f"member {member} lost {sorted(partitions)}")
        self.changes_seen.append((t, next(self._arrivals), member, tuple(partitions), False))

    def owners(self) -> tuple[dict[int, int], list[str]]:
        """Who holds each partition after all that happened, and every assignment of a partition held by
        another member at that time."""
        owner: dict[int, int] = {}
        double: list[str] = []
        for t, _, member, partitions, assigned in sorted(self.changes_seen):
            for p in partitions:
                holder = owner.get(p)
                if assigned:
                    if holder is not None and holder != member:
                        double.append(f"{t - self.start:.3f}s partition {p} assigned to member {member} while "
                                      f"member {holder} holds it")
                    owner[p] = member
                elif holder == member:
                    del owner[p]
        return owner, double

    def committed(self, offsets: list[TopicPartition]) -> None:
        for tp in offsets:
            self.acked[tp.partition] = max(self.acked.get(tp.partition, 0), tp.offset)

    def record(self, member: int, partition: int, offset: int, t: float | None = None) -> None:
        t = time.time() if t is None else t
        self.consumed.setdefault(partition, []).append((t, next(self._arrivals), member, offset))

    def count(self) -> int:
        return sum(len(v) for v in self.consumed.values())

    def check(self, produced: list[int]) -> None:
        """Single ownership throughout, no member fenced, each record consumed exactly once in order."""
        context = "\n".join(self.history[-40:])
        _, double = self.owners()
        assert not double, f"{double[:5]}\n{context}"
        assert not self.lost, f"{self.lost}\n{context}"
        assert not self.failed_commits, f"{self.failed_commits}\n{context}"
        for partition in range(self.partitions):
            events = sorted(self.consumed.get(partition, []))
            offsets = [offset for _, _, _, offset in events]
            expected = list(range(produced[partition]))
            if partition in self.uncommitted:  # redelivered only below the refused commit, nothing skipped
                high = -1
                for _, _, member, offset in events:
                    assert offset <= high + 1, f"partition {partition}: a gap before {offset} (member {member})"
                    assert offset > high or offset < self.uncommitted[partition], \
                        f"partition {partition}: offset {offset} consumed again, above the refused commit"
                    high = max(high, offset)
                offsets = sorted(set(offsets))
            if offsets != expected:
                repeated = len(offsets) - len(set(offsets))
                missing = sorted(set(expected) - set(offsets))
                first = next((i for i, (a, b) in enumerate(zip(offsets, expected)) if a != b), None)
                around = [(m, o) for _, _, m, o in events[max(0, (first or 0) - 3):(first or 0) + 3]]
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
        if commit_interval is not None:
            conf["on_commit"] = self._on_commit
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
        committing = {p: self.positions[p] for p in gone if p in self.positions}
        failure = self._commit(sorted(committing))
        if failure and self.ledger.stale_generation_ok and any(e in failure for e in GENERATION_MOVED):
            self.ledger.note(f"member {self.index}: {failure}")
            self._uncommitted(committing)
        elif failure and self.closed and self.committed_already(committing):
            # closing after another member left: its generation is behind the group's (as in Kafka), and what
            # it commits is committed already, so nothing is lost or consumed again
            self.ledger.note(f"member {self.index} closing: {failure}")
        elif failure:
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

    def _on_commit(self, err, offsets: list[TopicPartition]) -> None:
        """The answer to a commit (run inside poll): the periodic ones are asynchronous; librdkafka reports
        the synchronous ones here too, which changes nothing (`acked` keeps the highest)."""
        failed = err is not None or any(tp.error is not None for tp in offsets)
        if err is None:
            self.ledger.committed([tp for tp in offsets if tp.error is None and tp.offset >= 0])
        if failed:
            self.failed_periodic_commits += 1
        else:
            self.last_commit = time.monotonic()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        gone = [p.partition for p in partitions]
        held = {p: self.positions[p] for p in gone if p in self.positions}
        if self.ledger.stale_generation_ok:
            self._uncommitted(held)
        if self.closed and self.committed_already(held):  # closing: nothing uncommitted goes with them
            self.ledger.note(f"member {self.index} closing: lost {sorted(gone)}, committed already")
            self._drop(gone, lost=False)
        else:
            self._drop(gone, lost=True)

    def committed_already(self, positions: dict[int, int] | None = None) -> bool:
        """Whether a commit of these positions (default: all the member's) was acknowledged already."""
        positions = self.positions if positions is None else positions
        return all(self.ledger.acked.get(p, -1) >= offset for p, offset in positions.items())

    def commit_held(self) -> None:
        """Commit every position synchronously; a refusal is a failure (the member is in a settled group)."""
        failure = self._commit(sorted(self.positions))
        if failure:
            self.ledger.failed_commits.append(failure)

    def commit_async(self) -> None:
        """Commit every position, answered in a later poll (_on_commit)."""
        offsets = [TopicPartition(self.topic, p, o) for p, o in sorted(self.positions.items())]
        if offsets:
            self.consumer.commit(offsets=offsets, asynchronous=True)

    def _uncommitted(self, positions: dict[int, int]) -> None:
        for p, position in positions.items():
            self.ledger.uncommitted[p] = max(self.ledger.uncommitted.get(p, 0), position)

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
            # Asynchronous (answered in _on_commit): librdkafka holds a classic member's commit behind its own
            # JoinGroup, which waits for the other members to rejoin, and those need this thread to poll them
            # (their revoke callbacks): a synchronous commit there blocked every member for 60 s at a time.
            self.commit_async()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            # Revoke (and so commit) in poll, before close: librdkafka 2.16 running a member's revoke callback
            # inside close() can wait forever for its own group thread (rd_kafka_rebalance_protocol, asked of a
            # group already terminating; the brokers idle), where pytest's timeout cannot stop it. Seen with a
            # consumer-protocol member, then with a classic one of a mixed group closing in a CI run.
            self.consumer.unsubscribe()
            deadline = time.monotonic() + 10
            while self.assigned and time.monotonic() < deadline:
                self.consumer.poll(0.02)
            self.consumer.close()  # leaves (revoking, and so committing, whatever unsubscribe left it)


class JavaMember:
    """A member on the Java client (java/CoopMember.java) in a process of its own: its events, stamped there,
    reach the ledger when the test polls it; it closes (revoking, so committing) on "close" on stdin."""

    def __init__(self, classpath: str, bootstrap: str, group: str, topic: str, ledger: Ledger,
                 protocol: str, extra: tuple[str, ...] = ()) -> None:
        self.index = next(Member.ids)
        self.protocol = protocol
        self.ledger = ledger
        self.assigned: set[int] = set()
        self.consumed = 0
        self.closed = False
        self.partial_revocations = self.full_revocations = 0
        self._closing = False
        self._positions: dict[int, int] = {}
        self._lines: queue.Queue[str] = queue.Queue()
        self.proc = subprocess.Popen(
            ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx128m", "-cp", classpath, "CoopMember",
             bootstrap, topic, group, protocol, f"member-{self.index}", *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self._lines.put(line)

    def poll(self) -> None:
        try:
            line = self._lines.get(timeout=0.02)
        except queue.Empty:
            return
        self._apply(json.loads(line))
        while True:
            try:
                self._apply(json.loads(self._lines.get_nowait()))
            except queue.Empty:
                return

    def _apply(self, event: dict) -> None:
        t = event["t"] / 1e6
        if event["ev"] == "rec":
            self.consumed += 1
            self._positions[event["p"]] = event["o"] + 1
            self.ledger.record(self.index, event["p"], event["o"], t)
        elif event["ev"] == "assigned":
            self.ledger.assigned(self.index, event["p"], t)
            self.assigned |= set(event["p"])
        elif event["ev"] in ("revoked", "lost"):
            gone = set(event["p"])
            if event["ev"] == "revoked" and gone and not self._closing:
                if gone == self.assigned:
                    self.full_revocations += 1
                else:
                    self.partial_revocations += 1
            failed = event.get("commit", "ok") != "ok"
            # a generation moved on
            stale = event["ev"] == "lost" or any(e in event.get("commit", "") for e in GENERATION_MOVED_JAVA)
            if (failed or event["ev"] == "lost") and stale and self.ledger.stale_generation_ok:
                for p in gone & self._positions.keys():
                    self.ledger.uncommitted[p] = max(self.ledger.uncommitted.get(p, 0), self._positions[p])
            elif failed:
                self.ledger.failed_commits.append(f"member {self.index}: {event['commit']}")
            self.ledger.revoked(self.index, sorted(gone), event["ev"] == "lost", t)
            self.assigned -= gone
            for p in gone:
                self._positions.pop(p, None)

    def close(self) -> None:
        if self.closed:
            return
        self._closing = True
        try:
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # exited already
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.closed = True
        self._reader.join(10)  # it has queued the last lines: the pipe is at its end
        while not self._lines.empty():
            self._apply(json.loads(self._lines.get_nowait()))
        assert self.proc.returncode == 0, f"Java member exited with {self.proc.returncode}: {self.stderr[-20:]}"


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
    """Every offset below `produced` consumed (at least once)."""
    def done() -> bool:
        return all(len({e[3] for e in ledger.consumed.get(p, [])}) >= n for p, n in enumerate(produced))
    return done


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                                         timeout=30)]
    finally:
        consumer.close()
