"""What one follower fetch of a 1 MB batch costs the leader's event loop, without the network.

    .venv/bin/python bench/follower_fetch_cost.py [--fetches N] [--profile]

An in-process broker (one node) holds a topic with three 1 MB batches (1,000 records of
1 KB, the batches librdkafka sends at batch.size=1000000); Fetch v12 requests with a
replica id, as a follower's replica fetcher sends them, go through the sans-io
`ServerConnection` and `Broker.handle` and the response is encoded (its records are a
file region: sendfile sends them, and that kernel time is not counted here). Prints
microseconds per fetch; `--profile` adds a cProfile table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import pstats
import struct
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from klamm.broker.broker import Broker
from klamm.config.broker import BrokerConfig
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.connection import ServerConnection
from klamm.protocol.records import build_batch
from klamm.protocol.sendplan import release_regions


def frame(api_key: int, version: int, body: dict[str, Any]) -> bytes:
    types = message_types(api_key, version)
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=api_key, request_api_version=version,
                                                     correlation_id=1, client_id="bench"))
    entity_writer(types.request)(out, build(types.request, body))
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


@contextlib.asynccontextmanager
async def in_process_broker(partitions: int) -> AsyncIterator[Callable[[bytes], Awaitable[Any]]]:
    """A one-node broker holding topic "t" of `partitions` partitions, and its `exchange`: one framed request
    through `ServerConnection` and `Broker.handle`, the response encoded; the handler's answer returned."""
    with tempfile.TemporaryDirectory() as data:
        broker = Broker(BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data}))
        await broker.start()
        try:
            connection = ServerConnection(1 << 27, broker.supported_versions())
            peer = type("Peer", (), {"peer": "bench"})()

            async def exchange(request_frame: bytes) -> Any:
                connection.receive_data(request_frame)
                request = connection.next_request()
                response = await broker.handle(request, peer)
                release_regions(connection.encode_response(request, response))
                return response

            await exchange(frame(19, 5, {"topics": [{"name": "t", "num_partitions": partitions,
                                                      "replication_factor": 1, "assignments": [], "configs": []}],
                                         "timeout_ms": 5000, "validate_only": False}))
            yield exchange
        finally:
            await broker.stop()


async def run(fetches: int, profile: bool) -> None:
    async with in_process_broker(1) as exchange:
        produce = frame(0, 11, {"acks": 1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": build_batch([(None, b"x" * 1000)] * 1000)}]}]})
        for _ in range(3):
            await exchange(produce)
        fetch = frame(1, 12, {"replica_id": 2, "max_wait": 0, "min_bytes": 1, "max_bytes": 10 << 20,
                              "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                              "topics": [{"topic": "t", "partitions": [{
                                  "partition": 0, "current_leader_epoch": -1, "fetch_offset": 1000,
                                  "last_fetched_epoch": -1, "log_start_offset": 0,
                                  "partition_max_bytes": 1 << 20}]}],
                              "forgotten_topics_data": [], "rack_id": ""})
        await timed(lambda: exchange(fetch), fetches, profile, "follower fetch of a 1 MB batch")


async def timed(step: Callable[[], Awaitable[Any]], count: int, profile: bool, what: str) -> None:
    """`step` `count` times to warm up, then `count` times timed (printed as microseconds per `what`), and
    with `profile` `count` times more under cProfile."""
    async def loop() -> float:
        started = time.perf_counter()
        for _ in range(count):
            await step()
        return (time.perf_counter() - started) / count * 1e6

    await loop()
    print(f"{await loop():.1f} us per {what}")
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        await loop()
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fetches", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args.fetches, args.profile))


if __name__ == "__main__":
    main()
