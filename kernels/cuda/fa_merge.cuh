// The log-sum-exp merge of split-KV chunks shared by both CUDA flash-attention paths (cuda_flash_attn.cu,
// cuda_fa_decode.cu). Internal to the CUDA backend.
#pragma once

#include <cstdint>

#include "cuda_common.cuh"

namespace kvsim::cuda {

// Log-sum-exp merge of the split-KV chunks, one query row per block and D threads: part holds per stream s,
// chunk c and query row r a partial (m, l, acc[D]) at ((s * n_chunks + c) * n_q + r) * (D + 2); m = -INF for a
// chunk that saw no live cell. As the CPU merge (cpu_backend::flash_attn): max over chunks, those chunks skipped,
// out = acc / l, then the optional H_v rotation of the output. Log2: m is in log2 units (the decode kernel's exp2
// softmax, cuda_fa_decode.cuh), else natural (cuda_flash_attn.cu).
template <int D, bool Log2>
__global__ void __launch_bounds__(D) fa_merge_kernel(const float * __restrict__ part, float * __restrict__ out,
                                                      int n_chunks, int n_q, int rot_v) {
    __shared__ float o[D];
    const int r = blockIdx.x, s = blockIdx.y, e = threadIdx.x;
    const float * base = part + (int64_t) s * n_chunks * n_q * (D + 2) + (int64_t) r * (D + 2);
    const int64_t cstride = (int64_t) n_q * (D + 2);
    float mx = -INFINITY;
    for (int c = 0; c < n_chunks; ++c) mx = fmaxf(mx, base[c * cstride]);
    float acc = 0.0f;
    if (mx != -INFINITY) {
        float lsum = 0.0f;
        for (int c = 0; c < n_chunks; ++c) {
            const float * pc = base + c * cstride;
            if (pc[0] == -INFINITY) continue;
            const float w = Log2 ? exp2f(pc[0] - mx) : expf(pc[0] - mx);
            lsum += w * pc[1];
            acc += pc[2 + e] * w;
        }
        acc *= 1.0f / lsum;
    }
    o[e] = acc;
    __syncthreads();
    if (rot_v && mx != -INFINITY) block_fwht(o, D, rot_v);  // mx is uniform over the block: no divergent sync
    out[((int64_t) s * n_q + r) * D + e] = o[e];
}

}  // namespace kvsim::cuda
