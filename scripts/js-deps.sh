#!/usr/bin/env bash
# Idempotent setup of the Node.js client the kafkajs interop tests drive:
#   tests/interop/js/package{,-lock}.json  ->  .cache/js/node_modules/kafkajs
# Skipped when .cache/js already holds an install of the same lockfile.
# Without node/npm (or on a failed install) it only warns outside CI (the
# kafkajs tests then skip); with CI set (or KLAMM_REQUIRE_INTEROP_TOOLS=1) it fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SRC="$ROOT/tests/interop/js"
DEST="$ROOT/.cache/js"
STAMP="$DEST/.installed-lock"

strict=0
if [ -n "${CI:-}" ] && [ "${CI:-}" != "false" ] && [ "${CI:-}" != "0" ]; then strict=1; fi
if [ "${KLAMM_REQUIRE_INTEROP_TOOLS:-0}" = "1" ]; then strict=1; fi

log() { echo "js-deps: $*" >&2; }
give_up() {
    if [ "$strict" = 1 ]; then log "ERROR: $*"; exit 1; fi
    log "$*; kafkajs tests will be skipped"
    exit 0
}

command -v node >/dev/null 2>&1 || give_up "node not found (need Node.js >= 14)"
command -v npm >/dev/null 2>&1 || give_up "npm not found"

if [ -f "$STAMP" ] && cmp -s "$STAMP" "$SRC/package-lock.json" \
        && [ -f "$DEST/node_modules/kafkajs/package.json" ]; then
    log "kafkajs present in $DEST/node_modules"
    exit 0
fi

mkdir -p "$DEST"
cp "$SRC/package.json" "$SRC/package-lock.json" "$DEST/"
log "npm ci into $DEST"
if ! npm ci --prefix "$DEST" --ignore-scripts --no-audit --no-fund --loglevel=error >&2; then
    give_up "npm ci failed"
fi
[ -f "$DEST/node_modules/kafkajs/package.json" ] || give_up "kafkajs missing after npm ci"
cp "$SRC/package-lock.json" "$STAMP"
log "kafkajs $(node -p "require('$DEST/node_modules/kafkajs/package.json').version") ready in $DEST"
