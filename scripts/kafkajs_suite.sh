#!/usr/bin/env bash
# Runs kafkajs's own jest suite (every spec under src/, unit and integration) against klamm.
#
#   scripts/kafkajs_suite.sh KAFKAJS_CHECKOUT_OR_MIRROR [single|cluster] [jest args...]
#
# Jest args select tests as jest does (paths or patterns), e.g. the suite's own groups:
#   scripts/kafkajs_suite.sh /work/.mirror/tulios+kafkajs/repo cluster --testPathPattern 'src/consumer/.*.spec.js'
# Default: the whole suite, --runInBand (one jest process: the brokers and the clients share a small machine).
#
# KAFKAJS_CHECKOUT_OR_MIRROR is a kafkajs source tree (git clone https://github.com/tulios/kafkajs) or a bare
# git dir of it (exported at HEAD). It is copied to KJS_BUILD (default /tmp/klamm-kjs-build), where
# `npm install` (npm >= 7 follows the checkout's yarn.lock) installs its devDependencies (jest 25, ...); the
# copy is rebuilt only when the checkout's HEAD (or path) changes. Node >= 14 and npm from the registry.
#
# The suite dials fixed ports on localhost, the ones its docker-compose.2_4.yml publishes: broker 0 has
# PLAINTEXT 9092, SSL 9093, SASL_SSL 9094; brokers 1 and 2 the next three each (9095-9097, 9098-9100).
# They must be free. klamm serves them with the compose file's settings that matter: num.partitions=2,
# default.replication.factor=2 (1 in single), auto topic creation, group.initial.rebalance.delay.ms=0,
# an authorizer with allow.everyone.if.no.acl.found=true (StandardAuthorizer for the compose's
# SimpleAclAuthorizer), sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512 with the PLAIN users of
# testHelpers/kafka/server-jaas.conf (test, bob, alice) and the SCRAM user of scripts/createScramCredentials.sh
# (testscram: SCRAM-SHA-256 with 8192 iterations, SCRAM-SHA-512), added by `klamm storage format --add-scram`.
# TLS: a CA and a localhost certificate made with openssl in WORK, as a PEM keystore (the suite's clients
# do not verify the certificate: rejectUnauthorized=false; its JKS stores are for the JVM broker).
#
#   single   one `klamm serve` (node.id 0) on 9092-9094; 9095-9100 stay closed. The suite is written for
#            three brokers: its plainTextBrokers()/sslBrokers()/saslBrokers() list all three (a client
#            bootstraps from any that answers), and some tests expect three brokers or place replicas.
#   cluster  three processes as kafka_python_suite.sh's cluster (node 0 broker and controller, nodes 1 and 2
#            brokers), node N on 9092+3N..9094+3N; default.replication.factor=2 and min.insync.replicas=1 as
#            the compose file has them, the internal topics at RF 3 (Kafka's defaults with three brokers).
#
# OAUTHBEARER_ENABLED=1 (the suite's own switch) runs as the suite's test:group:oauthbearer CI job, with
# docker-compose.2_4_oauthbearer.yml's brokers: the SASL_SSL listeners take OAUTHBEARER only (unsecured JWTs,
# Kafka's default validator), connections.max.reauth.ms=15000, no authorizer; without jest args it runs that
# group's six spec files.
#
# KAFKA_VERSION (default 2.4, the newest the suite's compose files and CI know; its tests only ask for
# >= 0.11 and >= 1.1, so the <= 0.10 message-set fetch tests skip) gates tests; TEST_RETRIES (default 0
# here, 2 in the suite's CI) retries failed tests; KAFKAJS_DEBUG_PROTOCOL_BUFFERS=1 as the suite's
# `yarn jest` sets it. The suite's scripts/addPartitions.sh (docker exec kafka-topics) is replaced in the
# copy by `klamm topics --alter`.
#
# Failing against any Kafka >= 4.0 too, not klamm's (cluster mode fails only these):
#   - Broker > OffsetCommit (2), OffsetFetch, Heartbeat; Consumer errorRecovery "recovers from offset out of
#     range": they call joinGroup() without rebalanceTimeout, which kafkajs encodes as 0 (JoinGroup v5), so
#     the pending-sync timer of KAFKA-12890 (Kafka >= 2.8.1/3.0: group.rebalanceTimeoutMs(), the members'
#     largest) removes the member before its SyncGroup arrives: UNKNOWN_MEMBER_ID. The specs that pass
#     rebalanceTimeout: 60000 (joinGroup, syncGroup, leaveGroup) pass.
#   - Broker > Produce "max timestamp difference configured": message.timestamp.difference.max.ms was removed
#     in Kafka 4.0 (KIP-937): CreateTopics answers INVALID_CONFIG.
#   - Broker > describeConfigs "returns all config entries": expects Kafka 2.4's list (message.format.version
#     and message.timestamp.difference.max.ms, both removed in 4.0; max.message.bytes 1000012, now 1048588).
#   - Protocol > Requests > Produce > v2 "request with gzip" (no broker): gzip bytes compared with a fixture
#     made by an older zlib than Node 20's.
# (klamm's, found by this suite and fixed: the first JoinGroup of a fresh cluster could reach the coordinator
# broker before it had replayed __consumer_offsets' creation, and klamm answered COORDINATOR_NOT_AVAILABLE,
# on which kafkajs's consumer crashes (rebalanceOnPartitionChange); it answers NOT_COORDINATOR now, as Kafka.)
# Single mode adds the tests that need three brokers (replicas on nodes 1 and 2, replicationFactor 2,
# describeCluster's three brokers, BrokerPool and findGroupCoordinator falling back to another broker, the
# idempotent-produce specs' findBroker({nodeId: 1|2}), a non-leader broker for DeleteRecords) and timing
# tests (request_timeout events with requestTimeout 1 ms need a request slower than ~2 ms, e.g. an acks=-1
# produce waiting for a follower).
# Broker logs, the jest output (jest.txt) and its JUnit report (junit.xml) stay in WORK (default: a new
# /tmp/klamm-kjs.XXXX).
set -euo pipefail

