"""Interop with kafkajs 2.2.4 (Node.js): producer, admin and consumer groups.

Each scenario is a node script in tests/interop/js/ that reads its parameters as
one JSON object on stdin and prints JSON lines; these tests check the lines.
kafkajs is installed into .cache/js by scripts/js-deps.sh.  Without node or the
install the tests skip (fail under CI=true / KLAMM_REQUIRE_INTEROP_TOOLS=1).

kafkajs runs with its defaults except where noted (logs go to stderr; set
KAFKAJS_LOG_LEVEL=INFO or DEBUG to see more).  The broker runs with
group.initial.rebalance.delay.ms=0 like the other group tests.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import BrokerFactory, skip_or_fail

from .helpers import confluent_produce, create_topic
from .records import Rec, diff, expected

ROOT = Path(__file__).resolve().parents[2]
JS_DIR = ROOT / "tests" / "interop" / "js"
KAFKAJS = Path(os.environ.get("KAFKAJS_PATH") or ROOT / ".cache" / "js" / "node_modules" / "kafkajs")
KAFKAJS_VERSION = json.loads((JS_DIR / "package.json").read_text())["dependencies"]["kafkajs"]
OVERRIDES = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5}


@pytest.fixture(scope="session")
def node_bin() -> str:
    exe = shutil.which("node")
    if not exe:
        skip_or_fail("node not installed (need Node.js >= 14 for kafkajs)")
    pkg = KAFKAJS / "package.json"
    if not pkg.is_file():
        skip_or_fail(f"kafkajs not installed in {KAFKAJS.parent}: run scripts/js-deps.sh")
    version = json.loads(pkg.read_text())["version"]
    if version != KAFKAJS_VERSION:
        skip_or_fail(f"kafkajs {version} installed, {KAFKAJS_VERSION} expected: run scripts/js-deps.sh")
    return exe


@pytest.fixture(scope="module")
def js_broker(tmp_path_factory):
    factory = BrokerFactory(tmp_path_factory.mktemp("kafkajs"))
    yield factory(overrides=OVERRIDES)
    factory.close()


@dataclass
class JsResult:
    script: str
    rc: int
    lines: list[dict] = field(default_factory=list)
    stderr: str = ""

    def ok(self) -> "JsResult":
        assert self.rc == 0 and self.lines and self.lines[-1].get("done"), (
            f"{self.script} failed rc={self.rc}: {self.lines[-3:]}\n--- stderr ---\n{self.stderr[-4000:]}")
        return self

    def get(self, key: str) -> list:
        return [o[key] for o in self.lines if key in o]

    def one(self, key: str):
        vals = self.get(key)
        assert len(vals) == 1, f"{self.script}: expected one {key!r} line, got {len(vals)}: {self.lines[-5:]}"
        return vals[0]


def run_js(node: str, script: str, cfg: dict, timeout: float = 90) -> JsResult:
    env = {**os.environ, "KAFKAJS_PATH": str(KAFKAJS), "KAFKAJS_NO_PARTITIONER_WARNING": "1",
           "KLAMM_JS_TIMEOUT_MS": str(int((timeout - 5) * 1000))}
    try:
        p = subprocess.run([node, str(JS_DIR / script)], input=json.dumps(cfg), capture_output=True,
                           text=True, timeout=timeout, env=env, cwd=str(JS_DIR))
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise AssertionError(f"{script} still running after {timeout}s\n{out[-3000:]}\n{err[-3000:]}")
    lines = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return JsResult(script, p.returncode, lines, p.stderr)


# ----------------------------------------------------------------- records ---
def b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def unb64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def to_js(r: Rec, partition: int | None) -> dict:
    return {"k": b64(r.key), "v": b64(r.value), "h": [[k, b64(v)] for k, v in r.headers],
            "p": partition}


def from_js(o: dict) -> Rec:
    return Rec(unb64(o["k"]), unb64(o["v"]), tuple((k, unb64(v)) for k, v in o["h"]))


# ---------------------------------------------------- 1. produce + consume ---
# The last send is acks=all: with acks=1 the high watermark moves only once the followers have
# fetched, so a ListOffsets right after it may not see the records yet (on Kafka as on klamm).
SENDS = [  # (acks, compression, number of records)
    (1, "gzip", 90),
    (-1, "gzip", 90),
    (1, "none", 30),
    (-1, "none", 30),
]


@pytest.mark.timeout(90)
def test_produce_acks_gzip_and_consume_back(node_bin, js_broker, topic):
    parts = 3
    total = sum(n for _, _, n in SENDS)
    # kafkajs cannot write a header whose value is null (TypeError in sizeOfHeaders):
    # null header values are read back in test_kafkajs_reads_records_of_confluent_kafka.
    want = expected("kjs", total, size=300, null_header=False)
    assert any(r.key is None for r in want) and any(r.value is None for r in want)
    assert any(r.key is None and r.value is None for r in want)
    sends, start = [], 0
    for acks, codec, n in SENDS:
        sends.append({"acks": acks, "compression": codec, "from": start, "to": start + n})
        start += n
    res = run_js(node_bin, "produce_consume.js", {
        "bootstrap": js_broker.bootstrap, "topic": topic, "partitions": parts, "create": True,
        "group": f"{topic}-g", "records": [to_js(r, i % parts) for i, r in enumerate(want)],
        "sends": sends}).ok()
    assert res.one("created") is True

    # RecordMetadata: one entry per partition written, baseOffset = records already there
    sent = res.get("sent")
    assert sent == list(range(len(SENDS)))
    before = Counter()
    for line, s in zip([o for o in res.lines if "sent" in o], sends):
        idx = range(s["from"], s["to"])
        per_part = Counter(i % parts for i in idx)
        md = {m["partition"]: m for m in line["metadata"]}
        assert set(md) == set(per_part), line
        for p, m in md.items():
            assert m["topicName"] == topic and m["errorCode"] == 0, m
            assert int(m["baseOffset"]) == before[p], (line["acks"], line["compression"], m)
        before.update(per_part)

    offsets = {o["partition"]: o for o in res.one("offsets")}
    assert set(offsets) == set(range(parts))
    for p in range(parts):
        n = sum(1 for i in range(total) if i % parts == p)
        assert (int(offsets[p]["low"]), int(offsets[p]["high"]), int(offsets[p]["offset"])) == (0, n, n)

    recs = res.get("rec")
    assert res.one("consumed") == total
    assert sorted(res.one("assignment")[topic]) == list(range(parts))
    for p in range(parts):
        mine = [r for r in recs if r["p"] == p]
        assert [r["o"] for r in mine] == list(range(len(mine))), f"partition {p} offsets"
        wanted = [r for i, r in enumerate(want) if i % parts == p]
        got = [from_js(r) for r in mine]
        assert got == wanted, f"partition {p}:\n" + diff(got, wanted)
    assert all(r["ts"] > 1_600_000_000_000 for r in recs)


@pytest.mark.timeout(60)
def test_produce_to_auto_created_topic(node_bin, js_broker, topic):
    """kafkajs's producer asks for allowAutoTopicCreation; klamm creates the topic on metadata."""
    want = expected("kjs-auto", 40, null_header=False)
    res = run_js(node_bin, "produce_consume.js", {
        "bootstrap": js_broker.bootstrap, "topic": topic, "partitions": 1, "create": False,
        "group": f"{topic}-g", "records": [to_js(r, 0) for r in want],
        "sends": [{"acks": -1, "compression": "gzip", "from": 0, "to": 40}]}).ok()
    assert res.one("sent") == 0
    [md] = [o["metadata"] for o in res.lines if "sent" in o]
    assert [(m["partition"], m["errorCode"], int(m["baseOffset"])) for m in md] == [(0, 0, 0)]
    got = [from_js(r) for r in res.get("rec")]
    assert got == want, diff(got, want)


