"""CPU per produce request inside the broker, without the network: decode, handle, encode.

    .venv/bin/python bench/profile_produce.py [--requests N] [--records-per-batch R] [--profile]

Feeds framed Produce v11 requests (one batch of R 100-byte records) through the
sans-io `ServerConnection` and `Broker.handle` of an in-process broker and
prints microseconds per request; `--profile` adds a cProfile table.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import struct
import tempfile
import time

from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_writer

from klamm.broker.broker import Broker
from klamm.config.broker import BrokerConfig
from klamm.controller.topics import CreateTopicSpec
from klamm.protocol.api import message_types
from klamm.protocol.build import build
from klamm.protocol.connection import ServerConnection
from klamm.protocol.records import build_batch


def produce_frame(records_per_batch: int) -> bytes:
    types = message_types(0, 11)
    out = io.BytesIO()
    entity_writer(RequestHeader)(out, RequestHeader(request_api_key=0, request_api_version=11, correlation_id=1,
                                                     client_id="bench"))
    batch = build_batch([(None, b"x" * 100)] * records_per_batch)
    entity_writer(types.request)(out, build(types.request, {
        "acks": 1, "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}))
    frame = out.getvalue()
    return struct.pack(">i", len(frame)) + frame


async def create_topic(broker: Broker, name: str) -> None:
    """Create `name` (one partition) as a CreateTopics request would, and wait until this broker hosts it."""
    spec = CreateTopicSpec(name, num_partitions=1, replication_factor=1)
    [result] = await broker.controller_client.create_topics([spec], validate_only=False)
    if result.error:
        raise RuntimeError(f"creating {name}: {result.error.name}")
    for _ in range(1000):
        if (name, 0) in broker.replicas.partitions:
            return
        await asyncio.sleep(0.01)
    raise RuntimeError(f"{name}-0 not hosted after 10 s")


async def run(requests: int, records_per_batch: int, profile: bool) -> None:
    with tempfile.TemporaryDirectory() as data:
        broker = Broker(BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": data}))
        await broker.start()
        try:
            await create_topic(broker, "t")
            connection = ServerConnection(1 << 27, broker.supported_versions())
            frame = produce_frame(records_per_batch)
            peer = type("Peer", (), {"peer": "bench"})()

            async def loop() -> float:
                started = time.perf_counter()
                for _ in range(requests):
                    connection.receive_data(frame)
                    request = connection.next_request()
                    connection.encode_response(request, await broker.handle(request, peer))
                return (time.perf_counter() - started) / requests * 1e6

            await loop()  # warm up
            print(f"{await loop():.1f} us per produce request ({records_per_batch} records of 100 B)")
            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                await loop()
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(20)
        finally:
            await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--records-per-batch", type=int, default=100)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args.requests, args.records_per_batch, args.profile))


if __name__ == "__main__":
    main()
