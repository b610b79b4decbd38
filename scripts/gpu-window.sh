#!/usr/bin/env bash
# One short GPU window (15 minutes of device time, each machine start counted) spent on the GPU, not on compilers:
# everything is built here and travels in one git-ignored folder, gpu-carry/ (at most 64 MiB with the tree).
#   scripts/gpu-window.sh prepare    here: kvsim's CUDA build for sm_90 in build-gpu/ (ccache), its four binaries
#                                    stripped, libfmt, and llama.cpp's CUDA build (scripts/gpu-llama.sh build) packed
#                                    into gpu-carry/
#   scripts/gpu-window.sh run OUT    on the GPU host (device call: carry ['gpu-carry']): unpacks, writes the llama.cpp
#                                    models in the background (CPU and disk), runs scripts/gpu-check.sh on the
#                                    prebuilt binaries (budget KVSIM_GPU_CHECK_BUDGET, default 300 s), then
#                                    scripts/gpu-llama.sh bench; OUT gets gpu-check.tar.gz, summary.txt and
#                                    llama.tar.gz (three of the eight files a device call brings back)
# The binaries have this checkout's paths compiled in (KVSIM_SOURCE_DIR, KVSIM_BINARY_DIR: tests find kvsim and the
# scripts through them); where the GPU host's copy of the tree lies elsewhere, `run` links this path to it.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$ROOT/gpu-carry
BINS=(kvsim kvbench test_cuda test_nvtx)

prepare() {
    local b
    [ -f "$ROOT/build-gpu/CMakeCache.txt" ] || CCACHE_BASEDIR=$ROOT cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DKVSIM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
        > /dev/null || exit 1
    grep -q "^CMAKE_CUDA_COMPILER:" "$ROOT/build-gpu/CMakeCache.txt" || { echo "gpu-window: no nvcc, no CUDA build" >&2; exit 1; }
    nice -n 5 ninja -C "$ROOT/build-gpu" "${BINS[@]}" > /dev/null || exit 1
    rm -rf "$CARRY" && mkdir -p "$CARRY/bin"
    for b in "${BINS[@]}"; do strip -o "$CARRY/bin/$b" "$ROOT/build-gpu/$b"; done
    echo "kvsim $(git -C "$ROOT" describe --always --dirty) built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME") for sm_90, source $ROOT" \
        > "$CARRY/bin/PREBUILT"
    cp -L "$(ldd "$ROOT/build-gpu/kvsim" | awk '/libfmt/ {print $3}')" "$CARRY/bin/"
    tar czf "$CARRY/kvsim-bin.tar.gz" -C "$CARRY" bin && rm -rf "$CARRY/bin"
    [ -f "$ROOT/gpu-llama/BUILD" ] || "$ROOT/scripts/gpu-llama.sh" build || exit 1
    tar czf "$CARRY/gpu-llama.tar.gz" -C "$ROOT" gpu-llama
    local tree
    tree=$(git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 du -cb) | tail -n1 | cut -f1)
    echo "gpu-carry: $(du -sb "$CARRY" | cut -f1) bytes, tree $tree bytes (64 MiB = 67108864 in all)"
    ls -l "$CARRY"
}

run() {
    local out=$1 src models=/tmp/kvsim-gpu-models t0=$SECONDS rc=0
    mkdir -p "$out" || exit 2
    out=$(cd "$out" && pwd)
    cd "$ROOT" || exit 2
    tar xzf "$CARRY/kvsim-bin.tar.gz" -C "$CARRY" && tar xzf "$CARRY/gpu-llama.tar.gz" -C "$ROOT" || exit 1
    src=$(sed -n 's/.*, source //p' "$CARRY/bin/PREBUILT")
    if [ -n "$src" ] && [ "$src" != "$ROOT" ] && [ ! -e "$src" ]; then
        mkdir -p "$(dirname "$src")" && ln -s "$ROOT" "$src"
    fi
    rm -rf "$ROOT/build-gpu" && mkdir -p "$ROOT/build-gpu"
    cp -a "$CARRY"/bin/* "$ROOT/build-gpu/"
    echo "window: unpacked in $((SECONDS - t0)) s; this tree is $ROOT, the binaries' is ${src:-?}"
    nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
    ( "$ROOT/scripts/gpu-llama.sh" prep "$models" > "$out/prep.log" 2>&1 & )
    KVSIM_GPU_PREBUILT=1 KVSIM_GPU_LIBDIR=$ROOT/build-gpu KVSIM_GPU_BUILD_DIR=$ROOT/build-gpu \
        KVSIM_GPU_CHECK_BUDGET=${KVSIM_GPU_CHECK_BUDGET:-300} "$ROOT/scripts/gpu-check.sh" "$out" || rc=1
    echo "window: gpu-check done at $((SECONDS - t0)) s (rc $rc); waiting for the models"
    while [ ! -f "$models/READY" ] && pgrep -f "gpu-llama.sh prep" > /dev/null; do sleep 2; done
    echo "window: models ready at $((SECONDS - t0)) s: $(tail -n1 "$out/prep.log")"
    mkdir -p "$out/llama"
    "$ROOT/scripts/gpu-llama.sh" bench "$models" "$out/llama" || rc=1
    mv "$out/prep.log" "$out/llama/"
    tar czf "$out/llama.tar.gz" -C "$out" llama && rm -rf "$out/llama"
    echo "window: done at $((SECONDS - t0)) s, rc $rc"
    return $rc
}

case "${1:-}" in
    prepare) [ $# -eq 1 ] || { echo "usage: $0 prepare | run OUT" >&2; exit 2; }; prepare ;;
    run) [ $# -eq 2 ] || { echo "usage: $0 prepare | run OUT" >&2; exit 2; }; run "$2" ;;
    *) echo "usage: $0 prepare | run OUT" >&2; exit 2 ;;
esac
