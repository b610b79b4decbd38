#!/usr/bin/env bash
# kvsim's CPU K-shift against llama.cpp's own (tests/tools/kshift_vs_ggml.cpp): builds the tool against this
# build's kernel libraries and the prebuilt ggml of ../shared/tools/kvoracle/build.sh (WORK, default
# /tmp/oracle-work), then runs it. Exit 77 (skipped) without the prebuilt ggml.
#
#   scripts/kshift-vs-ggml.sh [build-dir] [n_cells=65536] [threads=2] [reps=7]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true
work=${WORK:-/tmp/oracle-work}
lib=$work/nlc/package/bins/linux-x64
if [[ ! -f $lib/libggml.v0.5.0.so || ! -f $work/inc/ggml.h ]]; then
    echo "SKIPPED: no prebuilt ggml under $work (run ../shared/tools/kvoracle/build.sh)"
    exit 77
fi
for a in libkvsim_kernels.a libkvsim_core.a; do
    [[ -f $build/$a ]] || { echo "kshift-vs-ggml: $build/$a missing (build the kvsim_kernels target)" >&2; exit 2; }
done
exe=$build/kshift_vs_ggml
# KVSIM_TOOL_FLAGS: extra compile/link flags matching the build's (ctest sets the sanitizer ones in an ASan build).
# shellcheck disable=SC2086
g++ ${KVSIM_TOOL_FLAGS:-} -std=gnu++20 -O2 -march=native -Wall -Wextra -I"$work/inc" -I"$root/kernels" -I"$root/lib" -isystem /usr/include/eigen3 \
    "$root/tests/tools/kshift_vs_ggml.cpp" -o "$exe" "$build/libkvsim_kernels.a" "$build/libkvsim_core.a" \
    "$lib/libggml.v0.5.0.so" "$lib/libggml-base.so" -Wl,-rpath,"$lib" -lpthread
"$exe" "$lib" "$@"
