// Decode flash attention, typed and pipelined (the default CUDA kernel; KVSIM_CUDA_FA=legacy selects the older
// cuda_flash_attn.cu kernel). Design and what is unproven: kernels/cuda/README.md "Decode kernel". Included only
// by the per-type instantiation files cuda_fa_decode_<type>.cu, so each type compiles in its own translation unit.
//
// One block of 128 threads per (split-KV chunk, kv head, group of R query rows, stream), as the legacy kernel.
// Differences that matter for bandwidth:
//   - K and V types are template parameters (kv_t_*): the copy into shared memory and the conversion from it are
//     separate, so loads never wait behind conversions of another type's case;
//   - K/V tiles of TC cells stream through an S-stage cp.async pipeline into shared memory, the tile's mask
//     values (loaded to registers one tile earlier) in the same stage; a tile masked for every row is not copied;
//   - scores in log2 units (log2(e) folded into scale, slope and softcap) and exp2f; each (row, cell) score and
//     softmax weight is computed by the lanes owning that row after a reduce-scatter of the R dot products over
//     the cell's G lanes (R-1 + log2(G/R) shuffles instead of R*log2(G)), then shared through shared memory.
// Semantics are those of kernels/cpu/cpu_flash_attn.cpp and the legacy kernel: mask -INF wins over any score,
// fully masked rows give zeros, mask == nullptr means every cell < n_kv is visible with mask value 0.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_common.cuh"
#include "cuda_fa_decode.h"
#include "fa_reduce_scatter.h"

namespace kvsim::cuda::fa_decode {

constexpr int threads = 128;                 // 4 warps, as the legacy kernel
constexpr int stage_max_bytes = 12288;      // K+V bytes of one tile at most (8-12 KB for every type at D >= 128)
constexpr float log2e = 1.4426950408889634f;

// ---- KV types: bytes of a head row, cp.async width, element order of a lane's part, conversion from smem ----
// Each lane converts "part" p (8 elements) of a head row: elements p*8..p*8+7, except q4_0 whose part p =
// 4*block + sub holds elements {sub*4..sub*4+3} and {16+sub*4..16+sub*4+3} of the block (its nibble layout), as
// the legacy kernel's part_elem; the query and the output use the same order, so no data is shuffled.

struct kv_t_f32 {
    static constexpr int head_bytes(int d) { return d * 4; }
    __device__ static __forceinline__ int elem(int p, int i) { return p * 8 + i; }
    __device__ static __forceinline__ void load(const char * row, int p, float x[8]) {
        const float4 a = reinterpret_cast<const float4 *>(row)[2 * p];
        const float4 b = reinterpret_cast<const float4 *>(row)[2 * p + 1];
        x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w;
        x[4] = b.x; x[5] = b.y; x[6] = b.z; x[7] = b.w;
    }
};

struct kv_t_f16 {
    static constexpr int head_bytes(int d) { return d * 2; }
    __device__ static __forceinline__ int elem(int p, int i) { return p * 8 + i; }
    __device__ static __forceinline__ void load(const char * row, int p, float x[8]) {
        const uint4 a = reinterpret_cast<const uint4 *>(row)[p];
        const uint32_t w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));  // exact, low half first
            x[2 * i] = f.x;
            x[2 * i + 1] = f.y;
        }
    }
};

// q8_0 block: f16 d, 32 x int8 (34 bytes, 2-byte aligned in the row): x = q * d (kernels/quant.cpp row_to_f32)
struct kv_t_q8_0 {
    static constexpr int head_bytes(int d) { return d / 32 * 34; }
    __device__ static __forceinline__ int elem(int p, int i) { return p * 8 + i; }
    __device__ static __forceinline__ void load(const char * row, int p, float x[8]) {
        const uint16_t * b = reinterpret_cast<const uint16_t *>(row + (p >> 2) * 34);
        const float d = h2f(b[0]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint16_t w = b[1 + (p & 3) * 4 + i];
            x[2 * i] = (float) (int8_t) (w & 0xff) * d;
            x[2 * i + 1] = (float) (int8_t) (w >> 8) * d;
        }
    }
};

