#!/usr/bin/env bash
# Runs aiokafka's own test suite (tests/, its integration tests included) against klamm.
#
#   scripts/aiokafka_suite.sh AIOKAFKA_CHECKOUT [single|cluster] [pytest args...]
#
# AIOKAFKA_CHECKOUT is an aiokafka source tree (git clone https://github.com/aio-libs/aiokafka). The
# suite runs in a venv of its own (AK_VENV, default /tmp/aiokvenv, created on first use with the
# checkout installed editable, C extensions built, and the test requirements of requirements-ci.txt
# but gssapi, ruff, mypy and the coverage tools), never in klamm's .venv.
#
# aiokafka's tests/conftest.py starts a docker image (docker/, Kafka 2.8.1 in its Makefile) and runs
# Kafka's shell tools in it. A small pytest plugin (written to WORK, loaded with -p) replaces those
# fixtures before pytest reads them: kafka_server is the running klamm (host, port, ssl_port,
# sasl_plain_port, sasl_ssl_port), acl_manager runs `klamm acls` and kafka_config `klamm configs`
# (as kafka-acls.sh and kafka-configs.sh in the container, here as the super user admin over
# SASL_PLAINTEXT instead of through ZooKeeper), ssl_folder holds the certificates of the checkout's
# gen-ssl-certs.sh (openssl and keytool). kerberos_utils skips the GSSAPI tests: klamm has no
# Kerberos mechanism (and there is no KDC here).
#
# klamm gets the settings of the image's start-kafka.sh: listeners PLAINTEXT, SSL (the script's
# PKCS12 key store, ssl.client.auth=required), SASL_PLAINTEXT and SASL_SSL (PLAIN with the JAAS
# file's users admin, test and test2; SCRAM-SHA-256/512, users added by the tests), num.partitions=2,
# auto.create.topics.enable=true, an authorizer with allow.everyone.if.no.acl.found and
# super.users=User:admin. Differences: ssl.enabled.protocols=TLSv1.2 (the image also lists TLSv1 and
# TLSv1.1, which klamm does not offer), the key store type PKCS12 (the file is PKCS12 whatever its
# .jks name), GSSAPI not enabled; group.initial.rebalance.delay.ms=0 and
# offsets.topic.num.partitions=2 to keep the run short.
#
#   single   one `klamm serve` with the four listeners.
#   cluster  three processes as kafka_python_suite.sh's cluster (node 0 broker and controller, nodes 1
#            and 2 brokers, default.replication.factor=3, min.insync.replicas=2, internal topics at RF
#            3), each with the four listeners; the suite bootstraps from node 1 (broker only). Brokers
#            talk to each other and to the controller over SASL_PLAINTEXT as admin, so the tests'
#            cluster ACLs (a DENY for User:test) leave replication alone.
#
# Not klamm's, in a cluster: test_admin's test_metadata, test_describe_cluster and
# test_describe_configs_broker take the cluster for one broker (`[broker_id] = ...brokers.keys()`,
# `len(brokers) == 1`). Now and then, as the tests produce with acks=1 and take the high watermark to
# be the log end at once (so on one broker): test_kafka_consumer_offsets_search_many_partitions finds
# nothing (offsets_for_times at once on a new topic: a record past the HW is not found, in Kafka too,
# until the followers have fetched it), test_consumer_seek_to_end reads a record at once after
# seek_to_end (the latest offset is the HW, which a follower may not have taken past the last acks=1
# record yet); test_concurrent_send_on_different_connection_groups fetches from a random broker at
# once after checking the new topic on another (brokers apply metadata on their own, in Kafka too).
# test_manual_subscribe_pattern failed once in 2026-11-26's runs (partition 1 read twice, partition 0
# not at all) and passed the 6 reruns: not explained. test_consumer_seek_forward_getmany failed once in
# 2026-12-03's run (count_fetch_requests 0 != 1) and passed alone: its consumer's fetcher had already fetched from
# the partition's leader while seek_to_committed asked the coordinator, another broker. Skipped: the two
# GSSAPI tests, test_sasl_unknown_topic_describe (Kafka < 1.0 only), and test_protocol's 103 cases of an
# empty parametrization.
#
# KAFKA_VERSION (default 2.8.1, the Makefile's) gates the tests (@kafka_versions). Broker logs and
# the pytest output stay in WORK (default: a new /tmp/klamm-ak.XXXX).
set -euo pipefail

