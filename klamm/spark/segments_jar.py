"""The JVM reader of format("klamm-segments"): klamm/spark/jvm/*.java, built into a jar for the installed PySpark.

A Python data source hands Spark its rows through a Python worker, and Spark's
ingestion of them costs more CPU a row than a whole parquet read. The JVM reader
(klamm.spark.jvm.SegmentsSource) reads the same slices into Spark's column
vectors inside the executor: the same options and rows, at the speed of Spark's
own file sources. It needs a JDK's `javac` where the session starts; the jar is
built once per source and PySpark version, into ~/.cache/klamm/spark (or
$XDG_CACHE_HOME/klamm/spark), and Spark ships it to executors (spark.jars).

    spark = klamm.spark.configure(SparkSession.builder.master("local[*]")).getOrCreate()
    klamm.spark.register(spark)

Spark refuses a format name that both a JVM source and a Python one claim, so
`register` leaves the Python reader out of "klamm-segments" when the JVM reader is
on the session's class path (it stays reachable as "klamm-segments-python"), and
PySpark's own discovery of `pyspark_klamm_segments` skips it when ENV is set.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Any

SOURCES = Path(__file__).resolve().parent / "jvm"
SOURCE_CLASS = "klamm.spark.jvm.SegmentsSource"
ENV = "KLAMM_SPARK_SEGMENTS_JAR"
_SERVICE = "META-INF/services/org.apache.spark.sql.sources.DataSourceRegister"


class JarUnavailable(RuntimeError):
    """The JVM reader cannot be built here (no JDK, or PySpark is not installed)."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "klamm" / "spark"


def _javac() -> str:
    java_home = os.environ.get("JAVA_HOME")
    candidate = os.path.join(java_home, "bin", "javac") if java_home else None
    found = candidate if candidate and os.access(candidate, os.X_OK) else shutil.which("javac")
    if found is None:
        raise JarUnavailable("the JVM reader of klamm-segments needs a JDK's javac (Java 17 or later)")
    return found


def jar() -> Path:
    """The reader's jar, built on first use for this PySpark."""
    try:
        import pyspark
    except ImportError as exc:
        raise JarUnavailable("PySpark is not installed (pip install klamm[spark])") from exc
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256(pyspark.__version__.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    target = _cache_dir() / f"klamm-segments-{pyspark.__version__}-{digest.hexdigest()[:16]}.jar"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    spark_jars = Path(pyspark.__file__).resolve().parent / "jars"
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        classes = Path(tmp) / "classes"
        done = subprocess.run([_javac(), "--release", "17", "-nowarn", "-cp", f"{spark_jars}/*", "-d", str(classes),
                               *map(str, sources)], capture_output=True, text=True)
        if done.returncode:
            raise JarUnavailable(f"javac failed on {SOURCES}: {done.stderr[-2000:]}")
        built = Path(tmp) / target.name
        with zipfile.ZipFile(built, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            out.writestr(_SERVICE, SOURCE_CLASS + "\n")
            for path in sorted(classes.rglob("*.class")):
                out.write(path, path.relative_to(classes).as_posix())
        os.replace(built, target)  # atomic: a concurrent build of the same sources writes the same bytes
    return target


def configure(builder: Any) -> Any:
    """`builder` (a SparkSession.Builder) with the JVM reader's jar added to spark.jars."""
    path = str(jar())
    existing = getattr(builder, "_options", {}).get("spark.jars")
    builder.config("spark.jars", ",".join(filter(None, [existing, path])))
    os.environ[ENV] = path  # inherited by Spark's JVM and its Python workers: see pyspark_klamm_segments
    return builder


def on_class_path(spark: Any) -> bool:
    """Whether `spark`'s driver can load the JVM reader (False for a Spark Connect session)."""
    try:
        jvm = spark.sparkContext._jvm
        return bool(jvm.org.apache.spark.util.Utils.classIsLoadable(SOURCE_CLASS))
    except Exception:  # Spark Connect has no JVM in this process
        return False
