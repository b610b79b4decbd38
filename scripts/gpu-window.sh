#!/usr/bin/env bash
# One short GPU window (15 minutes of device time, each machine start counted) spent on the GPU, not on compilers:
# everything is built here and travels in one git-ignored folder, gpu-carry/ (at most 64 MiB with the tree).
#   scripts/gpu-window.sh prepare    here: kvsim's CUDA build for sm_90 in build-gpu/ (ccache), its four binaries
#                                    stripped, libfmt, and llama.cpp's CUDA build when scripts/gpu-llama.sh build has
#                                    made it, packed into gpu-carry/
#   scripts/gpu-window.sh run MODE OUT  on the GPU host (device call: carry ['gpu-carry']), MODE:
#                                    check  scripts/gpu-check.sh on the prebuilt binaries (budget
#                                           KVSIM_GPU_CHECK_BUDGET, default 300 s): OUT/gpu-check.tar.gz, summary.txt
#                                    llama  the llama.cpp models, then scripts/gpu-llama.sh bench: OUT/llama.tar.gz
#                                    types  the same with gpu-llama.sh's second set (more weight types and models)
#                                    heldout  the same with its third set (two models outside every fit)
#                                    kvu    the same with its fourth set (several sequences: one stream or their own)
#                                    graphs the same with its fifth set (each test with and without CUDA graphs)
#                                    (two or three of the eight files a device call brings back)
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
    grep -q "^CMAKE_CUDA_FLAGS_RELEASE:" "$ROOT/build-gpu/CMakeCache.txt" || { echo "gpu-window: no nvcc, no CUDA build" >&2; exit 1; }
    nice -n 5 ninja -C "$ROOT/build-gpu" "${BINS[@]}" > /dev/null || exit 1
    rm -rf "$CARRY" && mkdir -p "$CARRY/bin"
    for b in "${BINS[@]}"; do strip -o "$CARRY/bin/$b" "$ROOT/build-gpu/$b"; done
    echo "kvsim $(git -C "$ROOT" describe --always --dirty) built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME") for sm_90, source $ROOT" \
        > "$CARRY/bin/PREBUILT"
    cp -L "$(ldd "$ROOT/build-gpu/kvsim" | awk '/libfmt/ {print $3}')" "$CARRY/bin/"
    # xz -9: its 64 MiB window folds the four copies of the same CUDA fatbin (13 MB each) into one
    XZ_OPT=-9 tar cJf "$CARRY/kvsim-bin.tar.xz" -C "$CARRY" bin && rm -rf "$CARRY/bin"
    if [ -f "$ROOT/gpu-llama/BUILD" ]; then
        XZ_OPT=-9 tar cJf "$CARRY/gpu-llama.tar.xz" -C "$ROOT" gpu-llama
    else
        echo "gpu-window: llama.cpp not built yet (scripts/gpu-llama.sh build, about an hour on 2 cores): 'run check' only"
    fi
    local tree
    tree=$(git -C "$ROOT" ls-files -z | (cd "$ROOT" && xargs -0 du -cb) | tail -n1 | cut -f1)
    echo "gpu-carry: $(du -sb "$CARRY" | cut -f1) bytes, tree $tree bytes (64 MiB = 67108864 in all)"
    ls -l "$CARRY"
}

