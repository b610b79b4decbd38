#!/usr/bin/env bash
# The GPU check (issues 8 and 17): everything a short GPU window should measure, in one run of at most 8 minutes on
# a 16-core host (KVSIM_GPU_CHECK_BUDGET seconds overrides), for a GPU host that has CUDA, CMake, ninja, Nsight
# Compute and compute-sanitizer but no Debian C++ libraries and no network: those come from the folder
# scripts/gpu-bundle.sh prepared (default <repo>/gpu-bundle; KVSIM_GPU_BUNDLE overrides), found through
# CMAKE_PREFIX_PATH and LD_LIBRARY_PATH.
#   1. configure and build (only kvsim, kvbench, test_cuda, test_nvtx; all cores), and prove the build used the
#      bundle's headers and libfmt (CMake cache, the compiler's dependency lists, ldd);
#   2. test_cuda (every CUDA kernel against the CPU references);
#   3. kvbench sweep --backend cuda at n_kv 4K/32K/128K, batch 1/8/64, f16/q8_0/q4_0 (the goal points: n_kv >= 32K,
#      batch 8-64), with the device-to-device copy limit of the same run and the largest buffer taken from the GPU's
#      free memory, and the legacy kernel (KVSIM_CUDA_FA=legacy) at n_kv 32K, batch 8/64;
#   4. kvsim replay --backend cuda --verify on small traces;
#   5. test_cuda's sanitizer set under compute-sanitizer --tool memcheck and --tool racecheck;
#   6. test_nvtx: the NVTX ranges of a short CUDA replay (and a CPU one), recorded by an injection library;
#   7. ncu on the flash-attention kernels of one goal point (f16, batch 32; --clock-control none): DRAM throughput,
#      achieved occupancy, the top stall reasons;
#   8. issue 4's CPU sweep on all of the host's cores, when time is left.
# The steps run in this order of worth, so a short budget drops the last ones. Each step is time-boxed and logged; a
# step whose tool the host cannot run (e.g. compute-sanitizer or ncu on a sandboxed runtime) is reported UNSUPPORTED
# with the tool's message, not as a failure.
# Output: OUT/gpu-check.tar.gz (every log and result) and OUT/summary.txt (one page), two files: the GPU host gives
# back at most 8.
#   usage: scripts/gpu-check.sh OUT              the check, on a host with an NVIDIA GPU
#          scripts/gpu-check.sh --dry-run [OUT]  on any machine, no GPU needed: bundle found, configure and build
#                                                with the bundle only (the system's /usr prefix ignored by CMake,
#                                                and checked), test_cuda reports itself skipped, archive written;
#                                                the GPU steps are listed, not run. OUT default: build-bundle/dry-run;
#                                                budget 40 minutes (a 2-core machine's CUDA build)
#   KVSIM_GPU_PREBUILT=1: the binaries (kvsim, kvbench, test_cuda, test_nvtx) are already in the build folder, built
#   on the CPU machine for this GPU's architecture (a 15-minute window spends no minutes compiling); configure, build
#   and the bundle's header proof are skipped, libfmt comes from KVSIM_GPU_LIBDIR (default: the bundle's), and every
#   library the binaries load must resolve.
# Exit status: 0 when every step that ran passed (UNSUPPORTED included), 1 otherwise, 2 for bad usage.
set -u -o pipefail

