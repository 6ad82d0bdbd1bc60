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
from collections.abc import Iterator

from follower_fetch_cost import frame, in_process_broker, timed  # bench/

from klamm.protocol.records import build_batch


def fetch_frame(partitions: int, session_id: int, epoch: int) -> bytes:
    entries = [{"partition": i, "current_leader_epoch": -1, "fetch_offset": 1, "last_fetched_epoch": 0,
                "log_start_offset": 0, "partition_max_bytes": 1 << 20} for i in range(partitions)]
    return frame(1, 12, {"replica_id": 2, "max_wait": 0, "min_bytes": 0, "max_bytes": 10 << 20,
                         "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                         "topics": [{"topic": "t", "partitions": entries}] if epoch <= 0 else [],
                         "forgotten_topics_data": [], "rack_id": ""})


async def run(partitions: int, fetches: int, sessionless: bool, profile: bool) -> None:
    async with in_process_broker(partitions) as exchange:
        for index in range(partitions):
            await exchange(frame(0, 11, {"acks": 1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
                {"index": index, "records": build_batch([(None, b"x" * 10)])}]}]}))
        if sessionless:
            full = fetch_frame(partitions, 0, -1)
            frames: Iterator[bytes] = iter(lambda: full, None)
        else:
            session_id = (await exchange(fetch_frame(partitions, 0, 0)))["session_id"]
            # made before the clock starts: one per exchange of the three loops of `timed`
            frames = iter([fetch_frame(partitions, session_id, epoch) for epoch in range(1, 3 * fetches + 1)])
        kind = "sessionless" if sessionless else "incremental"
        await timed(lambda: exchange(next(frames)), fetches, profile,
                    f"{kind} follower fetch of {partitions} caught-up partitions")


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