# unpack WHAT...: the packed folders (kvsim, llama) into place; kvsim's binaries into build-gpu/, with this
# checkout's path linked to where the binaries were built when that differs
unpack() {
    local w src
    cd "$ROOT" || exit 2
    for w in "$@"; do
        # Python's tarfile: the GPU host's image may lack xz
        case $w in
            kvsim) # a CMake build there is someone's own (gpu-check.sh builds into build-gpu): not replaced
                   if [ -f "$ROOT/build-gpu/CMakeCache.txt" ]; then
                       echo "gpu-window: $ROOT/build-gpu holds a CMake build; move it away, or run scripts/gpu-check.sh OUT" >&2
                       exit 2
                   fi
                   rm -rf "$ROOT/build-gpu" && mkdir -p "$ROOT/build-gpu" || exit 1
                   python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                       "$CARRY/kvsim-bin.tar.xz" "$ROOT/build-gpu" || exit 1
                   mv "$ROOT"/build-gpu/bin/* "$ROOT/build-gpu/" && rmdir "$ROOT/build-gpu/bin" || exit 1
                   src=$(sed -n 's/.*, source //p' "$ROOT/build-gpu/PREBUILT")
                   if [ -n "$src" ] && [ "$src" != "$ROOT" ] && [ ! -e "$src" ]; then
                       mkdir -p "$(dirname "$src")" && ln -s "$ROOT" "$src"
                   fi
                   echo "window: kvsim unpacked; this tree is $ROOT, the binaries' is ${src:-?}" ;;
            llama) python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
                       "$CARRY/gpu-llama.tar.xz" "$ROOT" || exit 1
                   echo "window: llama.cpp unpacked: $(cat "$ROOT/gpu-llama/BUILD")" ;;
        esac
    done
}

# Where the models go (21 GB for the 8B's two types): the roomiest of the tree's disk, /tmp and /root
models_dir() {
    local d a best=$ROOT best_kb=0
    for d in "$ROOT" /tmp /root; do
        a=$(df -Pk "$d" 2> /dev/null | awk 'NR == 2 {print $4}')
        [ "${a:-0}" -gt "$best_kb" ] && best=$d && best_kb=$a
    done
    echo "window: models in $best/gpu-models ($((best_kb / 1048576)) GiB free there)" >&2
    echo "$best/gpu-models"
}

check() {
    local out=$1
    KVSIM_GPU_PREBUILT=1 KVSIM_GPU_LIBDIR=$ROOT/build-gpu KVSIM_GPU_BUILD_DIR=$ROOT/build-gpu \
        KVSIM_GPU_CHECK_BUDGET=${KVSIM_GPU_CHECK_BUDGET:-300} "$ROOT/scripts/gpu-check.sh" "$out"
}

llama() {   # llama OUT [-types|-heldout|-kvu|-graphs]: gpu-llama.sh's first set, or its second, third, fourth or fifth
    local out=$1 set=${2:-} models rc=0
    models=$(models_dir)
    mkdir -p "$out/llama"
    "$ROOT/scripts/gpu-llama.sh" "prep$set" "$models" > "$out/llama/prep.log" 2>&1 || rc=1
    echo "window: models at $SECONDS s: $(tail -n1 "$out/llama/prep.log")"
    "$ROOT/scripts/gpu-llama.sh" "bench$set" "$models" "$out/llama" || rc=1
    tar czf "$out/llama.tar.gz" -C "$out" llama && rm -rf "$out/llama"
    return $rc
}

# MODE OUT: check (kvsim), llama, types, heldout, kvu or graphs (llama.cpp's five sets)
window() {
    local mode=$1 out=$2 rc=0 f=gpu-llama.tar.xz
    # before anything is unpacked or written: a GPU, and what prepare packed for this mode
    if ! nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2> /dev/null; then
        echo "gpu-window: no NVIDIA GPU here (nvidia-smi failed): run MODE on the GPU host, prepare here" >&2
        exit 1
    fi
    [ "$mode" = check ] && f=kvsim-bin.tar.xz
    [ -f "$CARRY/$f" ] || { echo "gpu-window: $CARRY/$f missing: run scripts/gpu-window.sh prepare, then carry gpu-carry" >&2; exit 2; }
    mkdir -p "$out" || exit 2
    out=$(cd "$out" && pwd)
    case $mode in
        check) unpack kvsim; check "$out" || rc=1 ;;
        llama) unpack llama; llama "$out" || rc=1 ;;
        types) unpack llama; llama "$out" -types || rc=1 ;;
        heldout) unpack llama; llama "$out" -heldout || rc=1 ;;
        kvu) unpack llama; llama "$out" -kvu || rc=1 ;;
        graphs) unpack llama; llama "$out" -graphs || rc=1 ;;
    esac
    echo "window: $mode done at $SECONDS s, rc $rc"
    return $rc
}

usage() { echo "usage: $0 prepare | run check|llama|types|heldout|kvu|graphs OUT" >&2; exit 2; }
case "${1:-}" in -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
case "${1:-}" in
    prepare) [ $# -eq 1 ] || usage; prepare ;;
    run) [ $# -eq 3 ] || usage
         case $2 in check|llama|types|heldout|kvu|graphs) window "$2" "$3" ;; *) usage ;; esac ;;
    *) usage ;;
esac
