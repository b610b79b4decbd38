#!/usr/bin/env bash
# kvsim's CPU decode flash attention against llama.cpp's own, with this process's read bandwidth
# (tests/tools/fa_vs_ggml.cpp; scripts/vs-ggml.sh builds and runs it).
#
#   scripts/fa-vs-ggml.sh [build-dir] [n_kv=16384,65536] [threads=2] [rounds=3] [calls=10] [types=f16,q8_0,q4_0] [cycle_mib=128]
exec "$(dirname "$0")/vs-ggml.sh" fa_vs_ggml "$@"
