"""A Raft quorum of three dedicated controllers (`klamm serve`, process.roles=controller) and two brokers.

Controllers 1, 2 and 3 elect a leader over Vote/BeginQuorumEpoch and replicate
`__cluster_metadata` by Fetch; the brokers (nodes 4 and 5) follow the leader as
observers and send their writes to whichever controller is active. While topics
are created in a loop, the active controller is killed with SIGKILL, again and
again: another takes over within a few election timeouts, creations go on, and
every creation that was acknowledged is still there at the end.
"""

from __future__ import annotations

import json
import subprocess
import threading
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from klamm.controller.raft import wire
from klamm.controller.raft.messages import VoteRequest
from klamm.protocol.errors import ErrorCode
from tests.conftest import BrokerProcess, free_port, klamm_storage
from tests.integration.conftest import RawClient

from .helpers import SequenceStream, wait_for
from .tcp_proxy import TcpProxy

pytestmark = [pytest.mark.timeout(300)]

KLAMM = str(Path(sys.executable).parent / "klamm")
FAST = {"broker.session.timeout.ms": "4000", "broker.heartbeat.interval.ms": "300",
        "controller.quorum.election.timeout.ms": "400", "controller.quorum.fetch.timeout.ms": "800",
        "controller.quorum.election.backoff.max.ms": "400", "offsets.topic.num.partitions": "1"}


class Quorum:
    """Controllers 1-3 and brokers 4-5; with `proxied`, everyone reaches each controller through a TcpProxy."""

    def __init__(self, base: Path, *, proxied: bool = False, overrides: dict[str, str] | None = None) -> None:
        ports = {node_id: free_port() for node_id in (1, 2, 3)}
        self.proxies = {n: TcpProxy(p) for n, p in ports.items()} if proxied else {}
        addresses = {n: self.proxies[n].address if proxied else f"127.0.0.1:{p}" for n, p in ports.items()}
        voters = ",".join(f"{n}@{address}" for n, address in addresses.items())
        cluster_id = klamm_storage("random-uuid")
        self.controllers: dict[int, BrokerProcess] = {}
        self.brokers: dict[int, BrokerProcess] = {}
        for node_id in (1, 2, 3, 4, 5):
            config = {"node.id": str(node_id), "controller.quorum.voters": voters,
                      "controller.listener.names": "CONTROLLER", **FAST, **(overrides or {})}
            if node_id in ports:
                port = ports[node_id]
                config.update({"process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{port}",
                               "listener.security.protocol.map": "CONTROLLER:PLAINTEXT"})
            else:
                port = free_port()
                config["process.roles"] = "broker"
            node = BrokerProcess(port, base / f"node{node_id}", base / f"node{node_id}.log", config)
            properties = base / f"node{node_id}.properties"
            properties.parent.mkdir(parents=True, exist_ok=True)
            properties.write_text("".join(f"{k}={v}\n" for k, v in {**config, "log.dirs": str(node.log_dir)}.items()))
            klamm_storage("format", "--cluster-id", cluster_id, "--config", str(properties))
            (self.controllers if node_id in ports else self.brokers)[node_id] = node
        self.bootstrap = ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> None:
        for node in [*self.controllers.values(), *self.brokers.values()]:
            node.start()

    def kill(self) -> None:
        for node in [*self.controllers.values(), *self.brokers.values()]:
            if node.running:
                node.kill()
        for proxy in self.proxies.values():
            proxy.close()

    def describe(self, *options: str) -> list[str]:
        """`klamm metadata-quorum describe` through a broker (which asks the active controller)."""
        broker = next(b for b in self.brokers.values())
        p = subprocess.run([KLAMM, "metadata-quorum", "--bootstrap-server", broker.bootstrap, "describe",
                            *options], capture_output=True, text=True, timeout=30, check=False)
        assert p.returncode == 0, p.stderr
        return p.stdout.splitlines()

    def describe_at(self, controller: int, *options: str) -> list[str]:
        """The same at a controller's listener (`--bootstrap-controller`): any voter leads the tool to the active."""
        address = self.controllers[controller].bootstrap
        p = subprocess.run([KLAMM, "metadata-quorum", "--bootstrap-controller", address, "describe", *options],
                           capture_output=True, text=True, timeout=30, check=False)
        assert p.returncode == 0, p.stderr
        return p.stdout.splitlines()

    def leader(self) -> int:
        """The active controller, as `klamm metadata-quorum describe --status` reports it."""
        status = dict(line.split(":", 1) for line in self.describe("--status"))
        return int(status["LeaderId"])

    def followers_caught_up(self) -> dict[str, list[str]] | None:
        """The --replication rows (NodeId -> the other columns) once every voter is at the leader's end."""
        rows = {cells[0]: cells[1:] for cells in (line.split() for line in self.describe("--replication")[1:])}
        voters = {n: r for n, r in rows.items() if r[-1] in ("Leader", "Follower")}
        ends = {r[1] for r in voters.values()}
        return rows if sorted(voters) == ["1", "2", "3"] and len(ends) == 1 else None


