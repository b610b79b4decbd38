#!/usr/bin/env bash
# llama.cpp's own numbers on a GPU host (issue 24's GPU profiles): llama-bench and llama-batched-bench of the llama.cpp
# the oracles run (de3ff815), built with CUDA here, where apt and time are cheap, and run on the GPU host, where
# neither is (nothing installable, 15 minutes of device time): random-weight GGUFs of the shipped presets' shapes
# (scripts/time-validation/make_model.py; the weight VALUES do not change llama.cpp's speed, the shapes and types do).
#   scripts/gpu-llama.sh build          here: CUDA build for sm_90 only into $WORK (default /tmp/tv-cuda), then the
#                                       binaries and their libraries, stripped, into <repo>/gpu-llama (git-ignored;
#                                       name it in the device call's carry)
#   scripts/gpu-llama.sh prep DIR       GPU host: the models under DIR (CPU and disk only, so it can run beside
#                                       scripts/gpu-check.sh): llama-3.1-8b F16 and Q4_K_M (the published tables'
#                                       types), llama-3.2-1b F16 and Q4_0 (a second model for the transfer check)
#   scripts/gpu-llama.sh prep-types DIR, bench-types DIR OUT: the second set (more weight types and models, below)
#   scripts/gpu-llama.sh prep-heldout DIR, bench-heldout DIR OUT: the third set, two models no fit has seen (below)
#   scripts/gpu-llama.sh prep-kvu DIR, bench-kvu DIR OUT: the fourth set, several sequences in one stream or in their own
#   scripts/gpu-llama.sh prep-graphs DIR, bench-graphs DIR OUT: the fifth set, each ubatch with and without CUDA graphs
#   scripts/gpu-llama.sh bench DIR OUT  GPU host: llama-bench -o json and llama-batched-bench jsonl on them, into OUT,
#                                       within LLAMA_BUDGET seconds (default 150)
# Results are llama-bench's own JSON, what kvsim calibrate reads. Exit status: 0 ok, 1 a step failed, 2 bad usage.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
COMMIT=de3ff815ea7d559ee917f063901b8986f038abc6
BIN=${KVSIM_GPU_LLAMA:-$ROOT/gpu-llama}

usage() { echo "usage: $0 build | prep DIR | bench DIR OUT | prep-types DIR | bench-types DIR OUT | prep-heldout DIR | bench-heldout DIR OUT | prep-kvu DIR | bench-kvu DIR OUT | prep-graphs DIR | bench-graphs DIR OUT" >&2; exit 2; }
case "${1:-}" in -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac

build() {
    local work=${WORK:-/tmp/tv-cuda} src=${TV_SRC:-/tmp/tv-work/src}
    [ "$(cat "$src/.commit" 2>/dev/null)" = "$COMMIT" ] || { echo "gpu-llama: no llama.cpp $COMMIT source in $src (scripts/time-validation/build.sh unpacks it)" >&2; exit 1; }
    # sm_90-real only: one architecture keeps libggml-cuda small enough to travel (64 MiB for the whole tree);
    # GGML_NATIVE=OFF with AVX2: the GPU host's processor is not this one; --allow-shlib-undefined: libggml-cuda needs
    # the driver's libcuda.so.1, which only the GPU host has
    [ -f "$work/build/CMakeCache.txt" ] || cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_NCCL=OFF \
        -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_CCACHE=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON -DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined \
        > "$work/cmake.log" || exit 1
    nice -n 10 cmake --build "$work/build" --target llama-bench llama-batched-bench llama-quantize -j "${JOBS:-2}" \
        > "$work/build.log" || { tail -n 20 "$work/build.log"; exit 1; }
    rm -rf "$BIN" && mkdir -p "$BIN"
    cp -L "$work"/build/bin/llama-bench "$work"/build/bin/llama-batched-bench "$work"/build/bin/llama-quantize "$BIN"/
    cp -a "$work"/build/bin/lib*.so* "$BIN"/   # the soname links too: they point inside the folder
    find "$BIN" -type f -exec strip --strip-unneeded {} +
    echo "$COMMIT built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), nvcc $(nvcc --version | grep -o 'release [0-9.]*')" > "$BIN/BUILD"
    du -sh "$BIN"
}

