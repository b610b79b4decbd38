#!/usr/bin/env bash
# Builds and runs one of the tools that hold a kvsim CPU kernel against llama.cpp's own in one process
# (tests/tools/NAME.cpp: kshift_vs_ggml, fa_vs_ggml) against this build's kernel libraries and the prebuilt ggml
# of ../shared/tools/kvoracle/build.sh (WORK, default /tmp/oracle-work). Exit 77 (skipped) without the prebuilt ggml.
#
#   scripts/vs-ggml.sh NAME [build-dir] [tool arguments...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=${1:?usage: scripts/vs-ggml.sh NAME [build-dir] [args...]}
shift
build=${1:-$root/build}
shift || true
[[ -f $root/tests/tools/$name.cpp ]] || { echo "vs-ggml: no tests/tools/$name.cpp" >&2; exit 2; }
work=${WORK:-/tmp/oracle-work}
lib=$work/nlc/package/bins/linux-x64
if [[ ! -f $lib/libggml.v0.5.0.so || ! -f $work/inc/ggml.h ]]; then
    echo "SKIPPED: no prebuilt ggml under $work (run ../shared/tools/kvoracle/build.sh)"
    exit 77
fi
for a in libkvsim_kernels.a libkvsim_core.a; do
    [[ -f $build/$a ]] || { echo "vs-ggml: $build/$a missing (build the kvsim_kernels target)" >&2; exit 2; }
done
exe=$build/$name
# KVSIM_TOOL_FLAGS: extra compile/link flags matching the build's (ctest sets the sanitizer ones in an ASan build).
# shellcheck disable=SC2086
g++ ${KVSIM_TOOL_FLAGS:-} -std=gnu++20 -O2 -march=native -Wall -Wextra -I"$work/inc" -I"$root/kernels" -I"$root/lib" \
    -I"$root/tests/tools" -isystem /usr/include/eigen3 "$root/tests/tools/$name.cpp" -o "$exe" \
    "$build/libkvsim_kernels.a" "$build/libkvsim_core.a" "$lib/libggml.v0.5.0.so" "$lib/libggml-base.so" \
    -Wl,-rpath,"$lib" -lpthread
"$exe" "$lib" "$@"
