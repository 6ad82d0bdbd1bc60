"""`klamm dump-log` on segment files a broker wrote (the broker is stopped first)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import confluent_produce, create_topic
from .records import Rec

pytestmark = [pytest.mark.timeout(180), pytest.mark.persistence, pytest.mark.single_node]

KLAMM = str(Path(sys.executable).parent / "klamm")

BATCH_RE = re.compile(
    r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: (-?\d+) lastSequence: (-?\d+) "
    r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: (\d+) isTransactional: false "
    r"isControl: false deleteHorizonMs: OptionalLong.empty position: (\d+) CreateTime: (\d+) size: (\d+) "
    r"magic: 2 compresscodec: (\w+) crc: (\d+) isvalid: true")


def dump(*args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([KLAMM, "dump-log", *args], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"dump-log {args} failed rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def test_dump_log_of_a_stopped_broker(broker_factory, topic):
    b = broker_factory(overrides={"log.index.interval.bytes": "200"})
    create_topic(b.bootstrap, topic)
    lines = "".join(f"h:{i}\tkey-{i}\tvalue-{i}\n" for i in range(30))
    # --sync: one record per batch; compressed ones batched (librdkafka sends tiny batches uncompressed)
    for codec, sync in (("none", ["--sync"]), ("gzip", []), ("zstd", [])):
        subprocess.run([KLAMM, "console-producer", "--bootstrap-server", b.bootstrap, "--topic", topic,
                        "--property", "parse.key=true", "--property", "parse.headers=true",
                        "--compression-codec", codec, *sync],
                       input=lines, text=True, check=True, capture_output=True, timeout=60)
    idempotent = [Rec(b"k", b"idem", ())] * 3
    confluent_produce(b.bootstrap, topic, idempotent, extra={"enable.idempotence": True})
    b.stop()

    segment = b.log_dir / f"{topic}-0" / "00000000000000000000"
    log, index, timeindex = (str(segment) + s for s in (".log", ".index", ".timeindex"))

    out = dump("--files", log).stdout.splitlines()
    assert out[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    batches = [BATCH_RE.fullmatch(line) for line in out[2:]]
    assert all(batches), out
    assert [m.group(12) for m in batches[:3]] == ["none", "none", "none"]  # --sync: one record per batch
    assert {m.group(12) for m in batches} == {"none", "gzip", "zstd"}
    position, next_offset = 0, 0
    for m in batches:  # contiguous offsets and positions
        assert int(m.group(1)) == next_offset and int(m.group(9)) == position
        next_offset = int(m.group(2)) + 1
        position += int(m.group(11))
    assert next_offset == 93 and position == Path(log).stat().st_size
    last = batches[-1]
    assert last.group(4) == "0" and last.group(5) == "2" and int(last.group(6)) >= 0  # idempotent producer

    deep = dump("--files", log, "--print-data-log").stdout.splitlines()
    records = [line for line in deep if line.startswith("| ")]
    assert len(records) == 93
    assert re.fullmatch(r"\| offset: 0 CreateTime: \d+ keySize: 5 valueSize: 7 sequence: -1 headerKeys: \[h\] "
                        r"key: key-0 payload: value-0", records[0]), records[0]
    assert records[31].endswith("headerKeys: [h] key: key-1 payload: value-1")
    assert re.fullmatch(r"\| offset: 92 CreateTime: \d+ keySize: 1 valueSize: 4 sequence: 2 headerKeys: \[\] "
                        r"key: k payload: idem", records[92]), records[92]
    assert dump("--files", log, "--deep-iteration").stdout.count("payload") == 0

    idx = dump("--files", f"{index},{timeindex}")
    assert idx.stderr == ""  # every entry points at the batch it names
    entries = [line for line in idx.stdout.splitlines() if line.startswith("offset: ")]
    assert entries, idx.stdout
    ends = {int(m.group(9)): int(m.group(2)) for m in batches}
    for entry in entries:
        offset, pos = map(int, re.fullmatch(r"offset: (\d+) position: (\d+)", entry).groups())
        assert ends[pos] == offset
    times = [line for line in idx.stdout.splitlines() if line.startswith("timestamp: ")]
    assert times and all(re.fullmatch(r"timestamp: \d+ offset: \d+", t) for t in times)

    sane = dump("--files", f"{index},{timeindex}", "--index-sanity-check").stdout.splitlines()
    assert sane == [f"Dumping {index}", f"{index} passed sanity check.",
                    f"Dumping {timeindex}", f"{timeindex} passed sanity check."]


def test_dump_log_reports_a_corrupt_index(tmp_path):
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    bad = tmp_path / "00000000000000000000.index"
    bad.write_bytes(b"\x00" * 12)  # not whole 8-byte entries
    p = subprocess.run([KLAMM, "dump-log", "--files", str(bad)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "not a multiple of 8" in p.stderr
    p = subprocess.run([KLAMM, "dump-log", "--files", str(tmp_path / "x.snapshot")], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and "Ignoring unknown file" in p.stderr