DRY=0
if [ "${1:-}" = "--dry-run" ]; then
    DRY=1
    shift
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -gt 1 ] || { [ $DRY -eq 0 ] && [ $# -ne 1 ]; } || [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    echo "usage: $0 OUT | $0 --dry-run [OUT]" >&2
    exit 2
fi
OUT=${1:-$ROOT/build-bundle/dry-run}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
cd "$ROOT" || exit 2
if [ $DRY -eq 1 ]; then
    # no GPU window to fit: the build may take what a 2-core CI machine needs
    BUDGET=${KVSIM_GPU_CHECK_BUDGET:-2400}
    BUILD_CAP=2300
    BUILD=${KVSIM_GPU_BUILD_DIR:-build-bundle}
else
    BUDGET=${KVSIM_GPU_CHECK_BUDGET:-480}
    BUILD_CAP=240
    BUILD=${KVSIM_GPU_BUILD_DIR:-build-gpu}
fi
BUNDLE=${KVSIM_GPU_BUNDLE:-$ROOT/gpu-bundle}
PREBUILT=${KVSIM_GPU_PREBUILT:-0}
[ $DRY -eq 1 ] && PREBUILT=0
JOBS=$(nproc 2>/dev/null || echo 4)
START=$SECONDS
FAILED=0
mkdir -p "$BUILD" || exit 2
BUILD=$(cd "$BUILD" && pwd)
WORK=$BUILD/gpu-check   # everything here goes into the archive
rm -rf "$WORK"
mkdir -p "$WORK"
SUMMARY=$WORK/summary.txt
: > "$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - (SECONDS - START))); }

# Archive and summary under OUT, whatever happened (also after an early stop).
finish() {
    note "total $((SECONDS - START))s of ${BUDGET}s; $([ $FAILED -eq 0 ] && echo 'ALL PASSED' || echo 'SOME STEPS FAILED')"
    tar czf "$OUT/gpu-check.tar.gz" -C "$BUILD" gpu-check && cp "$SUMMARY" "$OUT/summary.txt"
    echo "gpu-check: $OUT/gpu-check.tar.gz ($(du -h "$OUT/gpu-check.tar.gz" | cut -f1)), $OUT/summary.txt"
}
trap finish EXIT

# run_step NAME CAP UNSUPPORTED_REGEX CMD...: runs CMD for at most CAP seconds (and what is left of the budget),
# log in WORK/NAME.log; PASS / FAIL / TIMEOUT, or UNSUPPORTED when it failed and its log matches the regex ("" =
# never). Returns CMD's status.
run_step() {
    local name=$1 cap=$2 unsupported=$3
    shift 3
    local log=$WORK/$name.log remain
    remain=$(left)
    [ "$cap" -lt "$remain" ] && remain=$cap
    if [ "$remain" -le 5 ]; then
        note "SKIP $name: time budget spent"
        FAILED=1
        return 1
    fi
    local t0=$SECONDS
    timeout --kill-after=10 "$remain" "$@" > "$log" 2>&1
    local rc=$? dt=$((SECONDS - t0))
    if [ $rc -eq 0 ]; then
        note "PASS $name (${dt}s)"
    elif [ -n "$unsupported" ] && grep -qE "$unsupported" "$log"; then
        note "UNSUPPORTED $name on this host (${dt}s): $(grep -m1 -oE ".{0,60}($unsupported).{0,60}" "$log")"
    elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        note "TIMEOUT $name after ${dt}s (cap ${remain}s)"
        FAILED=1
    else
        note "FAIL $name rc=$rc (${dt}s, log gpu-check/$name.log)"
        tail -n 15 "$log" | sed 's/^/    /' | tee -a "$SUMMARY"
        FAILED=1
    fi
    return $rc
}

note "kvsim gpu-check$([ $DRY -eq 1 ] && echo ' --dry-run') $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $JOBS cores, budget ${BUDGET}s"

# ---- the bundle ----
PREFIX=$BUNDLE/root/usr
LIBDIR=${KVSIM_GPU_LIBDIR:-$PREFIX/lib/x86_64-linux-gnu}
if [ "$PREBUILT" = 1 ]; then
    note "prebuilt binaries in $BUILD ($(cat "$BUILD/PREBUILT" 2>/dev/null || echo 'no PREBUILT note')), libfmt from $LIBDIR"
else
    for f in include/fmt/format.h include/eigen3/Eigen/Dense include/CLI/CLI.hpp include/doctest/doctest.h \
        include/libfccp/csv.h include/nlohmann/json.hpp lib/x86_64-linux-gnu/libfmt.so; do
        if [ ! -e "$PREFIX/$f" ]; then
            note "FAIL bundle: $PREFIX/$f missing (run scripts/gpu-bundle.sh where apt works, then carry gpu-bundle)"
            FAILED=1
            exit 1
        fi
    done
    note "bundle $BUNDLE: $(head -n1 "$BUNDLE/MANIFEST" 2>/dev/null | sed 's/^# //')"
    export CMAKE_PREFIX_PATH=$PREFIX${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
fi
export LD_LIBRARY_PATH=$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# ---- the GPU ----
CC=""
FREE_MIB=0
if [ $DRY -eq 0 ]; then
    if nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1; then
        nvidia-smi --query-gpu=name,compute_cap,memory.total,memory.free,clocks.max.sm,clocks.max.mem,driver_version \
            --format=csv | tee -a "$SUMMARY"
        CC=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
        FREE_MIB=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -n1 | tr -d ' ')
    else
        note "FAIL nvidia-smi: no NVIDIA driver here (use --dry-run on a machine without a GPU)"
        FAILED=1
        exit 1
    fi
fi
ARCH=${CC:-90}   # the dry run builds for Hopper (sm_90), the H200 this check is written for

# ---- configure + build with the bundle only (or the prebuilt binaries, checked) ----
prebuilt_ok() {
    local b bad=0
    for b in kvsim kvbench test_cuda test_nvtx; do
        [ -x "$BUILD/$b" ] || { echo "$BUILD/$b missing"; bad=1; continue; }
        ldd "$BUILD/$b" | grep -E "not found|libfmt|libcudart" | sed "s|^|$b: |"
        ldd "$BUILD/$b" | grep -q "not found" && bad=1
    done
    return $bad
}
if [ "$PREBUILT" = 1 ]; then
    export BUILD
    export -f prebuilt_ok
    run_step prebuilt 20 "" bash -c prebuilt_ok || exit 1
    sed 's/^/    /' "$WORK/prebuilt.log" >> "$SUMMARY"
else
    CMAKE_ARGS=(-S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVSIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH"
        -DCMAKE_PREFIX_PATH="$PREFIX")
    # the dry run must not find the system's copies of the same packages: CMake ignores the /usr prefix
    [ $DRY -eq 1 ] && CMAKE_ARGS+=(-DCMAKE_IGNORE_PREFIX_PATH=/usr)
    if [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja > /dev/null 2>&1; then CMAKE_ARGS+=(-G Ninja); fi
    run_step configure 120 "" cmake "${CMAKE_ARGS[@]}" || exit 1
    CUDA_ON=0
    grep -q "kvsim: CUDA backend ON" "$WORK/configure.log" && CUDA_ON=1
    if [ $CUDA_ON -eq 0 ]; then
        if [ $DRY -eq 0 ]; then
            note "FAIL configure: nvcc not found, the CUDA backend is not built"
            FAILED=1
            exit 1
        fi
        note "NOTE configure: no nvcc here, the dry run builds the CPU backend only (the CUDA sources are not compiled)"
    fi
    run_step build "$BUILD_CAP" "" cmake --build "$BUILD" -j "$JOBS" --target kvsim kvbench test_cuda test_nvtx || exit 1
    # Proof that the bundle, and only the bundle, provided the six packages.
    bundle_only() {
        local bad=0 deps
        echo "CMake cache entries of the packages:"
        for v in fmt_DIR Eigen3_DIR nlohmann_json_DIR CLI11_INCLUDE DOCTEST_INCLUDE FCCP_INCLUDE; do
            local val
            val=$(grep -E "^$v:" "$BUILD/CMakeCache.txt" | cut -d= -f2-)
            echo "  $v = $val"
            case "$val" in "$BUNDLE"/*) ;; *) echo "  ^ not in the bundle"; bad=1 ;; esac
        done
        if [ -f "$BUILD/build.ninja" ]; then
            deps=$(cd "$BUILD" && ninja -t deps 2>/dev/null)
        else
            deps=$(find "$BUILD" -name '*.d' -exec cat {} + 2>/dev/null)
        fi
        # ccache (CMakeLists.txt, base_dir = the source folder) writes a bundle inside the clone as a path relative to
        # the build folder, so both spellings count
        local from_bundle from_system rel
        rel=$(realpath -m --relative-to="$BUILD" "$PREFIX/include")
        from_bundle=$(grep -cF -e "$PREFIX/include" -e "$rel" <<< "$deps")
        from_system=$(grep -E "(^|[ :])/usr/include/(fmt|eigen3|CLI|doctest|libfccp|nlohmann)/" <<< "$deps" | sort -u)
        echo "headers read from the bundle (dependency lists): $from_bundle"
        [ "$from_bundle" -gt 0 ] || { echo "  none: the dependency lists were not found"; bad=1; }
        if [ -n "$from_system" ]; then
            echo "headers of these packages read from /usr/include instead:"
            echo "$from_system" | head -n 20
            bad=1
        fi
        local fmt_lib
        fmt_lib=$(ldd "$BUILD/kvsim" | grep libfmt)
        echo "kvsim loads: $fmt_lib"
        case "$fmt_lib" in *"$LIBDIR"*) ;; *) echo "  ^ libfmt not from the bundle"; bad=1 ;; esac
        return $bad
    }
    export BUILD BUNDLE PREFIX LIBDIR WORK
    export -f bundle_only
    run_step bundle_only 30 "" bash -c bundle_only
    grep -E "headers read from the bundle|kvsim loads" "$WORK/bundle_only.log" | sed 's/^/    /' >> "$SUMMARY"
fi

KVSIM=$BUILD/kvsim
KVBENCH=$BUILD/kvbench
FAST_TC='CUDA sanitizer set*,CUDA KQ mask*,CUDA K-shift refuses*'
TOOL_UNSUPPORTED='Device not supported|not supported on this|LibraryNotLoaded|ERR_NVGPUCTRPERM|Failed to initialize the profiler|Target application terminated before first instrumented API call'

if [ $DRY -eq 1 ]; then
    # the binaries run, and without a GPU test_cuda says it skipped (exit 77, ctest's SKIP_RETURN_CODE), never passed
    run_step test_cuda_skips 60 "" bash -c "'$BUILD/test_cuda'; rc=\$?; echo \"exit status \$rc (77: skipped)\"; [ \$rc -eq 77 ]"
    note "DRY-RUN: not run here: test_cuda on the GPU, compute-sanitizer memcheck/racecheck ($FAST_TC), kvbench sweep"
    note "  --backend cuda (n_kv 4K-128K, batch 1,8,64, f16/q8_0/q4_0; legacy kernel), ncu on the FA kernels, test_nvtx's CUDA replay,"
    note "  kvsim replay --backend cuda --verify, issue 4's CPU sweep"
    exit $FAILED
fi

# ---- 1. kernels against the references ----
run_step test_cuda 120 "" "$BUILD/test_cuda" --duration=true
if [ -f "$WORK/test_cuda.log" ]; then
    grep -E "^\[doctest\] (test cases|assertions)|^SKIPPED" "$WORK/test_cuda.log" | sed 's/^/    /' | tee -a "$SUMMARY"
fi
# ---- 2. the goal points ----
HOST_MIB=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
MAX_BUF=$((FREE_MIB * 6 / 10))             # K+V of one point (and its copies), below the GPU's free memory
[ $((HOST_MIB * 7 / 10)) -lt $MAX_BUF ] && MAX_BUF=$((HOST_MIB * 7 / 10))   # kvbench fills K/V on the host first
[ "$MAX_BUF" -gt 8192 ] && MAX_BUF=8192
note "kvbench max buffer ${MAX_BUF} MiB (GPU free ${FREE_MIB} MiB, host ${HOST_MIB} MiB, at most 8 GiB)"
# issue 28's sweep: n_kv 4K-128K, batch 1/8/64 (the goal points are n_kv >= 32K, batch 8-64); K+V over 8 GiB skipped
# (the host fills them first), the Eigen baseline only on small points (it runs on the CPU)
if run_step kvbench_cuda 150 "" "$KVBENCH" sweep --backend cuda --ctx 4096,32768,131072 --batch 1,8,64 \
    --kv-type f16,q8_0,q4_0 --repeats 10 -t "$JOBS" --limit-mib 1024 --max-buffer-mib "$MAX_BUF" --eigen-max-mib 256 \
    --out "$WORK/kvbench-cuda"; then
    run_step kvbench_cuda_points 10 "" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
lim = d.get("limits", [{}])[0]
print("limit (device-to-device copy): %.0f GB/s" % lim.get("read_gbs", 0))
bad = 0
for p in d["points"]:
    errs = [e for e in (p.get("err_check", -1), p.get("err_vs_eigen", -1), p.get("err_vs_ref", -1)) if e is not None and e >= 0]
    ok = p["status"] == "ok" and all(e <= 1e-3 for e in errs)
    bad += not ok and p["status"] != "skipped"   # over --max-buffer-mib: not run, not failed
    print("  n_kv %6d batch %3d %-5s %-7s %7.0f GB/s %5.1f%% of the limit  max|err| %s" % (p["ctx"], p["batch"], p["kv_type"],
          p["status"], p["gbs"], 100 * p["frac_limit"], "%.1e" % max(errs) if errs else "-"))
sys.exit(1 if bad else 0)' "$WORK/kvbench-cuda/kvbench.json"
    sed 's/^/    /' "$WORK/kvbench_cuda_points.log" >> "$SUMMARY"
fi
KVSIM_CUDA_FA=legacy run_step kvbench_cuda_legacy 60 "" "$KVBENCH" sweep --backend cuda --ctx 32768 --batch 8,64 \
    --kv-type f16,q8_0,q4_0 --repeats 10 -t "$JOBS" --limit-mib 1024 --max-buffer-mib "$MAX_BUF" --eigen-max-mib 0 \
    --out "$WORK/kvbench-cuda-legacy"
grep -E "GB/s|limit" "$WORK/kvbench_cuda_legacy.log" 2>/dev/null | head -n 12 | sed 's/^/    legacy: /' >> "$SUMMARY"

# ---- 3. verified CUDA replays ----
verified_replays() {
    set -e
    local m=(--model llama-3-8b --backend cuda --verify --no-progress)
    "$KVSIM" replay traces/ops/context_shift.csv -c 4096 -np 2 -kvu "${m[@]}" --out "$WORK/replay-ops"
    "$KVSIM" replay tests/data/sched/two_shifts.jsonl -c 512 -np 2 --context-shift --n-layer 2 -ctk q8_0 -ctv q8_0 \
        -fa on "${m[@]}" --out "$WORK/replay-requests"
    "$KVSIM" replay traces/azure/AzureLLMInferenceTrace_conv_2023.csv --limit 100 -c 32768 -np 8 "${m[@]}" \
        --verify-every 16 --time-budget 20 --out "$WORK/replay-azure"
}
export KVSIM
export -f verified_replays
run_step replay_cuda_verify 150 "" bash -c verified_replays
grep -E "verify|attention \(measured\)|measured limit" "$WORK/replay_cuda_verify.log" 2>/dev/null | sed 's/^/    /' >> "$SUMMARY"

# ---- 4. the fast cases under the sanitizers ----
if command -v compute-sanitizer > /dev/null 2>&1; then
    run_step memcheck 90 "$TOOL_UNSUPPORTED" compute-sanitizer --tool memcheck --error-exitcode 3 "$BUILD/test_cuda" -tc="$FAST_TC"
    run_step racecheck 90 "$TOOL_UNSUPPORTED" compute-sanitizer --tool racecheck --error-exitcode 3 "$BUILD/test_cuda" -tc="$FAST_TC"
else
    note "SKIP memcheck, racecheck: compute-sanitizer not on the PATH"
fi

# ---- 5. NVTX ranges of a CUDA replay (and a CPU one) ----
run_step test_nvtx 90 "" "$BUILD/test_nvtx"
grep -q "SKIPPED" "$WORK/test_nvtx.log" 2>/dev/null && note "FAIL test_nvtx: a case skipped itself on the GPU host" && FAILED=1

# ---- 6. ncu on the flash-attention kernels of one goal point ----
if command -v ncu > /dev/null 2>&1; then
    if run_step ncu 120 "$TOOL_UNSUPPORTED" ncu --clock-control none --nvtx --nvtx-include 'kvsim@attention/' \
        --launch-count 3 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' -f -o "$WORK/ncu-fa" \
        "$KVBENCH" sweep --backend cuda --ctx 32768 --batch 32 --kv-type f16 --repeats 2 --eigen-max-mib 0 \
        --ref-max-cells 0 --out "$WORK/ncu-kvbench"; then
        ncu --import "$WORK/ncu-fa.ncu-rep" --page details > "$WORK/ncu-details.txt" 2>&1
        ncu --import "$WORK/ncu-fa.ncu-rep" --page raw --csv > "$WORK/ncu-raw.csv" 2>&1
        grep -E "^  [a-z_]+.*\(|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Duration" \
            "$WORK/ncu-details.txt" | head -n 30 | sed 's/^/    /' >> "$SUMMARY"
        python3 - "$WORK/ncu-raw.csv" >> "$SUMMARY" 2>&1 << 'EOF'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if len(rows) < 3: sys.exit("    ncu raw page: no kernels")
head = rows[0]
for r in rows[2:]:
    name = r[head.index("Kernel Name")] if "Kernel Name" in head else "?"
    st = []
    for i, h in enumerate(head):
        if h.startswith("smsp__average_warps_issue_stalled_") and i < len(r):
            try: st.append((float(r[i].replace(",", "")), h[len("smsp__average_warps_issue_stalled_"):].split("_per_issue")[0]))
            except ValueError: pass
    top = ", ".join("%s %.2f" % (n, v) for v, n in sorted(st, reverse=True)[:4])
    print("    top stalls (warps per issue) %s: %s" % (name[:40], top))
EOF
    fi
else
    note "SKIP ncu: not on the PATH"
fi

# ---- 7. issue 4's CPU targets on this host's cores (the development VM's 2 vCPUs are core-bound) ----
if [ "$(left)" -gt 100 ]; then
    run_step kvbench_cpu 90 "" "$KVBENCH" sweep --backend cpu --ctx 16384,65536 --kv-type f16,q8_0 --batch 1,16 \
        -t "$JOBS" --repeats 3 --eigen-max-mib 1024 --out "$WORK/kvbench-cpu"
else
    note "SKIP kvbench_cpu: under 100 s left"
fi
exit $FAILED
