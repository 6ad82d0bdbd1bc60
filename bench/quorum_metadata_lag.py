"""How long after a CreateTopics answers every node of a cluster serves the new topic.

Starts three `klamm serve` processes: with `--kind quorum` three combined nodes
(process.roles=broker,controller, a Raft quorum of three voters, Kafka's default quorum timeouts); with
`--kind cluster` node 1 broker and controller, nodes 2 and 3 brokers following its metadata log. Then,
`--rounds` times, creates a topic of `--partitions` partitions through node 1 and asks each node's own Metadata (one connection per node, asked in turn until all
three know the topic with a leader) how long after the CreateTopics answer it serves the topic. A
quiet pause between rounds lets the followers' fetches park at the leader, as between a cluster's
metadata changes.

    PYTHONPATH=$PWD .venv/bin/python bench/quorum_metadata_lag.py [--rounds 40] [--kind cluster] [--partitions 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.conftest import ClusterProcess  # noqa: E402
from tests.integration.conftest import RawClient  # noqa: E402

GIVE_UP_S = 5.0


def knows(client: RawClient, name: str) -> bool:
    response = client.request(3, 12, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                      "allow_auto_topic_creation": False,
                                      "include_topic_authorized_operations": False})
    (topic,) = response.topics
    return topic.error_code == 0 and all(p.leader_id >= 0 for p in topic.partitions) and bool(topic.partitions)


def one_round(nodes: list[RawClient], name: str, partitions: int) -> list[float]:
    """Seconds from the CreateTopics answer until each node serves the topic."""
    created = nodes[0].request(19, 7, {"timeout": 30_000, "validate_only": False, "topics": [{
        "name": name, "num_partitions": partitions, "replication_factor": 3, "assignments": [], "configs": []}]})
    answered = time.monotonic()
    assert created.topics[0].error_code == 0, created.topics[0]
    lags: list[float | None] = [None] * len(nodes)
    while None in lags:
        for i, client in enumerate(nodes):
            if lags[i] is None and knows(client, name):
                lags[i] = time.monotonic() - answered
        if time.monotonic() - answered > GIVE_UP_S:
            raise AssertionError(f"{name}: nodes {[i + 1 for i, lag in enumerate(lags) if lag is None]} "
                                 f"did not serve it within {GIVE_UP_S} s")
    return [lag for lag in lags if lag is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between rounds")
    parser.add_argument("--kind", choices=("quorum", "cluster"), default="quorum")
    parser.add_argument("--partitions", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="klamm-quorum-lag-") as base:
        cluster = ClusterProcess(Path(base), {"default.replication.factor": 3, "min.insync.replicas": 2},
                                 quorum=args.kind == "quorum").start()
        try:
            nodes = [RawClient(node.port) for node in cluster.nodes]
            slowest = []
            for n in range(args.rounds):
                time.sleep(args.pause)
                slowest.append(max(one_round(nodes, f"lag-{n}-{uuid.uuid4().hex[:8]}", args.partitions)))
            for client in nodes:
                client.close()
        finally:
            cluster.stop()
    ms = sorted(s * 1000 for s in slowest)
    print(f"{args.kind} of 3 nodes, {len(ms)} CreateTopics of {args.partitions} partitions: the last node serves "
          f"the topic after the answer, "
          f"p50 {statistics.median(ms):.1f} ms, p90 {ms[int(len(ms) * 0.9) - 1]:.1f} ms, max {ms[-1]:.1f} ms; "
          f"{sum(m > 100 for m in ms)} over 100 ms")


if __name__ == "__main__":
    main()
