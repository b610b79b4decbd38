// Grouped flash-attention inner loops for the CPU decode kernel: all query rows that share one KV head
// (the GQA group times the tokens of a stream) against one tile of that head's K/V rows, reading each K/V
// element from memory once and dequantising it in registers (no f32 copy of the tile).
// Shapes: K/V rows of one head are head_dim elements of type f32/f16/q8_0/q4_0 (ggml block layout) at
// `base + j * stride` bytes for tile cell j; query rows and accumulators are f32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kv/ggml_type.h"

namespace kvsim::cpu {

// Prefetch of the next tile's K and V bytes into L2, spread over the inner-loop iterations of the current one:
// a burst of hundreds of prefetches fills the L2 miss queue and stalls the core, so that memory and compute
// would alternate instead of overlapping. Each step() issues `per_step` 64-byte lines, K first, then V.
struct prefetch_stream {
    const char * k = nullptr;
    const char * k_end = nullptr;
    const char * v = nullptr;
    const char * v_end = nullptr;
    int per_step = 0;

    void step() {
        for (int i = 0; i < per_step; ++i) {
            if (k < k_end) {
                __builtin_prefetch(k, 0, 2);
                k += 64;
            } else if (v < v_end) {
                __builtin_prefetch(v, 0, 2);
                v += 64;
            } else {
                return;
            }
        }
    }
    // Issue whatever is left (the loops ran fewer iterations than planned).
    void finish() {
        per_step = 1 << 30;
        step();
    }
};

// True when this build has the grouped path (AVX-512) and it handles these types and head sizes
// (head_dim_k % 16 == 0, head_dim_v % 16 == 0). Otherwise the tile-copy path runs.
bool fa_group_supported(ggml_type tk, ggml_type tv, int64_t head_dim_k, int64_t head_dim_v);

// scores[r * ld + j] = dot(q[r], K_j) for r < n_rows, j < nt, where K_j is head_dim_k elements at k0 + j*stride.
// Computed for every j < nt, dead cells included (the caller masks them): only memory inside the tile is read.
void fa_group_qk(ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride, int64_t nt,
                 int64_t head_dim_k, float * scores, int64_t ld, prefetch_stream & pf);

// acc[r][e] += sum_j p[r * ld + j] * V_j[e] for r < n_rows, e < head_dim_v, over the cells j < nt with live[j]
// != 0 (dead cells are never read, so garbage there cannot turn 0 * NaN into NaN).
void fa_group_pv(ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0,
                 size_t stride, int64_t nt, int64_t head_dim_v, const char * live, prefetch_stream & pf);

// Inner-loop iterations of fa_group_qk + fa_group_pv for these sizes (each calls pf.step() once per iteration).
int64_t fa_group_steps(int64_t n_rows, int64_t nt, int64_t head_dim_v);

}  // namespace kvsim::cpu
