"""Config and log-management APIs through the Java AdminClient (tests/interop/java/ConfigClient.java).

Each change is observed twice: through the AdminClient's describe, and through
behaviour seen by another client (retention deleting segments, MESSAGE_TOO_LARGE,
the low watermark after deleteRecords).
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.conftest import BrokerFactory

from .conftest import compile_java
from .helpers import confluent_produce, create_topic, wait_for
from .records import Rec

pytestmark = [pytest.mark.timeout(240), pytest.mark.java]



@pytest.fixture(scope="module")
def java():
    classpath = compile_java("ConfigClient")

    def batch(*commands: list[object], timeout: float = 150) -> list[tuple[int, dict]]:
        """Runs the commands in one JVM; per command (rc, last JSON object printed)."""
        text = "\n".join(" ".join(str(a) for a in c) for c in commands) + "\n"
        cmd = ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m", "-cp", classpath, "ConfigClient", "batch"]
        p = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=timeout)
        results, last = [], {}
        for line in p.stdout.splitlines():
            if not line.startswith("{"):
                continue
            obj = json.loads(line)
            if "batch_end" in obj:
                results.append((obj["rc"], last))
                last = {}
            elif "batch" not in obj:
                last = obj
        assert len(results) == len(commands), f"{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return results

    return batch


@pytest.fixture(scope="module")
def cfg_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("configs-java"))
    yield factory(overrides={"log.retention.check.interval.ms": 200, "log.retention.hours": 100})
    factory.close()


def low_watermark(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm"})
    try:
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return low
    finally:
        consumer.close()


def test_describe_topic_and_broker_with_synonyms(java, cfg_broker, make_topic):
    bs = cfg_broker.bootstrap
    topic = create_topic(bs, make_topic(), config={"retention.ms": "3600000"})
    [(rc, described), (rc2, broker)] = java(["describe-topic", bs, topic], ["describe-broker", bs, 1])
    assert rc == 0 and rc2 == 0, (described, broker)
    configs = described["configs"]
    retention = configs["retention.ms"]
    assert (retention["value"], retention["source"], retention["readOnly"], retention["type"]) == (
        "3600000", "DYNAMIC_TOPIC_CONFIG", False, "LONG")
    # the static log.retention.hours is a fallback of log.retention.ms, which Kafka leaves out
    assert retention["synonyms"] == [["retention.ms", "3600000", "DYNAMIC_TOPIC_CONFIG"]]
    assert retention["doc"]
    segment = configs["segment.bytes"]
    assert (segment["value"], segment["source"]) == ("1073741824", "DEFAULT_CONFIG")
    assert segment["synonyms"] == [["log.segment.bytes", "1073741824", "DEFAULT_CONFIG"]]
    entries = broker["configs"]
    hours = entries["log.retention.hours"]
    assert (hours["value"], hours["source"], hours["readOnly"]) == ("100", "STATIC_BROKER_CONFIG", False)
    assert hours["synonyms"] == [["log.retention.hours", "100", "STATIC_BROKER_CONFIG"],
                                 ["log.retention.hours", "168", "DEFAULT_CONFIG"]]
    assert entries["num.io.threads"]["readOnly"] is True
    assert entries["node.id"]["value"] == "1"


def test_incremental_and_legacy_alter(java, cfg_broker, make_topic):
    bs = cfg_broker.bootstrap
    topic = create_topic(bs, make_topic(), config={"segment.ms": "100000"})
    results = java(
        ["incremental", bs, "topic", topic, "APPEND", "cleanup.policy", "compact"],
        ["incremental", bs, "topic", topic, "SET", "retention.bytes", "123456789"],
        ["describe-topic", bs, topic],
        ["incremental", bs, "topic", topic, "APPEND", "retention.ms", "5"],
        ["incremental", bs, "topic", topic, "SET", "retention.ms", "soon"],
        ["alter", bs, topic, "max.message.bytes=2000"],
        ["describe-topic", bs, topic],
        ["incremental", bs, "broker", 1, "SET", "num.io.threads", "2"],
    )
    assert [rc for rc, _ in results[:3]] == [0, 0, 0]
    configs = results[2][1]["configs"]
    assert configs["cleanup.policy"]["value"] == "delete,compact"
    assert configs["retention.bytes"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs["segment.ms"]["value"] == "100000"
    assert results[3] == (3, {"error": "InvalidConfigurationException",
                              "message": "Can't APPEND to key retention.ms because its type is not LIST."})
    assert results[4] == (3, {"error": "InvalidConfigurationException",
                              "message": "Invalid value soon for configuration retention.ms: Not a number of type LONG"})
    assert results[5][0] == 0
    after = results[6][1]["configs"]
    overridden = {name for name, c in after.items() if c["source"] == "DYNAMIC_TOPIC_CONFIG"}
    assert overridden == {"max.message.bytes"}  # the legacy API replaced every override
    assert results[7] == (3, {"error": "InvalidRequestException",
                              "message": "Cannot update these configs dynamically: Set(num.io.threads)"})


def test_retention_change_deletes_old_segments(java, cfg_broker, make_topic):
    bs = cfg_broker.bootstrap
    topic = create_topic(bs, make_topic(), config={"internal.segment.bytes": "700", "file.delete.delay.ms": "0"})
    old = int(time.time() * 1000) - 3_600_000
    for i in range(6):  # one record per batch, one batch per segment: offsets 0..5
        ts = old if i < 4 else int(time.time() * 1000)
        [(_, _, err)] = confluent_produce(bs, topic, [Rec(None, b"%d" % i + b"x" * 500, ())], timestamps=[ts],
                                          extra={"linger.ms": 0})
        assert err is None
    assert low_watermark(bs, topic) == 0
    [(rc, _)] = java(["incremental", bs, "topic", topic, "SET", "retention.ms", "600000"])
    assert rc == 0
    wait_for(lambda: low_watermark(bs, topic) == 4, what="retention to delete the four old segments")
    seg_dir = cfg_broker.log_dir / f"{topic}-0"
    wait_for(lambda: sorted(p.name for p in seg_dir.glob("*.log")) == ["00000000000000000004.log",
                                                                       "00000000000000000005.log"],
             what="old segment files to be removed")
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "reader", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])  # below the log start: reset to earliest
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()[:1]))
        assert got == [(4, b"4"), (5, b"5")]
    finally:
        consumer.close()


def test_max_message_bytes_change_is_enforced(java, cfg_broker, make_topic):
    bs = cfg_broker.bootstrap
    topic = create_topic(bs, make_topic())
    [(_, _, err)] = confluent_produce(bs, topic, [Rec(None, b"x" * 5000, ())])
    assert err is None
    [(rc, _)] = java(["incremental", bs, "topic", topic, "SET", "max.message.bytes", "1000"])
    assert rc == 0
    [(_, _, err)] = confluent_produce(bs, topic, [Rec(None, b"x" * 5000, ())], extra={"retries": 0})
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE


@pytest.mark.single_node  # one broker's log dir
def test_delete_records_log_dirs_and_producers(java, cfg_broker, make_topic):
    bs = cfg_broker.bootstrap
    topic = create_topic(bs, make_topic())
    results = java(
        ["produce", bs, topic, 5, 100],
        ["delete-records", bs, topic, 0, 3],
        ["producers", bs, topic, 0],
        ["log-dirs", bs, 1],
        ["delete-records", bs, topic, 0, 99],
    )
    assert results[0] == (0, {"sent": 5})
    assert results[1] == (0, {"low_watermark": 3})
    assert low_watermark(bs, topic) == 3
    [producer] = results[2][1]["producers"]
    assert producer["last_sequence"] == 4 and producer["epoch"] == 0 and producer["txn_start"] is False
    [(path, described)] = results[3][1]["dirs"].items()
    assert Path(path) == cfg_broker.log_dir.resolve() and described["total"] > 0 and described["usable"] > 0
    assert described["replicas"][f"{topic}-0"] > 500
    assert results[4][0] == 3 and results[4][1]["error"] == "OffsetOutOfRangeException"