AK=${1:?usage: $0 AIOKAFKA_CHECKOUT [single|cluster] [pytest args...]}
AK=$(cd "$AK" && pwd)
MODE=${2:-single}
shift $(( $# >= 2 ? 2 : 1 ))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KLAMM=${KLAMM_BIN:-$ROOT/.venv/bin/klamm}
AK_VENV=${AK_VENV:-/tmp/aiokvenv}
WORK=${WORK:-$(mktemp -d /tmp/klamm-ak.XXXX)}
KAFKA_VERSION=${KAFKA_VERSION:-2.8.1}

if [ ! -x "$AK_VENV/bin/python" ]; then
    python3 -m venv "$AK_VENV"
    "$AK_VENV/bin/pip" install -q Cython==3.2.2 pytest==9.0.2 pytest-asyncio==1.3.0 pytest-mock==3.15.1 \
        pytest-timeout docker==7.1.0 async-timeout==5.0.1 cramjam==2.11.0
    "$AK_VENV/bin/pip" install -q -e "$AK"
fi

# The certificates of the image's ssl_cert volume, made by the checkout's own script.
SSL_DIR=$WORK/ssl_cert
if [ ! -f "$SSL_DIR/client.key" ]; then
    mkdir -p "$SSL_DIR"
    (cd "$SSL_DIR" && bash "$AK/gen-ssl-certs.sh" >"$WORK/gen-ssl-certs.log" 2>&1)
fi

PLAIN_JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin" user_admin="admin" user_test="test" user_test2="test2";'
COMMON=(num.partitions=2 auto.create.topics.enable=true offsets.topic.num.partitions=2
        group.initial.rebalance.delay.ms=0
        authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
        allow.everyone.if.no.acl.found=true super.users=User:admin
        sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=$PLAIN_JAAS"
        "listener.name.sasl_ssl.plain.sasl.jaas.config=$PLAIN_JAAS"
        ssl.protocol=TLS ssl.enabled.protocols=TLSv1.2 ssl.client.auth=required
        ssl.keystore.type=PKCS12 "ssl.keystore.location=$SSL_DIR/br_server.keystore.jks"
        ssl.keystore.password=abcdefgh ssl.key.password=abcdefgh
        ssl.truststore.type=PKCS12 "ssl.truststore.location=$SSL_DIR/br_server.truststore.jks"
        ssl.truststore.password=abcdefgh ssl.endpoint.identification.algorithm=)
# shellcheck source=scripts/klamm_nodes.sh
source "$ROOT/scripts/klamm_nodes.sh"

declare -A SSL_PORTS=() SASL_PORTS=() SASL_SSL_PORTS=()
for id in 0 1 2; do
    SSL_PORTS[$id]=$(free_port) SASL_PORTS[$id]=$(free_port) SASL_SSL_PORTS[$id]=$(free_port)
done
node_listeners() {
    printf ',SSL://localhost:%s,SASL_PLAINTEXT://localhost:%s,SASL_SSL://localhost:%s' \
        "${SSL_PORTS[$1]}" "${SASL_PORTS[$1]}" "${SASL_SSL_PORTS[$1]}"
}

case "$MODE" in
single)
    start_nodes single
    NODE=0
    ;;
cluster)
    EXTRA=(listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT
           inter.broker.listener.name=SASL_PLAINTEXT sasl.mechanism.inter.broker.protocol=PLAIN
           sasl.mechanism.controller.protocol=PLAIN "listener.name.controller.plain.sasl.jaas.config=$PLAIN_JAAS")
    start_nodes cluster
    NODE=1
    ;;
*)
    echo "mode must be single or cluster, not $MODE" >&2
    exit 2
    ;;
esac

cat >"$WORK/admin.properties" <<EOF
security.protocol=SASL_PLAINTEXT
sasl.mechanism=PLAIN
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin";
EOF

cat >"$WORK/klamm_aiokafka.py" <<'EOF'
"""aiokafka's docker fixtures (tests/conftest.py) pointed at the klamm the script started."""