# The libraries llama.cpp's CUDA build loads: ours, then CUDA's (cuBLAS may live outside /usr/local/cuda's lib64 on
# the GPU host's image, e.g. in a Python wheel: any missing one is looked up under /usr/local and /opt)
lib_path() {
    export LD_LIBRARY_PATH=$BIN:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    local lib dir
    for lib in $(ldd "$BIN/libggml-cuda.so" | awk '/not found/ {print $1}'); do
        dir=$(find /usr/local /opt -name "$lib" -print -quit 2>/dev/null)
        if [ -n "$dir" ]; then LD_LIBRARY_PATH=$(dirname "$dir"):$LD_LIBRARY_PATH; else echo "gpu-llama: $lib not found" >&2; fi
    done
}

prep() {
    local dir=$1 q=$BIN/llama-quantize t0=$SECONDS
    mkdir -p "$dir" || exit 1
    lib_path
    df -h "$dir" | tail -n1
    python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l8b-f16.gguf" --preset llama-3.1-8b || exit 1
    "$q" "$dir/l8b-f16.gguf" "$dir/l8b-q4km.gguf" Q4_K_M "$(nproc)" > "$dir/quant-l8b.log" 2>&1 || exit 1
    echo "prep: 8B models in $((SECONDS - t0)) s"
    python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l1b-f16.gguf" --preset llama-3.2-1b || exit 1
    "$q" "$dir/l1b-f16.gguf" "$dir/l1b-q4_0.gguf" Q4_0 "$(nproc)" > "$dir/quant-l1b.log" 2>&1 || exit 1
    rm -f "$dir/l1b-f16.gguf"
    echo "prep: 4 models in $((SECONDS - t0)) s"
    touch "$dir/READY"
}

# bench_begin OUT BUDGET: the output folder, the libraries, the GPU's and the build's notes; then each step runs
# within what is left of BUDGET seconds
bench_begin() {
    B_OUT=$1 B_BUDGET=$2 B_T0=$SECONDS B_FAIL=0
    mkdir -p "$B_OUT" || exit 1
    lib_path
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv > "$B_OUT/gpu.csv" 2>&1
    cp "$BIN/BUILD" "$B_OUT/build.txt"
}

# step NAME CMD...: CMD's stdout into OUT/NAME, stderr into OUT/NAME.log
step() {
    local name=$1 left=$((B_BUDGET - (SECONDS - B_T0)))
    shift
    [ "$left" -gt 5 ] || { echo "bench: $name skipped, budget spent"; B_FAIL=1; return; }
    timeout --kill-after=5 "$left" "$@" > "$B_OUT/$name" 2> "$B_OUT/$name.log" || { echo "bench: $name failed ($?)"; B_FAIL=1; }
    echo "bench: $name done at $((SECONDS - B_T0)) s"
}

