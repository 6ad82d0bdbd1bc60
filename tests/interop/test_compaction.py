"""Log compaction seen by confluent-kafka: keyed records to a compacted topic with small
segments, the background cleaner, then exact surviving offsets and values."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from .helpers import confluent_consume, confluent_produce, create_topic, wait_for
from .records import Rec

pytestmark = [pytest.mark.timeout(180), pytest.mark.persistence]

CLEANER = {"log.cleaner.backoff.ms": "100"}
COMPACTED = {
    "cleanup.policy": "compact",
    "internal.segment.bytes": "1024",  # test-only: segment.bytes has a 1 MiB floor
    "min.cleanable.dirty.ratio": "0.01",
}


def produce_rounds(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """Overwrites (several codecs, a tombstone), then unique filler keys so that every
    overwrite ends up in an inactive (cleanable) segment. Returns (offset, key, value)."""
    rounds = [
        ("none", [Rec(f"k{i}".encode(), f"v0-{i}".encode() * 5, ()) for i in range(10)]),
        ("lz4", [Rec(f"k{i}".encode(), f"v1-{i}".encode() * 5, ()) for i in range(0, 10, 2)]),
        ("zstd", [Rec(b"k3", b"v2-3", ()), Rec(b"k9", None, ()), Rec(b"k0", b"v2-0", ())]),
        ("gzip", [Rec(b"k4", b"v3-4", ())]),
    ]
    rounds += [("none", [Rec(f"filler{n}".encode(), b"f" * 400, ())]) for n in range(6)]
    written = []
    for codec, recs in rounds:
        results = confluent_produce(bootstrap, topic, recs, codec=codec)
        assert not [e for _, _, e in results if e is not None]
        written += [(offset, rec.key, rec.value) for (_, offset, _), rec in zip(results, recs)]
    return written


def latest_per_key(written):
    latest = {}
    for offset, key, value in written:
        latest[key] = (offset, key, value)
    return sorted(latest.values())


def consume_all(bootstrap: str, topic: str, count: int, start: int = 0):
    msgs = confluent_consume(bootstrap, topic, 0, start, count, timeout=10)
    return [(m.offset(), m.key(), m.value()) for m in msgs]


def test_compaction_keeps_exactly_the_latest_record_per_key(broker_factory, topic):
    broker = broker_factory(overrides=CLEANER)
    create_topic(broker.bootstrap, topic, config=COMPACTED)
    written = produce_rounds(broker.bootstrap, topic)
    assert [o for o, _, _ in written] == list(range(len(written)))
    want = latest_per_key(written)
    assert len(want) == 10 + 6 and (16, b"k9", None) in want  # the tombstone is kept (delete.retention.ms)

    wait_for(lambda: consume_all(broker.bootstrap, topic, len(want)) == want, timeout=60,
             what="the cleaner to compact the topic")
    got = consume_all(broker.bootstrap, topic, len(want))
    assert got == want

    # A fetch at an offset the cleaner removed returns the next surviving record.
    removed = min(o for o, _, _ in written if (o, written[o][1], written[o][2]) not in want)
    after = [w for w in want if w[0] > removed]
    assert consume_all(broker.bootstrap, topic, len(after), start=removed) == after

    # The compacted log and the cleaner's checkpoint survive a restart.
    broker.restart()
    assert consume_all(broker.bootstrap, topic, len(want)) == want
    checkpoint = (broker.log_dir / "cleaner-offset-checkpoint").read_text().split("\n")
    assert any(line.startswith(f"{topic} 0 ") for line in checkpoint)
    assert "log cleaning failed" not in broker.log_text()


def test_compacted_topic_refuses_records_without_key(broker, topic):
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    results = confluent_produce(broker.bootstrap, topic, [Rec(None, b"no key", ())],
                                extra={"retries": 0, "message.send.max.retries": 0})
    [(_, _, error)] = results
    assert error is not None and error.code() == KafkaError.INVALID_RECORD
    ok = confluent_produce(broker.bootstrap, topic, [Rec(b"key", b"value", ())])
    assert ok[0][2] is None and ok[0][1] == 0