import os
import shlex
import subprocess
from pathlib import Path

import pytest

ENV = os.environ


def _klamm_tool(tool, options):
    """Run `klamm TOOL` as the super user, as the image ran Kafka's tool of that name."""
    cmd = [ENV["KLAMM_BIN"], tool, "--bootstrap-server", ENV["KLAMM_SASL_SERVER"],
           "--command-config", ENV["KLAMM_ADMIN_CONFIG"], *shlex.split(" ".join(options))]
    done = subprocess.run(cmd, capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} failed: {(done.stdout + done.stderr).decode()}")
    return done.stdout


def _fixtures(conftest):
    from tests._testutil import ACLManager, KafkaConfig

    class KlammACLs(ACLManager):
        def _exec(self, *cmd_options):
            return _klamm_tool("acls", ["--force", *cmd_options])

    class KlammConfigs(KafkaConfig):
        def _exec(self, *cmd_options):
            return _klamm_tool("configs", cmd_options)

    class NoKerberos:
        def kinit(self, principal):
            pytest.skip("GSSAPI: klamm offers no Kerberos mechanism (and there is no KDC here)")

        def kdestroy(self):
            pass

    @pytest.fixture(scope="session")
    def docker():
        yield None

    @pytest.fixture(scope="session")
    def ssl_folder():
        return Path(ENV["KLAMM_SSL_DIR"])

    @pytest.fixture(scope="session")
    def kafka_server():
        return conftest.KafkaServer("localhost", int(ENV["KLAMM_PORT"]), int(ENV["KLAMM_SSL_PORT"]),
                                    int(ENV["KLAMM_SASL_PORT"]), int(ENV["KLAMM_SASL_SSL_PORT"]), None)

    @pytest.fixture(scope="class")
    def acl_manager(kafka_server, request):
        return KlammACLs(None, "klamm")

    @pytest.fixture(scope="class")
    def kafka_config(kafka_server, request):
        return KlammConfigs(None, "klamm")

    @pytest.fixture(scope="class")
    def kerberos_utils(kafka_server):
        return NoKerberos()

    return {"docker": docker, "ssl_folder": ssl_folder, "kafka_server": kafka_server,
            "acl_manager": acl_manager, "kafka_config": kafka_config, "kerberos_utils": kerberos_utils}


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin, plugin_name):
    # Before the fixture manager reads tests/conftest.py: its docker fixtures become klamm's.
    if plugin_name and plugin_name.endswith("conftest.py") and hasattr(plugin, "KafkaServer"):
        for name, fixture in _fixtures(plugin).items():
            setattr(plugin, name, fixture)
EOF

export KLAMM_BIN=$KLAMM KLAMM_ADMIN_CONFIG=$WORK/admin.properties KLAMM_SSL_DIR=$SSL_DIR
export KLAMM_PORT=$PORT KLAMM_SSL_PORT=${SSL_PORTS[$NODE]} KLAMM_SASL_PORT=${SASL_PORTS[$NODE]}
export KLAMM_SASL_SSL_PORT=${SASL_SSL_PORTS[$NODE]} KLAMM_SASL_SERVER=localhost:${SASL_PORTS[$NODE]}
export PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}"
echo "klamm ($MODE) on localhost:$PORT (SSL $KLAMM_SSL_PORT, SASL_PLAINTEXT $KLAMM_SASL_PORT," \
     "SASL_SSL $KLAMM_SASL_SSL_PORT), KAFKA_VERSION=$KAFKA_VERSION, logs in $WORK"
ARGS=("$@")
[[ " ${ARGS[*]} " == *" tests"* ]] || ARGS=(tests "${ARGS[@]}")  # the whole suite unless paths are given
cd "$AK"
set +e
"$AK_VENV/bin/python" -m pytest "${ARGS[@]}" -p klamm_aiokafka -p no:cacheprovider \
    --docker-image "klamm:$KAFKA_VERSION" --no-pull --timeout 300 \
    -o log_level=INFO --show-capture=no -rfEs 2>&1 | tee "$WORK/pytest.txt"
rc=${PIPESTATUS[0]}
echo "pytest exit $rc; klamm logs: $WORK/node*.log"
exit "$rc"
