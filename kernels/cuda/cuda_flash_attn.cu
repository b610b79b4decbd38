// Legacy flash-attention kernel (KVSIM_CUDA_FA=legacy, and the fallback for mixed K/V pairs; the default is the
// typed pipelined kernel of cuda_fa_decode.cuh, dispatched from fa_launch below).
// Flash-attention decode on the GPU (FlashDecoding split-KV): one thread block per (split-KV chunk, kv head, query
// row group, stream). Within a block, groups of G = head_dim/8 lanes each own one cell at a time: every lane loads
// 8 elements of the cell's K row (one 16-byte load for f16), dots them with the R query rows of the kv head's GQA
// group held in registers (so each K/V byte is read once for all R query heads), reduces over the G lanes with
// shuffles, and keeps its own online-softmax state (FlashAttention-2 recurrence) over tiles of TC cells. The
// block's groups are merged through shared memory into one partial (m, l, acc) per query row and chunk; a second
// kernel merges the chunks by log-sum-exp, divides by l and applies the output Hadamard rotation. Semantics mirror
// kernels/cpu/cpu_flash_attn.cpp line for line (mask -INF wins over any score, fully masked rows give zeros).
#include <algorithm>
#include <cmath>

#include "cuda_common.cuh"
#include "cuda_fa_decode.h"
#include "cuda_internal.h"
#include "fa_merge.cuh"

