// The per-instruction-set bodies behind simd.h (internal to kernels/cpu), each in a file of its own under
// a target region (isa_target.h), and the scalar loops they share for their tails. Same contracts as simd.h; call only a
// level that cpu_isa_supported() says this CPU has.
#pragma once

#include <cmath>
#include <cstdint>

#include "cpu/simd.h"

namespace kvsim::cpu {

// Scalar tails, j0 (e0) the first cell (element) the vector loop did not cover. Defined here, outside any target
// region, so every file instantiates them for the baseline ISA.
inline void scores_finish_tail(float * s, const float * mv, int64_t j0, int64_t nt, float scale, float softcap,
                               float slope) {
    for (int64_t j = j0; j < nt; ++j) {
        if (mv[j] == -INFINITY) {
            s[j] = -INFINITY;
            continue;
        }
        float x = s[j] * scale;
        if (softcap != 0.0f) x = softcap * tanhf(x);
        s[j] = x + slope * mv[j];
    }
}
inline float softmax_exp_tail(float * s, int64_t j0, int64_t nt, float mn) {
    float sum = 0.0f;
    for (int64_t j = j0; j < nt; ++j) {
        s[j] = s[j] == -INFINITY ? 0.0f : expf(s[j] - mn);
        sum += s[j];
    }
    return sum;
}
inline void pv_tail(float * acc, const float * p, const float * v, int64_t v_stride, int64_t nt, int64_t e0, int64_t n) {
    for (int64_t j = 0; j < nt; ++j) {
        if (p[j] == 0.0f) continue;
        for (int64_t e = e0; e < n; ++e) acc[e] += p[j] * v[j * v_stride + e];
    }
}

#define KVSIM_SIMD_DECLS                                                                                            \
    bool row_to_f32(ggml_type t, const void * src, float * dst, int64_t n); /* false: type not vectorized */         \
    float dot_f32(const float * a, const float * b, int64_t n);                                                      \
    void tile_qk_f32(const float * q, const float * k, int64_t k_stride, int64_t nt, int64_t n, float * out);       \
    void tile_scores_finish(float * s, const float * mv, int64_t nt, float scale, float softcap, float slope);      \
    float tile_max(const float * s, int64_t nt);                                                                     \
    float tile_exp_sum(float * s, int64_t nt, float mn);                                                             \
    void tile_pv_f32(float * acc, const float * p, const float * v, int64_t v_stride, int64_t nt, int64_t n);

namespace avx512 { KVSIM_SIMD_DECLS }
namespace avx2 { KVSIM_SIMD_DECLS }

#undef KVSIM_SIMD_DECLS

}  // namespace kvsim::cpu
