"""Controller fail-over time: how long a quorum of three controllers goes without an active one.

Starts three dedicated controllers (process.roles=controller) and one broker as
`klamm serve` processes with Kafka's default quorum timeouts
(controller.quorum.election.timeout.ms=1000, controller.quorum.fetch.timeout.ms=2000),
then, `--rounds` times each, stops the active controller with SIGKILL or SIGTERM
and measures until (a) DescribeQuorum through the broker names another leader and
(b) a CreateTopics through the broker succeeds. The stopped controller is
started again before the next round.

    PYTHONPATH=$PWD .venv/bin/python bench/controller_failover.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

KLAMM = str(Path(sys.executable).parent / "klamm")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, base: Path, node_id: int, config: dict[str, str]) -> None:
        self.config_path = base / f"node{node_id}.properties"
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        self.log_path = base / f"node{node_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen([KLAMM, "serve", "--config", str(self.config_path)], stdout=out,
                                         stderr=subprocess.STDOUT)

    def stop(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(60)


def leader(broker: str) -> int | None:
    p = subprocess.run([KLAMM, "metadata-quorum", "--bootstrap-server", broker, "describe", "--status"],
                       capture_output=True, text=True, timeout=30, check=False)
    if p.returncode != 0:
        return None
    return int(dict(line.split(":", 1) for line in p.stdout.splitlines())["LeaderId"])


def wait(condition, timeout: float = 60.0) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.02)
    raise TimeoutError("gave up")


def created(admin: AdminClient, name: str) -> bool:
    try:
        admin.create_topics([NewTopic(name, 1, 1)], request_timeout=5)[name].result(10)
        return True
    except Exception as exc:  # noqa: BLE001
        return "TOPIC_ALREADY_EXISTS" in str(exc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="klamm-failover-"))
    ports = {n: free_port() for n in (1, 2, 3)}
    voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in ports.items())
    cluster_id = subprocess.run([KLAMM, "storage", "random-uuid"], capture_output=True, text=True,
                                check=True).stdout.strip()
    common = {"controller.quorum.voters": voters, "controller.listener.names": "CONTROLLER"}
    nodes = {}
    for n, port in ports.items():
        nodes[n] = Node(base, n, {**common, "node.id": str(n), "process.roles": "controller",
                                  "listeners": f"CONTROLLER://127.0.0.1:{port}",
                                  "listener.security.protocol.map": "CONTROLLER:PLAINTEXT",
                                  "log.dirs": str(base / f"node{n}")})
    broker_port = free_port()
    nodes[4] = Node(base, 4, {**common, "node.id": "4", "process.roles": "broker",
                              "listeners": f"PLAINTEXT://127.0.0.1:{broker_port}", "log.dirs": str(base / "node4")})
    for node in nodes.values():
        subprocess.run([KLAMM, "storage", "format", "--cluster-id", cluster_id, "--config", str(node.config_path)],
                       check=True, capture_output=True)
        node.start()
    broker = f"127.0.0.1:{broker_port}"
    admin = AdminClient({"bootstrap.servers": broker})
    try:
        wait(lambda: leader(broker) is not None)
        results: dict[str, list[tuple[float, float]]] = {"SIGKILL": [], "SIGTERM": []}
        for round_ in range(args.rounds):
            for name, sig in (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
                old = wait_leader = leader(broker)
                assert old is not None
                stopped = time.monotonic()
                nodes[old].stop(sig)
                wait_leader = wait(lambda old=old: leader(broker) not in (None, old))
                topic = f"{name}-{round_}"
                wait(lambda topic=topic: created(admin, topic))
                results[name].append((wait_leader, time.monotonic() - stopped))
                nodes[old].start()
                wait(lambda: len({leader(broker)}) == 1 and leader(broker) is not None)
                time.sleep(3)  # the restarted controller catches up before the next round
        print(f"{'stop':<8} {'rounds':>6} {'new leader p50':>15} {'max':>6} {'creation p50':>13} {'max':>6}")
        for name, times in results.items():
            to_leader, to_create = [t for t, _ in times], [t for _, t in times]
            print(f"{name:<8} {len(times):>6} {statistics.median(to_leader):>14.2f}s {max(to_leader):>5.2f}s "
                  f"{statistics.median(to_create):>12.2f}s {max(to_create):>5.2f}s")
    finally:
        for node in nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                os.kill(node.proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
