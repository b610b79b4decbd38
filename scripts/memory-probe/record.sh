#!/usr/bin/env bash
# Records what the real llama.cpp does with memory, the expected values of test_memory:
# - the compute and output buffer sizes it reserves for a context (compute_buffer.jsonl;
#   lib/kv/memory_breakdown's formula is held within 5 % of each), by tests/tools/memory_probe;
# - the context llama-server's --fit chooses (common/fit.cpp: common_fit_params, run on chosen
#   memory sizes, fit.jsonl; lib/kv/fit's arithmetic must give the same n_ctx), by tests/tools/fit_probe.
#
# Needs kvoracle's prebuilt libllama (../shared/tools/kvoracle/build.sh, WORK=/tmp/oracle-work by
# default). Builds tests/tools/memory_probe against it, writes three random-shape GGUFs with sparse
# tensor data (scripts/time-validation/make_model.py --sparse: the probe loads with no_alloc, so
# no weight is read or allocated), and runs the probe over a grid of -c, -ub, -np/-kvu and -fa.
#
# usage: scripts/memory-probe/record.sh [DIR]   (default tests/data/memory)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=${WORK:-/tmp/oracle-work}
LIB=$WORK/nlc/package/bins/linux-x64
DIR=${1:-$ROOT/tests/data/memory}
OUT=$DIR/compute_buffer.jsonl
[ -f "$WORK/inc/llama.h" ] && [ -f "$LIB/libllama.v0.5.0.so" ] ||
  { echo "record.sh: no kvoracle build in $WORK (run ../shared/tools/kvoracle/build.sh, or set WORK)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
g++ -std=c++17 -O1 -Wall -I"$WORK/inc" "$ROOT/tests/tools/memory_probe.cpp" -o "$TMP/memory_probe" \
  "$LIB/libllama.v0.5.0.so" "$LIB/libggml.v0.5.0.so" "$LIB/libggml-base.so" -ldl -Wl,-rpath,"$LIB"
# fit_probe compiles against common/fit.h of the same source (the bundle kvoracle unpacked)
mkdir -p "$TMP/inc"
git -C "$WORK/lcpp.git" show "$(cat "$WORK/inc/COMMIT"):common/fit.h" > "$TMP/inc/fit.h"
g++ -std=c++17 -O1 -Wall -I"$TMP/inc" -I"$WORK/inc" "$ROOT/tests/tools/fit_probe.cpp" -o "$TMP/fit_probe" \
  "$LIB/libllama-common.so" "$LIB/libllama.v0.5.0.so" "$LIB/libggml.v0.5.0.so" "$LIB/libggml-base.so" -ldl -rdynamic \
  -Wl,-rpath,"$LIB"
models="llama-3.2-1b qwen2.5-0.5b llama-3.1-8b"
for m in $models; do
  python3 "$ROOT/scripts/time-validation/make_model.py" "$TMP/$m.gguf" --preset "$m" --sparse >/dev/null
done
{
  for m in $models; do
    for ub in 256 512 2048; do
      for fa in on off; do
        for c in 4096 32768; do
          for np in "-np 1 -kvu 1" "-np 4 -kvu 0"; do
            echo "{\"model\": \"$m\", \"args\": \"-c $c -ub $ub $np -fa $fa\", \"probe\": $("$TMP/memory_probe" "$TMP/$m.gguf" -c $c -ub $ub $np -fa $fa 2>/dev/null)}"
          done
        done
      done
    done
    # FA on with a context long enough for the KQ mask (live through every layer's FFN) to pass the logits
    for args in "-c 1048576 -ub 512 -np 1 -kvu 1 -fa on" "-c 131072 -ub 512 -np 1 -kvu 1 -fa off" \
                "-c 65536 -ub 512 -np 1 -kvu 1 -fa on -ctk q8_0 -ctv q8_0"; do
      echo "{\"model\": \"$m\", \"args\": \"$args\", \"probe\": $("$TMP/memory_probe" "$TMP/$m.gguf" $args 2>/dev/null)}"
    done
  done
} > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "record.sh: $(wc -l < "$OUT") records in $OUT"

# --fit: memory sizes from too small for the smallest context to more than the largest needs
FIT=$DIR/fit.jsonl
{
  for m in $models; do
    for mem in 3000000000 6000000000 12000000000 24000000000 48000000000 96000000000; do
      for args in "-np 1 -kvu 1" "-np 4 -kvu 1" "-np 4 -kvu 0" "-np 4 -kvu 1 -fitc 8192 -fitt 2048" "-np 2 -kvu 0 -ub 2048 -fa off" \
                  "-c 8192 -np 4 -kvu 1"; do
        echo "{\"model\": \"$m\", \"args\": \"--memory $mem $args\", \"probe\": $("$TMP/fit_probe" "$TMP/$m.gguf" --memory $mem $args 2>/dev/null)}"
      done
    done
  done
} > "$FIT.tmp"
mv "$FIT.tmp" "$FIT"
echo "record.sh: $(wc -l < "$FIT") records in $FIT"
