#!/usr/bin/env bash
# scripts/check-layers.sh must fail on a planted bad edge, naming its file:line, and pass a clean tree.
# Runs on a tiny throwaway tree (the script takes the tree's root as its argument).
set -euo pipefail
script="$(cd "$(dirname "$0")/.." && pwd)/scripts/check-layers.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lib/kv" "$tmp/lib/core" "$tmp/lib/report" "$tmp/kernels" "$tmp/apps"
printf '#pragma once\n' > "$tmp/lib/core/types.h"
printf '#pragma once\n#include "kv/cells.h"\n' > "$tmp/lib/report/occupancy.h"
printf '#pragma once\n#include "core/types.h"\n#include <vector>\n' > "$tmp/lib/kv/cells.h"
printf '#include "core/types.h"\n' > "$tmp/kernels/quant.h"
printf '#include <CLI/CLI.hpp>\n#include "report/occupancy.h"\n' > "$tmp/apps/main.cpp"

fail() { echo "check_layers_test: $*"; exit 1; }
out=$("$script" "$tmp") || fail "a clean tree failed: $out"

# upward edges: the cache including a report, a kernel including the cache, CLI11 outside apps/
printf '#include "core/types.h"\n#include "report/occupancy.h"\n' > "$tmp/lib/kv/cells.cpp"
printf '#include "core/types.h"\n\n#include "kv/cells.h"\n' > "$tmp/kernels/quant.cpp"
printf '#include <CLI/CLI.hpp>\n' > "$tmp/lib/core/types.cpp"
set +e
out=$("$script" "$tmp")
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "planted bad edges: exit $rc, expected 1: $out"
for want in "lib/kv/cells.cpp:2: kv -> report" "kernels/quant.cpp:3: kernels -> kv" "lib/core/types.cpp:1: CLI11 outside apps/" \
            "3 include(s) break"; do
  grep -qF "$want" <<< "$out" || fail "missing '$want' in: $out"
done
echo "check_layers_test: ok"