// q4_0 block: f16 d, 16 bytes of nibbles (18 bytes): element j in the low nibble of byte j, j+16 in its high
// nibble; x = ((q & 15) - 8) * d
struct kv_t_q4_0 {
    static constexpr int head_bytes(int d) { return d / 32 * 18; }
    __device__ static __forceinline__ int elem(int p, int i) { return (p >> 2) * 32 + (i >> 2) * 16 + (p & 3) * 4 + (i & 3); }
    __device__ static __forceinline__ void load(const char * row, int p, float x[8]) {
        const uint16_t * b = reinterpret_cast<const uint16_t *>(row + (p >> 2) * 18);
        const float d = h2f(b[0]);
        const uint32_t q = (uint32_t) b[1 + (p & 3) * 2] | ((uint32_t) b[2 + (p & 3) * 2] << 16);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int byte = (int) ((q >> (8 * i)) & 0xffu);
            x[i] = (float) ((byte & 15) - 8) * d;
            x[4 + i] = (float) ((byte >> 4) - 8) * d;
        }
    }
};

// Widest cp.async (16, 8 or 4 bytes) dividing a head row: rows and cells are whole head rows apart, so this
// divides every copy's offset once the tensor base is aligned to it (checked on the host: fa_decode_supports).
constexpr int copy_width(int head_bytes) { return head_bytes % 16 == 0 ? 16 : head_bytes % 8 == 0 ? 8 : 4; }

// Cells per tile: the largest power of two whose K+V fit stage_max_bytes, at least one cell per lane group, at
// most 64 (f16 D=128: 16 cells, 8 KB; q8_0: 32 cells, 8.5 KB; q4_0: 64 cells, 9 KB; f32: 8 cells, 8 KB).
constexpr int tile_cells(int kv_bytes_per_cell, int n_groups) {
    int tc = 1;
    while (tc * 2 * kv_bytes_per_cell <= stage_max_bytes && tc < 64) tc *= 2;
    return tc < n_groups ? n_groups : tc;
}

// ---- cp.async (sm_80+) ----

template <int W>
__device__ __forceinline__ void cp_async(void * smem, const void * gmem) {
    const unsigned s = (unsigned) __cvta_generic_to_shared(smem);
    if constexpr (W == 16) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(W) : "memory");
    }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }

template <class KT, class VT, int D, int R>
struct shape {
    static constexpr int G = D / 8;                 // lanes per cell
    static constexpr int CPW = 32 / G;              // cells per warp at a time
    static constexpr int NG = (threads / 32) * CPW; // lane groups per block
    static constexpr int KB = KT::head_bytes(D), VB = VT::head_bytes(D);
    static constexpr int WK = copy_width(KB), WV = copy_width(VB);
    static constexpr int TC = tile_cells(KB + VB, NG);  // cells per tile (multiple of NG: both powers of two)
    static constexpr int CPG = TC / NG;             // cells per group per tile
    static constexpr int ROW_SHIFT = ilog2(G) - ilog2(R);  // lane part p owns row p >> ROW_SHIFT
    static constexpr int MPT = (TC * R + threads - 1) / threads;  // mask values per thread per tile
    // 2 blocks/SM for 8 query rows (q and acc alone take 128 registers), 4 otherwise
    static constexpr int MIN_BLOCKS = R >= 8 ? 2 : 4;
    // cp.async pipeline depth: ST-1 tiles in flight while one is computed; one more with only 2 blocks per SM
    static constexpr int ST = R >= 8 ? 4 : 3;
    // one pipeline stage: K tile, V tile, mask tile [TC][R] (floats)
    static constexpr int K_OFF = 0, V_OFF = TC * KB, M_OFF = V_OFF + TC * VB;
    static constexpr int STAGE_BYTES = (M_OFF + TC * R * 4 + 15) / 16 * 16;
    static constexpr int PIPE_BYTES = ST * STAGE_BYTES;
    // block-end merge of the NG groups (aliases the pipeline once it is drained)
    static constexpr int MERGE_BYTES = NG * R * D * 4 + 2 * NG * R * 4;
    static constexpr int SMEM_BYTES = PIPE_BYTES > MERGE_BYTES ? PIPE_BYTES : MERGE_BYTES;
    static_assert(G >= R && G <= 32 && TC % NG == 0 && KB % 4 == 0 && VB % 4 == 0, "shape");
    static_assert(M_OFF % 16 == 0 && STAGE_BYTES % 16 == 0 && (TC * KB) % 16 == 0, "stage alignment");
    static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory above 48 KB");
};