bench() {
    local dir=$1 m
    bench_begin "$2" "${LLAMA_BUDGET:-150}"
    # In order of worth, so a short budget drops the last ones. Depth 0: the published tables' pp512-pp8192 and tg128
    # (tg512 too for the 8B: the published tables' tg), and the 1-64 token prompts a multi-slot server runs (-r 3:
    # llama-bench's mean and stddev); at depth: prompts and generation over long contexts' K/V. -fa 1: kvsim's GPU
    # model; the 8B F16 once more with -fa 0 (what flash attention is worth there).
    local common=(-ngl 99 -fa 1 -o json) pp=1,2,4,8,16,32,64,128,512,1024,4096,8192 missing=0
    for m in l8b-f16 l8b-q4km l1b-q4_0; do
        [ -f "$dir/$m.gguf" ] || { echo "bench: $dir/$m.gguf missing"; missing=1; }
    done
    [ $missing -eq 0 ] || return 1
    step bench-l8b-f16.json "$BIN/llama-bench" -m "$dir/l8b-f16.gguf" "${common[@]}" -p $pp -n 128,512 -r 3
    step bench-l8b-q4km.json "$BIN/llama-bench" -m "$dir/l8b-q4km.gguf" "${common[@]}" -p $pp -n 128,512 -r 3
    step bench-depth-l8b-f16.json "$BIN/llama-bench" -m "$dir/l8b-f16.gguf" "${common[@]}" -p 4,512 -n 128 -d 4096,16384 -r 2
    step bench-depth-l8b-q4km.json "$BIN/llama-bench" -m "$dir/l8b-q4km.gguf" "${common[@]}" -p 4,512 -n 128 -d 4096,16384 -r 2
    # several sequences in one cache (-kvu), each decoding: the steps of llama-server's -np slots
    for m in l8b-q4km l8b-f16; do
        step "batched-$m.jsonl" "$BIN/llama-batched-bench" -m "$dir/$m.gguf" -ngl 99 -fa on -kvu -c 40960 -b 2048 \
            -ub 512 -npp 512 -ntg 32 -npl 1,2,4,8,16,32,64 --output-format jsonl
    done
    # a second model for the transfer check (a profile fitted on the 8B predicting the 1B)
    step bench-l1b-q4_0.json "$BIN/llama-bench" -m "$dir/l1b-q4_0.gguf" "${common[@]}" -p $pp -n 128 -r 3
    step bench-depth-l1b-q4_0.json "$BIN/llama-bench" -m "$dir/l1b-q4_0.gguf" "${common[@]}" -p 4,512 -n 128 -d 4096,16384 -r 2
    step bench-fa0-l8b-f16.json "$BIN/llama-bench" -m "$dir/l8b-f16.gguf" -ngl 99 -fa 0 -o json -p 4,512,4096 -n 128 \
        -d 0,16384 -r 2
    return $B_FAIL
}

# The second set ("types"): what a fit across models and weight types needs (one profile for a card, whatever the
# GGUF): the 8B in Q4_0 and Q8_0, the 1B in F16, Q4_K_M and Q8_0, Qwen2.5-0.5B in F16 and Q4_0; and the 8B's F16 and
# Q4_K_M once more, for the spread between two runs.
quant() {   # quant DIR F16NAME OUTNAME TYPE
    "$BIN/llama-quantize" "$1/$2.gguf" "$1/$3.gguf" "$4" "$(nproc)" > "$1/quant-$3.log" 2>&1
}
prep_types() {
    local dir=$1 t0=$SECONDS
    mkdir -p "$dir" || exit 1
    lib_path
    [ -f "$dir/l8b-f16.gguf" ] || python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l8b-f16.gguf" --preset llama-3.1-8b || exit 1
    [ -f "$dir/l8b-q4km.gguf" ] || quant "$dir" l8b-f16 l8b-q4km Q4_K_M || exit 1
    quant "$dir" l8b-f16 l8b-q4_0 Q4_0 && quant "$dir" l8b-f16 l8b-q8_0 Q8_0 || exit 1
    python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l1b-f16.gguf" --preset llama-3.2-1b || exit 1
    quant "$dir" l1b-f16 l1b-q4km Q4_K_M && quant "$dir" l1b-f16 l1b-q8_0 Q8_0 || exit 1
    python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/q05-f16.gguf" --preset qwen2.5-0.5b || exit 1
    quant "$dir" q05-f16 q05-q4_0 Q4_0 || exit 1
    echo "prep types: models in $((SECONDS - t0)) s"
    touch "$dir/READY"
}
# bench_one DIR M [DEPTH]: llama-bench of model M (DIR/M.gguf) at depth 0, prompts of 1-4096 tokens and tg128, then,
# given DEPTH, pp4 / pp512 / tg128 at that depth; a missing file is noted (B_FAIL) and returns 1
bench_one() {
    local dir=$1 m=$2 common=(-ngl 99 -fa 1 -o json)
    [ -f "$dir/$m.gguf" ] || { echo "bench: $dir/$m.gguf missing"; B_FAIL=1; return 1; }
    step "bench-$m.json" "$BIN/llama-bench" -m "$dir/$m.gguf" "${common[@]}" -p 1,2,4,8,16,64,512,4096 -n 128 -r 3
    [ -z "${3:-}" ] || step "bench-depth-$m.json" "$BIN/llama-bench" -m "$dir/$m.gguf" "${common[@]}" -p 4,512 -n 128 -d "$3" -r 2
}
bench_types() {
    local dir=$1 m
    bench_begin "$2" "${LLAMA_BUDGET:-240}"
    for m in l8b-q4_0 l8b-q8_0 l1b-f16 l1b-q4km l1b-q8_0 q05-f16 q05-q4_0 l8b-f16 l8b-q4km; do
        bench_one "$dir" "$m" 16384
    done
    return $B_FAIL
}

