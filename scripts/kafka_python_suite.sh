#!/usr/bin/env bash
# Runs kafka-python's own integration suite (test/integration) against klamm.
#
#   scripts/kafka_python_suite.sh KAFKA_PYTHON_CHECKOUT [single|cluster|sasl] [pytest args...]
#
# KAFKA_PYTHON_CHECKOUT is a kafka-python source tree (git clone https://github.com/dpkp/kafka-python).
# The suite runs in a venv of its own (KP_VENV, default /tmp/kpvenv, created on first use with the
# checkout installed editable and its test requirements), never in klamm's .venv.
#
#   single   one `klamm serve` (node.id 0, as the suite's own kafka.properties template has it)
#   cluster  three processes: node 0 broker and controller, nodes 1 and 2 brokers; the suite bootstraps
#            from node 1 (a broker-only node, so its admin requests are forwarded to the controller).
#            default.replication.factor=3, min.insync.replicas=2 and the internal topics at RF 3. The
#            suite's create_topics() asks for KafkaFixture.replicas replicas, which is 1 for an external
#            broker: a small pytest plugin (written to WORK, loaded with -p) makes it 3. KP_REPLICAS=1
#            runs the suite as it is (its topics at RF 1, so min.insync.replicas stays 1: acks=all to a
#            one-replica topic with min.insync.replicas=2 is NOT_ENOUGH_REPLICAS, in Kafka too).
#            Not klamm's there: test_create_partitions asks for new partitions of one replica each
#            ([[0], [0]]) on its 3-replica topic, which Kafka refuses with INVALID_REPLICA_ASSIGNMENT too;
#            test_delete_records takes one poll() to return the records of six partitions, which on
#            three brokers returns as soon as the first leaders answer (polling on, every offset is right).
#   sasl     test_sasl_integration.py alone (it skips itself under KAFKA_URI and otherwise spawns a JVM
#            broker): one klamm with a SASL_PLAINTEXT listener (PLAIN, and SCRAM-SHA-256/512 credentials
#            added by `klamm storage format --add-scram`) for the fixture's user alice; a small plugin
#            makes the fixture's KafkaFixture.instance() that listener. test_admin is deselected: it
#            checks its topic with get_topic_names(), which runs Kafka's bin/kafka-topics.sh.
#
# klamm is started with the settings of the suite's servers/resources/default/kafka.properties that
# matter to it (num.partitions=4, node.id=0, advertised.listeners, the StandardAuthorizer with
# allow.everyone.if.no.acl.found, offsets.topic.num.partitions=2, group.min.session.timeout.ms=1000,
# group.initial.rebalance.delay.ms=0).  KAFKA_VERSION (default 4.2.0, the suite's default) gates the
# tests; KAFKA_ROOT must be an existing directory for the fixture, an empty one will do.
#
# Left out: test_ssl_integration.py (its fixture always spawns a JVM broker from KAFKA_ROOT and makes
# keystores with keytool, whatever KAFKA_URI says); test_sasl_integration.py skips itself under
# KAFKA_URI.  Broker logs and the pytest output stay in WORK (default: a new /tmp/klamm-kp.XXXX).
set -euo pipefail

KP=${1:?usage: $0 KAFKA_PYTHON_CHECKOUT [single|cluster] [pytest args...]}
KP=$(cd "$KP" && pwd)
MODE=${2:-single}
shift $(( $# >= 2 ? 2 : 1 ))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KLAMM=${KLAMM_BIN:-$ROOT/.venv/bin/klamm}
KP_VENV=${KP_VENV:-/tmp/kpvenv}
WORK=${WORK:-$(mktemp -d /tmp/klamm-kp.XXXX)}
export KAFKA_VERSION=${KAFKA_VERSION:-4.2.0}
export KAFKA_ROOT=${KAFKA_ROOT:-$WORK/kafka-root}
mkdir -p "$KAFKA_ROOT"

if [ ! -x "$KP_VENV/bin/python" ]; then
    python3 -m venv "$KP_VENV"
    "$KP_VENV/bin/pip" install -q -e "$KP" pytest pytest-mock pytest-timeout crc32c lz4 python-snappy zstandard xxhash
fi

COMMON=(num.partitions=4 offsets.topic.num.partitions=2 group.min.session.timeout.ms=1000
        group.initial.rebalance.delay.ms=0 log.cleaner.enable=false
        authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
        allow.everyone.if.no.acl.found=true)
# shellcheck source=scripts/klamm_nodes.sh
source "$ROOT/scripts/klamm_nodes.sh"

case "$MODE" in
single)
    start_nodes single
    ;;
cluster)
    KP_REPLICAS=${KP_REPLICAS:-3}
    start_nodes cluster $(( KP_REPLICAS >= 3 ? 2 : 1 ))
    ;;