// R consecutive floats of shared memory (a cell's mask values in the stage, or a group's softmax weights),
// 16-byte aligned for R >= 4 and 8-byte for R = 2, in 16- or 8-byte loads.
template <int R>
__device__ __forceinline__ void load_row(const float * src, float (&mk)[R]) {
    if constexpr (R % 4 == 0) {
#pragma unroll
        for (int i = 0; i < R; i += 4) {
            const float4 v = *reinterpret_cast<const float4 *>(src + i);
            mk[i] = v.x; mk[i + 1] = v.y; mk[i + 2] = v.z; mk[i + 3] = v.w;
        }
    } else if constexpr (R == 2) {
        const float2 v = *reinterpret_cast<const float2 *>(src);
        mk[0] = v.x; mk[1] = v.y;
    } else {
        mk[0] = src[0];
    }
}

__device__ __forceinline__ float mask_value(const fa_decode_params & p, int64_t idx) {
    return p.mask_f16 ? h2f(__ldg(static_cast<const uint16_t *>(p.mask) + idx)) : __ldg(static_cast<const float *>(p.mask) + idx);
}

template <class KT, class VT, int D, int R>
__global__ void __launch_bounds__(threads, (shape<KT, VT, D, R>::MIN_BLOCKS)) fa_decode_kernel(const fa_decode_params p) {
    using S = shape<KT, VT, D, R>;
    constexpr int stages = S::ST;
    constexpr int G = S::G, NG = S::NG, TC = S::TC, CPG = S::CPG, KB = S::KB, VB = S::VB, MPT = S::MPT;
    __shared__ __align__(16) char smem[S::SMEM_BYTES];
    __shared__ __align__(16) float sm_pw[NG][CPG + 1][R];  // per group: softmax weights of its cells, then alpha, per row

    const int tid = threadIdx.x;
    const int lane = tid & 31;
    const int part = lane % G;
    const int grp = (tid >> 5) * S::CPW + lane / G;
    const int ri = part >> S::ROW_SHIFT;  // the query row this lane finishes scores for
    const bool row_owner = (part & ((1 << S::ROW_SHIFT) - 1)) == 0;

    const int c = blockIdx.x;
    const int hk = blockIdx.y / p.n_rgroups, rg = blockIdx.y % p.n_rgroups;
    const int s = blockIdx.z;
    const int c0 = c * p.chunk;
    const int c1 = min(p.n_kv, c0 + p.chunk);
    const int n_tiles = c1 > c0 ? (c1 - c0 + TC - 1) / TC : 0;

    // query rows: row r = t*gqa + g of kv head hk is query head hk*gqa + g of token t (as the legacy kernel)
    float q[R][8], acc[R][8];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = rg * R + i;
        const bool valid = r < p.n_rows;
        const int t = valid ? r / p.gqa : 0, h = hk * p.gqa + (valid ? r % p.gqa : 0);
        const float * qr = p.q + ((int64_t) (s * p.n_tps + t) * p.n_head + h) * D;
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            q[i][e] = valid ? qr[KT::elem(part, e)] : 0.0f;
            acc[i][e] = 0.0f;
        }
    }
    // this lane's row: ALiBi slope in log2 units, running max (log2 units) and sum
    float slope2, m = -INFINITY, l = 0.0f;
    const auto warp_xor = [](float x, int o) { return __shfl_xor_sync(0xffffffffu, x, o); };
    {
        const int r = rg * R + ri;
        const int h = hk * p.gqa + (r < p.n_rows ? r % p.gqa : 0);
        slope2 = alibi_slope_dev(h, p.n_head, p.max_bias) * log2e;
    }

    // mask values this thread loads for each tile: pair k is (cell mc[k], row idx % R); mrow < 0: none
    int mc[MPT];
    int64_t mrow[MPT];
