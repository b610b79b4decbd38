// The per-instruction-set K-shift row bodies behind cpu_k_shift.cpp (internal to kernels/cpu).
#pragma once

#include <cstdint>

#include "cpu/simd_isa.h"
#include "kv/ggml_type.h"
#include "rope.h"

namespace kvsim::cpu {

// The shapes the vector K-shift handles: f32/f16/q8_0/q4_0 rows, head_dim % 8 == 0, n_rot % 16 == 0, rotation
// blocks rot_n of 0 (none) or a power of two >= 8; others take the portable loops.
inline bool kshift_vector_ok(ggml_type t, int64_t head_dim, const rope_params & p, int rot_n) {
    const bool type_ok = t == ggml_type::f32 || t == ggml_type::f16 || t == ggml_type::q8_0 || t == ggml_type::q4_0;
    return type_ok && head_dim % 8 == 0 && p.n_rot % 16 == 0 && p.n_rot <= head_dim &&
           (rot_n == 0 || (rot_n >= 8 && (rot_n & (rot_n - 1)) == 0));
}

namespace avx2 {
// One cell's K row (n_head heads of head_dim elements of type t) shifted in place: to f32 (into x, n_head *
// head_dim floats; f32 rows in place), fwht over blocks of rot_n (0 = none), RoPE of every head with the position's
// cache (rope_cache_init), fwht, back to t. Only for kshift_vector_ok shapes.
void kshift_row(ggml_type t, void * row, int64_t n_head, int64_t head_dim, const rope_params & p, const float * cache,
                int rot_n, float * x);
}  // namespace avx2

}  // namespace kvsim::cpu
