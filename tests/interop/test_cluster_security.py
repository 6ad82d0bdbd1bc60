"""A Raft quorum whose controllers authenticate each other: three `klamm serve` processes (broker and controller
each) with a SASL_PLAINTEXT CONTROLLER listener (PLAIN: SCRAM credentials live in the metadata log, which the
voters cannot read before they have elected a leader, so Kafka's controllers authenticate with PLAIN or TLS).
Vote, BeginQuorumEpoch, the metadata Fetch between voters, broker registration and heartbeats all go through
authenticated connections: an election after the active controller is killed works the same way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic

from tests.conftest import CLUSTER_DEFAULTS, QUORUM_DEFAULTS, ClusterProcess

from .helpers import SequenceStream, admin, confluent_consume, create_topic, wait_for

pytestmark = [pytest.mark.timeout(300)]

KLAMM = str(Path(sys.executable).parent / "klamm")
PLAIN = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" '
         'password="controller-secret" user_controller="controller-secret";')
SECURED = {**CLUSTER_DEFAULTS, **QUORUM_DEFAULTS, "broker.session.timeout.ms": "4000",
           "broker.heartbeat.interval.ms": "300", "offsets.topic.num.partitions": "1",
           "sasl.mechanism.controller.protocol": "PLAIN",
           "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
           "listener.name.controller.plain.sasl.jaas.config": PLAIN}


def leader_id(bootstrap: str) -> int | None:
    p = subprocess.run([KLAMM, "metadata-quorum", "--bootstrap-server", bootstrap, "describe", "--status"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return None
    status = dict(line.split(":", 1) for line in p.stdout.splitlines() if ":" in line)
    return int(status["LeaderId"].strip())


def test_a_quorum_elects_and_replicates_over_sasl(tmp_path: Path) -> None:
    cluster = ClusterProcess(tmp_path, SECURED, quorum=True, controller_protocol="SASL_PLAINTEXT")
    try:
        cluster.start()
        for node in cluster.nodes:  # every listener of the quorum speaks SASL
            assert "CONTROLLER:SASL_PLAINTEXT" in node.overrides["listener.security.protocol.map"]
        first = wait_for(lambda: leader_id(cluster.bootstrap), timeout=30, what="an active controller")
        create_topic(cluster.bootstrap, "votes")
        with SequenceStream(cluster.bootstrap, "votes") as stream:
            wait_for(lambda: len(stream.acked) > 100, timeout=30, what="records acknowledged")
            cluster.nodes[first - 1].kill()
            others = ",".join(n.bootstrap for i, n in enumerate(cluster.nodes, 1) if i != first)
            wait_for(lambda: leader_id(others) not in (None, first), timeout=60,
                     what="another controller elected over authenticated connections")
            count = len(stream.acked)
            wait_for(lambda: len(stream.acked) > count + 100, timeout=60, what="records acknowledged after it")
        assert not stream.failed, stream.failed[:3]
        # a write the new active controller takes (two brokers left)
        client = admin(others)
        client.create_topics([NewTopic("after-the-election", 1, 2)])["after-the-election"].result(30)
        log = [int(m.value()) for m in confluent_consume(others, "votes", 0, 0, len(stream.acked), timeout=60)]
        assert log == list(range(len(log)))
    finally:
        cluster.kill()
