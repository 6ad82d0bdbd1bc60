# Starts klamm brokers for the client-suite scripts (kafka_python_suite.sh, franz_go_suite.sh, ...).
# Source it, do not run it:
#
#   KLAMM=.../klamm WORK=/tmp/some-dir COMMON=(key=value ...)   # COMMON: settings of every node
#   source scripts/klamm_nodes.sh
#   start_nodes single            # one `klamm serve`, node.id 0
#   start_nodes cluster [MIN_ISR] # node 0 broker+controller, nodes 1 and 2 brokers, RF 3 defaults
#   echo "$PORT"                  # the node to bootstrap from (node 1 in a cluster: broker only)
#
# Extra node settings go in the array EXTRA (KEY=VALUE, appended to every node's properties; a key
# given again there wins). Extra listeners: define a function node_listeners NODE_ID printing
# ",NAME://host:port..." (ports free_port gave beforehand); they join the node's listeners and
# advertised.listeners. PORTS[N] set after sourcing and before `start_nodes cluster` fixes node N's
# PLAINTEXT port (for a suite that dials a fixed address).
# Every node started is killed when the sourcing script exits (an EXIT trap). Logs, properties and
# log dirs are in WORK (nodeN.log, nodeN.properties, nodeN/).

declare -a EXTRA  # keeps a value the sourcing script gave
PIDS=()
PORT=
declare -A PORTS=()

klamm_nodes_stop() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    PIDS=()
}
trap klamm_nodes_stop EXIT

# A free TCP port below the ephemeral range, so no client connection can take it before klamm binds.
free_port() {
    python3 - <<'EOF'
import random, socket
first = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
while True:
    port = random.randint(20000, first - 1)
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    print(port)
    break
EOF
}

more_listeners() {  # node id
    if declare -F node_listeners >/dev/null; then node_listeners "$1"; fi
}

# A CA (WORK/ca.pem) and a server certificate for localhost signed by it, key and chain in one PEM keystore
# (KIP-651: ssl.keystore.type=PEM, ssl.keystore.location=WORK/keystore.pem), made with openssl.
make_keystore() {  # CA common name
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$1" \
        -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$WORK/server.key" \
        -out "$WORK/server.csr" 2>/dev/null
    openssl x509 -req -days 2 -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
        -extfile <(printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n') -out "$WORK/server.pem" 2>/dev/null
    cat "$WORK/server.key" "$WORK/server.pem" >"$WORK/keystore.pem"
}

wait_ready() {  # log file
    for _ in $(seq 200); do
        grep -q "klamm ready" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "klamm did not start, see $1" >&2
    tail -20 "$1" >&2
    exit 1
}

# start NODE_ID PROPERTIES_FILE
start() {
    "$KLAMM" serve --config "$2" >"$WORK/node$1.log" 2>&1 &
    PIDS+=($!)
}

# properties NODE_ID FILE KEY=VALUE...
properties() {
    local id=$1 file=$2
    shift 2
    { printf '%s\n' "node.id=$id" "log.dirs=$WORK/node$id" "${COMMON[@]}" "$@" "${EXTRA[@]}"; } >"$file"
}

start_single() {
    local listeners
    PORT=$(free_port)
    listeners="PLAINTEXT://localhost:$PORT$(more_listeners 0)"
    properties 0 "$WORK/node0.properties" "listeners=$listeners" "advertised.listeners=$listeners"
    start 0 "$WORK/node0.properties"
    wait_ready "$WORK/node0.log"
}

# start_cluster MIN_ISR: three processes sharing one cluster id, every default replication factor 3.
start_cluster() {
    local min_isr=$1 controller cluster_id id roles listeners advertised
    controller=$(free_port)
    cluster_id=$("$KLAMM" storage random-uuid)
    for id in 0 1 2; do
        PORTS[$id]=${PORTS[$id]:-$(free_port)}  # a port set before start_nodes stays
        advertised="PLAINTEXT://localhost:${PORTS[$id]}$(more_listeners "$id")"
        roles=broker listeners=$advertised
        if [ "$id" = 0 ]; then
            roles=broker,controller listeners="$listeners,CONTROLLER://localhost:$controller"
        fi
        properties "$id" "$WORK/node$id.properties" "process.roles=$roles" "listeners=$listeners" \
            "advertised.listeners=$advertised" \
            "controller.quorum.voters=0@localhost:$controller" controller.listener.names=CONTROLLER \
            listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT \
            default.replication.factor=3 "min.insync.replicas=$min_isr" offsets.topic.replication.factor=3 \
            transaction.state.log.replication.factor=3 transaction.state.log.min.isr=2
        "$KLAMM" storage format --cluster-id "$cluster_id" --config "$WORK/node$id.properties" >/dev/null
    done
    for id in 0 1 2; do
        start "$id" "$WORK/node$id.properties"
        wait_ready "$WORK/node$id.log"
    done
    PORT=${PORTS[1]}
}

# start_nodes single|cluster [MIN_ISR, cluster only, default 2]
start_nodes() {
    case "$1" in
    single) start_single ;;
    cluster) start_cluster "${2:-2}" ;;
    *)
        echo "mode must be single or cluster, not $1" >&2
        exit 2
        ;;
    esac
}
