// Hadamard "attention rotation" of quantized KV caches (llama.cpp PR #21038; semantics doc §5.4).
// Q and K are multiplied by the normalised Sylvester-Walsh-Hadamard matrix H_k, V by H_v (size 64), and the
// attention output by H_v again (H is symmetric and involutive). Applied block-diagonally: a row of a head
// is split into consecutive blocks of n elements, each transformed on its own (n divides the head size).
#pragma once

#include <cstdint>

#include "core/ggml_type.h"

namespace kvsim {

// Which tensors are rotated and with which block size (0 = not rotated).
struct attn_rot {
    int n_k = 0;  // block size for Q and K (power of two >= 64), 0 = off
    int n_v = 0;  // block size for V and the output (64), 0 = off
    bool k() const { return n_k > 0; }
    bool v() const { return n_v > 0; }
};

// Largest power of two >= 64 dividing head_dim (128 -> 128, 192 -> 64, 576 -> 64); 0 when head_dim % 64 != 0.
// Source: src/llama-kv-cache.cpp (attn_rot_hadamard sizes).
int hadamard_size_k(int64_t head_dim);
// V always uses 64 ("smaller is better"), when head_dim % 64 == 0; else 0.
int hadamard_size_v(int64_t head_dim);

// Rotation chosen by llama_kv_cache's constructor: K rotated iff !disable, type_k quantized and head_k % 64 == 0;
// V likewise with type_v/head_v. F32/F16/BF16 are never rotated. `disable` mirrors LLAMA_ATTN_ROT_DISABLE.
attn_rot attn_rot_config(ggml_type type_k, ggml_type type_v, int64_t head_k, int64_t head_v, bool disable);
// atoi(getenv("LLAMA_ATTN_ROT_DISABLE")) != 0, as llama_kv_cache reads it.
bool attn_rot_disabled_by_env();

// In-place normalised fast Walsh-Hadamard transform of x[0..n) (n a power of two): x <- H_n x,
// H_n(i,j) = (-1)^popcount(i&j)/sqrt(n). O(n log n): scale by 1/sqrt(n), then butterflies in natural order
// (as ggml-cuda fwht.cu). Throws std::invalid_argument when n is not a power of two >= 1.
void fwht(float * x, int n);
// Apply fwht to each consecutive block of n elements of x[0..len); len % n == 0 (else std::invalid_argument).
void fwht_blocks(float * x, int64_t len, int n);

}  // namespace kvsim