@pytest.mark.timeout(60)
def test_kafkajs_reads_records_of_confluent_kafka(node_bin, js_broker, topic):
    """Records with null header values (which kafkajs cannot write) written by librdkafka."""
    want = expected("cf", 50)
    assert any(v is None for r in want for _, v in r.headers)
    create_topic(js_broker.bootstrap, topic, 1)
    confluent_produce(js_broker.bootstrap, topic, want, codec="gzip")
    res = run_js(node_bin, "produce_consume.js", {
        "bootstrap": js_broker.bootstrap, "topic": topic, "create": False, "group": f"{topic}-g",
        "records": [to_js(r, 0) for r in want], "sends": []}).ok()
    got = [from_js(r) for r in res.get("rec")]
    assert [r["o"] for r in res.get("rec")] == list(range(len(want)))
    assert got == want, diff(got, want)


# ------------------------------------------------------------------ 2. admin ---
@pytest.mark.timeout(60)
def test_admin(node_bin, js_broker, make_topic):
    t3, t1 = make_topic("three"), make_topic("one")
    res = run_js(node_bin, "admin.js", {"bootstrap": js_broker.bootstrap, "topics": [t3, t1],
                                        "badTopic": "bad topic name!"}).ok()
    steps = {o["step"]: o for o in res.lines if "step" in o}

    def result(name):
        o = steps[name]
        assert "error" not in o, f"{name}: {o['error']}"
        return o["result"]

    cluster = result("describeCluster")
    # One broker, or each node of a test cluster (KLAMM_TEST_BROKER=cluster).
    assert sorted(f"{b['host']}:{b['port']}" for b in cluster["brokers"]) == sorted(js_broker.bootstrap.split(","))
    ids = sorted(b["nodeId"] for b in cluster["brokers"])
    assert cluster["controller"] in ids
    assert isinstance(cluster["clusterId"], str) and cluster["clusterId"]

    assert result("createTopics") is True
    assert result("createTopicsAgain") is False  # kafkajs maps TOPIC_ALREADY_EXISTS to false
    bad = steps["createTopicsInvalid"]
    assert "error" in bad, bad
    assert "INVALID_TOPIC_EXCEPTION" in json.dumps(bad["error"]), bad

    listed = result("listTopics")
    assert t3 in listed and t1 in listed and "bad topic name!" not in listed

    md = {t["name"]: t for t in result("fetchTopicMetadata")["topics"]}
    assert set(md) == {t3, t1}
    for name, n in ((t3, 3), (t1, 1)):
        parts = sorted(md[name]["partitions"], key=lambda p: p["partitionId"])
        assert [p["partitionId"] for p in parts] == list(range(n))
        for p in parts:  # t3: the default replication factor (every broker); t1: one replica
            assert p["partitionErrorCode"] == 0 and p["leader"] == p["replicas"][0], p
            assert sorted(p["replicas"]) == (ids if name == t3 else p["replicas"]) and len(p["replicas"]) == \
                (len(ids) if name == t3 else 1), p
            assert sorted(p["isr"]) == sorted(p["replicas"]), p

    def offsets(name):
        return {o["partition"]: (int(o["low"]), int(o["high"]), int(o["offset"])) for o in result(name)}

    assert offsets("fetchTopicOffsetsEmpty") == {p: (0, 0, 0) for p in range(3)}
    assert offsets("fetchTopicOffsets") == {0: (0, 5, 5), 1: (0, 0, 0), 2: (0, 2, 2)}

    [cfg] = result("describeConfigs")
    assert cfg["errorCode"] == 0 and cfg["resourceName"] == t1
    assert {"name": "cleanup.policy", "value": "compact"} in cfg["configEntries"]

    assert result("createPartitions") is None  # kafkajs resolves createPartitions to undefined
    assert offsets("fetchTopicOffsetsGrown") == {0: (0, 5, 5), 1: (0, 0, 0), 2: (0, 2, 2), 3: (0, 0, 0)}

    assert result("deleteTopics") is None
    after = result("listTopicsAfterDelete")
    assert t1 not in after and t3 in after
    gone = steps["fetchTopicMetadataDeleted"]
    assert "error" in gone and "UNKNOWN_TOPIC_OR_PARTITION" in json.dumps(gone["error"]), gone



