#!/usr/bin/env bash
# Time-model validation against the real llama.cpp, calibration and validation in ONE run
# (the machine is shared and noisy; two runs would compare different machines), interleaved in ROUNDS:
#   0. the op trace of a request-trace slice (kvsim replay --emit-ops, --arrivals saturate: the ops do not
#      depend on the step times)
#   1. each round: llama-bench calibration points (-o json: pp at several -p and -ub; 2-8 token prompts and pp512
#      at several -d), llama-batched-bench's runs (1, 2 and 4 sequences in one cache) timed call by call by
#      tv-decode-timer (batched_steps.py: their op trace, then llama-bench rows; also the scanned- and masked-cell
#      runs, where only the first sequences decode), then the slice's op trace timed
#      call by call on the real library (tv-decode-timer)
#   2. merge_rounds.py: every llama-bench result and every real step time the minimum (STAT=median: the median)
#      over the rounds, with the round-to-round spread (why the minimum: merge_rounds.py)
#   3. kvsim calibrate on the merged results -> a device profile
#   4. held-out validation: kvsim replay of the slice with that profile (steps.csv; the same op trace, checked),
#      compare.py: per-step error, TTFT / TPOT p50, each beside the rounds' spread.
# Needs: scripts/time-validation/build.sh done ($WORK/build/bin, $WORK/tv-decode-timer) and a
# kvsim built with `calibrate`, `--device FILE`, `--weights` (KVSIM=, default build-val/kvsim).
# Settings (environment):
#   PRESET=qwen2.5-0.5b|llama-3.2-1b   model shape (make_model.py preset = kvsim --model preset)
#   WEIGHTS=q4_0|q8_0|f16|q4_k_m       weight type (llama-quantize; kvsim --weights)
#   THREADS=1 CPUS=0-1                  llama.cpp threads, taskset CPU list (kvsim too). One thread:
#                                       on this shared 2-vCPU VM under load, -t 2 measured slower and
#                                       far noisier (ggml's threads spin at a barrier per op and wait
#                                       for a descheduled partner): docs/benchmarks.md
#   TRACE=traces/azure/...csv LIMIT=12  first LIMIT requests of the trace
#   CTX=8192 NP=4 KVU=1 B=2048 UB=512 FA=on CTK=f16 CTV=f16   replay / context settings
#   CONTEXT_SHIFT=0|1                   1: the replay with --context-shift (llama-server's; a slice with shifts needs a
#                                       small context, e.g. CTX=2048 NP=4 KVU=0 LIMIT=16: two shifts)
#   CAL_CTX=$CTX                        the context of the timed calibration runs (batched-bench's, the K-shift steps):
#                                       a small CTX for the replay would not hold their 4 x 528 or 16 x 272 cells
#   KSHIFT_DEPTHS=512,2048 KSHIFT_STEPS=8   decode steps after a K-shift of the whole CAL_CTX cache, at these depths
#                                       (kshift_steps.py); empty KSHIFT_DEPTHS: none, calibrate keeps the cpu profile's price
#   ROUNDS=5                            interleaved rounds (calibration and timed replay each round)
#   REPS=1                              llama-bench repetitions within a round
#   STAT=min|median                     the statistic over rounds (merge_rounds.py says why min)
#   ATTENTION_CELLS=                    kvsim calibrate --attention-cells: empty = the base profile's
#                                       (cpu: visible, since 2026-12-04); visible = attention on the cells each token's own
#                                       sequence sees (ggml's CPU flash attention skips masked cells)
#   OUT=$WORK/run-<date>                results folder (logs, JSON, CSVs, result.txt)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
WORK="${WORK:-/tmp/tv-work}"
PRESET="${PRESET:-qwen2.5-0.5b}"
WEIGHTS="${WEIGHTS:-q4_0}"
THREADS="${THREADS:-1}"
CPUS="${CPUS:-0-1}"
TRACE="${TRACE:-$REPO/traces/azure/AzureLLMInferenceTrace_conv_2023.csv}"
LIMIT="${LIMIT:-12}"
CTX="${CTX:-8192}" NP="${NP:-4}" KVU="${KVU:-1}" B="${B:-2048}" UB="${UB:-512}" FA="${FA:-on}"
CTK="${CTK:-f16}" CTV="${CTV:-f16}" REPS="${REPS:-1}" ROUNDS="${ROUNDS:-5}" STAT="${STAT:-min}"
CONTEXT_SHIFT="${CONTEXT_SHIFT:-0}" CAL_CTX="${CAL_CTX:-$CTX}" KSHIFT_DEPTHS="${KSHIFT_DEPTHS-512,2048}" KSHIFT_STEPS="${KSHIFT_STEPS:-8}"
case "$CONTEXT_SHIFT" in 0|1) ;; *) printf "run.sh: CONTEXT_SHIFT must be 0 or 1, got %q\n" "$CONTEXT_SHIFT" >&2; exit 2 ;; esac
ATTENTION_CELLS="${ATTENTION_CELLS:-}"
case "$ATTENTION_CELLS" in ""|n_kv|visible) ;; *) echo "run.sh: ATTENTION_CELLS must be n_kv or visible, got '$ATTENTION_CELLS'" >&2; exit 2 ;; esac
KVSIM="${KVSIM:-$REPO/build-val/kvsim}"
OUT="${OUT:-$WORK/run-$(date -u +%Y%m%dT%H%M%SZ)}"
BIN="$WORK/build/bin"
TIMER="$WORK/tv-decode-timer"

