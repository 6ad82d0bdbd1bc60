"""Transactions with the Java client: commit/abort seen by read_committed and read_uncommitted
consumers, consume-transform-produce with sendOffsetsToTransaction, and fencing.

tests/interop/java/TxnClient.java drives the clients; it is compiled here once.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.conftest import BrokerFactory

from .conftest import JARS, JAVA_LIBS, ROOT, skip_or_fail
from .helpers import create_topic

pytestmark = [pytest.mark.timeout(180), pytest.mark.java]

SRC = ROOT / "tests" / "interop" / "java" / "TxnClient.java"
BUILD = ROOT / ".cache" / "java-build-txn"


@pytest.fixture(scope="module")
def txn_java():
    if not shutil.which("java") or not shutil.which("javac"):
        skip_or_fail("java/javac not installed (need a JDK 17)")
    missing = [j for j in JARS if not (JAVA_LIBS / f"{j}.jar").is_file()]
    if missing:
        skip_or_fail(f"Java client jars missing in {JAVA_LIBS}: run scripts/test-deps.sh")
    classpath = ":".join([str(BUILD), *(str(JAVA_LIBS / f"{j}.jar") for j in JARS)])
    cls = BUILD / "TxnClient.class"
    if not cls.exists() or cls.stat().st_mtime < SRC.stat().st_mtime:
        BUILD.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "--release", "17", "-cp", classpath,
                            "-d", str(BUILD), str(SRC)], capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, f"javac failed:\n{p.stdout}\n{p.stderr}"

    def command(*args: object) -> list[str]:
        return ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m", "-cp", classpath, "TxnClient",
                *(str(a) for a in args)]

    def run(*args: object, timeout: float = 120) -> dict:
        p = subprocess.run(command(*args), capture_output=True, text=True, timeout=timeout)
        merged: dict = {}
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                merged.update(json.loads(line))
        assert p.returncode == 0, f"TxnClient {args[0]} failed (rc {p.returncode}): {merged}\n{p.stderr[-3000:]}"
        return merged

    run.command = command  # type: ignore[attr-defined]  # for a long-running TxnClient (the rolling restart's job)
    return run


@pytest.fixture(scope="module")
def txn_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("txn-java"))
    yield factory(overrides={"transaction.state.log.num.partitions": 5, "offsets.topic.num.partitions": 5})
    factory.close()


def test_commit_and_abort_per_isolation_level(txn_java, txn_broker, topic):
    create_topic(txn_broker.bootstrap, topic, partitions=2)
    txn_java("produce", txn_broker.bootstrap, f"{topic}-txn", topic,
             "commit:c1,c2,c3", "abort:a1,a2", "commit:c4,c5", "abort:a3")
    committed = txn_java("consume", txn_broker.bootstrap, topic, "read_committed", 5)
    uncommitted = txn_java("consume", txn_broker.bootstrap, topic, "read_uncommitted", 8)
    assert sorted(committed["values"]) == ["c1", "c2", "c3", "c4", "c5"]
    assert sorted(uncommitted["values"]) == ["a1", "a2", "a3", "c1", "c2", "c3", "c4", "c5"]
    # order within each partition: c1,c3,(a2),c5 on one and c2,(a1),c4,(a3) on the other
    seen = committed["values"]
    assert seen.index("c1") < seen.index("c3") < seen.index("c5")
    assert seen.index("c2") < seen.index("c4")
    # 8 records + a marker per partition a transaction wrote to (the last one wrote to one): the log end
    assert sum(committed["end"].values()) == sum(uncommitted["end"].values()) == 8 + 7


def test_consume_transform_produce_offsets_visible_after_commit(txn_java, txn_broker, make_topic):
    source, sink = make_topic("in"), make_topic("out")
    create_topic(txn_broker.bootstrap, source, partitions=2)
    create_topic(txn_broker.bootstrap, sink, partitions=2)
    txn_java("produce", txn_broker.bootstrap, f"{source}-feed", source, "commit:x,y,z,w")
    result = txn_java("ctp", txn_broker.bootstrap, f"{source}-ctp", source, sink, f"{source}-group")
    assert result["before"] == {}
    # each partition: 2 records (then the marker): the next offset to process is 2
    assert result["after"] == {"0": 2, "1": 2}
    out = txn_java("consume", txn_broker.bootstrap, sink, "read_committed", 4)
    assert sorted(out["values"]) == ["W", "X", "Y", "Z"]


def test_second_producer_fences_the_first(txn_java, txn_broker, topic):
    create_topic(txn_broker.bootstrap, topic, partitions=1)
    result = txn_java("fence", txn_broker.bootstrap, f"{topic}-txn", topic)
    assert result["fenced"] == "ProducerFencedException"
    committed = txn_java("consume", txn_broker.bootstrap, topic, "read_committed", 1)
    assert committed["values"] == ["b"]
    uncommitted = txn_java("consume", txn_broker.bootstrap, topic, "read_uncommitted", 1)
    assert uncommitted["values"] == ["a", "b"]
