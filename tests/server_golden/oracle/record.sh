#!/usr/bin/env bash
# The server oracle's record.sh (../shared/tools/server-oracle) with this folder's client.py, which adds the
# per-request fields of kvsim's request traces (client.py says which). Same usage and output as the shared one:
#   tests/server_golden/oracle/record.sh [--check] tests/server_golden [NAME...]
# Exit 77 when ../shared/tools/server-oracle is absent.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ORACLE_DIR="$(cd "$HERE/../../../../shared/tools/server-oracle" 2>/dev/null && pwd)" || {
  echo "skipped: ../shared/tools/server-oracle not found"; exit 77; }
export ORACLE_DIR
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# run.sh and record.sh find client.py and run.sh beside themselves: copies, next to this client
cp "$ORACLE_DIR/run.sh" "$ORACLE_DIR/record.sh" "$tmp/"
cp "$HERE/client.py" "$tmp/client.py"
# Speculative decoding (-md): draft_ops.so in front of the shared shim keeps the draft context's calls out of
# ops.csv and writes them to draft.ops.csv (draft_ops.c; patch_oracle.py adapts the copies).
cc -O2 -shared -fPIC -o "$tmp/draft_ops.so" "$HERE/draft_ops.c" -ldl -lpthread
export SHIM="$tmp/draft_ops.so:${SHIM:-${WORK:-/tmp/server-oracle-work}/shim.so}"
python3 "$HERE/patch_oracle.py" "$tmp/run.sh" "$tmp/record.sh"
"$tmp/record.sh" "$@"
