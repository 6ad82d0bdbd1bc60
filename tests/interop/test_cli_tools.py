"""`klamm topics|console-producer|console-consumer|consumer-groups|configs` as subprocesses against a broker.

The tools are confluent-kafka clients, so these run against any broker; the
output is compared exactly where Kafka's tools fix the format.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import confluent_consume, confluent_produce, confluent_recs, create_topic, wait_for
from .records import Rec

pytestmark = [pytest.mark.timeout(180), pytest.mark.single_node]  # output compared with one broker's address and configs

KLAMM = str(Path(sys.executable).parent / "klamm")


def klamm(*args: str, stdin: str | None = None, ok: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
    p = subprocess.run([KLAMM, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
    if ok:
        assert p.returncode == 0, f"klamm {' '.join(args)} failed rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def consume(bootstrap: str, topic: str, *extra: str) -> list[str]:
    p = klamm("console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
              "--timeout-ms", "3000", *extra)
    return p.stdout.splitlines()


# ------------------------------------------------------------------------ topics


def test_topics_create_describe_alter_delete(broker, topic):
    b = broker.bootstrap
    out = klamm("topics", "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2",
                "--replication-factor", "1", "--config", "retention.ms=123456", "--config", "cleanup.policy=compact")
    assert out.stdout == f"Created topic {topic}.\n"

    again = klamm("topics", "--bootstrap-server", b, "--create", "--topic", topic, ok=False)
    assert again.returncode == 1
    assert again.stdout.startswith("Error while executing topic command : ") and "already exists" in again.stdout
    assert klamm("topics", "--bootstrap-server", b, "--create", "--topic", topic, "--if-not-exists").stdout == ""

    assert topic in klamm("topics", "--bootstrap-server", b, "--list").stdout.splitlines()
    assert klamm("topics", "--bootstrap-server", b, "--list", "--topic", topic).stdout == f"{topic}\n"

    lines = klamm("topics", "--bootstrap-server", b, "--describe", "--topic", topic).stdout.splitlines()
    assert re.fullmatch(rf"Topic: {re.escape(topic)}\tTopicId: [A-Za-z0-9_-]{{22}}\tPartitionCount: 2\t"
                        r"ReplicationFactor: 1\tConfigs: cleanup.policy=compact,retention.ms=123456", lines[0]), lines[0]
    assert lines[1:] == [f"\tTopic: {topic}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A"
                         for p in (0, 1)]

    assert klamm("topics", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "3").stdout == ""
    wait_for(lambda: "PartitionCount: 3" in klamm("topics", "--bootstrap-server", b, "--describe",
                                                   "--topic", topic).stdout, what="3 partitions")

    assert klamm("topics", "--bootstrap-server", b, "--delete", "--topic", topic).stdout == ""
    wait_for(lambda: topic not in klamm("topics", "--bootstrap-server", b, "--list").stdout.splitlines(),
             what="topic deleted")
    missing = klamm("topics", "--bootstrap-server", b, "--delete", "--topic", topic, ok=False)
    assert missing.returncode == 1
    assert missing.stdout == f"Error while executing topic command : Topic '{topic}' does not exist as expected\n"
    assert klamm("topics", "--bootstrap-server", b, "--delete", "--topic", topic, "--if-exists").returncode == 0


def test_topics_bad_arguments(broker):
    p = klamm("topics", "--bootstrap-server", broker.bootstrap, "--create", ok=False)
    assert p.returncode == 2 and "topic" in p.stderr
    p = klamm("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", "x", "--partitions", "0",
              ok=False)
    assert p.returncode == 1 and p.stdout == "Error while executing topic command : The partitions must be greater than 0\n"


# ------------------------------------------------------------------------ console producer / consumer


def test_console_round_trip_with_keys_and_headers(broker, topic):
    b = broker.bootstrap
    create_topic(b, topic)
    lines = "h1:a,h2:b\tk1\tv1\nNULL\tk2\tv2 with\ttab\nx:1\tNULL\tNULL\n"
    klamm("console-producer", "--bootstrap-server", b, "--topic", topic, "--property", "parse.key=true",
          "--property", "parse.headers=true", "--property", "null.marker=NULL", "--compression-codec", "zstd",
          stdin=lines)
    got = confluent_recs(confluent_consume(b, topic, 0, 0, 3))
    assert [(r.key, r.value) for r in got] == [(b"k1", b"v1"), (b"k2", b"v2 with\ttab"), (None, None)]
    assert got[0].headers == (("h1", b"a"), ("h2", b"b"))

    out = consume(b, topic, "--property", "print.key=true", "--property", "print.headers=true",
                  "--property", "print.partition=true", "--property", "print.offset=true")
    assert out == ["Partition:0\tOffset:0\th1:a,h2:b\tk1\tv1",
                   "Partition:0\tOffset:1\tNO_HEADERS\tk2\tv2 with\ttab",
                   "Partition:0\tOffset:2\tx:1\tnull\tnull"]

    out = consume(b, topic, "--property", "print.timestamp=true", "--property", "print.key=true",
                  "--property", "key.separator=|", "--property", "null.literal=-", "--max-messages", "3")
    assert [re.sub(r"CreateTime:\d{13}", "CreateTime:T", line) for line in out] == [
        "CreateTime:T|k1|v1", "CreateTime:T|k2|v2 with\ttab", "CreateTime:T|-|-"]


def test_console_consumer_partition_offset_and_counts(broker, topic):
    b = broker.bootstrap
    create_topic(b, topic, partitions=2)
    confluent_produce(b, topic, [Rec(b"k", f"p0-{i}".encode(), ()) for i in range(5)], partition=0)
    confluent_produce(b, topic, [Rec(b"k", f"p1-{i}".encode(), ()) for i in range(3)], partition=1)
    p = klamm("console-consumer", "--bootstrap-server", b, "--topic", topic, "--partition", "0", "--offset", "3",
              "--timeout-ms", "2000")
    assert p.stdout.splitlines() == ["p0-3", "p0-4"]
    assert "Processed a total of 2 messages" in p.stderr
    assert sorted(consume(b, topic)) == sorted([f"p0-{i}" for i in range(5)] + [f"p1-{i}" for i in range(3)])
    p = klamm("console-consumer", "--bootstrap-server", b, "--topic", topic, "--from-beginning", "--max-messages", "4")
    assert len(p.stdout.splitlines()) == 4 and "Processed a total of 4 messages" in p.stderr
    # latest (the default) without new records: nothing
    p = klamm("console-consumer", "--bootstrap-server", b, "--topic", topic, "--timeout-ms", "1500")
    assert p.stdout == ""
    bad = klamm("console-consumer", "--bootstrap-server", b, "--topic", topic, "--from-beginning", "--offset", "1",
                ok=False)
    assert bad.returncode == 1 and "from-beginning and offset cannot be specified together" in bad.stderr


def test_console_producer_file_with_progress(broker, topic, tmp_path):
    b = broker.bootstrap
    create_topic(b, topic)
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"key-{i}:value-{i}\n" for i in range(5000)))
    p = klamm("console-producer", "--bootstrap-server", b, "--topic", topic, "--file", str(path), "--progress",
              "--property", "parse.key=true", "--property", "key.separator=:", "--compression-codec", "lz4")
    assert "100%" in p.stderr and "5000 records" in p.stderr
    got = confluent_recs(confluent_consume(b, topic, 0, 0, 5000))
    assert got[4999].key == b"key-4999" and got[4999].value == b"value-4999"
    # without --progress and not on a terminal: no bar
    p = klamm("console-producer", "--bootstrap-server", b, "--topic", topic, "--file", str(path))
    assert p.stderr == ""


def test_console_producer_reports_a_bad_line(broker, topic):
    create_topic(broker.bootstrap, topic)
    p = klamm("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
              "--property", "parse.key=true", stdin="k\tv\nnokey\n", ok=False)
    assert p.returncode == 1 and "No key separator found on line number 2: 'nokey'" in p.stderr


# ------------------------------------------------------------------------ consumer groups


def group_cmd(b: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    return klamm("consumer-groups", "--bootstrap-server", b, *args, ok=ok)


def test_consumer_groups_describe_reset_delete(broker, make_topic):
    b = broker.bootstrap
    topic = create_topic(b, make_topic(), partitions=2)
    group = make_topic("group")
    confluent_produce(b, topic, [Rec(None, f"a{i}".encode(), ()) for i in range(6)], partition=0)
    confluent_produce(b, topic, [Rec(None, f"b{i}".encode(), ()) for i in range(4)], partition=1)
    p = klamm("console-consumer", "--bootstrap-server", b, "--topic", topic, "--group", group, "--from-beginning",
              "--timeout-ms", "4000")
    assert len(p.stdout.splitlines()) == 10

    assert group in group_cmd(b, "--list").stdout.splitlines()
    p = group_cmd(b, "--describe", "--group", group)
    assert f"Consumer group '{group}' has no active members." in p.stderr
    w = max(15, len(group))
    t = max(15, len(topic))
    header = (f"{'GROUP':<{w}} {'TOPIC':<{t}} {'PARTITION':<10} {'CURRENT-OFFSET':<15} {'LOG-END-OFFSET':<15} "
              f"{'LAG':<15} {'CONSUMER-ID':<15} {'HOST':<15} CLIENT-ID")

    def row(partition, offset, end, lag):
        return (f"{group:<{w}} {topic:<{t}} {partition:<10} {offset:<15} {end:<15} {lag:<15} "
                f"{'-':<15} {'-':<15} -")

    assert p.stdout.split("\n") == ["", header, row(0, 6, 6, 0), row(1, 4, 4, 0), ""]

    p = group_cmd(b, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest")
    assert "--execute option is missing" in p.stderr
    assert p.stdout.split("\n") == ["", f"{'GROUP':<30} {'TOPIC':<30} {'PARTITION':<10} {'NEW-OFFSET':<15}",
                                    f"{group:<30} {topic:<30} {'0':<10} {'0':<15}",
                                    f"{group:<30} {topic:<30} {'1':<10} {'0':<15}", ""]
    assert row(0, 6, 6, 0) in group_cmd(b, "--describe", "--group", group).stdout  # dry run changed nothing

    group_cmd(b, "--reset-offsets", "--group", group, "--topic", f"{topic}:1", "--shift-by", "-3", "--execute")
    group_cmd(b, "--reset-offsets", "--group", group, "--topic", f"{topic}:0", "--to-offset", "99", "--execute")
    out = group_cmd(b, "--describe", "--group", group).stdout
    assert row(0, 6, 6, 0) in out and row(1, 1, 4, 3) in out  # 99 clamped to the log end

    p = group_cmd(b, "--reset-offsets", "--group", group, "--all-topics", "--to-datetime", "2000-01-01T00:00:00.000",
                  "--execute")
    assert f"{group:<30} {topic:<30} {'1':<10} {'0':<15}" in p.stdout
    p = klamm("console-consumer", "--bootstrap-server", b, "--topic", topic, "--group", group, "--timeout-ms", "4000")
    assert len(p.stdout.splitlines()) == 10  # everything again, from the reset offsets

    p = group_cmd(b, "--delete-offsets", "--group", group, "--topic", f"{topic}:0")
    assert p.stdout.split("\n") == [f"Request succeed for deleting offsets with topic {topic}:0 group {group}", "",
                                    f"{'TOPIC':<30} {'PARTITION':<15} {'STATUS':<15}",
                                    f"{topic:<30} {'0':<15} {'Successful':<15}", ""]
    out = group_cmd(b, "--describe", "--group", group).stdout
    assert f"{topic:<{t}} 0 " not in out and row(1, 4, 4, 0) in out

    assert group_cmd(b, "--delete", "--group", group).stdout == (
        f"Deletion of requested consumer groups ('{group}') was successful.\n")
    p = group_cmd(b, "--delete", "--group", group, ok=False)
    assert p.returncode == 1 and f"* Group '{group}' could not be deleted due to: " in p.stdout
    p = group_cmd(b, "--describe", "--group", group)
    assert f"Error: Consumer group '{group}' does not exist." in p.stdout


def test_consumer_groups_active_member(broker, make_topic):
    b = broker.bootstrap
    topic = create_topic(b, make_topic(), partitions=2)
    group = make_topic("group")
    confluent_produce(b, topic, [Rec(None, b"x", ())] * 3, partition=0)
    member = subprocess.Popen([KLAMM, "console-consumer", "--bootstrap-server", b, "--topic", topic, "--group", group,
                               "--from-beginning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def stable():
            out = group_cmd(b, "--describe", "--group", group, "--members").stdout
            rows = out.split("\n")
            return len(rows) > 2 and rows[2].split()[-1:] == ["2"] and out
        out = wait_for(stable, what="a stable member")
        lines = out.split("\n")
        assert lines[0] == "" and lines[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert lines[2].split()[0] == group and lines[2].split()[-1] == "2"
        p = group_cmd(b, "--describe", "--group", group, "--state")
        assert re.search(rf"{re.escape(group)}\s+127\.0\.0\.1:{broker.port}  \(1\)\s+range\s+Stable\s+1", p.stdout), p.stdout
        p = group_cmd(b, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest", "--execute", ok=False)
        assert (f"Error: Assignments can only be reset if the group '{group}' is inactive, "
                "but the current state is Stable.") in p.stdout
        wait_for(lambda: "console-consumer" in group_cmd(b, "--describe", "--group", group).stdout.split("\n")[2],
                 what="offsets rows with the member")
    finally:
        member.terminate()
        member.wait(20)


# ------------------------------------------------------------------------ configs


def test_configs_describe_and_alter(broker, topic):
    b = broker.bootstrap
    create_topic(b, topic, config={"retention.ms": "86400000"})
    base = ["configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic]
    out = klamm(*base, "--describe").stdout.splitlines()
    assert out[0] == f"Dynamic configs for topic {topic} are:"
    assert out[1] == "  retention.ms=86400000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=86400000}"
    assert len(out) == 2

    p = klamm(*base, "--alter", "--add-config", "segment.ms=3600000,cleanup.policy=[compact,delete]",
              "--delete-config", "retention.ms")
    assert p.stdout == f"Completed updating config for topic {topic}.\n"
    out = klamm(*base, "--describe").stdout.splitlines()
    assert [line.split(" ")[2] for line in out[1:]] == ["cleanup.policy=compact,delete", "segment.ms=3600000"]
    assert "DEFAULT_CONFIG:log.cleanup.policy=delete" in out[1]
    assert "Configs: cleanup.policy=compact,delete,segment.ms=3600000" in klamm(
        "topics", "--bootstrap-server", b, "--describe", "--topic", topic).stdout

    p = klamm(*base, "--alter", "--delete-config", "retention.ms", ok=False)
    assert p.returncode == 1 and "Invalid config(s): retention.ms" in p.stderr
    out = klamm(*base, "--describe", "--all").stdout.splitlines()
    assert out[0] == f"All configs for topic {topic} are:"
    retention = [line for line in out if line.startswith("  retention.ms=")]
    # (Kafka would list synonyms={DEFAULT_CONFIG:log.retention.hours=168} here; klamm lists none yet)
    assert len(retention) == 1 and retention[0].startswith("  retention.ms=604800000 sensitive=false synonyms={"), out

    broker_out = klamm("configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "1",
                       "--describe", "--all").stdout.splitlines()
    assert broker_out[0] == "All configs for broker 1 are:"
    assert any(line.startswith("  log.retention.hours=") for line in broker_out)


# ------------------------------------------------------------------------ leader-election


def test_leader_election_reports_as_kafkas_tool(broker, topic, tmp_path):
    b = broker.bootstrap
    create_topic(b, topic)
    p = klamm("leader-election", "--bootstrap-server", b, "--election-type", "preferred", "--topic", topic,
              "--partition", "0")
    assert p.stdout == f"Valid replica already elected for partitions {topic}-0\n"
    election = tmp_path / "election.json"
    election.write_text(f'{{"partitions": [{{"topic": "{topic}", "partition": 0}}, '
                        f'{{"topic": "{topic}", "partition": 99}}]}}')
    p = klamm("leader-election", "--bootstrap-server", b, "--election-type", "PREFERRED", "--path-to-json-file",
              str(election), ok=False)
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    assert lines[0] == f"Valid replica already elected for partitions {topic}-0"
    assert lines[1].startswith(f"Error completing leader election (PREFERRED) for partition: {topic}-99: ")
    assert p.stderr == "1 replica(s) could not be elected\n"


def test_leader_election_bad_arguments(broker, tmp_path):
    b = broker.bootstrap
    p = klamm("leader-election", "--bootstrap-server", b, "--topic", "t", "--partition", "0", ok=False)
    assert (p.returncode, p.stderr) == (1, "Missing required option(s): --election-type\n")
    p = klamm("leader-election", "--bootstrap-server", b, "--election-type", "unclean", ok=False)
    assert p.stderr == ("One and only one of the following options is required: --topic, --all-topic-partitions, "
                        "--path-to-json-file\n")
    p = klamm("leader-election", "--bootstrap-server", b, "--election-type", "unclean", "--topic", "t", ok=False)
    assert p.stderr == "Missing required option(s): --partition\n"
    duplicated = tmp_path / "dup.json"
    duplicated.write_text('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}')
    p = klamm("leader-election", "--bootstrap-server", b, "--election-type", "unclean", "--path-to-json-file",
              str(duplicated), ok=False)
    assert p.stderr == "Replica election data contains duplicate partitions: t-0\n"
