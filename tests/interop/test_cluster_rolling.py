"""A rolling restart of three `klamm serve` processes under an exactly-once consume-transform-produce job.

Node by node (brokers first, the controller node last), each process gets
SIGTERM (a controlled shutdown: its leaderships, coordinators included, move
away before it exits), starts again and catches up until every partition has
its full ISR. Meanwhile an idempotent producer (librdkafka) feeds `input`, and
two instances of a transactional job in one consumer group (the Java client,
as a Kafka Streams task runs) read it read_committed, write each record
transformed to `output` and commit their consumed offsets in the same
transaction (KIP-447's group metadata). An aborted transaction rewinds the job
to its committed offsets, as such jobs do; every seventh transaction fails on
purpose before its commit, so aborts and rewinds happen while the coordinators
and leaders move.

(librdkafka's send_offsets_to_transaction can hang for good when the group
coordinator's broker leaves the cluster's metadata, as a stopped broker does:
librdkafka issues #5511 and #5456; hence the Java client for the job.)

Afterwards `output`, read read_committed, holds every acknowledged input exactly
once: nothing lost, nothing doubled, across coordinator and leader moves.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.conftest import BrokerProcess

from .helpers import SequenceStream, wait_for
from .test_cluster_processes import nodes  # noqa: F401  (a fixture)
from .test_transactions_java import txn_java  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.timeout(300), pytest.mark.java]

PARTITIONS = 3
GROUP = "etl"
ABORT_EVERY = 7  # the job's transactions that fail on purpose: one in seven


class TransformJob:
    """One instance of the exactly-once job (TxnClient.java `job`), its progress read from its output lines."""

    def __init__(self, command: list[str], stop_file: Path, abort_every: int = 0) -> None:
        self.stop_file = stop_file
        env = {**os.environ, "TXN_JOB_ABORT_EVERY": str(abort_every)}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.progress: dict[str, Any] = {"committed": 0, "aborts": 0, "restarts": 0}
        self.stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=lambda: self.stderr.extend(self.process.stderr or ()), daemon=True).start()

    @property
    def committed(self) -> int:
        return int(self.progress["committed"])

    def _read(self) -> None:
        for line in self.process.stdout or ():
            if line.startswith("{"):
                self.progress = json.loads(line)

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def failure(self) -> str | None:
        """Why the job died, if it did."""
        if self.process.poll() in (None, 0):
            return None
        return f"job exited {self.process.returncode}: {self.progress} {''.join(self.stderr)[-2000:]}"


def progress(jobs: list[TransformJob]) -> str:
    return ", ".join(f"job {i}: {j.progress}" for i, j in enumerate(jobs, 1))


def fully_replicated(bootstrap: str) -> bool:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return all(not p.error and p.leader >= 0 and sorted(p.isrs) == sorted(p.replicas)
               for t in metadata.topics.values() for p in t.partitions.values())


def committed_offsets(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        offsets = consumer.committed([TopicPartition("input", p) for p in range(PARTITIONS)], 10)
    finally:
        consumer.close()
    return sum(max(tp.offset, 0) for tp in offsets)


def read_topic(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record of `topic` as a consumer in `isolation` reads it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "isolation.level": isolation,
                         "enable.auto.commit": False})
    values: list[tuple[int, int, bytes]] = []
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)[1]
                for p in range(PARTITIONS)]
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        done = {p for p in range(PARTITIONS) if ends[p] == 0}
        deadline = time.monotonic() + 60
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
                done |= {tp.partition for tp in positions if tp.offset >= ends[tp.partition]}
                continue
            if message.error():
                continue
            values.append((message.partition(), message.offset(), message.value()))
            if message.offset() + 1 >= ends[message.partition()]:
                done.add(message.partition())
    finally:
        consumer.close()
    assert len(done) == PARTITIONS, f"{topic} not read to its end"
    return values


def doubled(bootstrap: str, output: list[tuple[int, int, bytes]]) -> str:
    """Where each input number written twice to output is, in output and in input (read uncommitted)."""
    where: dict[int, list[tuple[int, int]]] = {}
    for partition, offset, value in output:
        where.setdefault(int(value.removesuffix(b"-out")), []).append((partition, offset))
    twice = {n: places for n, places in where.items() if len(places) > 1}
    in_input: dict[int, list[tuple[int, int]]] = {}
    for partition, offset, value in read_topic(bootstrap, "input", "read_uncommitted"):
        if int(value) in twice:
            in_input.setdefault(int(value), []).append((partition, offset))
    return "; ".join(f"{n}: output (partition, offset) {places}, input {in_input.get(n)}"
                     for n, places in sorted(twice.items())[:10])


def test_rolling_restart_under_an_exactly_once_job(nodes: list[BrokerProcess], txn_java: Any,  # noqa: F811
                                                  tmp_path: Path) -> None:
    bootstrap = ",".join(n.bootstrap for n in nodes)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                                   for name in ("input", "output")], request_timeout=30)
    for future in futures.values():
        future.result(30)
    wait_for(lambda: fully_replicated(bootstrap), timeout=30, what="input and output fully replicated")

    stop_file = tmp_path / "stop-jobs"
    jobs = [TransformJob(txn_java.command("job", bootstrap, f"etl-{i}", "input", "output", GROUP, stop_file),
                         stop_file, ABORT_EVERY) for i in (1, 2)]
    try:
        with SequenceStream(bootstrap, "input", partition=None) as feeder:
            wait_for(lambda: sum(j.committed for j in jobs) > 500, timeout=60, what="the job under way")
            for node in (nodes[1], nodes[2], nodes[0]):  # the controller node last
                assert node.stop() == 0
                count = sum(j.committed for j in jobs)
                wait_for(lambda: sum(j.committed for j in jobs) > count + 100, timeout=60,
                         what=f"the job going on without node {nodes.index(node) + 1} ({progress(jobs)})")
                node.start()
                wait_for(lambda: fully_replicated(bootstrap), timeout=60,
                         what=f"every partition's ISR full after restarting node {nodes.index(node) + 1}")
                assert not [j.failure() for j in jobs if j.failure()], [j.failure() for j in jobs]
        assert not feeder.failed, feeder.failed[:3]
        acked = set(feeder.acked)
        wait_for(lambda: committed_offsets(bootstrap) >= len(acked), timeout=60,
                 what=f"the job through all {len(acked)} records of input ({progress(jobs)})")
    finally:
        for job in jobs:
            job.stop()
    assert not [j.failure() for j in jobs if j.failure()], [j.failure() for j in jobs]
    assert all(j.progress["aborts"] > 0 for j in jobs), progress(jobs)

    output = read_topic(bootstrap, "output")
    seen = [int(v.removesuffix(b"-out")) for _, _, v in output]
    assert len(seen) == len(set(seen)), \
        f"a record was written twice: {doubled(bootstrap, output)} ({progress(jobs)})"
    assert set(seen) == acked, "output is input, exactly once"
