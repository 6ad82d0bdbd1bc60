"""The Apache Kafka Java client 3.9.1 (default settings: idempotent producer) against the broker.

JVM work is batched: a module fixture runs all produce/consume commands in one JVM.
"""

from __future__ import annotations

import pytest

from .helpers import admin, confluent_consume, confluent_recs, wait_for
from .records import CODECS, diff, expected, from_java

pytestmark = [pytest.mark.timeout(240), pytest.mark.java]

COUNT = 30
SIZE = 200
MANY = 3000
TS_BASE = 1_700_000_000_000


@pytest.fixture(scope="module")
def roundtrip(java_client, broker, request):
    """One JVM: per codec create + produce + consume all + consume from the middle."""
    bs = broker.bootstrap
    suffix = request.node.name.replace("/", "-")[-40:].strip("-.")
    topics = {c: f"java-{c}-{abs(hash(suffix)) % 10**8}" for c in CODECS}
    topics["many"] = f"java-many-{abs(hash(suffix)) % 10**8}"
    cmds = []
    for c in CODECS:
        t = topics[c]
        cmds += [["admin-create", bs, t, 1],
                 ["produce", bs, t, COUNT, c, f"size={SIZE}", f"prefix=j{c}"],
                 ["consume", bs, t, 0, 0, COUNT],
                 ["consume", bs, t, 0, 10, 5]]
    t = topics["many"]
    cmds += [["admin-create", bs, t, 1],
             ["produce", bs, t, MANY, "lz4", "size=50", "prefix=many", "linger=20", "batch=16384"],
             ["consume", bs, t, 0, 0, "all", 60000]]
    res = java_client.batch(cmds, timeout=240)
    out = {}
    for k, c in enumerate([*CODECS, "many"]):
        out[c] = res[4 * k: 4 * k + 4] if c != "many" else res[4 * k: 4 * k + 3]
    return topics, out


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_produce_and_consume(roundtrip, broker, codec):
    topics, out = roundtrip
    created, produced, consumed, middle = out[codec]
    created.ok()
    produced.ok()
    acks = sorted(produced.lines, key=lambda o: o["i"])
    assert [(o["i"], o["partition"], o["offset"]) for o in acks] == [(i, 0, i) for i in range(COUNT)]
    want = expected(f"j{codec}", COUNT, SIZE)

    consumed.ok()
    assert [o["offset"] for o in consumed.lines] == list(range(COUNT))
    got = [from_java(o) for o in consumed.lines]
    assert got == want, diff(got, want)
    assert [o["timestamp"] for o in consumed.lines] == [o["timestamp"] for o in acks]
    assert all(o["timestampType"] == "CreateTime" for o in consumed.lines)

    middle.ok()
    assert [o["offset"] for o in middle.lines] == list(range(10, 15))
    assert [from_java(o) for o in middle.lines] == want[10:15]

    # librdkafka reads what the Java client wrote (snappy: xerial framing)
    got = confluent_recs(confluent_consume(broker.bootstrap, topics[codec], 0, 0, COUNT))
    assert got == want, diff(got, want)


def test_many_batches_idempotent(roundtrip):
    topics, out = roundtrip
    created, produced, consumed = out["many"]
    created.ok()
    produced.ok()
    assert sorted(o["offset"] for o in produced.lines) == list(range(MANY))
    consumed.ok()
    assert [o["offset"] for o in consumed.lines] == list(range(MANY))
    got = [from_java(o) for o in consumed.lines]
    want = expected("many", MANY, 50)
    assert got == want, diff(got, want)