KJS=${1:?usage: $0 KAFKAJS_CHECKOUT_OR_MIRROR [single|cluster] [jest args...]}
KJS=$(cd "$KJS" && pwd)
MODE=${2:-single}
shift $(( $# >= 2 ? 2 : 1 ))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KLAMM=${KLAMM_BIN:-$ROOT/.venv/bin/klamm}
KJS_BUILD=${KJS_BUILD:-/tmp/klamm-kjs-build}
WORK=${WORK:-$(mktemp -d /tmp/klamm-kjs.XXXX)}
mkdir -p "$WORK"
OAUTHBEARER_ENABLED=${OAUTHBEARER_ENABLED:-}
JEST_ARGS=("$@")
if [ ${#JEST_ARGS[@]} -eq 0 ] && [ "$OAUTHBEARER_ENABLED" = 1 ]; then
    # package.json's test:group:oauthbearer
    JEST_ARGS=(src/producer/index.spec.js src/broker/__tests__/connect.spec.js
               src/consumer/__tests__/connection.spec.js src/broker/__tests__/disconnect.spec.js
               src/admin/__tests__/connection.spec.js src/broker/__tests__/reauthenticate.spec.js)
fi
case "$MODE" in
single | cluster) ;;
*)
    echo "mode must be single or cluster, not $MODE" >&2
    exit 2
    ;;
esac

# The copy (and its node_modules) is rebuilt only when the checkout's HEAD (or path) changes.
STAMP=$(git -C "$KJS" rev-parse HEAD 2>/dev/null || echo "$KJS")
if [ "$(cat "$KJS_BUILD/stamp" 2>/dev/null)" != "$STAMP" ]; then
    rm -rf "$KJS_BUILD/kafkajs"
    mkdir -p "$KJS_BUILD/kafkajs"
    if [ "$(git -C "$KJS" rev-parse --is-bare-repository 2>/dev/null)" = true ]; then
        git -C "$KJS" archive HEAD | tar -x -C "$KJS_BUILD/kafkajs"
    else
        cp -a "$KJS/." "$KJS_BUILD/kafkajs"
        rm -rf "$KJS_BUILD/kafkajs/node_modules"
    fi
    (cd "$KJS_BUILD/kafkajs" && npm install --no-audit --no-fund --ignore-scripts --loglevel=error)
    echo "$STAMP" >"$KJS_BUILD/stamp"
fi
SUITE=$KJS_BUILD/kafkajs
# testHelpers.addPartitions() runs ./scripts/addPartitions.sh (docker exec kafka-topics --alter).
cat >"$SUITE/scripts/addPartitions.sh" <<EOF
#!/bin/bash -e
# Written by klamm's scripts/kafkajs_suite.sh: the suite's docker exec kafka-topics, with klamm's CLI.
exec "$KLAMM" topics --bootstrap-server localhost:9092 --alter --topic "^\${TOPIC:?}\\\$" --partitions "\${PARTITIONS:?}"
EOF
chmod +x "$SUITE/scripts/addPartitions.sh"

for port in $(seq 9092 9100); do
    if python3 -c "import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', $port))" 2>/dev/null; then
        continue
    fi
    echo "port $port is taken: the suite dials localhost:9092-9100" >&2
    exit 1
done

PLAIN_JAAS='org.apache.kafka.common.security.plain.PlainLoginModule required username="test" password="testtest" user_test="testtest" user_bob="bobbob" user_alice="alicealice";'
OAUTH_JAAS='org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="admin";'
COMMON=(num.partitions=2 auto.create.topics.enable=true delete.topic.enable=true
        group.initial.rebalance.delay.ms=0 ssl.keystore.type=PEM "ssl.keystore.location=$WORK/keystore.pem")
if [ "$OAUTHBEARER_ENABLED" = 1 ]; then
    COMMON+=(sasl.enabled.mechanisms=OAUTHBEARER connections.max.reauth.ms=15000
             "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=$OAUTH_JAAS")
else
    COMMON+=(sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
             "listener.name.sasl_ssl.plain.sasl.jaas.config=$PLAIN_JAAS"
             authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
             allow.everyone.if.no.acl.found=true)
fi
SCRAM=(--add-scram 'SCRAM-SHA-256=[name=testscram,iterations=8192,password=testtestscram=256]'
       --add-scram 'SCRAM-SHA-512=[name=testscram,password=testtestscram=512]')

# shellcheck source=scripts/klamm_nodes.sh
source "$ROOT/scripts/klamm_nodes.sh"
make_keystore klamm-kafkajs-ca
node_listeners() {  # node N: SSL on 9093+3N, SASL_SSL on 9094+3N
    echo ",SSL://localhost:$((9093 + 3 * $1)),SASL_SSL://localhost:$((9094 + 3 * $1))"
}

case "$MODE" in
single)
    PORT=9092
    LISTENERS="PLAINTEXT://localhost:$PORT$(node_listeners 0)"
    properties 0 "$WORK/node0.properties" "listeners=$LISTENERS" "advertised.listeners=$LISTENERS" \
        default.replication.factor=1
    "$KLAMM" storage format --cluster-id "$("$KLAMM" storage random-uuid)" --config "$WORK/node0.properties" \
        "${SCRAM[@]}" >/dev/null
    start 0 "$WORK/node0.properties"
    wait_ready "$WORK/node0.log"
    ;;
cluster)
    # start_cluster formats the nodes itself: the SCRAM user is added once the cluster runs.
    EXTRA=(default.replication.factor=2
           listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL)
    PORTS[0]=9092 PORTS[1]=9095 PORTS[2]=9098
    start_nodes cluster 1
    "$KLAMM" configs --bootstrap-server "localhost:$PORT" --alter --entity-type users --entity-name testscram \
        --add-config 'SCRAM-SHA-256=[iterations=8192,password=testtestscram=256],SCRAM-SHA-512=[password=testtestscram=512]'
    ;;
