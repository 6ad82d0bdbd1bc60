"""What an acks=all produce's wait for the ISR costs the leader, without the network.

    .venv/bin/python bench/acks_all_wait_cost.py [--waits N] [--rounds R]

A replicated Partition (this node and one follower in the ISR) takes a one-record batch, a produce's
`wait_for_replication` starts, the follower's fetch of the new end moves the high watermark, and the wait
returns: process CPU microseconds per round, append and fetch included, best of R. Compare two trees by
putting each one's `klamm` package first on PYTHONPATH in turn.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from pathlib import Path

from klamm.broker.partition import Partition
from klamm.config.broker import BrokerConfig
from klamm.config.topic import TopicConfig
from klamm.protocol.records import build_batch
from klamm.storage.log import Log, LogConfig


async def rounds(partition: Partition, waits: int) -> float:
    batch = build_batch([(None, b"x" * 100)])
    started = time.process_time()
    for _ in range(waits):
        end = partition.append(batch).last_offset + 1
        waiting = asyncio.ensure_future(partition.wait_for_replication(end, 30.0))
        await asyncio.sleep(0)  # the produce waits; the follower's fetch comes in a later turn of the loop
        partition.on_follower_fetch(2, end, 0)
        await waiting
    return (time.process_time() - started) / waits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--waits", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        partition = Partition("t", 0, uuid.uuid4(), Log.open(Path(tmp) / "t-0", LogConfig()),
                              TopicConfig.resolve(BrokerConfig.from_properties({}), {}))
        partition.become_leader(1, node_id=1, replicas=(1, 2), isr=(1, 2))
        best = min(asyncio.run(rounds(partition, args.waits)) for _ in range(args.rounds))
        partition.log.close()
    print(f"{best * 1e6:.1f} µs per acks=all append, wait and follower fetch")


if __name__ == "__main__":
    main()
