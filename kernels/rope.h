// RoPE as ggml computes it (ggml/src/ggml-cpu/ops.cpp: rope_yarn, ggml_rope_cache_init, rotate_pairs;
// ggml/src/ggml.c: ggml_rope_yarn_corr_dims), in float, for the K-shift (llama-kv-cache.cpp: build_rope_shift).
#pragma once

#include <cstdint>

namespace kvsim {

// GGML_ROPE_TYPE_NORMAL rotates pairs (2i, 2i+1); GGML_ROPE_TYPE_NEOX rotates (i, i + n_rot/2).
enum class rope_mode { norm, neox };

// ggml_rope_ext parameters. n_rot: rotated dims at the start of each head (even, <= head size).
// freq_factors: optional [n_rot/2] divisors of theta (llama3 / Phi-3 rope factors), nullptr = none.
struct rope_params {
    int n_rot = 128;
    rope_mode mode = rope_mode::norm;
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
    int n_ctx_orig = 0;
    const float * freq_factors = nullptr;
};

// Start/end correction dims of YaRN (ggml.c: ggml_rope_yarn_corr_dims), clamped to [0, n_dims-1].
void rope_yarn_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]);

// Fill cache[0..n_rot) with (cos, sin) pairs times the magnitude factor for position pos
// (ops.cpp: ggml_rope_cache_init with sin_sign = +1). corr_dims from rope_yarn_corr_dims.
void rope_cache_init(const rope_params & p, int64_t pos, const float corr_dims[2], float * cache);

// Rotate the first n_rot elements of one head row x in place with a cache from rope_cache_init
// (ops.cpp: rotate_pairs for NORMAL / NEOX).
void rope_rotate(const rope_params & p, const float * cache, float * x);

}  // namespace kvsim
