// Grouped flash-attention inner loops for the CPU decode kernel: all query rows that share one KV head
// (the GQA group times the tokens of a stream) against one tile of that head's K/V rows, reading each K/V
// element from memory once and dequantising it in registers (no f32 copy of the tile).
// Shapes: K/V rows of one head are head_dim elements of type f32/f16/q8_0/q4_0 (ggml block layout) at
// `base + j * stride` bytes for tile cell j; query rows and accumulators are f32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/cpu_isa.h"
#include "core/ggml_type.h"
#include "quant.h"

namespace kvsim::cpu {

// Prefetch of the next tile's K and V bytes into L2, paced by the work of the current one: every step() stands
// for the same amount of arithmetic (16 FMAs of 16 lanes: 4 rows x 4 cells x 16 elements of Q.K, 4 rows x 64
// elements of one cell of P.V) and issues lines_per_step 64-byte lines, K first, then V. A burst of prefetches
// fills the core's line fill buffers and stalls it, and pacing by loop iterations of unequal length (a Q.K
// iteration was 8 P.V iterations of work) bunched them, so the pacing carries a fractional credit (16.16 fixed
// point).
struct prefetch_stream {
    const char * k = nullptr;
    const char * k_end = nullptr;
    const char * v = nullptr;
    const char * v_end = nullptr;
    uint32_t lines_per_step = 0;  // 16.16 fixed point
    uint32_t credit = 0;

    void step() {
        credit += lines_per_step;
        for (; credit >= (1u << 16); credit -= 1u << 16) {
            if (k < k_end) {
                __builtin_prefetch(k, 0, 2);
                k += 64;
            } else if (v < v_end) {
                __builtin_prefetch(v, 0, 2);
                v += 64;
            } else {
                credit = 0;
                return;
            }
        }
    }
    // Issue whatever is left (the loops ran fewer steps than planned).
    void finish() {
        credit = 0;
        for (; k < k_end; k += 64) __builtin_prefetch(k, 0, 2);
        for (; v < v_end; v += 64) __builtin_prefetch(v, 0, 2);
    }
};

// True when the grouped path has loops for `isa` (AVX2, AVX-512, NEON), this CPU supports it (cpu_isa.h), and it
// handles these types (f32/f16/q8_0/q4_0) and head sizes (head_dim_k % 16 == 0, head_dim_v % 16 == 0). Otherwise
// the tile-copy path runs. Every function below takes the same `isa` and must only be called when this is true.
bool fa_group_supported(cpu_isa isa, ggml_type tk, ggml_type tv, int64_t head_dim_k, int64_t head_dim_v);

// scores[r * ld + j] = dot(q[r], K_j) for r < n_rows, j < nt, where K_j is head_dim_k elements at k0 + j*stride.
// Computed for every j < nt, dead cells included (the caller masks them): only memory inside the tile is read.
// cells: when set, K_j is the row of cell cells[j] (k0 + cells[j]*stride), a token's visible cells only.
// qq: for a q8_0 K, the same rows as q8_0 blocks (q is their dequantized copy); the AVX2 loops then take the dot
// products in integers (vpmaddubsw, one scale per block: ggml_vec_dot_q8_0_q8_0) instead of f32 FMAs. Null: f32.
void fa_group_qk(cpu_isa isa, ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride, int64_t nt,
                 int64_t head_dim_k, float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells = nullptr,
                 const block_q8_0 * const * qq = nullptr);

// acc[r][e] += sum_j p[r * ld + j] * V_j[e] for r < n_rows, e < head_dim_v, over the cells j < nt with live[j]
// != 0 (dead cells are never read, so garbage there cannot turn 0 * NaN into NaN). cells: as fa_group_qk (V_j at
// v0 + cells[j]*stride); live may then be null (every listed cell is read).
void fa_group_pv(cpu_isa isa, ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0,
                 size_t stride, int64_t nt, int64_t head_dim_v, const char * live, prefetch_stream & pf,
                 const int32_t * cells = nullptr);

// Prefetch steps of fa_group_qk (or fa_amx_qk_q8_0 when qk_amx) + fa_group_pv for these sizes. AVX-512: one per
// 16 elements of 4 query rows x 4 cells in Q.K (AMX: one per q8_0 block of 16 cells), one per cell and 64 elements
// (16 elements) of 4 rows in P.V. AVX2: one per 32 elements of 4 rows x 2 cells in Q.K, one per cell and 16
// elements of 4 rows in P.V; NEON as AVX2.
int64_t fa_group_steps(cpu_isa isa, int64_t n_rows, int64_t nt, int64_t head_dim_k, int64_t head_dim_v, bool qk_amx = false);

}  // namespace kvsim::cpu
