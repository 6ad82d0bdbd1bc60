"""kcat (librdkafka CLI) against the broker: -L, -P with -K/-z/-H/-Z, -C -e -o beginning.

KLAMM_KCAT_ARGS adds extra kcat arguments (development only, e.g. against other brokers).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess

import pytest

from .helpers import (confluent_consume, confluent_produce, confluent_recs, create_topic,
                      kcat_json_lines, kcat_recs)
from .records import CODECS, diff, expected

pytestmark = [pytest.mark.timeout(120), pytest.mark.kcat]

EXTRA = shlex.split(os.environ.get("KLAMM_KCAT_ARGS", ""))


def kcat(exe: str, bootstrap: str, *args: str, stdin: str | None = None, timeout: float = 60):
    cmd = [exe, "-b", bootstrap, *EXTRA, *args]
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{shlex.join(cmd)} failed rc={p.returncode}\n{p.stderr}"
    assert "% ERROR" not in p.stderr and "Delivery failed" not in p.stderr, p.stderr
    return p.stdout


def test_metadata(kcat_bin, broker, make_topic):
    t = create_topic(broker.bootstrap, make_topic(), partitions=2)
    addresses = broker.bootstrap.split(",")  # one broker, or each node of a test cluster
    out = kcat(kcat_bin, broker.bootstrap, "-L", "-m", "15")
    assert f"{len(addresses)} brokers:" in out, out
    assert all(address in out for address in addresses), out
    assert f'topic "{t}" with 2 partitions' in out, out

    md = json.loads(kcat(kcat_bin, broker.bootstrap, "-L", "-J", "-m", "15", "-t", t))
    assert sorted(b["name"] for b in md["brokers"]) == sorted(addresses)
    ids = {b["id"] for b in md["brokers"]}
    (tm,) = md["topics"]
    assert tm["topic"] == t
    parts = sorted(tm["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == [0, 1]
    for p in parts:
        replicas = [r["id"] for r in p["replicas"]]
        assert sorted(replicas) == sorted(ids)  # the default replication factor: every broker
        assert p["leader"] == replicas[0]  # the preferred replica leads
        assert sorted(r["id"] for r in p["isrs"]) == sorted(ids)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume(kcat_bin, broker, topic, codec):
    create_topic(broker.bootstrap, topic)
    n = 25
    lines = [f"key-{i}:value {i} {codec}" for i in range(n)] + ["knull:"]
    kcat(kcat_bin, broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K", ":", "-z", codec,
         "-Z", "-H", "src=kcat", "-H", "n=1", stdin="\n".join(lines) + "\n")

    out = kcat(kcat_bin, broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
               "-J")
    msgs = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [m["offset"] for m in msgs] == list(range(n + 1))
    assert [m["key"] for m in msgs] == [f"key-{i}" for i in range(n)] + ["knull"]
    assert [m["payload"] for m in msgs] == [f"value {i} {codec}" for i in range(n)] + [None]
    for m in msgs:
        assert m["partition"] == 0
        assert m["headers"] == ["src", "kcat", "n", "1"]
        assert m["tstype"] == "create" and m["ts"] > 0

    out = kcat(kcat_bin, broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "20", "-e",
               "-f", "%o|%k|%s\\n")
    assert out.splitlines() == [f"{i}|key-{i}|value {i} {codec}" for i in range(20, n)] + [f"{n}|knull|"]

    # and another client agrees on what kcat wrote
    got = confluent_recs(confluent_consume(broker.bootstrap, topic, 0, 0, n + 1))
    assert got[3].key == b"key-3" and got[3].value == f"value 3 {codec}".encode()
    assert got[3].headers == (("src", b"kcat"), ("n", b"1"))
    assert got[n].value is None


def test_consume_what_others_produced(kcat_bin, broker, topic):
    create_topic(broker.bootstrap, topic)
    recs = expected("kc", 30)
    confluent_produce(broker.bootstrap, topic, recs, codec="zstd")
    p = subprocess.run([kcat_bin, "-b", broker.bootstrap, *EXTRA, "-C", "-t", topic, "-p", "0",
                        "-o", "beginning", "-e", "-J"], capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    msgs = kcat_json_lines(p.stdout)
    assert [m["offset"] for m in msgs] == list(range(30))
    got = kcat_recs(msgs)
    assert got == recs, diff(got, recs)