#pragma unroll
    for (int k = 0; k < MPT; ++k) {
        const int idx = tid + k * threads;
        const int i = idx % R, r = rg * R + i;
        mc[k] = idx / R;
        mrow[k] = idx < TC * R && r < p.n_rows ? (int64_t) (s * p.n_tps + r / p.gqa) * p.n_kv : -1;
    }
    auto load_mask = [&](int tile, float (&mv)[MPT]) {
        const int j0 = c0 + tile * TC;
#pragma unroll
        for (int k = 0; k < MPT; ++k) {
            const int j = j0 + mc[k];
            mv[k] = -INFINITY;
            if (mrow[k] >= 0 && tile < n_tiles && j < c1) mv[k] = p.mask ? mask_value(p, mrow[k] + j) : 0.0f;
        }
    };
    auto any_live = [&](const float (&mv)[MPT]) {
        bool any = false;
#pragma unroll
        for (int k = 0; k < MPT; ++k) any |= mv[k] != -INFINITY;
        return any;
    };

    const char * kbase = p.k + (p.stream0 + s) * p.kv_size * p.k_row + hk * p.k_head;
    const char * vbase = p.v + (p.stream0 + s) * p.kv_size * p.v_row + hk * p.v_head;
    // Stage `tile` into its stage: mask values from registers, K/V rows by cp.async when live (block-uniform).
    auto issue = [&](int tile, const float (&mv)[MPT], bool live) {
        if (tile >= n_tiles) return;
        char * st = smem + (tile % stages) * S::STAGE_BYTES;
        float * sm_mask = reinterpret_cast<float *>(st + S::M_OFF);
#pragma unroll
        for (int k = 0; k < MPT; ++k) {
            if (tid + k * threads < TC * R) sm_mask[tid + k * threads] = mv[k];  // [cell][row] = idx
        }
        if (!live) return;
        const int j0 = c0 + tile * TC;
        const int n = min(TC, c1 - j0);
        constexpr int UK = KB / S::WK, UV = VB / S::WV;
        for (int x = tid; x < n * UK; x += threads) {
            const int cell = x / UK, u = x % UK;
            cp_async<S::WK>(st + S::K_OFF + cell * KB + u * S::WK, kbase + (int64_t) (j0 + cell) * p.k_row + u * S::WK);
        }
        for (int x = tid; x < n * UV; x += threads) {
            const int cell = x / UV, u = x % UV;
            cp_async<S::WV>(st + S::V_OFF + cell * VB + u * S::WV, vbase + (int64_t) (j0 + cell) * p.v_row + u * S::WV);
        }
    };

    // prologue: tiles 0..stages-2 in flight, the mask of tile stages-1 in registers
    float mv[MPT];
    unsigned live_bits = 0;  // bit (tile % stages): the tile in that stage was copied (not masked for every row)