namespace kvsim::cuda {

namespace {

constexpr int fa_warps = 4;
constexpr int fa_threads = 32 * fa_warps;

struct fa_params {
    const float * q;     // [dk, n_head, n_tps, n_stream], already H_k-rotated when rot.n_k
    const char * k;      // head hk of cell j of stream s at k + (s*kv_size + j)*k_row + hk*k_head
    const char * v;
    const void * mask;   // nullptr or [n_kv, n_tps, n_stream]
    float * part;        // [n_stream][n_chunks][n_head*n_tps][dv + 2]: m, l, acc
    int64_t k_row, v_row, k_head, v_head;
    int64_t kv_size, stream0;
    int tk, tv, mask_f16;
    int n_kv, n_tps, n_head, n_head_kv, gqa, n_rows, n_rgroups;
    int chunk, n_chunks;
    float scale, softcap, max_bias;
};

__device__ __forceinline__ float mask_at(const fa_params & p, int64_t idx) {
    return p.mask_f16 ? h2f(static_cast<const uint16_t *>(p.mask)[idx]) : static_cast<const float *>(p.mask)[idx];
}

// Sum of v over the G lanes of this lane's group (xor butterfly inside the group: every lane gets the sum).
template <int G>
__device__ __forceinline__ float group_sum(float v, unsigned gmask) {
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(gmask, v, o, G);
    return v;
}

template <int D, int R>
__global__ void __launch_bounds__(fa_threads) fa_chunk_kernel(const fa_params p) {
    constexpr int G = D / kv_part;        // lanes per cell
    constexpr int CPW = 32 / G;           // cells per warp at a time
    constexpr int NG = fa_warps * CPW;    // lane groups per block
    // cells per group per tile: fa_tc independent K and V loads in flight per lane; fewer with 8 rows, whose q
    // and acc already take 16*R registers (ptxas sm_90: 243 registers for R = 8, 190 for R = 4, no spills)
    constexpr int fa_tc = R >= 8 ? 2 : 4;
    const int lane = threadIdx.x & 31;
    const int part = lane % G;
    const int grp = (threadIdx.x >> 5) * CPW + lane / G;
    const unsigned gmask = G == 32 ? 0xffffffffu : (((1u << G) - 1u) << (lane / G * G));

    const int c = blockIdx.x;
    const int hk = blockIdx.y / p.n_rgroups, rg = blockIdx.y % p.n_rgroups;
    const int s = blockIdx.z;
    const int c0 = c * p.chunk;
    const int c1 = min(p.n_kv, c0 + p.chunk);

    // the block's query rows: row r = t*gqa + g of kv head hk is query head hk*gqa + g of token t
    float q[R][kv_part], slope[R], m[R], l[R], acc[R][kv_part];
    int64_t mrow[R];
    bool valid[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = rg * R + i;
        valid[i] = r < p.n_rows;
        const int t = valid[i] ? r / p.gqa : 0, h = hk * p.gqa + (valid[i] ? r % p.gqa : 0);
        const float * qr = p.q + ((int64_t) (s * p.n_tps + t) * p.n_head + h) * D;
#pragma unroll
        for (int e = 0; e < kv_part; ++e) {
            q[i][e] = valid[i] ? qr[part_elem(p.tk, part, e)] : 0.0f;
            acc[i][e] = 0.0f;
        }
        slope[i] = alibi_slope_dev(h, p.n_head, p.max_bias);
        mrow[i] = (int64_t) (s * p.n_tps + t) * p.n_kv;
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    const char * kbase = p.k + (p.stream0 + s) * p.kv_size * p.k_row + hk * p.k_head;
    const char * vbase = p.v + (p.stream0 + s) * p.kv_size * p.v_row + hk * p.v_head;

    for (int j0 = c0 + grp * fa_tc; j0 < c1; j0 += NG * fa_tc) {
        float sc[fa_tc][R];
        bool live[fa_tc];
        bool any = false;
#pragma unroll
        for (int cc = 0; cc < fa_tc; ++cc) {
            const int j = j0 + cc;
            live[cc] = false;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                float mv = -INFINITY;
                if (valid[i] && j < c1) mv = p.mask ? mask_at(p, mrow[i] + j) : 0.0f;
                sc[cc][i] = mv;  // the mask value until the score replaces it
                live[cc] |= mv != -INFINITY;
            }
            any |= live[cc];
        }
        if (!any) continue;  // every cell of the tile masked for every row: neither K nor V is read

        float kx[fa_tc][kv_part], vx[fa_tc][kv_part];
#pragma unroll
        for (int cc = 0; cc < fa_tc; ++cc) {
#pragma unroll
            for (int e = 0; e < kv_part; ++e) kx[cc][e] = vx[cc][e] = 0.0f;
            if (live[cc]) {
                load_part(p.tk, kbase + (int64_t) (j0 + cc) * p.k_row, part, kx[cc]);
                load_part(p.tv, vbase + (int64_t) (j0 + cc) * p.v_row, part, vx[cc]);
            }
        }
        // scores: s = scale*q.k (softcap: softcap*tanh), + slope*mask; -INF where the mask is -INF
#pragma unroll
        for (int cc = 0; cc < fa_tc; ++cc) {
#pragma unroll
            for (int i = 0; i < R; ++i) {
                float dot = 0.0f;
#pragma unroll
                for (int e = 0; e < kv_part; ++e) dot = fmaf(q[i][e], kx[cc][e], dot);
                dot = group_sum<G>(dot, gmask);
                const float mv = sc[cc][i];
                float x = dot * p.scale;
                if (p.softcap != 0.0f) x = p.softcap * tanhf(x);
                sc[cc][i] = mv == -INFINITY ? -INFINITY : x + slope[i] * mv;
            }
        }
        // online softmax and P.V per row
#pragma unroll
        for (int i = 0; i < R; ++i) {
            float mt = -INFINITY;
#pragma unroll
            for (int cc = 0; cc < fa_tc; ++cc) mt = fmaxf(mt, sc[cc][i]);
            if (mt == -INFINITY) continue;
            const float mn = fmaxf(m[i], mt);
            const float alpha = expf(m[i] - mn);  // 0 while nothing is accumulated (m = -INF)
            float sum = 0.0f;
#pragma unroll
            for (int e = 0; e < kv_part; ++e) acc[i][e] *= alpha;
#pragma unroll
            for (int cc = 0; cc < fa_tc; ++cc) {
                const float pr = sc[cc][i] == -INFINITY ? 0.0f : expf(sc[cc][i] - mn);
                sum += pr;
#pragma unroll
                for (int e = 0; e < kv_part; ++e) acc[i][e] = fmaf(pr, vx[cc][e], acc[i][e]);
            }
            l[i] = l[i] * alpha + sum;
            m[i] = mn;
        }
    }

    // merge the block's NG groups: partial of the chunk per query row
    __shared__ float sm_m[NG][R], sm_l[NG][R];
    __shared__ float sm_acc[NG][R][D];
#pragma unroll
    for (int i = 0; i < R; ++i) {
#pragma unroll
        for (int e = 0; e < kv_part; ++e) sm_acc[grp][i][part_elem(p.tv, part, e)] = acc[i][e];
        if (part == 0) {
            sm_m[grp][i] = m[i];
            sm_l[grp][i] = l[i];
        }
    }
    __syncthreads();
    const int n_q = p.n_head * p.n_tps;
    for (int x = threadIdx.x; x < R * D; x += fa_threads) {
        const int i = x / D, e = x % D;
        const int r = rg * R + i;
        if (r >= p.n_rows) continue;
        float mx = -INFINITY;
        for (int g = 0; g < NG; ++g) mx = fmaxf(mx, sm_m[g][i]);
        float o = 0.0f, lsum = 0.0f;
        if (mx != -INFINITY) {
            for (int g = 0; g < NG; ++g) {
                const float w = expf(sm_m[g][i] - mx);  // 0 for groups that saw no live cell
                o = fmaf(w, sm_acc[g][i][e], o);
                lsum = fmaf(w, sm_l[g][i], lsum);
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

// Q rotation by H_k (build_attn multiplies q by the rotation before the op): one row of D per block.
template <int D>
__global__ void __launch_bounds__(D) rotate_rows_kernel(const float * __restrict__ src, float * __restrict__ dst, int n) {
    __shared__ float x[D];
    const int64_t row = blockIdx.x;
    x[threadIdx.x] = src[row * D + threadIdx.x];
    __syncthreads();
    block_fwht(x, D, n);
    dst[row * D + threadIdx.x] = x[threadIdx.x];
}

int kv_code_of(ggml_type t) {
    switch (t) {
        case ggml_type::f32: return kv_f32;
        case ggml_type::f16: return kv_f16;
        case ggml_type::q8_0: return kv_q8_0;
        case ggml_type::q4_0: return kv_q4_0;
        default: throw std::invalid_argument("CUDA flash_attn: unsupported KV type");
    }
}

template <int D, int R>
void launch_chunks(const fa_params & p, int n_stream, cudaStream_t st) {
    const dim3 grid((unsigned) p.n_chunks, (unsigned) (p.n_head_kv * p.n_rgroups), (unsigned) n_stream);
    fa_chunk_kernel<D, R><<<grid, fa_threads, 0, st>>>(p);
}

template <int D>
void launch_all(const fa_params & p, int R, int n_stream, int rot_v, float * out, cudaStream_t st) {
    switch (R) {
        case 1: launch_chunks<D, 1>(p, n_stream, st); break;
        case 2: launch_chunks<D, 2>(p, n_stream, st); break;
        case 4: launch_chunks<D, 4>(p, n_stream, st); break;
        default: launch_chunks<D, 8>(p, n_stream, st); break;
    }
    fa_merge_kernel<D, false><<<dim3((unsigned) (p.n_head * p.n_tps), (unsigned) n_stream), D, 0, st>>>(p.part, out, p.n_chunks,
                                                                                                 p.n_head * p.n_tps, rot_v);
}

template <int D>
void launch_rotate(const float * src, float * dst, int64_t rows, int n, cudaStream_t st) {
    rotate_rows_kernel<D><<<(unsigned) rows, D, 0, st>>>(src, dst, n);
}

}  // namespace

int fa_rows_per_block(const fa_desc & d) {
    const int64_t rows = d.n_tps * (d.n_head / d.n_head_kv);
    return rows >= 8 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
}

void fa_check_cuda_shape(const fa_desc & d) {
    if (d.head_dim_k != d.head_dim_v || (d.head_dim_k != 64 && d.head_dim_k != 128 && d.head_dim_k != 256)) {
        throw std::invalid_argument("CUDA flash_attn: head_dim_k == head_dim_v in {64, 128, 256} required, got " +
                                    std::to_string(d.head_dim_k) + "/" + std::to_string(d.head_dim_v));
    }
    if (d.n_kv > INT32_MAX / 2 || d.n_head * d.n_tps > INT32_MAX / 2) throw std::invalid_argument("CUDA flash_attn: shape too large");
    // grid.y = n_head_kv * row groups of 8 (fa_launch): a launch beyond 65535 would fail, so say why up front
    const int64_t rows = d.n_tps * (d.n_head / d.n_head_kv);
    if (d.n_head_kv * ((rows + 7) / 8) > 65535) {
        throw std::invalid_argument("CUDA flash_attn: n_head_kv x ceil(n_tps x gqa / 8) exceeds the 65535 grid limit (ubatch too large)");
    }
}

void fa_launch(const fa_desc & d, const fa_plan & plan, const fa_args & a, const float * q, float * part, cudaStream_t st) {
    // the typed pipelined kernel unless KVSIM_CUDA_FA=legacy or the pair has no instantiation (cuda_fa_decode.h)
    if (fa_impl_requested() == fa_impl::decode && fa_decode_supports(a)) {
        fa_decode_launch(d, plan, a, q, part, st);
        return;
    }
    fa_params p{};
    p.q = q;
    p.k = static_cast<const char *>(a.k.data);
    p.v = static_cast<const char *>(a.v.data);
    p.mask = a.mask;
    p.part = part;
    p.k_row = (int64_t) a.k.row_bytes();
    p.v_row = (int64_t) a.v.row_bytes();
    p.k_head = (int64_t) a.k.head_bytes();
    p.v_head = (int64_t) a.v.head_bytes();
    p.kv_size = a.k.kv_size;
    p.stream0 = a.stream0;
    p.tk = kv_code_of(a.k.type);
    p.tv = kv_code_of(a.v.type);
    p.mask_f16 = a.mask_type == ggml_type::f16;
    p.n_kv = (int) d.n_kv;
    p.n_tps = (int) d.n_tps;
    p.n_head = (int) d.n_head;
    p.n_head_kv = (int) d.n_head_kv;
    p.gqa = (int) (d.n_head / d.n_head_kv);
    p.n_rows = (int) (d.n_tps * p.gqa);
    const int R = fa_rows_per_block(d);
    p.n_rgroups = (p.n_rows + R - 1) / R;
    p.chunk = (int) plan.chunk;
    p.n_chunks = (int) plan.n_chunks;
    p.scale = d.softcap != 0.0f ? d.scale / d.softcap : d.scale;
    p.softcap = d.softcap;
    p.max_bias = d.max_bias;
    const int n_stream = (int) d.n_stream;
    switch (d.head_dim_k) {
        case 64: launch_all<64>(p, R, n_stream, d.rot.n_v, a.out, st); break;
        case 128: launch_all<128>(p, R, n_stream, d.rot.n_v, a.out, st); break;
        default: launch_all<256>(p, R, n_stream, d.rot.n_v, a.out, st); break;
    }
    check(cudaGetLastError(), "flash_attn launch");
}

void rotate_q_launch(const float * src, float * dst, int64_t rows, int64_t head_dim, int n, cudaStream_t st) {
    switch (head_dim) {
        case 64: launch_rotate<64>(src, dst, rows, n, st); break;
        case 128: launch_rotate<128>(src, dst, rows, n, st); break;
        default: launch_rotate<256>(src, dst, rows, n, st); break;
    }
    check(cudaGetLastError(), "Q rotation launch");
}

}  // namespace kvsim::cuda
