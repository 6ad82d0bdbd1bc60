#!/usr/bin/env bash
# Runs confluent-kafka-python's own integration suite (tests/integration) against klamm.
#
#   scripts/confluent_kafka_python_suite.sh CKP_CHECKOUT [single|cluster] [pytest args...]
#
# CKP_CHECKOUT is a confluent-kafka-python source tree (git clone
# https://github.com/confluentinc/confluent-kafka-python; tried with v2.15.0's). Its tests run in a venv of
# their own (CK_VENV, default /tmp/ckvenv, made on first use) with the PyPI wheel of confluent-kafka at
# the version klamm's .venv has (CK_VERSION, 2.16.1 at the time of writing) and its avro,
# schemaregistry, json and protobuf extras (tests/common imports them), pytest, pytest-asyncio,
# pytest-timeout and the checkout's own tests/trivup tarball (cluster_fixture.py imports trivup); the
# tests import `tests.*` from the checkout and `confluent_kafka` from the wheel. Extra pytest args are
# appended (select with -k).
#
# conftest.py's kafka_cluster is its ByoFixture when BROKERS is set (bootstrap.servers, no Schema
# Registry unless SR_URL): BROKERS is klamm. klamm gets the settings of the broker trivup would start
# (tests/trivup's server.properties): num.partitions=3, the StandardAuthorizer with
# allow.everyone.if.no.acl.found and super.users=User:admin, and a SASL_PLAINTEXT listener (PLAIN users
# admin and sasl_user) for conftest.py's sasl_cluster, which always spawns a trivup Kafka: a small
# pytest plugin (written to WORK, loaded with -p) makes it a ByoFixture on that listener as sasl_user,
# so admin/test_describe_operations.py runs against klamm too.
# TEST_CONSUMER_GROUP_PROTOCOL=consumer (the suite's switch) runs the consumers with KIP-848.
#
#   single   one `klamm serve`.
#   cluster  three processes as kafka_python_suite.sh's cluster (node 0 broker and controller, nodes 1
#            and 2 brokers, internal topics at RF 3); the suite bootstraps from node 1 (broker only).
#            Brokers talk to each other and to the controller as admin over SASL_PLAINTEXT (as trivup's
#            brokers do), so the cluster ACLs test_describe_operations creates leave replication alone.
#            The fixture's create_topic() asks for one replica unless the test says otherwise: a plugin
#            makes that CK_REPLICAS (default 3). min.insync.replicas is CK_MIN_ISR, default 1: tests
#            that ask for one replica themselves (test_list_offsets, test_delete_records,
#            test_basic_operations, test_describe_operations) produce with librdkafka's default
#            acks=all, which is NOT_ENOUGH_REPLICAS on such a topic with min.insync.replicas=2, in Kafka too.
#
# After pytest, the suite's "old way" (tests/integration/integration_test.py, a script run against a
# docker Kafka from tests/docker/bin/cluster_up.sh; its one pytest test skips itself "must be run as a
# standalone script"): its modes producer, performance, consumer and throttle, in its __main__'s order
# (2 million records produced, three consumers of a million each), on test-topic created with one
# partition (the docker Kafka auto-creates it with num.partitions=1; with 3 its consumer test can commit a
# partition-EOF event, which librdkafka refuses) and the quota cluster_up.sh sets for client.id
# throttled_client. A driver calls the verify_* functions: __main__ itself stops at its first line
# (`'%s (0x%x)' % confluent_kafka.version()`: version() is a string, no longer a tuple). Its modes
# avro, avro-https and avro-basic-auth need a Schema Registry; admin runs nothing. CK_OLD_SCRIPT=0 skips
# this step.
#
# Left out: tests/integration/schema_registry (needs a Schema Registry, SR_URL; a JVM service);
# share_consumer (KIP-932 share groups: klamm has none, the fixture's first IncrementalAlterConfigs of
# the group config share.auto.offset.reset already fails with INVALID_CONFIG "Unknown group config name",
# and there is no ShareGroupHeartbeat/ShareFetch); share_consumer_sasl and share_consumer_oauth (share
# groups again, on a Kafka they spawn with trivup: SASL PLAIN, or OAUTHBEARER with
# connections.max.reauth.ms). Skipped by the suite itself: test_producer_dr_only_error (run by the old
# way's verify_producer instead), test_consumer_upgrade_downgrade unless TEST_CONSUMER_GROUP_PROTOCOL=consumer,
# test_consumer_error's two session.timeout.ms tests when it is.
#
# Not klamm's: single mode's test_incremental_alter_configs expects every topic to report a non-default
# min.insync.replicas="1". That is Kafka 4.1+'s eligible leader replicas (KIP-966, on by default for new
# clusters since 4.1; the suite pins broker version 4.2.0): when the controller turns ELR on it writes a
# cluster-level min.insync.replicas, the static value (ConfigurationControlManager
# .maybeGenerateElrSafetyRecords, metadata/src/main/java/org/apache/kafka/controller/), which every topic
# then reports as DYNAMIC_DEFAULT_BROKER_CONFIG. klamm has no ELR (it finalizes no
# eligible.leader.replicas.version), and answers as Kafka 4.0 or a 4.1+ cluster with ELR off. The test's
# own skipif names that record. CK_ELR_MIN_ISR=1 writes the same cluster-level config before the run,
# and the test passes. In cluster mode it passes as it is: min.insync.replicas=1 is in the nodes'
# properties there, a STATIC_BROKER_CONFIG, so not a default either.
#
# Broker logs, pytest.txt and integration_test.txt stay in WORK (default: a new /tmp/klamm-ckp.XXXX).
set -euo pipefail

