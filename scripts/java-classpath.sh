#!/usr/bin/env bash
# Prints the classpath for running the interop Java client by hand, e.g.
#   java -cp "$(scripts/java-classpath.sh)" KlammClient admin-list 127.0.0.1:9092
# (run scripts/test-deps.sh first).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cp="$ROOT/.cache/java-build"
for j in kafka-clients slf4j-api lz4-java snappy-java zstd-jni; do
    f="$ROOT/.cache/java-libs/$j.jar"
    [ -s "$f" ] || { echo "missing $f: run scripts/test-deps.sh" >&2; exit 1; }
    cp="$cp:$f"
done
echo "$cp"
