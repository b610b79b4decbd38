#!/usr/bin/env bash
# One-shot GPU check (issue 8): configure + build with CUDA, run the GPU tests (CUDA kernels vs the CPU backend and
# the references), a short kvbench sweep on the CUDA backend, a verified CUDA replay of a small trace, and issue
# 4's CPU sweep on all of the host's cores.
# Everything is written under OUTDIR (logs, results, summary.txt). Total budget: 8 minutes (KVSIM_GPU_CHECK_BUDGET
# seconds overrides); each step gets what is left. Steps whose tool or flag does not exist yet are skipped with a
# message. Exit status: 0 when every step that ran passed, 1 otherwise, 2 for bad usage.
#   usage: scripts/gpu-check.sh OUTDIR
set -u -o pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
OUT=$1
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
BUDGET=${KVSIM_GPU_CHECK_BUDGET:-480}
BUILD=${KVSIM_GPU_BUILD_DIR:-build-gpu}
JOBS=$(nproc 2>/dev/null || echo 4)
START=$SECONDS
FAILED=0
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - (SECONDS - START))); }

# run_step NAME LOG CMD...: runs CMD under the remaining budget, records pass/fail/timeout and the duration.
run_step() {
    local name=$1 log=$2
    shift 2
    local remain
    remain=$(left)
    if [ "$remain" -le 5 ]; then
        note "SKIP $name: time budget spent"
        FAILED=1
        return 1
    fi
    local t0=$SECONDS
    timeout --kill-after=10 "$remain" "$@" > "$log" 2>&1
    local rc=$?
    local dt=$((SECONDS - t0))
    if [ $rc -eq 0 ]; then
        note "PASS $name (${dt}s, log $log)"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        note "TIMEOUT $name after ${dt}s (log $log)"
        FAILED=1
    else
        note "FAIL $name rc=$rc (${dt}s, log $log)"
        tail -n 30 "$log" | sed 's/^/    /' | tee -a "$SUMMARY"
        FAILED=1
    fi
    return $rc
}

note "kvsim gpu-check $(date -u +%FT%TZ) in $ROOT, budget ${BUDGET}s, $JOBS jobs"
if command -v nvidia-smi > /dev/null 2>&1; then
    nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
    nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,clocks.max.mem --format=csv >> "$SUMMARY" 2>&1
    CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
else
    note "nvidia-smi not found: no NVIDIA driver here; the GPU tests will skip"
    CC=""
fi
ARCH_FLAG=()
if [ -n "$CC" ]; then ARCH_FLAG=(-DCMAKE_CUDA_ARCHITECTURES="$CC"); fi  # build for this GPU only: faster

run_step configure "$OUT/configure.log" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVSIM_CUDA=ON "${ARCH_FLAG[@]}" || {
    note "configure failed: stopping"
    exit 1
}
if ! grep -q "kvsim: CUDA backend ON" "$OUT/configure.log"; then
    note "FAIL configure: nvcc not found, the CUDA backend is not built"
    exit 1
fi
# test_cuda depends on the kvsim and kvbench apps (top CMakeLists), so this builds them too
run_step build "$OUT/build.log" cmake --build "$BUILD" -j "$JOBS" --target test_cuda test_nvtx || {
    note "build failed: stopping"
    exit 1
}

run_step test_cuda "$OUT/test_cuda.log" "$BUILD/test_cuda" --duration=true
grep -E "test cases|assertions" "$OUT/test_cuda.log" | sed 's/^/    /' >> "$SUMMARY"
if grep -q "no CUDA device" "$OUT/test_cuda.log"; then
    note "FAIL test_cuda: the GPU tests skipped themselves ($(grep -m1 -o 'no CUDA device.*' "$OUT/test_cuda.log"))"
    FAILED=1
fi
run_step test_nvtx "$OUT/test_nvtx.log" "$BUILD/test_nvtx"

KVBENCH="$BUILD/kvbench"
if [ -x "$KVBENCH" ] && "$KVBENCH" sweep --help > "$OUT/kvbench-help.txt" 2>&1; then
    mkdir -p "$OUT/kvbench"
    run_step kvbench_sweep "$OUT/kvbench.log" "$KVBENCH" sweep --ctx 4096,32768,131072 --kv-type f16,q8_0,q4_0 \
        --batch 1,8,32 --backend cuda -t "$JOBS" --repeats 10 --out "$OUT/kvbench" &&
        run_step kvbench_errors "$OUT/kvbench-errors.log" python3 -c '
import json, sys
pts = json.load(open(sys.argv[1]))["points"]
bad = [p for p in pts if p.get("status") == "ok" and max(p.get("err_vs_eigen", -1), p.get("err_vs_ref", -1)) > 1e-3]
for p in bad: print("CUDA output differs from the CPU baselines:", p)
print(len(pts), "points,", len(bad), "with |err| > 1e-3")
sys.exit(1 if bad else 0)' "$OUT/kvbench/kvbench.json"
else
    note "SKIP kvbench_sweep: $KVBENCH sweep not available in this checkout"
fi

KVSIM="$BUILD/kvsim"
TRACE=traces/ops/context_shift.csv
[ -x "$KVSIM" ] && "$KVSIM" replay --help > "$OUT/kvsim-replay-help.txt" 2>&1
if grep -q -- "--verify" "$OUT/kvsim-replay-help.txt" 2>/dev/null && grep -q -- "--backend" "$OUT/kvsim-replay-help.txt"; then
    # llama-3-8b heads (128): the CUDA kernels take head_dim 64/128/256, tiny-llama's is 32
    run_step replay_cuda_verify "$OUT/replay.log" "$KVSIM" replay "$TRACE" --model llama-3-8b -c 4096 -np 2 -kvu \
        --backend cuda --verify
else
    note "SKIP replay_cuda_verify: kvsim replay has no --backend/--verify flags in this checkout"
fi

# issue 4's CPU targets on this host's cores (the development VM's 2 vCPUs are core-bound: see docs/benchmarks.md)
if [ -x "$KVBENCH" ] && [ "$(left)" -gt 150 ]; then
    run_step kvbench_cpu "$OUT/kvbench-cpu.log" "$KVBENCH" sweep --backend cpu --ctx 16384,32768,65536 \
        --kv-type f16,q8_0 --batch 1,16 -t "$JOBS" --repeats 5 --out "$OUT/kvbench-cpu"
else
    note "SKIP kvbench_cpu: no kvbench or under 150 s left"
fi

if command -v nsys > /dev/null 2>&1 && [ -x "$KVSIM" ] && [ "$(left)" -gt 60 ]; then
    run_step nsys_profile "$OUT/nsys.log" nsys profile --trace=cuda,nvtx --force-overwrite=true \
        -o "$OUT/kvsim-replay" "$KVSIM" replay "$TRACE" --model llama-3-8b -c 4096 -np 2 -kvu --backend cuda
else
    note "SKIP nsys_profile: nsys not installed or too little time left"
fi

note "total $((SECONDS - START))s; $([ $FAILED -eq 0 ] && echo 'ALL PASSED' || echo 'SOME STEPS FAILED')"
exit $FAILED
