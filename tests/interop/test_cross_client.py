"""Records written by one client are read identically by every other client.

Writers: Java 3.9.1 (snappy = xerial framing, zstd, gzip), librdkafka (lz4, snappy, gzip, none),
kafka-python (snappy, lz4), aiokafka (zstd, gzip).
(kcat as a writer is checked in test_kcat.py, so a kcat problem fails only there.)
Readers: confluent-kafka, kafka-python, aiokafka, Java, kcat.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from .helpers import (aio_consume, aio_produce, aio_recs, confluent_consume, confluent_produce,
                      confluent_recs, create_topic, kcat_json_lines, kcat_recs, kp_consume, kp_produce,
                      kp_recs)
from .records import Rec, diff, expected, from_java

pytestmark = pytest.mark.timeout(240)

N = 40
SIZE = 300


def _optional(request, fixture: str):
    """The fixture's value, or None when the tool is missing (a skip, not in CI)."""
    try:
        return request.getfixturevalue(fixture)
    except pytest.skip.Exception:
        return None


@pytest.fixture(scope="module")
def written(broker, request):
    """{topic: (writer, codec, expected records)} for every writer available."""
    bs = broker.bootstrap
    run = uuid.uuid4().hex[:6]
    out: dict[str, tuple[str, str, list[Rec]]] = {}

    def topic(writer, codec):
        t = f"x-{writer}-{codec}-{run}"
        create_topic(bs, t)
        return t

    java = _optional(request, "java_client")
    if java is not None:
        cmds, jt = [], []
        for codec in ["snappy", "zstd", "gzip"]:
            t = topic("java", codec)
            cmds.append(["produce", bs, t, N, codec, f"size={SIZE}", f"prefix=java{codec}"])
            jt.append((t, codec))
        for res in java.batch(cmds):
            res.ok()
        for t, codec in jt:
            out[t] = ("java", codec, expected(f"java{codec}", N, SIZE))

    for codec in ["lz4", "snappy", "gzip", "none"]:
        t = topic("librdkafka", codec)
        recs = expected(f"rd{codec}", N, SIZE)
        res = confluent_produce(bs, t, recs, codec=codec)
        assert all(e is None for _, _, e in res), res
        out[t] = ("librdkafka", codec, recs)

    for codec in ["snappy", "lz4"]:
        t = topic("kafka-python", codec)
        recs = expected(f"kp{codec}", N, SIZE, null_header=False, both_null=False)
        kp_produce(bs, t, recs, codec=codec)
        out[t] = ("kafka-python", codec, recs)

    for codec in ["zstd", "gzip"]:
        t = topic("aiokafka", codec)
        recs = expected(f"aio{codec}", N, SIZE, both_null=False)
        aio_produce(bs, t, recs, codec=codec)
        out[t] = ("aiokafka", codec, recs)

    return out


def check(written, read) -> None:
    """read(topic, count) -> list[Rec]; collects every mismatch before failing."""
    problems = []
    for t, (writer, codec, want) in written.items():
        try:
            got = read(t, len(want))
        except Exception as e:
            problems.append(f"{writer}/{codec}: {type(e).__name__}: {e}")
            continue
        d = diff(got, want)
        if d:
            problems.append(f"{writer}/{codec}: {d}")
    assert not problems, "\n".join(problems)


def test_confluent_reads_all(broker, written):
    check(written, lambda t, n: confluent_recs(confluent_consume(broker.bootstrap, t, 0, 0, n)))


def test_kafka_python_reads_all(broker, written):
    check(written, lambda t, n: kp_recs(kp_consume(broker.bootstrap, t, 0, 0, n)))


def test_aiokafka_reads_all(broker, written):
    check(written, lambda t, n: aio_recs(aio_consume(broker.bootstrap, t, 0, 0, n)))


@pytest.mark.java
def test_java_reads_all(broker, written, java_client):
    items = list(written.items())
    results = java_client.batch([["consume", broker.bootstrap, t, 0, 0, len(w[2])] for t, w in items])
    by_topic = dict(zip([t for t, _ in items], results))

    def read(t, n):
        r = by_topic[t].ok()
        assert [o["offset"] for o in r.lines] == list(range(n))
        return [from_java(o) for o in r.lines]

    check(written, read)


@pytest.mark.kcat
def test_kcat_reads_all(broker, written, kcat_bin):
    def read(t, n):
        p = subprocess.run([kcat_bin, "-b", broker.bootstrap, "-C", "-t", t, "-p", "0",
                            "-o", "beginning", "-e", "-J"], capture_output=True, timeout=60)
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        msgs = kcat_json_lines(p.stdout)
        assert [m["offset"] for m in msgs] == list(range(n))
        return kcat_recs(msgs)

    check(written, read)
