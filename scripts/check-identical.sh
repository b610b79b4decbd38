#!/usr/bin/env bash
# The byte-identical check for refactors: runs a candidate kvsim and a baseline kvsim on the main job
# (the bundled Azure trace, bookkeeping only) and on every server golden scenario (tests/server_golden,
# with --emit-ops and every report), and compares every output file byte for byte. summary.json is
# compared after dropping the fields that measure this run's wall time (keys containing "wall" or
# ending in "_per_second", "elapsed_s"), which differ between any two runs; keys the candidate adds
# to summary.json are new outputs, not differences.
#
# Usage: scripts/check-identical.sh NEW_KVSIM BASE_DIR
#   BASE_DIR/kvsim is the baseline binary; its outputs are cached in BASE_DIR/out (made on first use).
#   NEW_FLAGS (environment): extra flags for the candidate only, e.g. flags that ask for an output a
#   refactor made optional. BASE_FLAGS: the same for the baseline.
# Exit: 0 identical, 1 a difference (the first differing files are listed), 2 bad usage.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 NEW_KVSIM BASE_DIR" >&2; exit 2; }
NEW=$(realpath "$1"); BASE=$(realpath "$2")
[ -x "$NEW" ] && [ -x "$BASE/kvsim" ] || { echo "check-identical: need $1 and $2/kvsim, both executable" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# Paths relative to the repository root: report.html names the trace, and two checkouts must agree.
cd "$ROOT"
GOLD=tests/server_golden
MAIN_TRACE=traces/azure/AzureLLMInferenceTrace_conv_2023.csv
MAIN_FLAGS="--model llama-3.1-8b -c 65536 -np 8 -kvu"

run_all() {  # BIN OUTDIR EXTRA_FLAGS
  local bin=$1 out=$2 extra=$3
  mkdir -p "$out"
  # shellcheck disable=SC2086
  "$bin" replay "$MAIN_TRACE" $MAIN_FLAGS --backend none -q --no-progress --out "$out/main" $extra
  for scn in "$GOLD"/*.scn; do
    local name trace flags
    name=$(basename "$scn" .scn)
    trace=$(sed -n 's/^trace: *//p' "$scn")
    flags=$(sed -n 's/^kvsim: *//p' "$scn")
    # shellcheck disable=SC2086
    "$bin" replay "$GOLD/$trace" -q --no-progress --backend none --emit-ops "$out/$name.ops.csv" \
      --out "$out/$name" $flags $extra
  done
}

normalise() {  # BASE NEW: summary.json without wall-time fields, keys sorted, of NEW only the keys BASE has
  python3 - "$1" "$2" <<'PY'
import json, sys
def timing(k):
    return "wall" in k or k.endswith(("_per_second", "elapsed_s"))
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items()
                if not timing(k)}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
def common(b, n):  # keys a candidate added are new outputs, not differences (a refactor adds none)
    if isinstance(b, dict) and isinstance(n, dict):
        return {k: common(b[k], n[k]) for k in b if k in n} | {k: None for k in b if k not in n}
    return n
base, new = (clean(json.load(open(f))) for f in sys.argv[1:3])
print(json.dumps(common(base, new), sort_keys=True) == json.dumps(base, sort_keys=True))
PY
}

if [ ! -f "$BASE/out/.complete" ]; then
  rm -rf "$BASE/out"
  run_all "$BASE/kvsim" "$BASE/out" "${BASE_FLAGS:-}"
  touch "$BASE/out/.complete"
fi
NEW_OUT=$(mktemp -d /tmp/check-identical.XXXXXX)
trap 'rm -rf "$NEW_OUT"' EXIT
run_all "$NEW" "$NEW_OUT" "${NEW_FLAGS:-}"

bad=0
while IFS= read -r f; do
  rel=${f#"$BASE/out/"}
  [ "$rel" = .complete ] && continue
  if [ ! -f "$NEW_OUT/$rel" ]; then echo "missing in the candidate: $rel"; bad=$((bad + 1)); continue; fi
  if [ "$(basename "$rel")" = summary.json ]; then
    [ "$(normalise "$f" "$NEW_OUT/$rel")" = True ] || { echo "differs: $rel"; bad=$((bad + 1)); }
  else
    cmp -s "$f" "$NEW_OUT/$rel" || { echo "differs: $rel"; bad=$((bad + 1)); }
  fi
done < <(find "$BASE/out" -type f | sort)
while IFS= read -r f; do
  rel=${f#"$NEW_OUT/"}
  [ -f "$BASE/out/$rel" ] || { echo "new in the candidate: $rel"; bad=$((bad + 1)); }
done < <(find "$NEW_OUT" -type f | sort)
n=$(find "$BASE/out" -type f ! -name .complete | wc -l)
if [ "$bad" -eq 0 ]; then echo "check-identical: $n files identical (main job + $(ls "$GOLD"/*.scn | wc -l) golden scenarios)"; exit 0; fi
echo "check-identical: $bad of $n files differ"; exit 1
