// Decode flash-attention kernel selection, split-KV plan and launch (internal to the CUDA backend). The typed,
// cp.async-pipelined kernel (cuda_fa_decode.cuh) is the default; the older kernel of cuda_flash_attn.cu stays
// selectable so a GPU run can compare both:
//   KVSIM_CUDA_FA unset, "" or "decode": the decode kernel for same-type K/V pairs (f32, f16, q8_0, q4_0) whose
//                                         tensors are aligned to its copy width; the legacy kernel otherwise
//                                         (mixed pairs are its generic fallback);
//   KVSIM_CUDA_FA=legacy:                 always the legacy kernel and its plan (4 x SMs blocks).
// Any other value is bad input: kvsim::usage_error (exit status 2 in the CLIs) naming the variable and the value.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention.h"

namespace kvsim::cuda {

enum class fa_impl { decode, legacy };

// The implementation KVSIM_CUDA_FA asks for (read at every call, so a test or a benchmark can switch it).
fa_impl fa_impl_requested();

// Kernel arguments (shared by every instantiation). Offsets in bytes, counts in cells/rows.
struct fa_decode_params {
    const float * q;     // [D, n_head, n_tps, n_stream], already H_k-rotated when rot.n_k
    const char * k;      // head hk of cell j of stream s at k + (s*kv_size + j)*k_row + hk*k_head
    const char * v;
    const void * mask;   // nullptr or [n_kv, n_tps, n_stream] (f16 when mask_f16, else f32)
    float * part;        // [n_stream][n_chunks][n_head*n_tps][D + 2]: m (log2 units), l, acc
    int64_t k_row, v_row, k_head, v_head;
    int64_t kv_size, stream0;
    int mask_f16;
    int n_kv, n_tps, n_head, n_head_kv, gqa, n_rows, n_rgroups;
    int chunk, n_chunks;
    float scale, softcap, max_bias;  // scale already divided by softcap when softcap != 0
};

// One instantiation: the __global__ function, its tile (cells per pipeline stage) and block size.
struct fa_decode_kernel_info {
    const void * fn = nullptr;
    int tile = 0;
    int threads = 0;
};

// Per-type tables (cuda_fa_decode_<type>.cu): head dim d in {64, 128, 256}, rows per block r in {1, 2, 4, 8}.
fa_decode_kernel_info fa_decode_info_f32(int d, int r);
fa_decode_kernel_info fa_decode_info_f16(int d, int r);
fa_decode_kernel_info fa_decode_info_q8_0(int d, int r);
fa_decode_kernel_info fa_decode_info_q4_0(int d, int r);

// True when the decode kernel handles these tensors: same K and V type among f32/f16/q8_0/q4_0 and K/V data
// aligned to 16 bytes (the widest cp.async; every row offset is then aligned to the kernel's copy width).
bool fa_decode_supports(const fa_args & a);

// Split-KV plan for d on a device with sm_count SMs: the legacy plan under KVSIM_CUDA_FA=legacy, otherwise
// the wave-efficiency search of fa_split.h with the f16 instantiation's occupancy (fa_desc carries no types;
// the other types' kernels differ little in registers and shared memory, and any plan is valid for any kernel).
fa_plan fa_plan_select(const fa_desc & d, int sm_count);
// The legacy plan: ~4 waves of blocks over the SMs, chunks of >= 256 cells, multiples of 64.
fa_plan fa_plan_legacy(const fa_desc & d, int sm_count);

// Enqueue the decode chunk kernel and its log2-domain merge (same contract as fa_launch).
void fa_decode_launch(const fa_desc & d, const fa_plan & plan, const fa_args & a, const float * q, float * part, cudaStream_t st);

}  // namespace kvsim::cuda