# --------------------------------------------------------- 3. consumer group ---
@pytest.mark.timeout(110)
def test_consumer_group(node_bin, js_broker, topic):
    parts, batches = 6, [60, 60, 30]
    group = f"{topic}-g"
    res = run_js(node_bin, "group.js", {"bootstrap": js_broker.bootstrap, "topic": topic, "group": group,
                                        "partitions": parts, "batches": batches}, timeout=105).ok()
    phases = {o["phase"]: o for o in res.lines if "phase" in o}
    steps = {o["step"]: o for o in res.lines if "step" in o}
    every = list(range(parts))

    def check_phase(name, members):
        ph = phases[name]
        sets = ph["assignments"]
        assert sorted(sets) == sorted(members)
        assert all(sets[m] for m in members), sets
        assert sorted(p for m in members for p in sets[m]) == every, sets  # disjoint + complete
        d = ph["described"]
        assert d["state"] == "Stable" and d["protocolType"] == "consumer", d
        assert d["protocol"] == "RoundRobinAssigner", d  # kafkajs's default assigner
        assert sorted(sorted(x["assignment"]) for x in d["members"]) == sorted(sets[m] for m in members), d
        assert sorted(x["clientId"] for x in d["members"]) == sorted(members), d

    check_phase("three", ["c1", "c2", "c3"])
    check_phase("two", ["c2", "c3"])
    check_phase("one", ["c4"])

    consumed = res.one("consumed")
    values = Counter(v for _, _, _, v in consumed)
    dups = {v: n for v, n in values.items() if n > 1}
    assert not dups, f"records delivered more than once: {sorted(dups)[:20]}"
    want = {f"{b}-{i}" for b, n in enumerate(batches, 1) for i in range(n)}
    assert set(values) == want, f"missing {sorted(want - set(values))[:20]}, unexpected {sorted(set(values) - want)[:20]}"
    by_batch = {b: {m for m, _, _, v in consumed if v.startswith(f"{b}-")} for b in (1, 2, 3)}
    assert by_batch[1] <= {"c1", "c2", "c3"} and by_batch[2] <= {"c2", "c3"} and by_batch[3] == {"c4"}, by_batch
    for m, p, o, v in consumed:  # partition/offset of each record are the ones it was written to
        b, i = map(int, v.split("-"))
        assert p == i % parts and o == sum(n // parts for n in batches[:b - 1]) + i // parts, (m, p, o, v)

    ends = {b: {str(p): sum(n // parts for n in batches[:b]) for p in every} for b in (1, 2, 3)}
    committed = {o["committed"]: o["offsets"] for o in res.lines if "committed" in o}
    assert committed == {f"batch{b}": ends[b] for b in (1, 2, 3)}

    def result(name):
        o = steps[name]
        assert "error" not in o, f"{name}: {o['error']}"
        return o["result"]

    listed = {g["groupId"]: g for g in result("listGroupsActive")["groups"]}
    assert listed.get(group, {}).get("protocolType") == "consumer", listed
    active = steps["deleteGroupsActive"]
    assert "error" in active and "NON_EMPTY_GROUP" in json.dumps(active["error"]), active
    stopped = result("describeGroupsStopped")
    assert stopped["state"] == "Empty" and stopped["members"] == [], stopped
    assert result("fetchOffsetsStopped") == ends[3]
    assert result("deleteGroups") == [{"groupId": group, "errorCode": 0}]
    assert group not in {g["groupId"] for g in result("listGroupsAfterDelete")["groups"]}
    assert result("fetchOffsetsAfterDelete") == {str(p): -1 for p in every}


@pytest.mark.persistence
@pytest.mark.timeout(90)
def test_group_resumes_after_broker_restart(node_bin, broker_factory, topic):
    """Records and the group's committed offsets survive a broker restart (SIGTERM + start)."""
    b = broker_factory(overrides=OVERRIDES)
    want = expected("kjs-restart", 42, null_header=False)
    cfg = {"bootstrap": b.bootstrap, "topic": topic, "partitions": 1, "group": f"{topic}-g",
           "records": [to_js(r, 0) for r in want]}
    first = run_js(node_bin, "produce_consume.js", {
        **cfg, "create": True, "expect": 30,
        "sends": [{"acks": -1, "compression": "gzip", "from": 0, "to": 30}]}).ok()
    assert [from_js(r) for r in first.get("rec")] == want[:30]
    b.restart()
    second = run_js(node_bin, "produce_consume.js", {
        **cfg, "create": False, "expect": 12, "settleMs": 1500,
        "sends": [{"acks": 1, "compression": "gzip", "from": 30, "to": 42}]}).ok()
    [line] = [o for o in second.lines if "sent" in o]
    assert [(m["partition"], int(m["baseOffset"])) for m in line["metadata"]] == [(0, 30)]
    recs = second.get("rec")
    assert [r["o"] for r in recs] == list(range(30, 42)), "resumed at the committed offset, once each"
    got = [from_js(r) for r in recs]
    assert got == want[30:], diff(got, want[30:])


@pytest.mark.single_node
@pytest.mark.timeout(90)
def test_kafkajs_over_mutual_tls(node_bin, topic, monkeypatch, pki):
    """kafkajs verifies the broker against the CA and authenticates with its client certificate."""
    import klamm.testing

    paths = pki["paths"]
    monkeypatch.setenv("KAFKAJS_SSL_CA", str(paths["ca"]))
    monkeypatch.setenv("KAFKAJS_SSL_CERT", str(paths["client_cert"]))
    monkeypatch.setenv("KAFKAJS_SSL_KEY", str(paths["client_key"]))
    want = expected("kjs-tls", 30, null_header=False)
    with klamm.testing.run_broker({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                                   "ssl.keystore.location": str(paths["server"]), "ssl.truststore.type": "PEM",
                                   "ssl.truststore.location": str(paths["ca"]), "ssl.client.auth": "required"}) as b:
        res = run_js(node_bin, "produce_consume.js", {
            "bootstrap": b.bootstrap_servers, "topic": topic, "partitions": 1, "create": True,
            "group": f"{topic}-g", "records": [to_js(r, 0) for r in want],
            "sends": [{"acks": -1, "compression": "gzip", "from": 0, "to": 30}]}).ok()
    assert res.one("consumed") == 30
    assert [from_js(r) for r in res.get("rec")] == want



SASL_PLAINTEXT = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                  "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                  'org.apache.kafka.common.security.plain.PlainLoginModule required '
                  'user_admin="admin-secret" user_alice="alice-secret";'}


def sasl_env(monkeypatch, mechanism: str, username: str, password: str) -> None:
    monkeypatch.setenv("KAFKAJS_SASL_MECHANISM", mechanism)
    monkeypatch.setenv("KAFKAJS_SASL_USERNAME", username)
    monkeypatch.setenv("KAFKAJS_SASL_PASSWORD", password)


def sasl_roundtrip(node: str, bootstrap: str, topic: str, prefix: str) -> None:
    """Create the topic, produce 30 records, consume them through a group."""
    want = expected(prefix, 30, null_header=False)
    res = run_js(node, "produce_consume.js", {
        "bootstrap": bootstrap, "topic": topic, "partitions": 2, "create": True, "group": f"{topic}-g",
        "records": [to_js(r, i % 2) for i, r in enumerate(want)],
        "sends": [{"acks": -1, "compression": "gzip", "from": 0, "to": 30}]}).ok()
    assert res.one("created") is True
    assert res.one("consumed") == 30 and sorted(res.one("assignment")[topic]) == [0, 1]
    for p in (0, 1):
        got = [from_js(r) for r in res.get("rec") if r["p"] == p]
        assert got == want[p::2], diff(got, want[p::2])


def sasl_refused(node: str, bootstrap: str, topic: str, mechanism: str) -> None:
    """kafkajs gives up at once with KafkaJSSASLAuthenticationError (not retriable), quoting the broker's
    SaslAuthenticate error message; `mechanism` as kafkajs names it in its message ('SCRAM SHA256')."""
    res = run_js(node, "produce_consume.js", {"bootstrap": bootstrap, "topic": topic, "partitions": 1,
                                              "create": True, "group": f"{topic}-g", "records": [], "sends": []},
                 timeout=40)
    assert res.rc == 1, res.lines
    error = res.one("error")
    assert error["name"] == "KafkaJSSASLAuthenticationError", error
    assert f"SASL {mechanism} authentication failed: Authentication failed" in error["message"], error


@pytest.mark.single_node
@pytest.mark.timeout(90)
def test_kafkajs_over_sasl_plain(node_bin, topic, monkeypatch):
    """kafkajs authenticates with PLAIN against the users of the listener's JAAS config and produces and
    consumes through a group; a wrong password, or an unknown user, is refused."""
    import klamm.testing

    with klamm.testing.run_broker(SASL_PLAINTEXT) as b:
        sasl_env(monkeypatch, "plain", "alice", "alice-secret")
        sasl_roundtrip(node_bin, b.bootstrap_servers, topic, "kjs-plain")
        for user, password in (("alice", "wrong"), ("mallory", "alice-secret")):
            sasl_env(monkeypatch, "plain", user, password)
            sasl_refused(node_bin, b.bootstrap_servers, f"{topic}-refused", "PLAIN")


@pytest.mark.single_node
@pytest.mark.timeout(90)
def test_kafkajs_over_sasl_scram_sha_256(node_bin, topic, monkeypatch):
    """An admin authenticated with PLAIN creates a SCRAM-SHA-256 user (AlterUserScramCredentials, through
    confluent-kafka); kafkajs authenticates as that user and produces and consumes through a group; the
    wrong password, or SCRAM-SHA-512 (no credential for it), is refused."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    import klamm.testing

    with klamm.testing.run_broker(SASL_PLAINTEXT) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"})
        upsert = UserScramCredentialUpsertion("dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                              b"dave-secret")
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(15)
        sasl_env(monkeypatch, "scram-sha-256", "dave", "dave-secret")
        sasl_roundtrip(node_bin, b.bootstrap_servers, topic, "kjs-scram")
        sasl_env(monkeypatch, "scram-sha-256", "dave", "wrong")
        sasl_refused(node_bin, b.bootstrap_servers, f"{topic}-refused", "SCRAM SHA256")
        sasl_env(monkeypatch, "scram-sha-512", "dave", "dave-secret")
        sasl_refused(node_bin, b.bootstrap_servers, f"{topic}-refused", "SCRAM SHA512")


from tests.integration.test_tls import pki  # noqa: E402,F401  (the certificate authority fixture)
