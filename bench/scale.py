"""Scale rows (issue 14): how a `klamm serve` process's costs grow with partitions, consumer groups and segments.

    .venv/bin/python bench/scale.py [--quick]

Each row runs at three sizes, each on a fresh broker (PLAINTEXT, one node):

- partitions: N partitions (N/10 topics of 10) created with CreateTopics; then a Metadata request for every
  topic (median of 5), a clean restart (process start until it answers Metadata), and the RSS after it;
- topics one at a time: N topics of one partition, each its own CreateTopics (as a client creating topics as it
  needs them does): every request commits and publishes a metadata image, so what an image costs to build and
  apply against the topics already there shows here, 100 times as often as in the partitions row;
- consumer groups: G groups each committing an offset 10 times (OffsetCommit v8, standalone commits, 8
  connections at once): commits per second and the RSS after;
- segments: a partition of S segments (the segment count of a 100 GB log at ~10 MB segments; each holds one
  small batch here, which start-up does not read after a clean shutdown), written offline with klamm's storage
  into a stopped broker's log directory; then a clean start (until it answers Metadata), the RSS after it, and
  a fetch of the first offset (the oldest segment found through the segment index).

The table gives each measure per unit at each size, and `growth`: the exponent k in cost ~ size^k between the
smallest and the largest size (1: linear, 0: constant; the row's claim is k <= 1 for totals).

Each broker's output goes to .cache/bench-logs/scale-<time>/<its data dir>.log. A broker that exits before the
bench stops it (killed by a signal, or crashed) fails the row with its exit status and log, not only with the
client's lost connection: a broker process killed by another program looked exactly like a broker closing the
connection (SIGKILL: "connection reset by peer" or end of file at the client, and nothing in the log).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from klamm.broker.client import BrokerConnection, BrokerUnavailable  # noqa: E402
from klamm.protocol.batch import split_batches  # noqa: E402
from klamm.protocol.records import build_batch  # noqa: E402
from klamm.storage.config import LogConfig  # noqa: E402
from klamm.storage.log import Log  # noqa: E402

KLAMM = Path(sys.executable).parent / "klamm"
METADATA, CREATE_TOPICS, OFFSET_COMMIT, FETCH, FIND_COORDINATOR = 3, 19, 8, 1, 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


LOGS = [ROOT / ".cache" / "bench-logs" / f"scale-{time.strftime('%Y%m%d%H%M%S')}"]  # where brokers' output goes


class Serve:
    """A `klamm serve` process on a data directory that outlives it (for restarts)."""

    def __init__(self, data: Path) -> None:
        self.data, self.port = data, free_port()
        self.log = LOGS[0] / f"{data.name}.log"  # restarts append to it
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Seconds from the process's start until it answers a Metadata request."""
        started = time.perf_counter()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as output:
            self.process = subprocess.Popen(
                [str(KLAMM), "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                 "--override", f"log.dirs={self.data}", "--override", "offsets.topic.num.partitions=1"],
                stdout=output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while True:
            try:
                asyncio.run(self.request(METADATA, 12, {"topics": [], "allow_auto_topic_creation": False}, 5))
                return time.perf_counter() - started
            except (BrokerUnavailable, OSError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"klamm serve did not come up: {self._status()}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM and wait; RuntimeError if the process had already exited: nothing the row measured since
        is the broker's (rows stop their broker in `finally`, so this also says why a request failed)."""
        assert self.process is not None
        try:  # a process killed a moment ago has reset its connections but may not have been reaped yet
            self.process.wait(0.5)
        except subprocess.TimeoutExpired:
            pass
        else:
            raise RuntimeError(f"klamm serve exited before the bench stopped it: {self._status()}")
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(120)

    def _status(self) -> str:
        assert self.process is not None
        code = self.process.returncode
        if code is None:
            how = "still running"
        elif code < 0:
            how = f"killed by {signal.Signals(-code).name}"
        else:
            how = f"exit code {code}"
        return f"pid {self.process.pid} {how}; its output is in {self.log}"

    @property
    def rss_mib(self) -> float:
        assert self.process is not None
        time.sleep(1)  # let the loop settle after the last request
        return rss_mib(self.process.pid)

    async def request(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float = 120) -> Any:
        connection = BrokerConnection("127.0.0.1", self.port, "klamm-bench-scale", timeout_s)
        try:
            return await connection.request(api_key, version, body)
        finally:
            connection.close()


def create_topics(broker: Serve, names: list[str], partitions: int, configs: dict[str, str] | None = None) -> None:
    async def create() -> None:
        for start in range(0, len(names), 100):
            response = await broker.request(CREATE_TOPICS, 7, {"timeout": 60_000, "validate_only": False, "topics": [
                {"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                 "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
                for name in names[start:start + 100]]})
            failed = [t.name for t in response.topics if t.error_code != 0]
            assert not failed, failed
    asyncio.run(create())


def partitions_row(base: Path, count: int) -> dict[str, float]:
    broker = Serve(base)
    broker.start()
    try:
        started = time.perf_counter()
        create_topics(broker, [f"t{i:05d}" for i in range(count // 10)], 10)
        created = time.perf_counter() - started

        def metadata() -> float:
            began = time.perf_counter()
            response = asyncio.run(broker.request(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False}))
            assert sum(len(t.partitions) for t in response.topics) >= count
            return time.perf_counter() - began
        answer = statistics.median(metadata() for _ in range(5))
    finally:
        broker.stop()
    startup = broker.start()
    try:
        rss = broker.rss_mib
    finally:
        broker.stop()
    return {"create s": created, "metadata ms": answer * 1000, "start s": startup, "RSS Δ MiB": rss - BASELINE[0]}


def single_topics_row(base: Path, count: int) -> dict[str, float]:
    broker = Serve(base)
    broker.start()
    try:
        async def create() -> None:
            client = BrokerConnection("127.0.0.1", broker.port, "klamm-bench-scale", 120)
            try:
                for i in range(count):
                    topic = {"name": f"s{i:05d}", "num_partitions": 1, "replication_factor": 1, "assignments": [],
                             "configs": []}
                    response = await client.request(CREATE_TOPICS, 7, {"timeout": 60_000, "validate_only": False,
                                                                       "topics": [topic]})
                    assert response.topics[0].error_code == 0, response
            finally:
                client.close()
        started = time.perf_counter()
        asyncio.run(create())
        created = time.perf_counter() - started
    finally:
        broker.stop()
    return {"create s": created, "ms per topic": created * 1000 / count}


async def find_coordinator(broker: Serve) -> None:
    for _ in range(600):
        response = await broker.request(FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["group-00000"]})
        if response.coordinators[0].error_code == 0:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"no group coordinator: {response}")


async def commit(client: BrokerConnection, group: str, offset: int) -> None:
    """One standalone OffsetCommit, retried while the coordinator (__consumer_offsets) is being created."""
    for _ in range(600):
        response = await client.request(OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "committed", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                             "committed_leader_epoch": -1,
                                                             "committed_metadata": ""}]}]})
        error = response.topics[0].partitions[0].error_code
        if error == 0:
            return
        assert error in (14, 15, 16), response  # load in progress, not available, not coordinator: retriable
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the commit of {group} kept failing: {response}")


