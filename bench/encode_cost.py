"""What the protocol layer's own Python costs a request: the length check before kio decodes it, and the
response's encoding.

    .venv/bin/python bench/encode_cost.py [--calls 20000] [--rounds 5]

The messages are those of the latency rows (one record a millisecond): a Produce v10 request of one batch and
its response, a consumer's Fetch v16 request of one partition and its response (its records a file region),
and a follower's Fetch v12 request and response; and the follower's side, its Fetch v12 requests written with
`encode_request` (header included): the full fetch that opens its session (18 partitions: a topic and 17 of
__consumer_offsets) and an incremental one (the one partition that moved). Prints the best of `--rounds` in
microseconds per call.
Compare two trees by putting each one's `klamm` package first on PYTHONPATH in turn.
"""

from __future__ import annotations

import argparse
import io
import timeit
import uuid
from collections.abc import Callable
from typing import Any

from kio.serial import entity_writer

from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.encoder import encode
from klamm.protocol.envelope import encode_request
from klamm.protocol.guard import check_lengths
from klamm.protocol.sendplan import FileRegion

_REGION = FileRegion(file=None, position=100, length=170)  # type: ignore[arg-type]
_PARTITION = {"partition_index": 0, "error_code": 0, "high_watermark": 1000, "last_stable_offset": 1000,
              "log_start_offset": 0, "aborted_transactions": [], "preferred_read_replica": -1, "records": _REGION}
_FETCH_REQUEST = {"max_wait": 500, "min_bytes": 1, "max_bytes": 52428800, "session_id": 5, "session_epoch": 7,
                  "forgotten_topics_data": [], "rack_id": ""}
_FETCH_PARTITION = {"partition": 0, "current_leader_epoch": 0, "fetch_offset": 1000, "last_fetched_epoch": -1,
                    "log_start_offset": -1, "partition_max_bytes": 1048576}


def _request(key: int, version: int, data: dict[str, Any]) -> tuple[type, bytes]:
    cls = message_types(key, version).request
    out = io.BytesIO()
    entity_writer(cls)(out, build(cls, data))
    return cls, out.getvalue()


def cases() -> list[tuple[str, Callable[[], Any]]]:
    topic_id = uuid.uuid4()
    produce = _request(0, 10, {"acks": 1, "timeout": 1000, "topic_data": [
        {"name": "t1", "partition_data": [{"index": 0, "records": b"x" * 170}]}]})
    consumer = _request(1, 16, {**_FETCH_REQUEST, "replica_id": -1, "isolation_level": 1, "topics": [
        {"topic_id": topic_id, "partitions": [_FETCH_PARTITION]}]})
    follower = _request(1, 12, {**_FETCH_REQUEST, "replica_id": 2, "topics": [
        {"topic": "t1", "partitions": [{**_FETCH_PARTITION, "last_fetched_epoch": 0}]}]})
    produced = {"responses": [{"name": "t1", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 999, "log_append_time_ms": -1, "log_start_offset": 0,
         "record_errors": [], "error_message": None}]}], "throttle_time_ms": 0}
    fetched = {"throttle_time_ms": 0, "error_code": 0, "session_id": 5,
               "responses": [{"topic_id": topic_id, "partitions": [_PARTITION]}]}
    follower_fetch = {**_FETCH_REQUEST, "replica_id": 2, "session_id": 0, "session_epoch": 0, "topics": [
        {"topic": "__consumer_offsets", "partitions": [{**_FETCH_PARTITION, "partition": i, "last_fetched_epoch": 0}
                                                       for i in range(17)]},
        {"topic": "t1", "partitions": [{**_FETCH_PARTITION, "last_fetched_epoch": 0}]}]}
    follower_moved = {**follower_fetch, "session_id": 5, "session_epoch": 7, "topics": follower_fetch["topics"][1:]}
    replicated = {"throttle_time_ms": 0, "error_code": 0, "session_id": 5,
                  "responses": [{"topic": "t1", "partitions": [_PARTITION]}]}
    return [
        ("check Produce v10 request", lambda: check_lengths(produce[0], produce[1], 0)),
        ("check Fetch v16 request (consumer)", lambda: check_lengths(consumer[0], consumer[1], 0)),
        ("check Fetch v12 request (follower)", lambda: check_lengths(follower[0], follower[1], 0)),
        ("encode Produce v10 response", lambda: encode(message_types(0, 10).response, produced)),
        ("encode Fetch v16 response (consumer)", lambda: encode(message_types(1, 16).response, fetched)),
        ("encode Fetch v12 response (follower)", lambda: encode(message_types(1, 12).response, replicated)),
        ("write a follower's Fetch v12 request, 18 partitions",
         lambda: encode_request(1, 12, follower_fetch, "klamm-replica-fetcher-2", 7)),
        ("write a follower's Fetch v12 request, 1 partition (incremental)",
         lambda: encode_request(1, 12, follower_moved, "klamm-replica-fetcher-2", 7)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for name, call in cases():
        best = min(timeit.repeat(call, number=args.calls, repeat=args.rounds)) / args.calls
        print(f"{best * 1e6:7.2f} µs  {name}")


if __name__ == "__main__":
    main()
