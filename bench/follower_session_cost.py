"""What a follower's fetch of many caught-up partitions costs the leader's event loop, without the network.

    .venv/bin/python bench/follower_session_cost.py [--partitions 18] [--fetches 1500] [--sessionless] [--profile]

An in-process broker (one node) holds a topic of `--partitions` partitions, one small batch in each. A
follower's Fetch v12 (replica id 2, min_bytes 0) at the log end of every partition, with its last fetched epoch,
goes through the sans-io `ServerConnection` and `Broker.handle`, and the response is encoded. By default the
follower opens an incremental fetch session with one full fetch and then sends empty incremental ones, as
klamm's replica fetcher does when nothing moved (a follower of the 17 partitions of `__consumer_offsets` a
leader of three has, and of one busy topic); `--sessionless` sends the full fetch every time. Prints
microseconds per fetch; `--profile` adds a cProfile table.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from follower_fetch_cost import frame  # bench/: the framing of a request

from klamm.broker.broker import Broker
from klamm.config.broker import BrokerConfig
from klamm.protocol.connection import ServerConnection
from klamm.protocol.records import build_batch
from klamm.protocol.sendplan import release_regions


def fetch_frame(partitions: int, session_id: int, epoch: int) -> bytes:
    entries = [{"partition": i, "current_leader_epoch": -1, "fetch_offset": 1, "last_fetched_epoch": 0,
                "log_start_offset": 0, "partition_max_bytes": 1 << 20} for i in range(partitions)]
    return frame(1, 12, {"replica_id": 2, "max_wait": 0, "min_bytes": 0, "max_bytes": 10 << 20,
                         "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                         "topics": [{"topic": "t", "partitions": entries}] if epoch <= 0 else [],
                         "forgotten_topics_data": [], "rack_id": ""})


async def run(partitions: int, fetches: int, sessionless: bool, profile: bool) -> None:
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
            for index in range(partitions):
                await exchange(frame(0, 11, {"acks": 1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
                    {"index": index, "records": build_batch([(None, b"x" * 10)])}]}]}))
            if sessionless:
                full = fetch_frame(partitions, 0, -1)
                frames: Iterator[bytes] = iter(lambda: full, None)
            else:
                session_id = (await exchange(fetch_frame(partitions, 0, 0)))["session_id"]
                # made before the clock starts: one per exchange of the three loops below
                frames = iter([fetch_frame(partitions, session_id, epoch) for epoch in range(1, 3 * fetches + 1)])

            async def loop() -> float:
                started = time.perf_counter()
                for _ in range(fetches):
                    await exchange(next(frames))
                return (time.perf_counter() - started) / fetches * 1e6

            await loop()  # warm up
            kind = "sessionless" if sessionless else "incremental"
            print(f"{await loop():.1f} us per {kind} follower fetch of {partitions} caught-up partitions")
            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                await loop()
                profiler.disable()
                pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
        finally:
            await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=18)
    parser.add_argument("--fetches", type=int, default=1500)
    parser.add_argument("--sessionless", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args.partitions, args.fetches, args.sessionless, args.profile))


if __name__ == "__main__":
    main()
