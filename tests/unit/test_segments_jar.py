"""klamm.spark.segments_jar: the JVM segment reader's jar, built once per source and PySpark version."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from klamm.spark import segments_jar  # noqa: E402


def test_the_jar_is_built_once_with_the_source_registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    built = segments_jar.jar()
    assert built.parent == tmp_path / "klamm" / "spark"
    with zipfile.ZipFile(built) as jar:
        assert jar.read("META-INF/services/org.apache.spark.sql.sources.DataSourceRegister").decode().strip() \
            == segments_jar.SOURCE_CLASS
        assert "klamm/spark/jvm/SegmentsSource.class" in jar.namelist()
    mtime = built.stat().st_mtime_ns
    assert segments_jar.jar() == built and built.stat().st_mtime_ns == mtime  # not built again
    assert [p.name for p in built.parent.iterdir()] == [built.name]  # no build directory left behind


def test_configure_adds_the_jar_to_spark_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(segments_jar.ENV, raising=False)

    class Builder:
        def __init__(self) -> None:
            self._options = {"spark.jars": "/opt/other.jar"}

        def config(self, key: str, value: str) -> Builder:
            self._options[key] = value
            return self

    builder = segments_jar.configure(Builder())
    path = str(segments_jar.jar())
    assert builder._options["spark.jars"] == f"/opt/other.jar,{path}"
    assert os.environ[segments_jar.ENV] == path


def test_without_a_jdk_the_jar_is_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(segments_jar.JarUnavailable, match="javac"):
        segments_jar.jar()