CKP=${1:?usage: $0 CKP_CHECKOUT [single|cluster] [pytest args...]}
CKP=$(cd "$CKP" && pwd)
MODE=${2:-single}
shift $(( $# >= 2 ? 2 : 1 ))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KLAMM=${KLAMM_BIN:-$ROOT/.venv/bin/klamm}
CK_VENV=${CK_VENV:-/tmp/ckvenv}
if [ -z "${CK_VERSION:-}" ]; then  # a `git archive` copy has no .venv: then CK_VERSION must be given
    CK_VERSION=$("$ROOT/.venv/bin/python" -c 'import confluent_kafka; print(confluent_kafka.__version__)' 2>/dev/null) ||
        { echo "$0: set CK_VERSION (no $ROOT/.venv with confluent-kafka to take it from)" >&2; exit 2; }
fi
WORK=${WORK:-$(mktemp -d /tmp/klamm-ckp.XXXX)}
mkdir -p "$WORK"

if [ ! -x "$CK_VENV/bin/python" ]; then
    python3 -m venv "$CK_VENV"
    "$CK_VENV/bin/pip" install -q "confluent-kafka[avro,schemaregistry,json,protobuf]==$CK_VERSION" \
        pytest pytest-timeout pytest-asyncio async-timeout "$CKP"/tests/trivup/trivup-*.tar.gz
fi

# trivup's server.properties (tests/trivup's KafkaBrokerApp) as far as klamm is concerned: 3 partitions
# for auto-created topics, the StandardAuthorizer with allow.everyone.if.no.acl.found and the super
# user admin; its SASL cluster's PLAIN users sasl_user (the tests' client) and admin.
PLAIN_JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin" user_admin="admin" user_sasl_user="sasl_user";'
COMMON=(num.partitions=3 auto.create.topics.enable=true
        authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
        allow.everyone.if.no.acl.found=true super.users=User:admin
        sasl.enabled.mechanisms=PLAIN "listener.name.sasl_plaintext.plain.sasl.jaas.config=$PLAIN_JAAS")
# shellcheck source=scripts/klamm_nodes.sh
source "$ROOT/scripts/klamm_nodes.sh"

declare -A SASL_PORTS=()
for id in 0 1 2; do SASL_PORTS[$id]=$(free_port); done
node_listeners() {
    printf ',SASL_PLAINTEXT://localhost:%s' "${SASL_PORTS[$1]}"
}

PLUGINS=(-p klamm_ckp)
case "$MODE" in
single)
    start_nodes single
    NODE=0
    ;;
cluster)
    # Brokers talk to each other and to the controller as admin over SASL_PLAINTEXT (as trivup's
    # brokers do), so the cluster ACLs test_describe_operations creates leave replication alone.
    EXTRA=(listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
           inter.broker.listener.name=SASL_PLAINTEXT sasl.mechanism.inter.broker.protocol=PLAIN
           sasl.mechanism.controller.protocol=PLAIN "listener.name.controller.plain.sasl.jaas.config=$PLAIN_JAAS")
    start_nodes cluster "${CK_MIN_ISR:-1}"
    NODE=1
    CK_REPLICAS=${CK_REPLICAS:-3}
    export CK_REPLICAS
    cat >"$WORK/klamm_ckp_replicas.py" <<'EOF'
"""The fixture's topics get CK_REPLICAS replicas when the test does not say how many."""

import os

from tests.integration.cluster_fixture import KafkaClusterFixture

_topic_conf = KafkaClusterFixture._topic_conf.__func__
REPLICAS = int(os.environ["CK_REPLICAS"])


def _with_replicas(cls, conf=None):
    topic_conf = _topic_conf(cls, conf)
    if conf is None or "replication_factor" not in conf:
        topic_conf["replication_factor"] = REPLICAS
    return topic_conf


KafkaClusterFixture._topic_conf = classmethod(_with_replicas)
EOF
    PLUGINS+=(-p klamm_ckp_replicas)
    ;;
*)
    echo "mode must be single or cluster, not $MODE" >&2
    exit 2
    ;;
esac

cat >"$WORK/klamm_ckp.py" <<'EOF'
"""conftest.py's sasl_cluster (a trivup Kafka with SASL PLAIN) becomes klamm's SASL_PLAINTEXT listener."""

import os

import pytest


