"""The tools that speak the protocol with klamm's own client (client quotas in `klamm configs`, `klamm
metadata-quorum`, `klamm reassign-partitions`) reach a SASL_SSL broker with --command-config, as Kafka's tools
do: TLS against the CA given, SASL PLAIN with a Java sasl.jaas.config or librdkafka's sasl.username."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klamm.cli.main import main
from tests.integration.conftest import BrokerThread
from tests.integration.secured import JAAS, STANDARD_AUTHORIZER
from tests.integration.test_tls import pki  # noqa: F401  (a fixture)


@pytest.fixture
def broker(broker_factory: Any, pki: dict[str, Any]) -> BrokerThread:  # noqa: F811
    paths = pki["paths"]
    return broker_factory(**{"listeners": "SASL_SSL://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
                             "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
                             "ssl.keystore.type": "PEM", "ssl.keystore.location": str(paths["server"]),
                             "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"})


def command_config(tmp_path: Path, pki: dict[str, Any], user: str, password: str) -> str:  # noqa: F811
    path = tmp_path / f"{user}.properties"
    path.write_text(f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nssl.ca.location={pki['paths']['ca']}\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="{user}" password="{password}";\n')
    return str(path)


def tool(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_quotas_quorum_and_reassignments_over_sasl_ssl(broker: BrokerThread, tmp_path: Path,
                                                       pki: dict[str, Any],  # noqa: F811
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = f"localhost:{broker.port}"  # the certificate names localhost
    admin = command_config(tmp_path, pki, "admin", "admin-secret")
    assert tool(capsys, "configs", "--bootstrap-server", bootstrap, "--command-config", admin, "--alter",
                "--entity-type", "clients", "--entity-name", "app", "--add-config", "producer_byte_rate=1024"
                ) == (0, "Completed updating config for client app.\n", "")
    code, out, _ = tool(capsys, "configs", "--bootstrap-server", bootstrap, "--command-config", admin,
                        "--describe", "--entity-type", "clients", "--entity-name", "app")
    assert (code, out) == (0, "Quota configs for client-id 'app' are producer_byte_rate=1024.0\n")
    code, out, _ = tool(capsys, "metadata-quorum", "--bootstrap-server", bootstrap, "--command-config", admin,
                        "describe", "--status")
    assert code == 0 and "LeaderId:" in out
    assert tool(capsys, "reassign-partitions", "--bootstrap-server", bootstrap, "--command-config", admin,
                "--list") == (0, "No partition reassignments found.\n", "")
    # alice authenticates but may not alter the cluster's quotas; a wrong password does not authenticate
    alice = command_config(tmp_path, pki, "alice", "alice-secret")
    code, _, err = tool(capsys, "configs", "--bootstrap-server", bootstrap, "--command-config", alice, "--alter",
                        "--entity-type", "clients", "--entity-name", "app", "--add-config", "producer_byte_rate=1")
    assert code == 1 and "cluster_authorization_failed: Cluster authorization failed" in err
    wrong = command_config(tmp_path, pki, "admin", "wrong")
    code, _, err = tool(capsys, "metadata-quorum", "--bootstrap-server", bootstrap, "--command-config", wrong,
                        "describe", "--status")
    assert code == 1 and "Invalid username or password" in err
