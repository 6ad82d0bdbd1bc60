"""The metadata quorum of three `klamm serve` processes, as kafka-metadata-quorum.sh and Java's Admin see it.

Node 1 (broker,controller) is the single voter and leader; nodes 2 and 3
(brokers) fetch `__cluster_metadata` from its controller listener, so they are
the quorum's observers, caught up at the leader's log end. DescribeQuorum sent
to node 2 is forwarded to the controller; `--bootstrap-controller` (and Java's
`bootstrap.controllers`) asks the controller listener directly.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BrokerProcess

from .helpers import wait_for
from .test_cluster_processes import nodes  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.timeout(180)]

KLAMM = str(Path(sys.executable).parent / "klamm")


def controller_address(nodes: list[BrokerProcess]) -> str:  # noqa: F811
    return nodes[0].overrides["controller.quorum.voters"].split("@", 1)[1]


def quorum_tool(target: str, address: str, *options: str) -> list[str]:
    p = subprocess.run([KLAMM, "metadata-quorum", target, address, "describe", *options],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


def replication(target: str, address: str) -> dict[str, list[str]]:
    """NodeId -> [DirectoryId, LogEndOffset, Lag, LastFetchTimestamp, LastCaughtUpTimestamp, Status]."""
    lines = quorum_tool(target, address, "--replication")
    assert lines[0].split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                "LastCaughtUpTimestamp", "Status"]
    return {cells[0]: cells[1:] for cells in (line.split() for line in lines[1:])}


def observers_caught_up(rows: dict[str, list[str]]) -> bool:
    leader_end = rows["1"][1]
    return all(rows.get(n, [None, None])[1] == leader_end for n in ("2", "3"))


def test_the_brokers_are_the_observers_of_the_single_voter(nodes: list[BrokerProcess]) -> None:  # noqa: F811
    # through node 2, which forwards to the controller, and at the controller listener itself
    for target, address in (("--bootstrap-server", nodes[1].bootstrap),
                            ("--bootstrap-controller", controller_address(nodes))):
        check_observers(target, address, controller_address(nodes))


def check_observers(target: str, address: str, controller: str) -> None:
    wait_for(lambda: observers_caught_up(replication(target, address)), timeout=30,
             what=f"nodes 2 and 3 fetching the metadata log up to its end ({target})")
    rows = replication(target, address)
    assert sorted(rows) == ["1", "2", "3"]
    assert rows["1"][0] == "AAAAAAAAAAAAAAAAAAAAAA" and rows["1"][2] == "0" and rows["1"][5] == "Leader"
    end = int(rows["1"][1])
    for node in ("2", "3"):
        _, log_end, lag, fetched, caught_up, status = rows[node]
        assert (status, int(log_end), lag) == ("Observer", end, "0")
        assert int(fetched) > 0 and int(caught_up) > 0

    status = dict(line.split(":", 1) for line in quorum_tool(target, address, "--status"))
    assert status["LeaderId"].strip() == "1" and int(status["HighWatermark"]) >= end
    assert status["CurrentVoters"].strip() == (
        f'[{{"id": 1, "directoryId": null, "endpoints": ["CONTROLLER://{controller}"]}}]')
    assert status["CurrentObservers"].strip() == '[{"id": 2, "directoryId": null}, {"id": 3, "directoryId": null}]'


def java_quorum(java_client: Any, *args: str) -> dict:
    result = java_client.run("admin-describe-quorum", *args)
    assert result.rc == 0, result.stderr[-3000:]
    [line] = result.lines
    return line


def test_javas_admin_describes_the_metadata_quorum(nodes: list[BrokerProcess], java_client: Any) -> None:  # noqa: F811
    for args in ((nodes[1].bootstrap,), (controller_address(nodes), "controller")):
        wait_for(lambda args=args: {o["id"] for o in java_quorum(java_client, *args)["observers"]} == {2, 3},
                 timeout=60, what="both brokers among the observers")
        quorum = java_quorum(java_client, *args)
        assert (quorum["leaderId"], quorum["leaderEpoch"]) == (1, 0)
        [voter] = quorum["voters"]
        assert voter["id"] == 1 and voter["logEndOffset"] == quorum["highWatermark"]
        assert quorum["nodes"] == {"1": [f"CONTROLLER://{controller_address(nodes)}"]}
        assert all(o["logEndOffset"] <= quorum["highWatermark"] and o["lastFetchTimestamp"] > 0
                   for o in quorum["observers"])