#pragma unroll
    for (int t = 0; t < stages - 1; ++t) {
        load_mask(t, mv);
        const bool live = __syncthreads_or(any_live(mv)) != 0;
        issue(t, mv, live);
        cp_async_commit();
        live_bits |= (unsigned) live << (t % stages);
    }
    load_mask(stages - 1, mv);
    bool live_next = __syncthreads_or(any_live(mv)) != 0;

    const float scale2 = p.scale * (p.softcap != 0.0f ? 1.0f : log2e);  // softcap: tanh argument stays natural
    const float softcap2 = p.softcap * log2e;

    for (int t = 0; t < n_tiles; ++t) {
        // the stage of tile t+stages-1 was last read by tile t-1's compute, which every thread has finished
        const int tn = t + stages - 1;
        issue(tn, mv, live_next);
        cp_async_commit();
        live_bits = (live_bits & ~(1u << (tn % stages))) | ((unsigned) live_next << (tn % stages));
        load_mask(tn + 1, mv);  // in flight during this tile's compute
        cp_async_wait<stages - 1>();
        __syncthreads();

        if (live_bits >> (t % stages) & 1u) {
            const char * st = smem + (t % stages) * S::STAGE_BYTES;
            const float * sm_mask = reinterpret_cast<const float *>(st + S::M_OFF);
            float sc[CPG];
            unsigned cell_live = 0;
            // scores of this group's cells (cells grp, grp + NG, ...): row ri's score in sc, log2 units
#pragma unroll
            for (int cc = 0; cc < CPG; ++cc) {
                const int cell = cc * NG + grp;
                float mk[R];
                load_row<R>(sm_mask + cell * R, mk);
                bool live = false;
#pragma unroll
                for (int i = 0; i < R; ++i) live |= mk[i] != -INFINITY;
                cell_live |= (unsigned) live << cc;
                float kx[8];
                if (live) {
                    KT::load(st + S::K_OFF + cell * KB, part, kx);
                } else {
#pragma unroll
                    for (int e = 0; e < 8; ++e) kx[e] = 0.0f;  // never read: uncopied or stale bytes
                }
                float dot[R];
#pragma unroll
                for (int i = 0; i < R; ++i) {
                    dot[i] = 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; ++e) dot[i] = fmaf(q[i][e], kx[e], dot[i]);
                }
                // the cell's G lanes reduce-scatter the R dot products: this lane ends with row ri's
                fa_reduce_scatter<R, G / 2, R>(dot, part, warp_xor);
                float mr = mk[0];
#pragma unroll
                for (int i = 1; i < R; ++i) mr = ri == i ? mk[i] : mr;
                // s = scale*q.k (softcap: softcap*tanh(q.k*scale/softcap)) + slope*mask, times log2(e); -INF wins
                const float x = p.softcap != 0.0f ? softcap2 * tanhf(dot[0] * p.scale) : dot[0] * scale2;
                sc[cc] = mr == -INFINITY ? -INFINITY : x + slope2 * mr;
            }
            // online softmax of row ri over this group's cells of the tile (FlashAttention-2 recurrence)
            float mt = -INFINITY;
#pragma unroll
            for (int cc = 0; cc < CPG; ++cc) mt = fmaxf(mt, sc[cc]);
            float alpha = 1.0f;
            if (mt != -INFINITY) {
                const float mn = fmaxf(m, mt);
                alpha = exp2f(m - mn);  // 0 while nothing is accumulated (m = -INF)
                float sum = 0.0f;
#pragma unroll
                for (int cc = 0; cc < CPG; ++cc) {
                    sc[cc] = sc[cc] == -INFINITY ? 0.0f : exp2f(sc[cc] - mn);
                    sum += sc[cc];
                }
                l = l * alpha + sum;
                m = mn;
            } else {
#pragma unroll
                for (int cc = 0; cc < CPG; ++cc) sc[cc] = 0.0f;
            }
            if (row_owner) {
#pragma unroll
                for (int cc = 0; cc < CPG; ++cc) sm_pw[grp][cc][ri] = sc[cc];
                sm_pw[grp][CPG][ri] = alpha;
            }
            __syncwarp();
            // P.V: every lane scales and accumulates its 8 elements for all R rows
            {
                float a[R];
                load_row<R>(sm_pw[grp][CPG], a);
#pragma unroll
                for (int i = 0; i < R; ++i) {
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[i][e] *= a[i];
                }
            }
#pragma unroll
            for (int cc = 0; cc < CPG; ++cc) {
                if (!(cell_live >> cc & 1u)) continue;  // V of a cell masked for every row is never read
                const int cell = cc * NG + grp;
                float vx[8];
                VT::load(st + S::V_OFF + cell * VB, part, vx);
                float w[R];
                load_row<R>(sm_pw[grp][cc], w);
#pragma unroll
                for (int i = 0; i < R; ++i) {
#pragma unroll
                    for (int e = 0; e < 8; ++e) acc[i][e] = fmaf(w[i], vx[e], acc[i][e]);
                }
            }
            __syncwarp();  // sm_pw is rewritten by the next live tile
        }
        // every thread is done with stage t % stages; decide whether tile tn+1 is copied
        live_next = __syncthreads_or(any_live(mv)) != 0;
    }
    cp_async_wait<0>();  // only empty groups remain; drained before the pipeline memory is reused
    __syncthreads();

    // merge the block's NG groups into one partial (m, l, acc) per query row of the chunk (log2 units)
    float * sm_acc = reinterpret_cast<float *>(smem);          // [NG][R][D]
    float * sm_m = sm_acc + NG * R * D, * sm_l = sm_m + NG * R;  // [NG][R]