def test_admin(java_client, broker, make_topic):
    bs = broker.bootstrap
    ta, tb = make_topic("a"), make_topic("b")
    res = java_client.batch([
        ["admin-create", bs, ta, 3],
        ["admin-create", bs, ta, 3],
        ["admin-create", bs, tb, 1, 1, "retention.ms=3600000", "cleanup.policy=delete"],
        ["admin-list", bs],
        ["admin-describe", bs, ta, tb],
        ["admin-describe-cluster", bs],
        ["admin-delete", bs, ta],
        ["admin-delete", bs, make_topic("never")],
    ])
    create_a, dup, create_b, listed, described, cluster, deleted, del_missing = res
    create_a.ok()
    assert dup.rc == 3 and dup.error["error"] == "TopicExistsException", dup.lines
    create_b.ok()
    listed.ok()
    assert {ta, tb} <= set(listed.lines[0]["topics"])

    described.ok()
    da, db = described.lines
    cluster.ok()
    (c,) = cluster.lines
    # One broker, or each node of a test cluster (KLAMM_TEST_BROKER=cluster).
    assert sorted(f"{n['host']}:{n['port']}" for n in c["nodes"]) == sorted(broker.bootstrap.split(","))
    ids = sorted(n["id"] for n in c["nodes"])
    assert c["controller"] in ids and c["clusterId"]
    assert da["name"] == ta and db["name"] == tb
    assert not da["internal"]
    assert da["topicId"] not in ("AAAAAAAAAAAAAAAAAAAAAA", "null") and da["topicId"] != db["topicId"]
    assert [p["partition"] for p in da["partitions"]] == [0, 1, 2]
    for p in da["partitions"]:  # the default replication factor: every broker, the preferred one leading
        assert sorted(p["replicas"]) == ids and sorted(p["isr"]) == ids and p["leader"] == p["replicas"][0]
    for p in db["partitions"]:  # replication factor 1
        assert len(p["replicas"]) == 1 and p["isr"] == p["replicas"] and p["leader"] == p["replicas"][0]

    deleted.ok()
    assert del_missing.rc == 3 and del_missing.error["error"] == "UnknownTopicOrPartitionException"
    a = admin(bs)
    wait_for(lambda: ta not in a.list_topics(timeout=10).topics, what=f"{ta} deleted")
    after = java_client.run("admin-list", bs).ok()
    topics = set(after.lines[0]["topics"])
    assert ta not in topics and tb in topics


def test_list_offsets(java_client, broker, topic):
    bs = broker.bootstrap
    n = 20
    res = java_client.batch([
        ["admin-create", bs, topic, 1],
        ["admin-list-offsets", bs, topic, 0, "earliest", "latest", "max-timestamp"],
        ["produce", bs, topic, n, "zstd", f"ts={TS_BASE}", "prefix=lo"],
        ["admin-list-offsets", bs, topic, 0, "earliest", "latest", "max-timestamp",
         TS_BASE - 1, TS_BASE + 5, TS_BASE + n - 1, TS_BASE + 100],
    ])
    created, empty, produced, offs = res
    created.ok()
    empty.ok()
    e = {o["spec"]: o for o in empty.lines}
    assert e["earliest"]["offset"] == 0 and e["latest"]["offset"] == 0
    assert e["max-timestamp"]["offset"] == -1
    produced.ok()
    assert sorted(o["timestamp"] for o in produced.lines) == [TS_BASE + i for i in range(n)]
    offs.ok()
    o = {x["spec"]: x for x in offs.lines}
    assert o["earliest"]["offset"] == 0
    assert o["latest"]["offset"] == n
    assert (o["max-timestamp"]["offset"], o["max-timestamp"]["timestamp"]) == (n - 1, TS_BASE + n - 1)
    assert (o[str(TS_BASE - 1)]["offset"], o[str(TS_BASE - 1)]["timestamp"]) == (0, TS_BASE)
    assert (o[str(TS_BASE + 5)]["offset"], o[str(TS_BASE + 5)]["timestamp"]) == (5, TS_BASE + 5)
    assert o[str(TS_BASE + n - 1)]["offset"] == n - 1
    assert o[str(TS_BASE + 100)]["offset"] == -1


@pytest.mark.single_node
def test_admin_describe_pages_through_describe_topic_partitions(java_client, broker_factory):
    """The Java admin (3.7+) describes topics with DescribeTopicPartitions when the broker offers it, following
    next_cursor; with max.request.partition.size.limit=2 a topic of 5 partitions takes three requests."""
    from tests.conftest import free_port
    from tests.interop.test_metrics import scrape, total

    metrics_port = free_port()
    broker = broker_factory({"max.request.partition.size.limit": 2, "metrics.port": metrics_port})
    bs = broker.bootstrap
    created, described = java_client.batch([["admin-create", bs, "paged", 5], ["admin-describe", bs, "paged"]])
    created.ok()
    described.ok()
    (topic,) = described.lines
    assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2, 3, 4]
    assert all(p["leader"] == 1 and p["isr"] == [1] for p in topic["partitions"])
    assert total(scrape(metrics_port), "klamm_requests_total", api="DescribeTopicPartitions") == 3