@pytest.fixture
def quorum(tmp_path: Path):
    cluster = Quorum(tmp_path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill()


def create(admin: AdminClient, name: str, replication: int = 1) -> bool:
    """Whether the creation was acknowledged (a retriable failure is no acknowledgement)."""
    try:
        admin.create_topics([NewTopic(name, 1, replication)], request_timeout=10)[name].result(15)
        return True
    except Exception as exc:  # noqa: BLE001  (creations go on through the failover)
        return "TOPIC_ALREADY_EXISTS" in str(exc)


def listed(admin: AdminClient, names: Iterable[str], timeout: float = 15) -> set[str]:
    """The topics a broker lists once it lists all of `names`, or at the timeout: a creation is acknowledged when the
    controller commits it, and a broker's metadata follows a moment later (as in Kafka)."""
    deadline = time.monotonic() + timeout
    while True:
        topics = set(admin.list_topics(timeout=15).topics)
        if set(names) <= topics or time.monotonic() > deadline:
            return topics
        time.sleep(0.2)


def delete(admin: AdminClient, name: str) -> bool:
    try:
        admin.delete_topics([name], request_timeout=10)[name].result(15)
        return True
    except Exception as exc:  # noqa: BLE001
        return "UNKNOWN_TOPIC" in str(exc)


def brokers(admin: AdminClient) -> set[int]:
    return {n.id for n in admin.describe_cluster(request_timeout=10).result(15).nodes}


def test_killing_the_active_controller_loses_no_acknowledged_creation(quorum: Quorum) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    wait_for(lambda: brokers(admin) == {4, 5}, timeout=60, what="both brokers registered with the quorum")
    # A voter of another cluster asking for votes is refused as Kafka refuses it, and changes nothing.
    epoch = int(dict(line.split(":", 1) for line in quorum.describe("--status"))["LeaderEpoch"])
    api_key, version, body = wire.request_body(VoteRequest(epoch + 5, 1, epoch + 5, 1 << 20), "another-cluster", 2)
    answer = RawClient(quorum.controllers[2].port).request(api_key, version, body)
    assert answer.error_code == ErrorCode.inconsistent_cluster_id
    assert int(dict(line.split(":", 1) for line in quorum.describe("--status"))["LeaderEpoch"]) == epoch
    acked: list[str] = []
    deleted: list[str] = []
    for round_ in range(3):
        for i in range(5):
            name = f"t{round_}-{i}"
            if create(admin, name):
                acked.append(name)
            if i % 2 and acked and delete(admin, acked[-2 if len(acked) > 1 else -1]):
                deleted.append(acked.pop(-2 if len(acked) > 1 else -1))
        leader = wait_for(quorum.leader, timeout=30, what="a leader")
        assert leader in quorum.controllers
        killed = time.monotonic()
        quorum.controllers[leader].kill()
        wait_for(lambda leader=leader: quorum.leader() != leader, timeout=30, what="another controller active")
        took = time.monotonic() - killed
        assert took < 20, f"a new controller took {took:.1f} s"
        name = f"after-kill-{round_}"
        wait_for(lambda name=name: create(admin, name), timeout=30, what="a creation through the new controller")
        acked.append(name)
        quorum.controllers[leader].start()
    topics = listed(admin, acked)
    missing = [t for t in acked if t not in topics]
    assert not missing, f"acknowledged creations lost: {missing}"
    wait_for(lambda: not [t for t in deleted if t in admin.list_topics(timeout=15).topics], timeout=15,
             what="acknowledged deletions stay done")
    assert len(acked) >= 8 and deleted
    assert brokers(admin) == {4, 5}  # heartbeats reached each new active controller: nobody was fenced
    rows = wait_for(quorum.followers_caught_up, timeout=30, what="the three voters at the leader's log end")
    assert sorted(r[-1] for n, r in rows.items() if n in "123") == ["Follower", "Follower", "Leader"]
    assert {r[-1] for n, r in rows.items() if n in ("4", "5")} == {"Observer"}
    for controller in quorum.controllers:
        status = dict(line.split(":", 1) for line in quorum.describe_at(controller, "--status"))
        assert int(status["LeaderId"]) == quorum.leader() and int(status["LeaderEpoch"]) >= 4
        assert [v["id"] for v in json.loads(status["CurrentVoters"])] == [1, 2, 3]


def test_two_controllers_down_stop_metadata_changes_not_produces(quorum: Quorum) -> None:
    admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
    wait_for(lambda: brokers(admin) == {4, 5}, timeout=60, what="both brokers registered with the quorum")
    assert create(admin, "orders", replication=2)
    with SequenceStream(quorum.bootstrap, "orders") as stream:
        wait_for(lambda: len(stream.acked) > 100, timeout=30, what="records acknowledged")
        leader = quorum.leader()
        down = [leader, next(n for n in quorum.controllers if n != leader)]
        for node in down:
            quorum.controllers[node].kill()
        count = len(stream.acked)
        wait_for(lambda: len(stream.acked) > count + 300, timeout=30, what="produces going on without a quorum")
        assert not create(admin, "while-down")  # no majority: no metadata change
        for node in down:
            quorum.controllers[node].start()
        wait_for(lambda: create(admin, "after"), timeout=60, what="a creation once the quorum is back")
        count = len(stream.acked)
        wait_for(lambda: len(stream.acked) > count + 100, timeout=30, what="produces after the recovery")
    assert not stream.failed, stream.failed[:3]


def test_a_partitioned_active_controller_is_replaced_and_rejoins(tmp_path: Path) -> None:
    quorum = Quorum(tmp_path, proxied=True)
    try:
        quorum.start()
        admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
        wait_for(lambda: brokers(admin) == {4, 5}, timeout=60, what="both brokers registered with the quorum")
        assert create(admin, "before")
        leader = quorum.leader()
        quorum.proxies[leader].cut()  # nobody reaches it; it still reaches the others
        wait_for(lambda: quorum.leader() != leader, timeout=30, what="another controller active")
        wait_for(lambda: create(admin, "during"), timeout=30, what="a creation through the new controller")
        quorum.proxies[leader].heal()
        wait_for(quorum.followers_caught_up, timeout=30, what="the old leader caught up as a follower")
        assert create(admin, "after")
        assert {"before", "during", "after"} <= listed(admin, ["before", "during", "after"])
    finally:
        quorum.kill()


def test_a_controller_far_behind_catches_up_from_a_snapshot(tmp_path: Path) -> None:
    """Snapshots every few KiB and a log cleaned behind them: a controller down meanwhile fetches a snapshot."""
    quorum = Quorum(tmp_path, overrides={"metadata.log.max.record.bytes.between.snapshots": "512",
                                         "metadata.max.retention.bytes": "1024", "metadata.log.segment.bytes": "1024",
                                         "log.flush.offset.checkpoint.interval.ms": "200"})
    try:
        quorum.start()
        admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
        wait_for(lambda: brokers(admin) == {4, 5}, timeout=60, what="both brokers registered with the quorum")
        behind = next(n for n in quorum.controllers if n != quorum.leader())
        quorum.controllers[behind].kill()
        names = [f"topic-{i}" for i in range(40)]
        for name in names:
            wait_for(lambda name=name: create(admin, name), timeout=30, what=f"creating {name}")
        leader_dir = quorum.controllers[quorum.leader()].log_dir / "__cluster_metadata-0"
        wait_for(lambda: len(list(leader_dir.glob("*.checkpoint"))) > 0 and not (leader_dir / (
            "0" * 20 + ".log")).exists(), timeout=30, what="the leader's log cleaned behind a snapshot")
        quorum.controllers[behind].start()
        wait_for(quorum.followers_caught_up, timeout=60, what="the controller that was down caught up")
        fetched = list((quorum.controllers[behind].log_dir / "__cluster_metadata-0").glob("*.checkpoint"))
        assert fetched, "it caught up without a snapshot"
        # It now holds every topic: make it the only possible leader with the other follower's help.
        leader = quorum.leader()
        quorum.controllers[leader].kill()
        wait_for(lambda: quorum.leader() != leader, timeout=30, what="a new leader")
        assert set(names) <= listed(admin, names)
        wait_for(lambda: create(admin, "afterwards"), timeout=30, what="a creation afterwards")
    finally:
        quorum.kill()


class CombinedQuorum:
    """Three nodes, each broker and controller (process.roles=broker,controller), all three voters."""

    def __init__(self, base: Path) -> None:
        controller_ports = {n: free_port() for n in (1, 2, 3)}
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in controller_ports.items())
        cluster_id = klamm_storage("random-uuid")
        self.nodes: dict[int, BrokerProcess] = {}
        for node_id, controller_port in controller_ports.items():
            port = free_port()
            config = {"node.id": str(node_id), "controller.quorum.voters": voters, **FAST,
                      "controller.listener.names": "CONTROLLER", "process.roles": "broker,controller",
                      "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
                      "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                      "replica.lag.time.max.ms": "2000", "replica.fetch.wait.max.ms": "200"}
            node = BrokerProcess(port, base / f"node{node_id}", base / f"node{node_id}.log", config)
            properties = base / f"node{node_id}.properties"
            properties.parent.mkdir(parents=True, exist_ok=True)
            properties.write_text("".join(f"{k}={v}\n" for k, v in {**config, "log.dirs": str(node.log_dir)}.items()))
            klamm_storage("format", "--cluster-id", cluster_id, "--config", str(properties))
            self.nodes[node_id] = node
        self.bootstrap = ",".join(n.bootstrap for n in self.nodes.values())

    def start(self, *node_ids: int) -> None:
        """Start nodes together: none is ready before a majority of controllers runs."""
        threads = [threading.Thread(target=self.nodes[n].start, kwargs={"timeout": 60})
                   for n in (node_ids or self.nodes)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def kill(self) -> None:
        for node in self.nodes.values():
            if node.running:
                node.kill()

    def leader(self) -> int:
        p = subprocess.run([KLAMM, "metadata-quorum", "--bootstrap-server", self.bootstrap, "describe", "--status"],
                           capture_output=True, text=True, timeout=30, check=False)
        assert p.returncode == 0, p.stderr
        return int(dict(line.split(":", 1) for line in p.stdout.splitlines())["LeaderId"])


def test_combined_nodes_form_a_quorum_and_survive_the_active_controllers_death(tmp_path: Path) -> None:
    quorum = CombinedQuorum(tmp_path)
    try:
        quorum.start()
        admin = AdminClient({"bootstrap.servers": quorum.bootstrap})
        wait_for(lambda: brokers(admin) == {1, 2, 3}, timeout=60, what="three brokers")
        assert create(admin, "orders", replication=3)
        with SequenceStream(quorum.bootstrap, "orders") as stream:
            wait_for(lambda: len(stream.acked) > 200, timeout=30, what="records acknowledged")
            leader = quorum.leader()
            quorum.nodes[leader].kill()  # the active controller, and a broker of the ISR
            wait_for(lambda: quorum.leader() != leader, timeout=30, what="another controller active")
            count = len(stream.acked)
            wait_for(lambda: len(stream.acked) > count + 300, timeout=60, what="produces after the kill")
            wait_for(lambda: create(admin, "after"), timeout=30, what="a creation through the new controller")
            quorum.start(leader)
            wait_for(lambda: brokers(admin) == {1, 2, 3}, timeout=60, what="the killed node back")
        assert not stream.failed, stream.failed[:3]
        assert {"orders", "after"} <= listed(admin, ["orders", "after"])
    finally:
        quorum.kill()