# The third set ("heldout"): two model shapes the fitted h200 has not seen, to hold a profile fitted across models
# against models outside its fit: Qwen2.5-7B (28 layers, 4 KV heads, q/k/v biases, 152K vocabulary) in F16, Q4_K_M,
# Q8_0 and Q4_0, and Llama-2-7B (no GQA: 4x the K/V bytes per cell, 32K vocabulary) in F16 and Q4_0.
prep_heldout() {
    local dir=$1 t0=$SECONDS
    mkdir -p "$dir" || exit 1
    lib_path
    python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/q7b-f16.gguf" --preset qwen2.5-7b || exit 1
    quant "$dir" q7b-f16 q7b-q4km Q4_K_M && quant "$dir" q7b-f16 q7b-q8_0 Q8_0 && quant "$dir" q7b-f16 q7b-q4_0 Q4_0 || exit 1
    echo "prep heldout: qwen2.5-7b in $((SECONDS - t0)) s"
    python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l2-f16.gguf" --preset llama-2-7b || exit 1
    quant "$dir" l2-f16 l2-q4_0 Q4_0 || exit 1
    echo "prep heldout: models in $((SECONDS - t0)) s"
    touch "$dir/READY"
}
bench_heldout() {
    local dir=$1 m
    bench_begin "$2" "${LLAMA_BUDGET:-200}"
    local common=(-ngl 99 -fa 1 -o json)
    for m in q7b-q4km q7b-f16 q7b-q8_0 q7b-q4_0 l2-f16 l2-q4_0; do
        bench_one "$dir" "$m"
    done
    # at depth: Qwen2.5-7B within its 32K training context, Llama-2-7B within its 4K
    for m in q7b-q4km q7b-f16; do
        step "bench-depth-$m.json" "$BIN/llama-bench" -m "$dir/$m.gguf" "${common[@]}" -p 4,512 -n 128 -d 16384 -r 2
    done
    step bench-depth-l2-f16.json "$BIN/llama-bench" -m "$dir/l2-f16.gguf" "${common[@]}" -p 4,512 -n 128 -d 3072 -r 2
    # several sequences in one cache: llama-server's -np steps on a model outside the fit
    step batched-q7b-q4km.jsonl "$BIN/llama-batched-bench" -m "$dir/q7b-q4km.gguf" -ngl 99 -fa on -kvu -c 40960 -b 2048 \
        -ub 512 -npp 512 -ntg 32 -npl 1,2,4,8,16,32,64 --output-format jsonl
    return $B_FAIL
}

# The fourth set ("kvu"): what CUDA's flash attention costs for prompts and decode steps of several sequences in one
# unified stream (-kvu: each ubatch's mask spans every sequence's cells, kvsim charges n_kv) against the same sequences
# each in its own stream (no -kvu: n_stream = n_seq), the 8B in F16 and Q4_K_M; and prompts over a deeper shared
# context (-npp 2048).
prep_kvu() {
    local dir=$1 t0=$SECONDS
    mkdir -p "$dir" || exit 1
    lib_path
    python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l8b-f16.gguf" --preset llama-3.1-8b || exit 1
    quant "$dir" l8b-f16 l8b-q4km Q4_K_M || exit 1
    echo "prep kvu: models in $((SECONDS - t0)) s"
    touch "$dir/READY"
}
bench_kvu() {
    local dir=$1 m kvu
    bench_begin "$2" "${LLAMA_BUDGET:-200}"
    for m in l8b-f16 l8b-q4km; do
        for kvu in -kvu ""; do
            step "batched-$m${kvu:--streams}.jsonl" "$BIN/llama-batched-bench" -m "$dir/$m.gguf" -ngl 99 -fa on $kvu -c 40960 \
                -b 2048 -ub 512 -npp 512 -ntg 32 -npl 1,2,4,8,16,32,64 --output-format jsonl
        done
    done
    for kvu in -kvu ""; do
        step "batched-l8b-f16-npp2048${kvu:--streams}.jsonl" "$BIN/llama-batched-bench" -m "$dir/l8b-f16.gguf" -ngl 99 -fa on \
            $kvu -c 40960 -b 2048 -ub 512 -npp 2048 -ntg 16 -npl 1,2,4,8,16 --output-format jsonl
    done
    return $B_FAIL
}

