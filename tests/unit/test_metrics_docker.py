"""The docker/ files, checked without a Docker engine: what they reference exists and parses.

The dashboard's queries are checked against a live scrape in
tests/interop/test_metrics.py; here: the image's command line is a valid klamm
configuration, and the files the Dockerfile and compose file name are there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from klamm.cli.main import build_parser, load_config

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def _dockerfile() -> str:
    return (DOCKER / "Dockerfile").read_text()


def _exec_form(instruction: str) -> list[str]:
    """The JSON array of an exec-form instruction: "ENTRYPOINT", or "HEALTHCHECK .* CMD" (a regex)."""
    text = _dockerfile().replace("\\\n", " ")
    match = re.search(rf"^{instruction}\s+(\[.*?\])\s*$", text, re.MULTILINE)
    assert match, f"no exec-form {instruction}"
    return json.loads(match.group(1))


def test_entrypoint_is_a_valid_broker_configuration():
    entrypoint = _exec_form("ENTRYPOINT")
    assert entrypoint[:2] == ["klamm", "serve"]
    args = build_parser().parse_args(entrypoint[1:])
    config = load_config(args.config, args.override)
    assert config.listeners == ["PLAINTEXT://0.0.0.0:9092"]
    assert config.advertised_listeners == ["PLAINTEXT://localhost:9092"]
    assert config.log_dirs == ["/var/lib/klamm"]
    assert config.metrics_port == 9404 and config.metrics_host == "0.0.0.0"


def test_image_runs_as_non_root_with_a_data_volume_and_health_check():
    dockerfile = _dockerfile()
    assert re.search(r"^FROM python:3\.11-slim", dockerfile, re.MULTILINE)
    assert re.search(r"^USER klamm$", dockerfile, re.MULTILINE)
    assert 'VOLUME ["/var/lib/klamm"]' in dockerfile
    healthcheck = _exec_form("HEALTHCHECK .* CMD")
    assert healthcheck[1] == "/opt/klamm/healthcheck.py"
    assert "COPY docker/healthcheck.py /opt/klamm/healthcheck.py" in dockerfile


def test_compose_mounts_files_that_exist():
    compose = (DOCKER / "docker-compose.yml").read_text()
    for source in re.findall(r"^\s+- (\./[^:]+):", compose, re.MULTILINE):
        assert (DOCKER / source).exists(), source
    assert "dockerfile: docker/Dockerfile" in compose
    assert 'targets: ["klamm:9404"]' in (DOCKER / "prometheus.yml").read_text()


def test_dashboard_parses_and_uses_the_provisioned_datasource():
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "klamm.json").read_text())
    datasource = (DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    uid = re.search(r"uid: (\S+)", datasource).group(1)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == uid
            assert panel["targets"] and all(t["expr"] for t in panel["targets"])
    provider = (DOCKER / "grafana" / "provisioning" / "dashboards" / "klamm.yml").read_text()
    assert "path: /var/lib/grafana/dashboards" in provider


def test_cluster_compose_nodes_are_valid_configurations() -> None:
    compose = (DOCKER / "docker-compose.cluster.yml").read_text()
    cluster_id = re.search(r'CLUSTER_ID: "([^"]+)"', compose).group(1)
    from klamm.cli.tools.storage import check_cluster_id
    check_cluster_id(cluster_id)
    for source in re.findall(r"^\s+- (\./[^:]+):", compose, re.MULTILINE):
        assert (DOCKER / source).exists(), source
    configs = {n: load_config(DOCKER / "cluster" / f"node{n}.properties", []) for n in (1, 2, 3)}
    assert configs[1].process_roles == ["broker", "controller"]
    assert all(configs[n].process_roles == ["broker"] for n in (2, 3))
    assert {c.controller_quorum_voters[0] for c in configs.values()} == {"1@klamm1:9093"}
    for n, config in configs.items():
        assert f"node{n}.properties" in compose and config.node_id == n