die() { echo "run.sh: $*" >&2; exit 2; }
# the calibration runs' settings, before anything runs: a bad one used to fail after minutes, or after all the rounds
whole() { [[ "$2" =~ ^[0-9]+$ ]] && [ "${#2}" -le 9 ] || die "$1 must be a whole number, got $(printf %q "$2")"; }
whole CAL_CTX "$CAL_CTX"; whole NP "$NP"; whole KSHIFT_STEPS "$KSHIFT_STEPS"
# batched-bench's runs hold NP x (512 + 16) cells, the masked-cell run 16 x (256 + 16)
CAL_NEED=$(( NP * 528 > 4352 ? NP * 528 : 4352 ))
[ "$CAL_CTX" -ge "$CAL_NEED" ] || die "CAL_CTX $CAL_CTX cannot hold the calibration runs' $CAL_NEED cells (NP $NP)"
if [ -n "$KSHIFT_DEPTHS" ]; then
  [[ "$KSHIFT_DEPTHS" =~ ^[0-9]{1,7}(,[0-9]{1,7})*$ ]] || die "KSHIFT_DEPTHS must be depths like 512,2048, got $(printf %q "$KSHIFT_DEPTHS")"
  [ "$KSHIFT_STEPS" -ge 2 ] && [ "$KSHIFT_STEPS" -le 4096 ] || die "KSHIFT_STEPS must be in [2, 4096], got $KSHIFT_STEPS"
  for d in ${KSHIFT_DEPTHS//,/ }; do
    [ "$d" -ge 2 ] && [ $((d + KSHIFT_STEPS)) -le "$CAL_CTX" ] || die "KSHIFT_DEPTHS: depth $d (+ $KSHIFT_STEPS steps) does not fit CAL_CTX $CAL_CTX"
  done
fi
[ -x "$BIN/llama-bench" ] && [ -x "$BIN/llama-quantize" ] && [ -x "$TIMER" ] || die "run scripts/time-validation/build.sh first ($BIN, $TIMER)"
[ -f "$TRACE" ] || die "no trace $TRACE"
mkdir -p "$OUT" "$WORK/models"
log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$OUT/log.txt"; }
load() { echo "$(date -u +%H:%M:%S) $1: $(uptime | sed 's/.*load average/load average/')" >> "$OUT/load.txt"; }
pin=(taskset -c "$CPUS")

# --- model: random F16 of the preset's shape, quantized once ----------------------------------
F16="$WORK/models/$PRESET-f16.gguf"
MODEL="$WORK/models/$PRESET-$WEIGHTS.gguf"
[ -f "$F16" ] || { log "making $F16"; python3 "$HERE/make_model.py" "$F16" --preset "$PRESET" >> "$OUT/log.txt"; }
if [ "$WEIGHTS" = f16 ]; then MODEL="$F16"
elif [ ! -f "$MODEL" ]; then
  QT="$(echo "$WEIGHTS" | tr a-z A-Z)"
  log "quantizing to $QT"
  nice -n 5 "$BIN/llama-quantize" "$F16" "$MODEL.tmp" "$QT" "$THREADS" > "$OUT/quantize.log" 2>&1
  mv "$MODEL.tmp" "$MODEL"
fi

{
  echo "date        $(date -u +%FT%TZ)"
  echo "kvsim       $KVSIM built $(date -u -r "$KVSIM" +%FT%TZ 2>/dev/null || echo '(missing)'); repo now at $(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet HEAD -- lib apps || echo ' + uncommitted changes in lib/apps')"
  echo "llama.cpp   $(cat "$WORK/src/.commit") (GGML_NATIVE=ON, $BIN)"
  echo "cpu         $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs, taskset $CPUS, -t $THREADS"
  echo "model       $MODEL ($PRESET, $WEIGHTS, random weights)"
  echo "replay      $TRACE first $LIMIT requests, -c $CTX -np $NP kvu=$KVU -b $B -ub $UB -fa $FA -ctk $CTK -ctv $CTV$([ "$CONTEXT_SHIFT" = 1 ] && echo ' --context-shift')"
  echo "calibration timed runs at -c $CAL_CTX; K-shift steps at depths ${KSHIFT_DEPTHS:-(none)}"
  echo "attention   cells charged: ${ATTENTION_CELLS:-the base profile default (cpu: visible)}"
  echo "protocol    $ROUNDS interleaved rounds, llama-bench -r $REPS per round; the $STAT over the rounds"
} | tee "$OUT/env.txt"
load start

# --- 0. the op trace ---------------------------------------------------------------------------
[ -x "$KVSIM" ] || { log "MISSING: no kvsim at $KVSIM (cmake -S . -B build-val -DKVSIM_CUDA=OFF && cmake --build build-val --target kvsim)"; exit 3; }
KVUFLAG=$([ "$KVU" = 1 ] && echo -kvu || echo -no-kvu)
REPLAY=(replay "$TRACE" --limit "$LIMIT" --model "$PRESET" --weights "$WEIGHTS" -c "$CTX" -np "$NP" "$KVUFLAG" -b "$B" -ub "$UB"
        -fa "$FA" -ctk "$CTK" -ctv "$CTV" --arrivals saturate --cache-ram 0 --backend none --no-progress)
[ "$CONTEXT_SHIFT" = 1 ] && REPLAY+=(--context-shift)
log "kvsim replay --emit-ops (first $LIMIT requests, --arrivals saturate: a gap-free clock for the TTFT join)"
"$KVSIM" "${REPLAY[@]}" --device cpu --emit-ops "$OUT/ops.csv" --out "$OUT/sim-ops" > "$OUT/replay-ops.txt" 2>&1

# --- 1. interleaved rounds: calibration points, then the real op trace ----------------------
BATCHED="--npp 128,512 --ntg 16 --npl 1,2,$NP"
python3 "$HERE/batched_steps.py" ops "$OUT/batched-ops.csv" $BATCHED --n-batch "$B"
# 2 or NP sequences' prompts, then only sequence 0 decodes: one token's visible cells beside 1-3x more masked ones, which
# ggml's CPU flash attention scans and skips (kvsim's per-scanned-cell term; the runs above cannot separate it from
# the K/V reads, since there every sequence decodes)
SCAN="--npp 128,512 --ntg 16 --npl 2,$NP --gen-seqs 1"
python3 "$HERE/batched_steps.py" ops "$OUT/scan-ops.csv" $SCAN --n-batch "$B"
# 16 prompts of 256 tokens (two calls of -b 2048), then only the first NP sequences decode: NP tokens a step, each
# beside 15 x 256 cells of the other sequences it walks past. The runs above hold 1-3x as many masked as visible
# cells, too few to price the walk apart from the imbalance of ggml's split-KV threads: fits put 1.8-12 ns on a cell
# that measured 0.4-0.6 ns (docs/benchmarks.md, 2026-12-04)
MASKED_SEQS=16
MASKED="--npp 256 --ntg 16 --npl $MASKED_SEQS --gen-seqs $NP"
python3 "$HERE/batched_steps.py" ops "$OUT/masked-ops.csv" $MASKED --n-batch "$B"
# llama-server's context shift: each decode step after one ropes the whole cache first (llama.cpp's K-shift), a cost
# llama-bench never measures
KSHIFT="--depths $KSHIFT_DEPTHS --steps $KSHIFT_STEPS"
[ -n "$KSHIFT_DEPTHS" ] && python3 "$HERE/kshift_steps.py" ops "$OUT/kshift-ops.csv" $KSHIFT --n-batch "$B"
FA1=$([ "$FA" = off ] && echo 0 || echo 1)
# -lm none: the weights read into memory, as tv-decode-timer loads them (mapped weights were paged out by the host
# between steps: tv-decode-timer.cpp)
common=(-m "$MODEL" -t "$THREADS" -fa "$FA1" -ctk "$CTK" -ctv "$CTV" -b "$B" -r "$REPS" -lm none -o json)
for r in $(seq 1 "$ROUNDS"); do
  log "round $r/$ROUNDS: llama-bench pp (-p 1,2,4,16,64,128,512 x -ub 128,$UB)"
  "${pin[@]}" "$BIN/llama-bench" "${common[@]}" -p 1,2,4,16,64,128,512 -n 0 -ub "128,$UB" > "$OUT/bench-pp-$r.json" 2> "$OUT/bench-pp-$r.log"
  load "bench-pp $r"
  # prompts at depth: a step of several tokens reads the cells a long prompt filled. No tg: llama-bench's tg32 is the
  # mean of 32 decodes, every stall included, where every other point is one decode's minimum over the samples
  log "round $r/$ROUNDS: llama-bench prompts at depth (-p 2,4,8,512 at -d 0,1024,2048)"
  "${pin[@]}" "$BIN/llama-bench" "${common[@]}" -p 2,4,8,512 -n 0 -d 0,1024,2048 -ub "$UB" > "$OUT/bench-depth-$r.json" 2> "$OUT/bench-depth-$r.log"
  load "bench-depth $r"
  # several sequences in one cache (and one, as the same steps): decode steps of NP tokens whose attention walks
  # the other sequences' cells and whose output matrix computes NP rows, each decode timed (batched_steps.py)
  log "round $r/$ROUNDS: llama-batched-bench's runs timed call by call ($BATCHED)"
  "${pin[@]}" "$TIMER" -m "$MODEL" --ops "$OUT/batched-ops.csv" -o "$OUT/batched-steps-$r.csv" -c "$CAL_CTX" -np "$NP" "$KVUFLAG" \
    -b "$B" -ub "$UB" -fa "$FA" -ctk "$CTK" -ctv "$CTV" -t "$THREADS" >> "$OUT/log.txt" 2>&1
  load "batched $r"
  log "round $r/$ROUNDS: $NP prompts, then sequence 0 alone decodes, timed call by call ($SCAN)"
  "${pin[@]}" "$TIMER" -m "$MODEL" --ops "$OUT/scan-ops.csv" -o "$OUT/scan-steps-$r.csv" -c "$CAL_CTX" -np "$NP" "$KVUFLAG" \
    -b "$B" -ub "$UB" -fa "$FA" -ctk "$CTK" -ctv "$CTV" -t "$THREADS" >> "$OUT/log.txt" 2>&1
  load "scan $r"
  log "round $r/$ROUNDS: $MASKED_SEQS prompts, then $NP sequences decode among the others' cells, timed call by call ($MASKED)"
  "${pin[@]}" "$TIMER" -m "$MODEL" --ops "$OUT/masked-ops.csv" -o "$OUT/masked-steps-$r.csv" -c "$CAL_CTX" -np "$MASKED_SEQS" "$KVUFLAG" \
    -b "$B" -ub "$UB" -fa "$FA" -ctk "$CTK" -ctv "$CTV" -t "$THREADS" >> "$OUT/log.txt" 2>&1
  load "masked $r"
  if [ -n "$KSHIFT_DEPTHS" ]; then
    log "round $r/$ROUNDS: decode steps after a K-shift of $CAL_CTX cells, timed call by call ($KSHIFT)"
    "${pin[@]}" "$TIMER" -m "$MODEL" --ops "$OUT/kshift-ops.csv" -o "$OUT/kshift-steps-$r.csv" -c "$CAL_CTX" -np 1 \
      -b "$B" -ub "$UB" -fa "$FA" -ctk "$CTK" -ctv "$CTV" -t "$THREADS" >> "$OUT/log.txt" 2>&1
    load "kshift $r"
  fi
  log "round $r/$ROUNDS: real llama.cpp: tv-decode-timer on $(grep -c ',decode,' "$OUT/ops.csv") decode rows"
  "${pin[@]}" "$TIMER" -m "$MODEL" --ops "$OUT/ops.csv" -o "$OUT/real-steps-$r.csv" -c "$CTX" -np "$NP" "$KVUFLAG" \
    -b "$B" -ub "$UB" -fa "$FA" -ctk "$CTK" -ctv "$CTV" -t "$THREADS" >> "$OUT/log.txt" 2>&1
  load "timer $r"
done
seqs=$(seq 1 "$ROUNDS")
python3 "$HERE/merge_rounds.py" --stat "$STAT" bench "$OUT/bench-pp.json" $(for r in $seqs; do echo "$OUT/bench-pp-$r.json"; done)
python3 "$HERE/merge_rounds.py" --stat "$STAT" bench "$OUT/bench-depth.json" $(for r in $seqs; do echo "$OUT/bench-depth-$r.json"; done)
python3 "$HERE/merge_rounds.py" --stat "$STAT" steps "$OUT/batched-steps.csv" $(for r in $seqs; do echo "$OUT/batched-steps-$r.csv"; done) > /dev/null
python3 "$HERE/batched_steps.py" bench "$OUT/batched-steps.csv" "$OUT/bench-pp.json" "$OUT/bench-np.json" $BATCHED \
  --n-batch "$B" --n-ubatch "$UB" --ctx "$CAL_CTX" --fa "$FA1" $([ "$KVU" = 1 ] && echo --kvu)
python3 "$HERE/merge_rounds.py" --stat "$STAT" steps "$OUT/scan-steps.csv" $(for r in $seqs; do echo "$OUT/scan-steps-$r.csv"; done) > /dev/null
python3 "$HERE/batched_steps.py" bench "$OUT/scan-steps.csv" "$OUT/bench-pp.json" "$OUT/bench-scan.json" $SCAN \
  --n-batch "$B" --n-ubatch "$UB" --ctx "$CAL_CTX" --fa "$FA1" $([ "$KVU" = 1 ] && echo --kvu)
python3 "$HERE/merge_rounds.py" --stat "$STAT" steps "$OUT/masked-steps.csv" $(for r in $seqs; do echo "$OUT/masked-steps-$r.csv"; done) > /dev/null
python3 "$HERE/batched_steps.py" bench "$OUT/masked-steps.csv" "$OUT/bench-pp.json" "$OUT/bench-masked.json" $MASKED \
  --n-batch "$B" --n-ubatch "$UB" --ctx "$CAL_CTX" --fa "$FA1" $([ "$KVU" = 1 ] && echo --kvu)
BENCH_KSHIFT=()
if [ -n "$KSHIFT_DEPTHS" ]; then
  python3 "$HERE/merge_rounds.py" --stat "$STAT" steps "$OUT/kshift-steps.csv" $(for r in $seqs; do echo "$OUT/kshift-steps-$r.csv"; done) > /dev/null
  python3 "$HERE/kshift_steps.py" bench "$OUT/kshift-steps.csv" "$OUT/bench-pp.json" "$OUT/bench-kshift.json" $KSHIFT \
    --n-batch "$B" --n-ubatch "$UB" --ctx "$CAL_CTX" --fa "$FA1" $([ "$KVU" = 1 ] && echo --kvu)
  BENCH_KSHIFT=("$OUT/bench-kshift.json")
fi
python3 "$HERE/merge_rounds.py" --stat "$STAT" steps "$OUT/real-steps.csv" $(for r in $seqs; do echo "$OUT/real-steps-$r.csv"; done) | tee "$OUT/rounds.txt"

# harness check (not kvsim): the timer on a llama-bench-like op trace, one 128-token prompt at
# depth 0 then 32 single tokens, against llama-bench's pp128 (-ub 128) / pp1 (-ub 512) of this run
{ echo "batch,op,seq,n_tokens,p0,p1,delta,seq_dst"; echo "p,decode,0,128,0,,,"
  for i in $(seq 0 31); do echo "g$i,decode,0,1,$((128 + i)),,,"; done; } > "$OUT/selfcheck-ops.csv"
"${pin[@]}" "$TIMER" -m "$MODEL" --ops "$OUT/selfcheck-ops.csv" -o "$OUT/selfcheck-steps.csv" -c "$CAL_CTX" -np 1 \
  -b "$B" -ub 128 -fa "$FA" -ctk "$CTK" -ctv "$CTV" -t "$THREADS" 2>> "$OUT/log.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/selfcheck.txt"
import csv, json, statistics, sys
d = sys.argv[1]
pp = [b for b in json.load(open(d + "/bench-pp.json")) if b["n_prompt"] == 128 and b["n_ubatch"] == 128]
p1 = [b for b in json.load(open(d + "/bench-pp.json")) if b["n_prompt"] == 1 and b["n_ubatch"] != 128]
st = list(csv.DictReader(open(d + "/selfcheck-steps.csv")))
g = statistics.median(float(r["ms"]) for r in st[1:])
if pp:
    print("harness check: 128-token prompt %.1f ms (timer) vs %.1f ms (llama-bench pp128 -ub 128)" % (float(st[0]["ms"]), pp[0]["avg_ns"] / 1e6))
if p1:
    print("harness check: 1-token decode median %.1f ms (timer) vs %.1f ms (llama-bench pp1, minimum of its samples)" % (g, p1[0]["avg_ns"] / 1e6))
PY

# --- 2. kvsim calibrate on the merged rounds --------------------------------------------------
CELLS=(); [ -n "$ATTENTION_CELLS" ] && CELLS=(--attention-cells "$ATTENTION_CELLS")
log "kvsim calibrate ${CELLS[*]:-}"
"$KVSIM" calibrate "$OUT/bench-pp.json" "$OUT/bench-depth.json" "$OUT/bench-np.json" "$OUT/bench-scan.json" "$OUT/bench-masked.json" "${BENCH_KSHIFT[@]}" --model "$PRESET" "${CELLS[@]}" -o "$OUT/profile.json" 2>&1 | tee "$OUT/calibrate.txt"

# --- 3. held-out validation -----------------------------------------------------------------
log "kvsim replay with the fitted profile"
"${pin[@]}" "$KVSIM" "${REPLAY[@]}" --device "$OUT/profile.json" --emit-ops "$OUT/ops-check.csv" --out "$OUT/sim" --steps-csv 2>&1 | tee "$OUT/replay.txt"
[ -f "$OUT/sim/steps.csv" ] || { log "MISSING: the replay wrote no steps.csv"; exit 3; }
cmp -s "$OUT/ops.csv" "$OUT/ops-check.csv" || { log "the fitted profile's replay issued other ops than the timed trace"; exit 3; }
log "compare"
python3 "$HERE/compare.py" "$OUT/sim" "$OUT/real-steps.csv" --ops "$OUT/ops.csv" --json "$OUT/result.json" --joined "$OUT/joined.csv" \
  | tee "$OUT/result.txt"
# the what-if re-charges an n_kv profile's attention on the visible cells: nothing to add when
# the profile already charges them
if [ "$ATTENTION_CELLS" != visible ]; then
  python3 "$HERE/visible_cells.py" "$OUT" --preset "$PRESET" | tee -a "$OUT/result.txt" || true
fi
cat "$OUT/load.txt" | tee -a "$OUT/result.txt"
log "done: $OUT"