def groups_row(base: Path, count: int, rounds: int = 10, connections: int = 8) -> dict[str, float]:
    broker = Serve(base)
    broker.start()
    try:
        create_topics(broker, ["committed"], 1)

        async def commit_all() -> None:
            clients = [BrokerConnection("127.0.0.1", broker.port, f"committer-{i}", 60) for i in range(connections)]

            async def commits(client: BrokerConnection, groups: range) -> None:
                for offset in range(rounds):
                    for group in groups:
                        await commit(client, f"group-{group:05d}", offset)
            share = math.ceil(count / connections)
            try:
                await asyncio.gather(*(commits(c, range(i * share, min(count, (i + 1) * share)))
                                       for i, c in enumerate(clients)))
            finally:
                for client in clients:
                    client.close()
        asyncio.run(find_coordinator(broker))  # creates __consumer_offsets, as a client's first FindCoordinator does
        started = time.perf_counter()
        asyncio.run(commit_all())
        elapsed = time.perf_counter() - started
        rss = broker.rss_mib
    finally:
        broker.stop()
    return {"commit s": elapsed, "commits/s": count * rounds / elapsed, "RSS Δ MiB": rss - BASELINE[0]}


def segments_row(base: Path, count: int) -> dict[str, float]:
    broker = Serve(base)
    broker.start()
    create_topics(broker, ["history"], 1)
    broker.stop()
    directory = next(base.glob("history-0"))
    log = Log.open(directory, LogConfig(segment_bytes=2048, segment_index_bytes=4096), clean_shutdown=True)
    payload = bytes(1500)  # each batch fills a segment past 2048 bytes with the next: one batch a segment
    for offset in range(count):
        buf = bytearray(build_batch([(None, payload)], base_offset=offset, partition_leader_epoch=0))
        log.append_as_follower(buf, split_batches(buf))
    log.close()
    segments = len(list(directory.glob("*.log")))
    startup = broker.start()
    try:
        rss = broker.rss_mib
        began = time.perf_counter()
        response = asyncio.run(broker.request(FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "history", "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                             "fetch_offset": 0, "last_fetched_epoch": -1,
                                                             "log_start_offset": -1,
                                                             "partition_max_bytes": 1 << 20}]}]}))
        first_fetch = time.perf_counter() - began
        assert response.responses[0].partitions[0].error_code == 0
    finally:
        broker.stop()
    return {"segments": segments, "start s": startup, "RSS Δ MiB": rss - BASELINE[0],
            "first fetch ms": first_fetch * 1000}


