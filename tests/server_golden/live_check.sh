#!/usr/bin/env bash
# Live check of the recordings: replays the scenarios of this folder against the real llama-server
# (../shared/tools/server-oracle, built by its build.sh into $WORK) twice each and checks that the
# server still issues exactly expected/NAME.ops.csv (record.sh --check). Run by ctest as
# server_oracle_live; exit 77 (ctest: skipped) when ../shared or the built server is absent.
# The two largest real-trace slices and the two editor-trace slices (about 6 minutes together on 2 cores) run only
# with LIVE_ALL=1.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ORACLE="$HERE/../../../shared/tools/server-oracle"
RECORD="$HERE/oracle/record.sh"   # the shared record.sh with this repository's client extension
WORK="${WORK:-/tmp/server-oracle-work}"
if [ ! -x "$ORACLE/record.sh" ]; then echo "skipped: $ORACLE not found"; exit 77; fi
if [ ! -x "$WORK/build/bin/llama-server" ] || [ ! -f "$WORK/shim.so" ]; then
  echo "skipped: the server oracle is not built (run $ORACLE/build.sh, about 17-40 minutes on 2 cores)"; exit 77
fi
names=()
for f in "$HERE"/*.scn; do
  n="$(basename "$f" .scn)"
  case "$n" in mooncake30_kvu|azure60_kvu|editor_reuse|editor_noreuse) [ "${LIVE_ALL:-0}" = 1 ] || continue;; esac
  names+=("$n")
done
exec "$RECORD" --check "$HERE" "${names[@]}"
