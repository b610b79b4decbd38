// Internal helpers of the CUDA backend: error checks, KV element loads (ggml block formats dequantized in
// registers), block-wide FWHT and quantizers that give the CPU backend's bits. Not part of the public interface.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_internal.h"

namespace kvsim::cuda {

// Runtime KV type codes passed to kernels (uniform branches; templating on K and V types would multiply the
// instantiations by 16).
enum kv_code : int { kv_f32 = 0, kv_f16 = 1, kv_q8_0 = 2, kv_q4_0 = 3 };

constexpr int kv_part = 8;  // elements one lane converts per load ("part" p covers 8 elements of a head row)

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

// Element index (within a head row) of value i (< 8) of part p. q4_0 stores element j in the low nibble and j+16
// in the high nibble of byte j of a 32-element block, so part p = 4*block + sub holds elements
// {sub*4..sub*4+3} and {16+sub*4..16+sub*4+3} of that block; the other types hold p*8..p*8+7.
__device__ __forceinline__ int part_elem(int code, int p, int i) {
    if (code != kv_q4_0) return p * kv_part + i;
    return (p >> 2) * 32 + (i >> 2) * 16 + (p & 3) * 4 + (i & 3);
}

// Load and convert part p of a head row starting at `row` into x[0..8) (order of part_elem), exactly as
// kernels/quant.cpp row_to_f32: f16 exact, q8_0 q*d, q4_0 ((q & 15) - 8)*d with d the block's f16 scale.
// f32/f16 rows are 16-byte aligned (ggml row sizes are multiples of 16 here); q8_0/q4_0 blocks (34/18 bytes) are
// only 2-byte aligned, so they are read as 16-bit words (still coalesced: a lane group reads contiguous bytes).
__device__ __forceinline__ void load_part(int code, const char * __restrict__ row, int p, float x[kv_part]) {
    switch (code) {
        case kv_f32: {
            const float4 a = __ldg(reinterpret_cast<const float4 *>(row) + 2 * p);
            const float4 b = __ldg(reinterpret_cast<const float4 *>(row) + 2 * p + 1);
            x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
            x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
            break;
        }
        case kv_f16: {
            const uint4 a = __ldg(reinterpret_cast<const uint4 *>(row) + p);
            const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                x[2 * i] = h2f((uint16_t) (w[i] & 0xffffu));
                x[2 * i + 1] = h2f((uint16_t) (w[i] >> 16));
            }
            break;
        }
        case kv_q8_0: {
            const uint16_t * b = reinterpret_cast<const uint16_t *>(row + (p >> 2) * 34);
            const float d = h2f(__ldg(b));
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const uint16_t w = __ldg(b + 1 + (p & 3) * 4 + i);
                x[2 * i] = (float) (int8_t) (w & 0xff) * d;
                x[2 * i + 1] = (float) (int8_t) (w >> 8) * d;
            }
            break;
        }
        default: {  // q4_0
            const uint16_t * b = reinterpret_cast<const uint16_t *>(row + (p >> 2) * 18);
            const float d = h2f(__ldg(b));
            const uint32_t q = (uint32_t) __ldg(b + 1 + (p & 3) * 2) | ((uint32_t) __ldg(b + 2 + (p & 3) * 2) << 16);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int byte = (int) ((q >> (8 * i)) & 0xffu);
                x[i] = (float) ((byte & 15) - 8) * d;
                x[4 + i] = (float) ((byte >> 4) - 8) * d;
            }
            break;
        }
    }
}

// ALiBi slope of query head h as kernels/attention.h alibi_slope (ggml: m0^(h+1) for h < n_head_log2, else
// m1^(2(h-n_head_log2)+1)); 1 when max_bias <= 0.
__device__ __forceinline__ float alibi_slope_dev(int h, int n_head, float max_bias) {
    if (max_bias <= 0.0f) return 1.0f;
    const unsigned n_head_log2 = 1u << (unsigned) floor(log2((double) n_head));
    const float m0 = powf(2.0f, -(max_bias) / n_head_log2);
    const float m1 = powf(2.0f, -(max_bias / 2.0f) / n_head_log2);
    return (unsigned) h < n_head_log2 ? powf(m0, (float) (h + 1)) : powf(m1, (float) (2 * (h - n_head_log2) + 1));
}

// In-place normalised FWHT of every consecutive block of n elements of x[0..len) (shared memory), by the whole
// thread block (all threads must call it). Same operations in the same order per element as kernels/hadamard.cpp
// fwht (scale by 1/sqrt(n) first, then butterflies h = 1, 2, ...), so results are bit-identical to the CPU.
__device__ inline void block_fwht(float * x, int len, int n) {
    const float s = 1.0f / sqrtf((float) n);
    for (int e = threadIdx.x; e < len; e += blockDim.x) x[e] *= s;
    __syncthreads();
    for (int h = 1; h < n; h *= 2) {
        for (int pi = threadIdx.x; pi < len / 2; pi += blockDim.x) {
            const int j = (pi / h) * 2 * h + pi % h;
            const float a = x[j], b = x[j + h];
            x[j] = __fadd_rn(a, b);
            x[j + h] = __fsub_rn(a, b);
        }
        __syncthreads();
    }
}

}  // namespace kvsim::cuda