#pragma unroll
    for (int i = 0; i < R; ++i) {
#pragma unroll
        for (int e = 0; e < 8; ++e) sm_acc[(grp * R + i) * D + VT::elem(part, e)] = acc[i][e];
    }
    if (row_owner) {
        sm_m[grp * R + ri] = m;
        sm_l[grp * R + ri] = l;
    }
    __syncthreads();
    const int n_q = p.n_head * p.n_tps;
    for (int x = tid; x < R * D; x += threads) {
        const int i = x / D, e = x % D;
        const int r = rg * R + i;
        if (r >= p.n_rows) continue;
        float mx = -INFINITY;
        for (int g = 0; g < NG; ++g) mx = fmaxf(mx, sm_m[g * R + i]);
        float o = 0.0f, lsum = 0.0f;
        if (mx != -INFINITY) {
            for (int g = 0; g < NG; ++g) {
                const float w = exp2f(sm_m[g * R + i] - mx);  // 0 for groups that saw no live cell
                o = fmaf(w, sm_acc[(g * R + i) * D + e], o);
                lsum = fmaf(w, sm_l[g * R + i], lsum);
            }
        }
        const int t = r / p.gqa, h = hk * p.gqa + r % p.gqa;
        float * dst = p.part + (((int64_t) s * p.n_chunks + c) * n_q + (int64_t) t * p.n_head + h) * (D + 2);
        dst[2 + e] = o;
        if (e == 0) {
            dst[0] = mx;
            dst[1] = lsum;
        }
    }
}

// Kernel table entry of one (K type, V type, D, R) instantiation.
template <class KT, class VT, int D, int R>
fa_decode_kernel_info kernel_info() {
    using S = shape<KT, VT, D, R>;
    return {reinterpret_cast<const void *>(&fa_decode_kernel<KT, VT, D, R>), S::TC, threads};
}

// Table of one same-type pair: D in {64, 128, 256} x R in {1, 2, 4, 8}.
template <class T>
fa_decode_kernel_info kernel_info_for(int d, int r) {
    switch (d) {
        case 64:
            return r == 1 ? kernel_info<T, T, 64, 1>() : r == 2 ? kernel_info<T, T, 64, 2>() : r == 4 ? kernel_info<T, T, 64, 4>() : kernel_info<T, T, 64, 8>();
        case 128:
            return r == 1 ? kernel_info<T, T, 128, 1>() : r == 2 ? kernel_info<T, T, 128, 2>() : r == 4 ? kernel_info<T, T, 128, 4>() : kernel_info<T, T, 128, 8>();
        default:
            return r == 1 ? kernel_info<T, T, 256, 1>() : r == 2 ? kernel_info<T, T, 256, 2>() : r == 4 ? kernel_info<T, T, 256, 4>() : kernel_info<T, T, 256, 8>();
    }
}

}  // namespace kvsim::cuda::fa_decode