sasl)
    PORT=$(free_port)
    properties 0 "$WORK/node0.properties" "listeners=SASL_PLAINTEXT://localhost:$PORT" \
        "advertised.listeners=SASL_PLAINTEXT://localhost:$PORT" \
        sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 \
        'listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="alice-secret" user_alice="alice-secret";'
    "$KLAMM" storage format --cluster-id "$("$KLAMM" storage random-uuid)" --config "$WORK/node0.properties" \
        --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]' \
        --add-scram 'SCRAM-SHA-512=[name=alice,password=alice-secret]' >/dev/null
    start 0 "$WORK/node0.properties"
    wait_ready "$WORK/node0.log"
    ;;
*)
    echo "mode must be single, cluster or sasl, not $MODE" >&2
    exit 2
    ;;
esac

PLUGIN=()
if [ "$MODE" = cluster ] && [ "$KP_REPLICAS" != 1 ]; then
    # KafkaFixture.instance(..., external=True) takes replicas=1 whatever the broker: give the suite's
    # topics (create_topics() uses fixture.replicas) three replicas, as klamm's own cluster runs have.
    cat >"$WORK/klamm_kp_replicas.py" <<'EOF'
import os

from test.integration.fixtures import KafkaFixture

_instance = KafkaFixture.instance.__func__
REPLICAS = int(os.environ["KP_REPLICAS"])


def _with_replicas(cls, *args, **kwargs):
    kwargs.setdefault("replicas", REPLICAS)
    return _instance(cls, *args, **kwargs)


KafkaFixture.instance = classmethod(_with_replicas)
EOF
    export KP_REPLICAS PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}"
    PLUGIN=(-p klamm_kp_replicas)
fi

TESTS=(test/integration --ignore=test/integration/test_ssl_integration.py)
if [ "$MODE" = sasl ]; then
    cat >"$WORK/klamm_kp_sasl.py" <<'EOF'
import os

from test.integration.fixtures import KafkaFixture

PORT = int(os.environ["KLAMM_SASL_PORT"])


def _sasl_listener(cls, broker_id, transport="PLAINTEXT", sasl_mechanism=None, **kwargs):
    assert transport == "SASL_PLAINTEXT", transport
    return KafkaFixture("localhost", PORT, broker_id, transport=transport, sasl_mechanism=sasl_mechanism,
                        external=True)


KafkaFixture.instance = classmethod(_sasl_listener)
EOF
    export KLAMM_SASL_PORT=$PORT PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}"
    unset KAFKA_URI
    PLUGIN=(-p klamm_kp_sasl)
    TESTS=(test/integration/test_sasl_integration.py --deselect "test/integration/test_sasl_integration.py::test_admin")
    echo "klamm (sasl) on localhost:$PORT, KAFKA_VERSION=$KAFKA_VERSION, logs in $WORK"
else
    export KAFKA_URI=kafka://localhost:$PORT
    echo "klamm ($MODE) on $KAFKA_URI, KAFKA_VERSION=$KAFKA_VERSION, logs in $WORK"
fi
cd "$KP"
set +e
"$KP_VENV/bin/python" -m pytest "${TESTS[@]}" -p no:cacheprovider "${PLUGIN[@]}" \
    -o log_level=INFO --show-capture=no -rfEs -W ignore::DeprecationWarning "$@" 2>&1 | tee "$WORK/pytest.txt"
rc=${PIPESTATUS[0]}
echo "pytest exit $rc; klamm logs: $WORK/node*.log"
exit "$rc"