@pytest.mark.single_node
def test_java_client_over_tls(java_client, tmp_path, monkeypatch, pki):
    """The Java client verifies the broker's certificate against a PEM trust store and produces and consumes
    over TLS; with ssl.client.auth=required it authenticates with a PEM key store."""
    import klamm.testing

    paths = pki["paths"]
    client_pem = tmp_path / "client.pem"
    client_pem.write_text(pki["text"]["client_key"] + pki["text"]["client_cert"])
    props = tmp_path / "client.properties"
    props.write_text(f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={paths['ca']}\n"
                     f"ssl.keystore.type=PEM\nssl.keystore.location={client_pem}\n")
    monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", str(props))
    with klamm.testing.run_broker({"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                                   "ssl.keystore.location": str(paths["server"]), "ssl.truststore.type": "PEM",
                                   "ssl.truststore.location": str(paths["ca"]), "ssl.client.auth": "required"}) as b:
        bs = b.bootstrap_servers
        created, produced, consumed = java_client.batch([
            ["admin-create", bs, "java-tls", 1], ["produce", bs, "java-tls", 50, "lz4", "size=300"],
            ["consume", bs, "java-tls", 0, 0, 50]])
        created.ok()
        produced.ok()
        consumed.ok()
        assert len(consumed.lines) == 50



SASL_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
PLAIN_USERS = 'user_admin="admin-secret" user_alice="alice-secret"'
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def sasl_listener(protocol: str, log_dir, **overrides) -> dict:
    """A single SASL_PLAINTEXT or SASL_SSL listener offering PLAIN and SCRAM; PLAIN users from Kafka's
    listener-prefixed JAAS key."""
    return {"listeners": f"{protocol}://127.0.0.1:0", "log.dirs": str(log_dir),
            "sasl.enabled.mechanisms": SASL_MECHANISMS,
            f"listener.name.{protocol.lower()}.plain.sasl.jaas.config": f"{PLAIN_MODULE} required {PLAIN_USERS};",
            **overrides}


def sasl_client(path, protocol: str, mechanism: str, user: str, password: str, ca=None) -> str:
    """A KLAMM_CLIENT_PROPERTIES file: security.protocol, sasl.mechanism, sasl.jaas.config (and a PEM trust store)."""
    module = PLAIN_MODULE if mechanism == "PLAIN" else SCRAM_MODULE
    text = (f"security.protocol={protocol}\nsasl.mechanism={mechanism}\n"
            f'sasl.jaas.config={module} required username="{user}" password="{password}";\n')
    if ca is not None:
        text += f"ssl.truststore.type=PEM\nssl.truststore.location={ca}\n"
    path.write_text(text)
    return str(path)


def refused(result) -> None:
    """The Java client gave up with SaslAuthenticationException (a produce: on the record's callback)."""
    errors = [o for o in result.lines if "error" in o]
    assert result.rc == 3 and errors, (result.rc, result.lines, result.stderr[-3000:])
    assert {o["error"] for o in errors} == {"SaslAuthenticationException"}, errors
    assert all("Authentication failed" in o["message"] for o in errors), errors


