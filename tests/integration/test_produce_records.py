"""Produce over the wire: record-level errors (INVALID_TIMESTAMP with record_errors), and pipelined
requests whose batches are prepared in worker threads still appending in order."""

from __future__ import annotations

import time
from typing import Any

from klamm.broker.partition import OFFLOAD_MIN_BYTES
from klamm.protocol.records import NewRecord, build_batch, iter_records
from tests.integration.conftest import PRODUCE, BrokerThread, create_topic, fetch, produce

INVALID_TIMESTAMP = 32
YEAR_MS = 365 * 24 * 3600 * 1000


def test_future_timestamp_is_refused_with_record_errors(broker: BrokerThread) -> None:
    now = time.time_ns() // 1_000_000
    future = now + 10 * YEAR_MS
    batch = build_batch([NewRecord(b"a", b"1", timestamp=now), NewRecord(b"b", b"2", timestamp=future)],
                        timestamp_ms=now)
    with broker.connect() as c:
        create_topic(c, "ts")
        response = produce(c, "ts", batch)
        assert response.error_code == INVALID_TIMESTAMP
        assert response.error_message == "One or more records have been rejected due to invalid timestamp"
        [error] = response.record_errors
        assert error.batch_index == 1
        assert error.batch_index_error_message.startswith(f"Timestamp {future} of message with offset 1 is out of range.")
        assert produce(c, "ts", build_batch([(b"a", b"1")], timestamp_ms=now)).base_offset == 0


def _produce_body(topic: str, records: bytes) -> dict[str, Any]:
    return {"acks": -1, "timeout": 10_000, "transactional_id": None,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}


def test_pipelined_produces_to_a_compacted_topic_append_in_request_order(broker: BrokerThread) -> None:
    batches = []
    for i in range(8):
        count = OFFLOAD_MIN_BYTES // 100 + 1 if i % 2 == 0 else 1  # big (worker thread), small (inline)
        batches.append(build_batch([(f"r{i}-{j}".encode(), b"v" * 100) for j in range(count)]))
    with broker.connect() as c:
        create_topic(c, "pipe-compact", configs={"cleanup.policy": "compact"})
        frames = [c.encode(PRODUCE, 9, _produce_body("pipe-compact", b), 100 + i) for i, b in enumerate(batches)]
        for i in range(len(batches)):
            c._sent[100 + i] = (PRODUCE, 9)
        c.send_raw(b"".join(frames))
        offsets = []
        for i in range(len(batches)):
            correlation_id, response = c.receive()
            assert correlation_id == 100 + i
            [partition] = response.responses[0].partition_responses
            assert partition.error_code == 0
            offsets.append(partition.base_offset)
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        got, offset = [], 0
        while True:
            data = fetch(c, "pipe-compact", offset, max_bytes=1 << 22).records
            if not data:
                break
            records = list(iter_records(data))
            got.extend(r.key.decode().split("-")[0] for r in records)
            offset = records[-1].offset + 1
        assert [k for n, k in enumerate(got) if n == 0 or got[n - 1] != k] == [f"r{i}" for i in range(8)]