ROWS: dict[str, tuple[Callable[[Path, int], dict[str, float]], tuple[int, ...], tuple[int, ...]]] = {
    "partitions": (partitions_row, (1_000, 3_000, 10_000), (300, 1_000, 3_000)),
    "topics one at a time": (single_topics_row, (1_000, 3_000, 10_000), (300, 1_000, 3_000)),
    "consumer groups": (groups_row, (100, 300, 1_000), (30, 100, 300)),
    "segments": (segments_row, (1_000, 3_000, 10_000), (300, 1_000, 3_000)),
}


BASELINE = [0.0]  # the RSS of an empty broker, measured first


def baseline_rss() -> float:
    base = Path(tempfile.mkdtemp(prefix="klamm-scale-empty-"))
    broker = Serve(base)
    try:
        broker.start()
        return broker.rss_mib
    finally:
        broker.stop()
        shutil.rmtree(base, ignore_errors=True)


def growth(small: tuple[int, float], large: tuple[int, float]) -> str:
    """The exponent k of cost ~ size^k between two sizes."""
    (n1, c1), (n2, c2) = small, large
    if c1 <= 0 or c2 <= 0:
        return "-"
    return f"{math.log(c2 / c1) / math.log(n2 / n1):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run)")
    parser.add_argument("--only", default=",".join(ROWS), help="rows to run, comma-separated")
    args = parser.parse_args()
    BASELINE[0] = baseline_rss()
    print(f"brokers' output in {LOGS[0]}")
    print(f"empty broker: RSS {BASELINE[0]:.1f} MiB (RSS Δ is above it)")
    print("| row | size | measures |")
    print("|---|---|---|")
    for name in args.only.split(","):
        run, full, quick = ROWS[name]
        results: list[tuple[int, dict[str, float]]] = []
        for size in quick if args.quick else full:
            base = Path(tempfile.mkdtemp(prefix=f"klamm-scale-{name.replace(' ', '-')}-"))
            try:
                results.append((size, run(base, size)))
            finally:
                shutil.rmtree(base, ignore_errors=True)
            measures = ", ".join(f"{k} {v:,.1f}" for k, v in results[-1][1].items())
            print(f"| {name} | {size:,} | {measures} |", flush=True)
        (first, a), (last, b) = results[0], results[-1]
        exponents = ", ".join(f"{k} {growth((first, a[k]), (last, b[k]))}" for k in a
                              if k not in ("segments", "commits/s", "ms per topic"))
        print(f"| {name} | growth {first:,} → {last:,} | {exponents} |", flush=True)


if __name__ == "__main__":
    main()
