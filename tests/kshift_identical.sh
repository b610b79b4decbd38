#!/usr/bin/env bash
# ctest kshift_vs_ggml: kvsim's CPU K-shift against llama.cpp's own graph (scripts/kshift-vs-ggml.sh, the prebuilt ggml of
# ../shared/tools/kvoracle/build.sh) on 8192 cells of a Llama-3-8B K: f16, q8_0 and q4_0 must come out bit-identical,
# with the model's RoPE and with YaRN x4 (--rope-scaling yarn --rope-scale 4: freq_scale 0.25, ext_factor 1).
# Skipped (77) without the prebuilt ggml.   Usage: tests/kshift_identical.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
for rope in "1 0 1" "0.25 1 1"; do
    # shellcheck disable=SC2086
    out=$("$2/scripts/kshift-vs-ggml.sh" "$1" 8192 1 1 $rope 2>&1)
    rc=$?
    echo "$out"
    [ $rc -eq 77 ] && exit 77
    [ $rc -ne 0 ] && exit 1
    [ "$(grep -cE '^(f16|q8_0|q4_0),yes,' <<<"$out")" -eq 3 ] || { echo "kshift_vs_ggml: not every type bit-identical (rope $rope)" >&2; exit 1; }
done
exit 0