def _klamm_sasl_cluster(conf={}):
    from tests.integration.cluster_fixture import ByoFixture

    return ByoFixture({"bootstrap.servers": os.environ["KLAMM_SASL_SERVER"], "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": "PLAIN", "sasl.username": "sasl_user", "sasl.password": "sasl_user"})


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin, plugin_name):
    if getattr(plugin, "__name__", None) == "tests.integration.conftest":
        plugin.create_sasl_cluster = _klamm_sasl_cluster
EOF
if [ "${CK_ELR_MIN_ISR:-}" != "" ]; then
    # What a Kafka 4.1+ controller writes when it turns ELR on (a cluster-level min.insync.replicas).
    # librdkafka (so `klamm configs`) and kafka-python refuse a broker resource without a name: one
    # IncrementalAlterConfigs v0 request (resource BROKER "", SET), written out here.
    python3 - "$PORT" "$CK_ELR_MIN_ISR" <<'EOF'
import socket, struct, sys

def string(s):
    return struct.pack(">h", len(s)) + s.encode()

body = (struct.pack(">i", 1) + struct.pack(">b", 4) + string("") + struct.pack(">i", 1)
        + string("min.insync.replicas") + struct.pack(">b", 0) + string(sys.argv[2]) + struct.pack(">b", 0))
frame = struct.pack(">hhi", 44, 0, 1) + string("ckp-suite") + body
with socket.create_connection(("localhost", int(sys.argv[1]))) as sock:
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    reply = b""
    while len(reply) < 4 or len(reply) < 4 + struct.unpack_from(">i", reply)[0]:
        reply += sock.recv(65536)
# size, correlation id, throttle time, array length, then the one resource's error code
(error,) = struct.unpack_from(">h", reply, 16)
sys.exit(f"IncrementalAlterConfigs of the cluster-level min.insync.replicas: error {error}" if error else 0)
EOF
fi
export PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}"
export BROKERS=localhost:$PORT KLAMM_SASL_SERVER=localhost:${SASL_PORTS[$NODE]}
unset SR_URL
echo "klamm ($MODE) on $BROKERS (SASL_PLAINTEXT $KLAMM_SASL_SERVER), confluent-kafka $CK_VERSION," \
     "group protocol ${TEST_CONSUMER_GROUP_PROTOCOL:-classic}, logs in $WORK"
TESTS=(tests/integration
       --ignore=tests/integration/schema_registry
       --ignore=tests/integration/share_consumer
       --ignore=tests/integration/share_consumer_sasl
       --ignore=tests/integration/share_consumer_oauth)
cd "$CKP"
set +e
"$CK_VENV/bin/python" -m pytest "${TESTS[@]}" -p no:cacheprovider "${PLUGINS[@]}" --timeout 600 \
    --show-capture=no -rfEs -W ignore::DeprecationWarning "$@" 2>&1 | tee "$WORK/pytest.txt"
rc=${PIPESTATUS[0]}
echo "pytest exit $rc"
[ "${CK_OLD_SCRIPT:-1}" = 0 ] && exit "$rc"

# The old way: integration_test.py's modes producer, performance, consumer and throttle, against the
# topic test-topic of one partition (the docker cluster's Kafka auto-creates it with num.partitions=1)
# and the throttle quota tests/docker/bin/cluster_up.sh sets for client.id throttled_client.
set -e
"$KLAMM" topics --bootstrap-server "localhost:$PORT" --create --topic test-topic --partitions 1 >/dev/null
"$KLAMM" configs --bootstrap-server "localhost:$PORT" --alter --entity-type clients --entity-name throttled_client \
    --add-config producer_byte_rate=1,consumer_byte_rate=1,request_percentage=001 >/dev/null
cat >"$WORK/klamm_ckp_old.py" <<'EOF'
"""integration_test.py's __main__ for the modes producer, performance, consumer and throttle, in its order."""

import sys
import time

from tests.integration import integration_test as it

it.bootstrap_servers, it.topic = sys.argv[1], "test-topic"
steps = [("verify_producer", ()), ("verify_producer_performance", (True,)), ("verify_producer_performance", (False,)),
         ("verify_consumer", ()), ("verify_batch_consumer", ()), ("verify_consumer_performance", ()),
         ("verify_batch_consumer_performance", ()), ("verify_stats_cb", ()), ("verify_throttle_cb", ())]
for name, args in steps:
    start = time.time()
    print("=" * 30, name, *args, "=" * 30, flush=True)
    getattr(it, name)(*args)
    print("#", name, "passed in %.1f s" % (time.time() - start), flush=True)
print("integration_test.py: all passed")
EOF
set +e
PYTHONPATH="$CKP:$PYTHONPATH" timeout 1200 "$CK_VENV/bin/python" "$WORK/klamm_ckp_old.py" "$BROKERS" \
    >"$WORK/integration_test.txt" 2>&1
old=$?
grep -E '^(# verify_|integration_test.py: )' "$WORK/integration_test.txt"
[ "$old" = 0 ] || { tail -20 "$WORK/integration_test.txt"; echo "integration_test.py exit $old"; }
echo "klamm logs: $WORK/node*.log"
[ "$rc" = 0 ] && exit "$old"
exit "$rc"
