#!/usr/bin/env bash
# Same-run A/B of kvsim's attention cells (n_kv vs visible) on a FINISHED run.sh result: re-fits
# the run's own llama-bench points with --attention-cells CELLS, replays the same trace slice
# with that profile and compares with the run's real timings (real-steps.csv). No llama.cpp is
# run: both settings are judged on the same measurements, so the machine's drift between runs
# does not enter the difference.
#   ab_cells.sh RUN_DIR n_kv|visible      results in RUN_DIR/ab-CELLS/ (profile.json, sim/, result.txt)
# Reads the preset, weights and replay settings from RUN_DIR/env.txt; KVSIM= as in run.sh.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
KVSIM="${KVSIM:-$REPO/build-val/kvsim}"
die() { echo "ab_cells.sh: $*" >&2; exit 2; }
[ $# -eq 2 ] || die "usage: ab_cells.sh RUN_DIR n_kv|visible"
RUN="$1" CELLS="$2"
case "$CELLS" in n_kv|visible) ;; *) die "cells must be n_kv or visible, got '$CELLS'" ;; esac
for f in env.txt bench-pp.json ops.csv real-steps.csv; do [ -f "$RUN/$f" ] || die "$RUN/$f missing (not a finished run.sh result)"; done
# the calibration points run.sh fed to calibrate (bench-tg.json: runs before the per-decode batched points)
BENCH=(); for f in bench-pp bench-tg bench-depth bench-np bench-scan; do [ -f "$RUN/$f.json" ] && BENCH+=("$RUN/$f.json"); done
# env.txt: "model  PATH (PRESET, WEIGHTS, random weights)" and "replay  TRACE first N requests, -c .. -np .. kvu=K ..."
read -r PRESET WEIGHTS < <(sed -n 's/^model .*(\([^,]*\), \([^,]*\), random weights)$/\1 \2/p' "$RUN/env.txt")
read -r TRACE LIMIT REST < <(sed -n 's/^replay *\([^ ]*\) first \([0-9]*\) requests, \(.*\)$/\1 \2 \3/p' "$RUN/env.txt")
[ -n "${PRESET:-}" ] && [ -n "${TRACE:-}" ] || die "$RUN/env.txt: cannot read the model / replay lines"
KVU=$(echo "$REST" | sed -n 's/.*kvu=\([01]\).*/\1/p')
SETTINGS=$(echo "$REST" | sed 's/ kvu=[01]//')
KVUFLAG=$([ "$KVU" = 1 ] && echo -kvu || echo -no-kvu)
OUT="$RUN/ab-$CELLS"
mkdir -p "$OUT"
"$KVSIM" calibrate "${BENCH[@]}" --model "$PRESET" --attention-cells "$CELLS" \
  -o "$OUT/profile.json" > "$OUT/calibrate.txt" 2>&1 || { cat "$OUT/calibrate.txt"; exit 2; }
# shellcheck disable=SC2086  # SETTINGS is the run's own flag list, word-split on purpose
"$KVSIM" replay "$TRACE" --limit "$LIMIT" --model "$PRESET" --weights "$WEIGHTS" --device "$OUT/profile.json" \
  $SETTINGS "$KVUFLAG" --arrivals saturate --cache-ram 0 --backend none --no-progress \
  --emit-ops "$OUT/ops.csv" --out "$OUT/sim" --steps-csv > "$OUT/replay.txt" 2>&1
# the real timings belong to the run's op trace: the A/B is only valid on the same calls
cmp -s "$OUT/ops.csv" "$RUN/ops.csv" || die "$OUT/ops.csv differs from the run's op trace: the real timings do not apply"
{ echo "A/B on $RUN: kvsim attention on $CELLS cells, profile re-fitted on the run's llama-bench points"
  grep '|error|' "$OUT/calibrate.txt" | sed 's/^/calibration: /'
  python3 "$HERE/compare.py" "$OUT/sim" "$RUN/real-steps.csv" --json "$OUT/result.json" --joined "$OUT/joined.csv"
} | tee "$OUT/result.txt"