esac

export KAFKA_VERSION=${KAFKA_VERSION:-2.4} TEST_RETRIES=${TEST_RETRIES:-0}
export KAFKAJS_DEBUG_PROTOCOL_BUFFERS=${KAFKAJS_DEBUG_PROTOCOL_BUFFERS:-1}
export JEST_JUNIT_OUTPUT_DIR=$WORK JEST_JUNIT_OUTPUT_NAME=junit.xml
[ "$OAUTHBEARER_ENABLED" = 1 ] && export OAUTHBEARER_ENABLED || unset OAUTHBEARER_ENABLED
echo "klamm ($MODE${OAUTHBEARER_ENABLED:+, OAUTHBEARER}) on localhost:9092, KAFKA_VERSION=$KAFKA_VERSION," \
    "TEST_RETRIES=$TEST_RETRIES, logs in $WORK"

cd "$SUITE"
set +e
node_modules/.bin/jest --ci --no-watchman --forceExit --runInBand "${JEST_ARGS[@]}" 2>&1 | tee "$WORK/jest.txt"
rc=${PIPESTATUS[0]}
set -e
echo "kafkajs jest exit $rc: $(grep -E '^Tests:' "$WORK/jest.txt" | tail -1); klamm logs: $WORK/node*.log"
exit "$rc"
