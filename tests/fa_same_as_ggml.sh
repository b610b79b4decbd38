#!/usr/bin/env bash
# ctest fa_vs_ggml: kvsim's CPU decode flash attention against llama.cpp's own ggml_flash_attn_ext on the same K/V
# bytes (scripts/fa-vs-ggml.sh, the prebuilt ggml of ../shared/tools/kvoracle/build.sh), 4096 cells of Llama-3-8B
# heads: q8_0 and q4_0 within 1e-5 of llama.cpp's output, f16 within the gap of ggml's f16 accumulation (the tool's
# check rows; it exits 1 otherwise). Timings are printed, never judged. Skipped (77) without the prebuilt ggml.
#   Usage: tests/fa_same_as_ggml.sh BUILD_DIR SOURCE_DIR
set -uo pipefail
out=$("$2/scripts/fa-vs-ggml.sh" "$1" 4096 1 1 1 f16,q8_0,q4_0 0 2>&1)
rc=$?
echo "$out"
[ $rc -eq 77 ] && exit 77
[ $rc -ne 0 ] && exit 1
[ "$(grep -cE '^check,(q8_0|q4_0),4096,.*,same$' <<<"$out")" -eq 2 ] || { echo "fa_vs_ggml: q8_0/q4_0 not the same as llama.cpp's" >&2; exit 1; }
[ "$(grep -cE '^check,f16,4096,.*,f16-gap$' <<<"$out")" -eq 1 ] || { echo "fa_vs_ggml: f16 beyond ggml's f16 accumulation gap" >&2; exit 1; }
