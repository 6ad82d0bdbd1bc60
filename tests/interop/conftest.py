"""Fixtures for external interop tools: the Java client and kcat."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def skip_or_fail(reason: str) -> None:
    """Skip when a tool is missing, but fail in CI (or with KLAMM_REQUIRE_INTEROP_TOOLS=1)."""
    ci = os.environ.get("CI", "")
    if ci not in ("", "0", "false", "False") or os.environ.get("KLAMM_REQUIRE_INTEROP_TOOLS") == "1":
        pytest.fail(reason + " (required because CI/KLAMM_REQUIRE_INTEROP_TOOLS is set)")
    pytest.skip(reason)

JAVA_SRC = ROOT / "tests" / "interop" / "java" / "KlammClient.java"
JAVA_LIBS = ROOT / ".cache" / "java-libs"
JAVA_BUILD = ROOT / ".cache" / "java-build"
JARS = ["kafka-clients", "slf4j-api", "lz4-java", "snappy-java", "zstd-jni"]


@dataclass
class JavaResult:
    rc: int
    lines: list[dict] = field(default_factory=list)
    stderr: str = ""

    @property
    def error(self) -> dict | None:
        for o in self.lines:
            if "error" in o and "i" not in o:
                return o
        return None

    def ok(self) -> "JavaResult":
        assert self.rc == 0, f"Java client failed rc={self.rc}: {self.lines[-3:]}\n{self.stderr[-4000:]}"
        return self


class JavaClient:
    """Runs KlammClient (Java Kafka client 3.9.1) subcommands."""

    def __init__(self, classpath: str):
        self.classpath = classpath

    def _java(self, args: list[str], stdin: str | None, timeout: float):
        cmd = ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx256m",
               "-cp", self.classpath, "KlammClient", *args]
        return subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)

    def run(self, *args: str, timeout: float = 90) -> JavaResult:
        p = self._java([str(a) for a in args], None, timeout)
        return JavaResult(p.returncode, _json_lines(p.stdout), p.stderr)

    def batch(self, commands: list[list], timeout: float = 180) -> list[JavaResult]:
        """Runs several subcommands in one JVM; returns one result per command."""
        text = "\n".join(" ".join(str(a) for a in c) for c in commands) + "\n"
        p = self._java(["batch"], text, timeout)
        results: list[JavaResult] = []
        cur: JavaResult | None = None
        for o in _json_lines(p.stdout):
            if "batch" in o and "args" in o:
                cur = JavaResult(-1)
            elif "batch_end" in o:
                assert cur is not None
                cur.rc = o["rc"]
                cur.stderr = p.stderr
                results.append(cur)
                cur = None
            elif cur is not None:
                cur.lines.append(o)
        assert len(results) == len(commands), (
            f"Java batch ended after {len(results)} of {len(commands)} commands (rc={p.returncode})\n"
            f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
        return results


def _json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def compile_java(name: str) -> str:
    """Compile tests/interop/java/<name>.java (if stale) into .cache/; return the classpath to run it.

    Skips (or fails under CI) when the JDK or the client jars are missing.
    """
    if not shutil.which("java") or not shutil.which("javac"):
        skip_or_fail("java/javac not installed (need a JDK 17)")
    missing = [j for j in JARS if not (JAVA_LIBS / f"{j}.jar").is_file()]
    if missing:
        skip_or_fail(f"Java client jars missing in {JAVA_LIBS} ({', '.join(missing)}): "
                     "run scripts/test-deps.sh")
    source = ROOT / "tests" / "interop" / "java" / f"{name}.java"
    build = JAVA_BUILD if name == "KlammClient" else ROOT / ".cache" / f"java-build-{name}"
    jars = [str(JAVA_LIBS / f"{j}.jar") for j in JARS]
    compiled = build / f"{name}.class"
    build.mkdir(parents=True, exist_ok=True)
    # make test runs test files in parallel processes: one compiles while the others wait for its classes
    with open(build.parent / f"{build.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not compiled.exists() or compiled.stat().st_mtime < source.stat().st_mtime:
            p = subprocess.run(["javac", "-nowarn", "-encoding", "UTF-8", "--release", "17",
                                "-cp", ":".join(jars), "-d", str(build), str(source)],
                               capture_output=True, text=True, timeout=180)
            assert p.returncode == 0, f"javac failed:\n{p.stdout}\n{p.stderr}"
    return ":".join([str(build), *jars])


@pytest.fixture(scope="session")
def java_client() -> JavaClient:
    """Compiles KlammClient.java once (if stale) and returns a runner."""
    return JavaClient(compile_java("KlammClient"))


@pytest.fixture(scope="session")
def kcat_bin() -> str:
    exe = shutil.which("kcat") or shutil.which("kafkacat")
    if not exe:
        skip_or_fail("kcat not installed: run scripts/test-deps.sh (apt-get install -y kcat)")
    return exe