@pytest.mark.single_node
def test_java_client_over_sasl_plain_then_scram_over_sasl_ssl(java_client, tmp_path, monkeypatch, pki):  # noqa: F811
    """PLAIN (PlainLoginModule) over SASL_PLAINTEXT: create a topic, produce, consume, and create SCRAM users
    with Admin.alterUserScramCredentials; then, on the same data over SASL_SSL, the SCRAM-SHA-512 user
    (ScramLoginModule) produces and consumes; wrong passwords fail with SaslAuthenticationException."""
    import klamm.testing

    data, ca = tmp_path / "data", pki["paths"]["ca"]
    topic = "java-sasl"
    monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", sasl_client(tmp_path / "plain.properties", "SASL_PLAINTEXT",
                                                              "PLAIN", "admin", "admin-secret"))
    with klamm.testing.run_broker(sasl_listener("SASL_PLAINTEXT", data)) as b:
        bs = b.bootstrap_servers
        created, produced, consumed, up512, up256, described, described_all = java_client.batch([
            ["admin-create", bs, topic, 1], ["produce", bs, topic, 40, "lz4", "size=200", "prefix=plain"],
            ["consume", bs, topic, 0, 0, 40],
            ["scram-upsert", bs, "carol", "SCRAM-SHA-512", 8192, "carol-secret-512"],
            ["scram-upsert", bs, "carol", "SCRAM-SHA-256", 4096, "carol-secret-256"],
            ["scram-describe", bs, "carol"], ["scram-describe", bs]])
        created.ok()
        produced.ok()
        assert sorted(o["offset"] for o in produced.lines) == list(range(40))
        consumed.ok()
        assert [from_java(o) for o in consumed.lines] == expected("plain", 40, 200)
        up512.ok()
        up256.ok()
        assert up512.lines == [{"upserted": "carol", "mechanism": "SCRAM-SHA-512", "iterations": 8192}]
        described.ok()
        (carol,) = described.lines
        assert carol["user"] == "carol"
        assert sorted((c["mechanism"], c["iterations"]) for c in carol["credentials"]) == [
            ("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)]
        described_all.ok()
        assert described_all.lines == described.lines  # PLAIN users have no SCRAM credential

        # PLAIN with a wrong password, or a user the JAAS config does not know
        for user, password in (("admin", "wrong"), ("mallory", "admin-secret")):
            monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", sasl_client(
                tmp_path / f"{user}.properties", "SASL_PLAINTEXT", "PLAIN", user, password))
            refused(java_client.run("admin-list", bs))

    # The same data behind a SASL_SSL listener: the credentials are the controller's, they survive the restart
    with klamm.testing.run_broker(sasl_listener("SASL_SSL", data, **{
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki["paths"]["server"])})) as b:
        bs = b.bootstrap_servers
        monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", sasl_client(tmp_path / "carol.properties", "SASL_SSL",
                                                                  "SCRAM-SHA-512", "carol", "carol-secret-512", ca))
        produced, consumed, described = java_client.batch([
            ["produce", bs, topic, 40, "zstd", "size=200", "prefix=scram"], ["consume", bs, topic, 0, 0, 80],
            ["scram-describe", bs, "carol"]])
        produced.ok()
        assert sorted(o["offset"] for o in produced.lines) == list(range(40, 80))
        consumed.ok()
        assert [from_java(o) for o in consumed.lines] == expected("plain", 40, 200) + expected("scram", 40, 200)
        described.ok()
        assert sorted((c["mechanism"], c["iterations"]) for c in described.lines[0]["credentials"]) == [
            ("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)]

        # SCRAM-SHA-512 with SCRAM-SHA-256's password, and a user with no credential: SaslAuthenticationException
        for user, password in (("carol", "carol-secret-256"), ("nobody", "carol-secret-512")):
            monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", sasl_client(
                tmp_path / f"bad-{user}.properties", "SASL_SSL", "SCRAM-SHA-512", user, password, ca))
            produce_refused, consume_refused, admin_refused = java_client.batch([
                ["produce", bs, topic, 1, "none"], ["consume", bs, topic, 0, 0, 1], ["scram-describe", bs]])
            refused(produce_refused)
            refused(consume_refused)
            refused(admin_refused)


@pytest.mark.single_node
def test_java_client_reauthenticates_over_sasl(java_client, tmp_path, monkeypatch):
    """KIP-368: with connections.max.reauth.ms the broker gives the session a lifetime (SaslAuthenticate v1)
    and the Java client re-authenticates on its open connections before it ends; records keep flowing."""
    import klamm.testing

    monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", sasl_client(tmp_path / "alice.properties", "SASL_PLAINTEXT",
                                                              "PLAIN", "alice", "alice-secret"))
    with klamm.testing.run_broker(sasl_listener("SASL_PLAINTEXT", tmp_path / "data",
                                                **{"connections.max.reauth.ms": 1500})) as b:
        bs = b.bootstrap_servers
        created, produced, consumed = java_client.batch([
            ["admin-create", bs, "java-reauth", 1],
            ["produce", bs, "java-reauth", 50, "none", "prefix=reauth", "rate=10", "linger=0"],
            ["consume", bs, "java-reauth", 0, 0, 50]])
        created.ok()
        produced.ok()
        consumed.ok()
        assert [from_java(o) for o in consumed.lines] == expected("reauth", 50)

        async def counts():
            accepted = sum(p.connections_accepted for p in b.broker._processors)
            return accepted, b.broker.metrics.registry.get_sample_value(
                "klamm_requests_total", {"api": "SaslHandshake", "version": "1"}) or 0

        import asyncio
        accepted, handshakes = asyncio.run_coroutine_threadsafe(counts(), b.loop).result(10)
    assert handshakes > accepted, (handshakes, accepted)  # some connection authenticated again


from tests.integration.test_tls import pki  # noqa: E402,F401  (the certificate authority fixture)


OAUTHBEARER_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


