"""`klamm storage` (kafka-storage.sh): random-uuid, format, info; and a formatted directory's identity is enforced."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from klamm.broker.broker import Broker
from klamm.cli.main import main
from klamm.cli.tools.storage import check_cluster_id
from klamm.cli.tools.common import ToolError
from klamm.config.broker import BrokerConfig
from klamm.controller.meta_properties import MetaPropertiesError, read_meta_properties

KLAMM = str(Path(sys.executable).parent / "klamm")


def config_file(tmp_path: Path, node_id: int = 2) -> tuple[Path, list[Path]]:
    dirs = [tmp_path / "a", tmp_path / "b"]
    path = tmp_path / "server.properties"
    path.write_text(f"node.id={node_id}\nlog.dirs={','.join(str(d) for d in dirs)}\n")
    return path, dirs


def test_random_uuid_is_a_kafka_cluster_id(capsys) -> None:
    assert main(["storage", "random-uuid"]) == 0
    cluster_id = capsys.readouterr().out.strip()
    check_cluster_id(cluster_id)  # 22 base64url characters of 16 bytes
    with pytest.raises(ToolError, match="does not appear to be a valid UUID"):
        check_cluster_id("not-a-uuid")


def test_format_writes_every_log_dir_then_refuses_to_format_again(tmp_path: Path, capsys) -> None:
    config, dirs = config_file(tmp_path)
    assert main(["storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"Formatting metadata directory {dirs[0]} with metadata.version 3.9-IV0.",
                   f"Formatting data directory {dirs[1]} with metadata.version 3.9-IV0."]
    props = [read_meta_properties(d) for d in dirs]
    assert {(p.cluster_id, p.node_id, p.version) for p in props} == {("MkU3OEVBNTcwNTJENDM2Qg", 2, 1)}
    assert props[0].directory_id != props[1].directory_id
    assert main(["storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(config)]) == 1
    assert capsys.readouterr().err == (f"Log directory {dirs[0]} is already formatted. Use --ignore-formatted to "
                                       "ignore this directory and format the others.\n")
    assert main(["storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(config), "-g"]) == 0
    assert capsys.readouterr().out == "All of the log directories are already formatted.\n"
    assert main(["storage", "info", "-c", str(config)]) == 0
    assert "cluster.id=MkU3OEVBNTcwNTJENDM2Qg node.id=2" in capsys.readouterr().out


def test_a_node_refuses_directories_of_another_cluster_or_node(tmp_path: Path) -> None:
    config, dirs = config_file(tmp_path)
    assert main(["storage", "format", "-t", "MkU3OEVBNTcwNTJENDM2Qg", "-c", str(config),
                 "--override", "node.id=3"]) == 0
    assert read_meta_properties(dirs[0]).node_id == 3  # --override beats the file
    broker = Broker(BrokerConfig.from_properties({"node.id": "2", "log.dirs": ",".join(map(str, dirs)),
                                                  "listeners": "PLAINTEXT://127.0.0.1:0"}))
    with pytest.raises(MetaPropertiesError, match="node.id 3, but this node is 2"):
        asyncio.run(broker.start())
    other = Broker(BrokerConfig.from_properties({"node.id": "3", "log.dirs": ",".join(map(str, dirs)),
                                                 "cluster.id": "AAAAAAAAAAAAAAAAAAAAAQ",
                                                 "listeners": "PLAINTEXT://127.0.0.1:0"}))
    with pytest.raises(MetaPropertiesError, match="does not match"):
        asyncio.run(other.start())


def test_the_command_line_tool(tmp_path: Path) -> None:
    config, dirs = config_file(tmp_path)
    uuid = subprocess.run([KLAMM, "storage", "random-uuid"], capture_output=True, text=True, check=True).stdout.strip()
    done = subprocess.run([KLAMM, "storage", "format", "--cluster-id", uuid, "--config", str(config)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and read_meta_properties(dirs[1]).cluster_id == uuid
    again = subprocess.run([KLAMM, "storage", "format", "--cluster-id", uuid, "--config", str(config)],
                           capture_output=True, text=True)
    assert again.returncode == 1 and "already formatted" in again.stderr
