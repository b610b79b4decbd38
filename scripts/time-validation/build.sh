#!/usr/bin/env bash
# Native CPU build of llama.cpp at the exact commit the oracles run (kvoracle, server-oracle),
# for timing: llama-bench, llama-batched-bench, llama-quantize and our decode timer (tv-decode-timer.cpp).
# Source: the bare repo ../../../shared/tools/kvoracle/build.sh unpacked (/tmp/oracle-work/lcpp.git)
# or the server-oracle one.  Everything goes under $WORK (default /tmp/tv-work), never the repo.
#   GGML_NATIVE=ON  (unlike server-oracle's build, which is GGML_NATIVE=OFF and so has no AVX2 in
#                    its ggml-cpu: not usable for timing)
#   JOBS=2, nice -n 10 (the machine is shared).
# Usage: scripts/time-validation/build.sh            (all)
#        scripts/time-validation/build.sh timer      (only re-link the decode timer)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WORK="${WORK:-/tmp/tv-work}"
COMMIT=de3ff815ea7d559ee917f063901b8986f038abc6
JOBS="${JOBS:-2}"
mkdir -p "$WORK"

build_timer() {
  local B="$WORK/build/bin" S="$WORK/src"
  g++ -std=c++17 -O2 -Wall -Wextra -I"$S/include" -I"$S/ggml/include" \
    "$HERE/tv-decode-timer.cpp" -o "$WORK/tv-decode-timer" \
    -L"$B" -lllama -lggml -lggml-base -Wl,-rpath,"$B"
  echo "built $WORK/tv-decode-timer"
}
if [ "${1:-}" = timer ]; then build_timer; exit 0; fi

GITDIR=""
for g in /tmp/oracle-work/lcpp.git /tmp/server-oracle-work/lcpp.git; do
  if [ -d "$g" ] && git -C "$g" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then GITDIR="$g"; break; fi
done
[ -n "$GITDIR" ] || { echo "build.sh: no bare repo holding $COMMIT; run ../shared/tools/kvoracle/build.sh first" >&2; exit 2; }
if [ "$(cat "$WORK/src/.commit" 2>/dev/null)" != "$COMMIT" ]; then
  rm -rf "$WORK/src" && mkdir -p "$WORK/src"
  git -C "$GITDIR" archive "$COMMIT" | tar x -C "$WORK/src"
  echo "$COMMIT" > "$WORK/src/.commit"
fi
if [ ! -f "$WORK/build/CMakeCache.txt" ]; then
  cmake -S "$WORK/src" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DGGML_NATIVE=ON -DGGML_CCACHE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TOOLS=ON > "$WORK/cmake.log"
fi
T0=$(date +%s)
nice -n 10 cmake --build "$WORK/build" --target llama-bench llama-batched-bench llama-quantize -j "$JOBS" > "$WORK/build.log"
echo "llama.cpp built in $(( $(date +%s) - T0 )) s"
build_timer
