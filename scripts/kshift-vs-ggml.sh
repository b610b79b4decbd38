#!/usr/bin/env bash
# kvsim's CPU K-shift against llama.cpp's own (tests/tools/kshift_vs_ggml.cpp; scripts/vs-ggml.sh builds and runs it).
#
#   scripts/kshift-vs-ggml.sh [build-dir] [n_cells=65536] [threads=2] [reps=7] [freq_scale=1] [ext_factor=0] [attn_factor=1]
exec "$(dirname "$0")/vs-ggml.sh" kshift_vs_ggml "$@"
