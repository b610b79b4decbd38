// The per-instruction-set K-shift row bodies behind cpu_k_shift.cpp (internal to kernels/cpu).
#pragma once

#include <cstdint>

#include "cpu/simd_isa.h"
#include "core/ggml_type.h"
#include "rope.h"

namespace kvsim::cpu {

// The shapes the vector K-shift handles: f32/f16/q8_0/q4_0 rows, head_dim % 8 == 0, n_rot % 16 == 0, rotation
// blocks rot_n of 0 (none) or a power of two >= 8; others take the portable loops.
inline bool kshift_vector_ok(ggml_type t, int64_t head_dim, const rope_params & p, int rot_n) {
    const bool type_ok = t == ggml_type::f32 || t == ggml_type::f16 || t == ggml_type::q8_0 || t == ggml_type::q4_0;
    return type_ok && head_dim % 8 == 0 && p.n_rot % 16 == 0 && p.n_rot <= head_dim &&
           (rot_n == 0 || (rot_n >= 8 && (rot_n & (rot_n - 1)) == 0));
}

// Floats of kshift_tables' output for n_rot rotated dims.
inline int64_t kshift_table_size(int n_rot) { return 2 * (int64_t) n_rot; }

namespace avx2 {
// The per-shift RoPE factors in the layout the vector loops read them (one load per 8 lanes, no shuffles per head),
// from rope_cache_init's interleaved (cos, sin) cache: NORMAL: tab[i] = cos of pair i/2, tab[n_rot + i] = its sin
// (each pair's value twice); NEOX: tab[i] = cos, tab[n_rot/2 + i] = sin of pair i < n_rot/2. A context shift moves
// every cell by the same delta, so the caller builds this once per distinct shift, not per cell.
void kshift_tables(const rope_params & p, const float * cache, float * tab);

// One cell's K row (n_head heads of head_dim elements of type t) shifted in place: to f32, fwht over blocks of rot_n
// (0 = none), RoPE of every head with the shift's tables (kshift_tables), fwht, back to t. f16/f32 rows go from
// memory to memory a vector at a time; a q8_0/q4_0 head of 128 with rot_n 128 and n_rot 128 (Llama, Qwen, Mistral
// heads) is done in five register passes over 128 floats in L1; other shapes go through x (n_head * head_dim
// floats). Only for kshift_vector_ok shapes.
void kshift_row(ggml_type t, void * row, int64_t n_head, int64_t head_dim, const rope_params & p, const float * tab,
                int rot_n, float * x);
}  // namespace avx2

}  // namespace kvsim::cpu
