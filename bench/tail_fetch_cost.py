"""What a tailing consumer's fetch of the newest batch costs the event loop, without the network.

    .venv/bin/python bench/tail_fetch_cost.py [--batches 1000] [--fetches 3000] [--read-committed] [--profile]

An in-process broker (one node) holds a topic of one partition with `--batches` batches of one 100-byte record
each, as the latency rows' producer sends them (one a millisecond, linger 0). A consumer's Fetch v12 of the
newest batch (replica id -1, max wait 0) goes through the sans-io `ServerConnection` and `Broker.handle`, and the
response is encoded (its records are a file region: sendfile sends them, and that kernel time is not counted
here). librdkafka fetches read_committed by default, which also reads the aborted transactions' range:
`--read-committed`. `--parked`: the fetch names the log end with a max wait of 30 s, so it parks, and a produce of
one batch wakes it (what a consumer at the log end costs, a produce included). Prints microseconds per fetch;
`--profile` adds a cProfile table.
"""

from __future__ import annotations

import argparse
import asyncio

from follower_fetch_cost import frame, in_process_broker, timed  # bench/

from klamm.protocol.records import build_batch


def fetch_frame(offset: int, read_committed: bool, max_wait_ms: int) -> bytes:
    return frame(1, 12, {"replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 50 << 20,
                         "isolation_level": int(read_committed), "session_id": 0, "session_epoch": -1,
                         "topics": [{"topic": "t", "partitions": [{
                             "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                             "last_fetched_epoch": -1, "log_start_offset": -1,
                             "partition_max_bytes": 1 << 20}]}],
                         "forgotten_topics_data": [], "rack_id": ""})


async def run(batches: int, fetches: int, read_committed: bool, parked: bool, profile: bool) -> None:
    async with in_process_broker(1) as exchange:
        produce = frame(0, 11, {"acks": 1, "timeout": 1000, "topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": build_batch([(None, b"x" * 100)])}]}]})
        for _ in range(batches):
            await exchange(produce)
        isolation = "read_committed" if read_committed else "read_uncommitted"
        if not parked:
            fetch = fetch_frame(batches - 1, read_committed, 0)
            await timed(lambda: exchange(fetch), fetches, profile,
                        f"{isolation} fetch of the newest of {batches} batches")
            return
        # one frame per step: each fetch names the log end the step before left (warm-up, timed, profiled)
        frames = iter([fetch_frame(batches + n, read_committed, 30_000) for n in range(3 * fetches)])

        async def parked_fetch() -> None:
            fetching = asyncio.ensure_future(exchange(next(frames)))
            await asyncio.sleep(0)
            assert not fetching.done(), "the fetch was answered without waiting"
            await exchange(produce)
            await fetching

        await timed(parked_fetch, fetches, profile, f"{isolation} fetch parked at the log end and the produce "
                                                    "that wakes it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=1000)
    parser.add_argument("--fetches", type=int, default=3000)
    parser.add_argument("--read-committed", action="store_true")
    parser.add_argument("--parked", action="store_true")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(run(args.batches, args.fetches, args.read_committed, args.parked, args.profile))


if __name__ == "__main__":
    main()