# The fifth set ("graphs"): what a llama_decode costs when its CUDA graph is replayed, captured, or not used. At the
# oracles' commit llama.cpp keeps two graphs, one for ubatches with outputs and one without (llama-context.cpp:
# get_gf_res_prev, gf_res_prev[n_outputs > 0]), and the CUDA backend caches one CUDA graph per ggml graph (keyed by its
# first node: ggml-cuda.cu ggml_cuda_graph_get_key); a call whose node shapes or pointers differ from that graph's
# previous call runs each kernel directly, the next identical one captures, the ones after replay
# (ggml_backend_cuda_graph_compute: warmup_complete; ggml_cuda_graph_update_required). llama-bench's samples are then
# capture, replay, replay, ... at depth 0 and direct, capture, replay, ... at a depth (the first repetition's prompt
# follows the depth fill): -r 4 gives each test a replayed sample; GGML_CUDA_DISABLE_GRAPHS=1 runs every call directly.
# The recorded -r 2 depth runs have no replayed sample, which is why a fit on depth 0 cannot predict them
# (docs/time-model.md, "CUDA graphs").
prep_graphs() {
    local dir=$1 t0=$SECONDS
    mkdir -p "$dir" || exit 1
    lib_path
    [ -f "$dir/l8b-f16.gguf" ] || python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l8b-f16.gguf" --preset llama-3.1-8b || exit 1
    [ -f "$dir/l1b-q4_0.gguf" ] || { python3 "$ROOT/scripts/time-validation/make_model.py" "$dir/l1b-f16.gguf" --preset llama-3.2-1b &&
        quant "$dir" l1b-f16 l1b-q4_0 Q4_0; } || exit 1
    echo "prep graphs: models in $((SECONDS - t0)) s"
    touch "$dir/READY"
}
bench_graphs() {
    local dir=$1 m
    bench_begin "$2" "${LLAMA_BUDGET:-240}"
    local tests=(-ngl 99 -fa 1 -o json -p 1,4,16,512,1024 -n 32 -d 0,4096,16384 -r 4)
    for m in l1b-q4_0 l8b-f16; do
        [ -f "$dir/$m.gguf" ] || { echo "bench: $dir/$m.gguf missing"; B_FAIL=1; continue; }
        step "graphs-$m.json" "$BIN/llama-bench" -m "$dir/$m.gguf" "${tests[@]}"
        step "graphs-off-$m.json" env GGML_CUDA_DISABLE_GRAPHS=1 "$BIN/llama-bench" -m "$dir/$m.gguf" "${tests[@]}"
    done
    return $B_FAIL
}

case "${1:-}" in
    build) [ $# -eq 1 ] || usage; build ;;
    prep) [ $# -eq 2 ] || usage; prep "$2" ;;
    bench) [ $# -eq 3 ] || usage; bench "$2" "$3" ;;
    prep-types) [ $# -eq 2 ] || usage; prep_types "$2" ;;
    bench-types) [ $# -eq 3 ] || usage; bench_types "$2" "$3" ;;
    prep-heldout) [ $# -eq 2 ] || usage; prep_heldout "$2" ;;
    bench-heldout) [ $# -eq 3 ] || usage; bench_heldout "$2" "$3" ;;
    prep-kvu) [ $# -eq 2 ] || usage; prep_kvu "$2" ;;
    bench-kvu) [ $# -eq 3 ] || usage; bench_kvu "$2" "$3" ;;
    prep-graphs) [ $# -eq 2 ] || usage; prep_graphs "$2" ;;
    bench-graphs) [ $# -eq 3 ] || usage; bench_graphs "$2" "$3" ;;
    *) usage ;;
esac
