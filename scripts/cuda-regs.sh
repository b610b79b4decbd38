#!/usr/bin/env bash
# Register and spill report of the CUDA flash-attention kernels: compiles each flash-attention source with
# `nvcc -Xptxas -v` for one architecture (no GPU needed), prints one line per kernel (registers, spill stores and
# loads, stack frame, shared memory) and fails when any kernel spills. Run from anywhere:
#   scripts/cuda-regs.sh                # sm_90
#   scripts/cuda-regs.sh --arch sm_80
# Exit: 0 no spills; 1 a kernel spills (or a register count is above --max-regs); 2 usage or compile error;
# 77 no nvcc (the test that runs this reports it as skipped).
set -euo pipefail

arch=sm_90
max_regs=255
while [[ $# -gt 0 ]]; do
    case "$1" in
        --arch) arch="${2:?--arch needs a value, e.g. sm_90}"; shift 2 ;;
        --max-regs) max_regs="${2:?--max-regs needs a number}"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "cuda-regs.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[[ "$arch" =~ ^sm_[0-9]+a?$ ]] || { echo "cuda-regs.sh: --arch '$arch' is not of the form sm_90" >&2; exit 2; }
[[ "$max_regs" =~ ^[0-9]+$ ]] || { echo "cuda-regs.sh: --max-regs '$max_regs' is not a number" >&2; exit 2; }

root="$(cd "$(dirname "$0")/.." && pwd)"
nvcc="${CUDACXX:-}"
if [[ -z "$nvcc" ]]; then
    nvcc="$(command -v nvcc || true)"
    [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
fi
if [[ -z "$nvcc" || ! -x "$nvcc" ]]; then
    echo "cuda-regs.sh: nvcc not found (set CUDACXX or PATH); nothing checked" >&2
    exit 77
fi
demangle=cat
command -v c++filt > /dev/null && demangle=c++filt

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# the flash-attention sources: the typed decode kernel per type, its merge, the legacy kernel
srcs=("$root"/kernels/cuda/cuda_fa_decode_*.cu "$root"/kernels/cuda/cuda_fa_decode.cu "$root"/kernels/cuda/cuda_flash_attn.cu)
status=0
printf '%-5s %-6s %-6s %-6s %-7s %s\n' regs spillS spillL stack smem kernel
for src in "${srcs[@]}"; do
    [[ -f "$src" ]] || continue
    # the flags of kernels/cuda/CMakeLists.txt that change code generation (no fast math); -cubin: device code
    # only (the host pass would add nothing to the report)
    if ! "$nvcc" -std=c++20 -O3 -arch="$arch" --expt-relaxed-constexpr -lineinfo \
        -I"$root/kernels" -I"$root/kernels/cuda" -I"$root/lib" \
        -cubin "$src" -o "$tmp/out.cubin" -Xptxas -v > "$tmp/log" 2>&1; then
        echo "cuda-regs.sh: nvcc failed on $src:" >&2
        cat "$tmp/log" >&2
        exit 2
    fi
    # ptxas -v prints per entry: "Compiling entry function 'NAME' for 'sm_90'", then
    # "N bytes stack frame, N bytes spill stores, N bytes spill loads", then "Used N registers, ... N bytes smem"
    awk -v maxr="$max_regs" '
        /Compiling entry function/ { name = $0; sub(/.*function \047/, "", name); sub(/\047.*/, "", name); st = ss = sl = 0; next }
        /bytes stack frame/ && name != "" { st = $1; ss = $5; sl = $9; next }
        /Used [0-9]+ registers/ && name != "" {
            regs = $0; sub(/.*Used /, "", regs); sub(/ registers.*/, "", regs)
            smem = 0; if ($0 ~ /bytes smem/) { smem = $0; sub(/ bytes smem.*/, "", smem); sub(/.* /, "", smem) }
            bad = (ss + 0 > 0 || sl + 0 > 0 || regs + 0 > maxr) ? " <-- FAIL" : ""
            printf "%-5s %-6s %-6s %-6s %-7s %s%s\n", regs, ss, sl, st, smem, name, bad
            if (bad != "") fail = 1
            name = ""
        }
        END { exit fail ? 1 : 0 }' "$tmp/log" > "$tmp/table" || status=1
    "$demangle" < "$tmp/table"
done
if [[ $status -ne 0 ]]; then
    echo "cuda-regs.sh: FAIL: a kernel spills registers or uses more than $max_regs ($arch)" >&2
    exit 1
fi
echo "cuda-regs.sh: no spills ($arch, ${#srcs[@]} sources)"