@pytest.mark.single_node
def test_java_client_over_oauthbearer_unsecured_tokens(java_client, tmp_path, monkeypatch):
    """OAUTHBEARER with Kafka's development tokens: the Java client's default login callback handler makes an
    unsigned JWS (it needs Jackson, taken from PySpark's jars here, as an application ships it) and the broker's
    default validator checks it; the principal is the token's sub, so ACL-free produce and consume work, and a
    token without the scope the listener requires is refused."""
    import klamm.testing
    from pathlib import Path

    import pyspark

    from .conftest import JavaClient

    jars = sorted(str(j) for j in (Path(pyspark.__file__).parent / "jars").glob("jackson-*.jar")
                  if j.name.split("-")[1] in ("core", "databind", "annotations"))
    assert len(jars) == 3, jars
    java = JavaClient(java_client.classpath + ":" + ":".join(jars))
    listener = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path / "data"),
                "sasl.enabled.mechanisms": "OAUTHBEARER",
                "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
                    f'{OAUTHBEARER_MODULE} required unsecuredValidatorRequiredScope="kafka";'}

    def client(path: str, options: str) -> str:
        file = tmp_path / path
        file.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
                        f"sasl.jaas.config={OAUTHBEARER_MODULE} required {options};\n")
        return str(file)

    with klamm.testing.run_broker(listener) as b:
        bs = b.bootstrap_servers
        monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", client(
            "alice.properties", 'unsecuredLoginStringClaim_sub="alice" unsecuredLoginListClaim_scope=",kafka"'))
        created, produced, consumed = java.batch([
            ["admin-create", bs, "java-oauth", 1], ["produce", bs, "java-oauth", 30, "none", "prefix=oauth"],
            ["consume", bs, "java-oauth", 0, 0, 30]])
        created.ok()
        produced.ok()
        consumed.ok()
        assert [from_java(o) for o in consumed.lines] == expected("oauth", 30)
        monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", client("noscope.properties",
                                                             'unsecuredLoginStringClaim_sub="mallory"'))
        refused_result = java.run("admin-list", bs)
        errors = [o for o in refused_result.lines if "error" in o]
        assert refused_result.rc == 3 and {o["error"] for o in errors} == {"SaslAuthenticationException"}, (
            refused_result.lines, refused_result.stderr[-3000:])


@pytest.mark.single_node
def test_java_delegation_tokens(java_client, tmp_path, monkeypatch):
    """Admin's createDelegationToken, describe, renew and expire as a PLAIN user; then a consumer that
    authenticates with the token (ScramLoginModule tokenauth="true") reads as the token's owner."""
    import base64

    import klamm.testing

    data = tmp_path / "data"
    plain = sasl_client(tmp_path / "alice.properties", "SASL_PLAINTEXT", "PLAIN", "alice", "alice-secret")
    with klamm.testing.run_broker(sasl_listener("SASL_PLAINTEXT", data, **{
            "delegation.token.secret.key": "java-token-secret"})) as b:
        bs = f"127.0.0.1:{b.port}"
        monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", plain)
        made = java_client.run("token-create", bs, "User:admin").ok().lines[0]
        assert (made["owner"], made["requester"], made["renewers"]) == ("User:alice", "User:alice", ["User:admin"])
        day_ms = 24 * 3600 * 1000
        assert (made["expiry"] - made["issue"], made["max"] - made["issue"]) == (day_ms, 7 * day_ms)
        assert [t["tokenId"] for t in java_client.run("token-describe", bs).ok().lines] == [made["tokenId"]]
        renewed = java_client.run("token-renew", bs, made["hmac"], 60_000).ok().lines[0]
        assert made["issue"] < renewed["expiry"] < made["expiry"]

        java_client.run("admin-create", bs, "java-tokens", 1).ok()
        java_client.run("produce", bs, "java-tokens", 20, "none", "prefix=tok").ok()
        token = tmp_path / "token.properties"
        token.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                         f'sasl.jaas.config={SCRAM_MODULE} required username="{made["tokenId"]}" '
                         f'password="{made["hmac"]}" tokenauth="true";\n')
        monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", str(token))
        consumed = java_client.run("consume", bs, "java-tokens", 0, 0, 20).ok()
        assert [from_java(o) for o in consumed.lines] == expected("tok", 20)
        refused_here = java_client.run("token-create", bs)  # a token cannot make tokens
        assert [o.get("error") for o in refused_here.lines] == ["UnsupportedByAuthenticationException"]

        monkeypatch.setenv("KLAMM_CLIENT_PROPERTIES", plain)
        assert java_client.run("token-expire", bs, made["hmac"], -1).ok().lines
        assert java_client.run("token-describe", bs).ok().lines == []
        assert len(base64.b64decode(made["hmac"])) == 64  # HMAC-SHA512
