"""Crash safety: an idempotent acks=all producer streams while the broker is killed with
SIGKILL (or stopped with SIGTERM) and restarted on the same port and data dir.
Every acknowledged record must be in the log exactly once, at its acknowledged
offset, and the log must hold the stream in order without duplicates."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer, TopicPartition

from .helpers import confluent_consume, confluent_consumer, create_topic, wait_for

pytestmark = [pytest.mark.timeout(240), pytest.mark.persistence, pytest.mark.single_node]

MAX_RECORDS = 200_000
MAX_OUTSTANDING = 2_000
ACKED_BEFORE_CRASH = 3_000


def value_of(seq: int) -> bytes:
    return b"crash-%08d" % seq


def seq_of(value: bytes) -> int:
    assert value.startswith(b"crash-"), value
    return int(value[6:])


class StreamingProducer(threading.Thread):
    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True)
        self.topic = topic
        self.p = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 2,
            "compression.type": "lz4",
            "message.timeout.ms": 90_000,
            "retry.backoff.ms": 50,
            "retry.backoff.max.ms": 500,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
        })
        self.lock = threading.Lock()
        self.acked: dict[int, int] = {}  # seq -> offset
        self.failed: dict[int, str] = {}
        self.sent = 0
        self.stop_sending = threading.Event()
        self.flush_left: int | None = None
        self.exc: BaseException | None = None

    def _cb(self, err, msg):
        seq = seq_of(msg.value())
        with self.lock:
            if err is None:
                self.acked[seq] = msg.offset()
            else:
                self.failed[seq] = str(err)

    def done(self) -> int:
        with self.lock:
            return len(self.acked) + len(self.failed)

    def run(self):
        try:
            while not self.stop_sending.is_set() and self.sent < MAX_RECORDS:
                if self.sent - self.done() >= MAX_OUTSTANDING:
                    self.p.poll(0.01)
                    continue
                try:
                    self.p.produce(self.topic, key=b"k%d" % (self.sent % 10), value=value_of(self.sent),
                                   partition=0, on_delivery=self._cb)
                except BufferError:
                    self.p.poll(0.05)
                    continue
                self.sent += 1
                self.p.poll(0)
            self.flush_left = self.p.flush(120)
        except BaseException as e:  # surfaced by the test
            self.exc = e


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_acknowledged_records_survive(fresh_broker, topic, how):
    b = fresh_broker
    create_topic(b.bootstrap, topic)
    prod = StreamingProducer(b.bootstrap, topic)
    prod.start()
    try:
        wait_for(lambda: len(prod.acked) >= ACKED_BEFORE_CRASH or prod.exc, timeout=90,
                 what=f"{ACKED_BEFORE_CRASH} acknowledged records")
        assert prod.exc is None, prod.exc
        assert prod.is_alive() and not prod.stop_sending.is_set(), "producer stopped before the crash"
        if how == "kill":
            b.kill()
        else:
            b.stop()
        with prod.lock:
            acked_at_crash = len(prod.acked)
        # keep producing into the outage for a moment, then stop creating new records
        time.sleep(0.2)
        prod.stop_sending.set()
        b.start()
    finally:
        prod.stop_sending.set()
        prod.join(150)
    assert not prod.is_alive(), "producer did not finish flushing"
    assert prod.exc is None, prod.exc

    c = confluent_consumer(b.bootstrap)
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        c.close()
    assert low == 0
    msgs = confluent_consume(b.bootstrap, topic, 0, 0, high, timeout=60)
    log = [(m.offset(), seq_of(m.value())) for m in msgs]
    assert [o for o, _ in log] == list(range(high)), "offsets are not dense"

    positions: dict[int, list[int]] = {}
    for off, seq in log:
        positions.setdefault(seq, []).append(off)
    lost = sorted(s for s in prod.acked if s not in positions)
    dup = sorted(s for s, offs in positions.items() if len(offs) > 1)
    moved = sorted(s for s, off in prod.acked.items() if positions.get(s, [off])[0] != off)
    assert not lost, f"{len(lost)} acknowledged records lost (of {len(prod.acked)}), first {lost[:10]}"
    assert not dup, f"{len(dup)} records duplicated, first {dup[:10]}"
    assert not moved, f"{len(moved)} acknowledged records not at their acked offset, first {moved[:10]}"
    seqs = [s for _, s in log]
    assert seqs == sorted(seqs), "the log is out of order"
    assert acked_at_crash >= ACKED_BEFORE_CRASH
    # With an idempotent producer every record should eventually be acknowledged.
    assert not prod.failed, f"{len(prod.failed)} records failed, e.g. {list(prod.failed.items())[:3]}"
    assert prod.flush_left == 0
    assert len(prod.acked) == prod.sent == high
