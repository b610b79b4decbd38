#include "cpu/simd.h"

#include <cmath>

#include "cpu/simd_isa.h"
#include "quant.h"

namespace kvsim::cpu {

void row_to_f32_fast(ggml_type t, const void * src, float * dst, int64_t n, [[maybe_unused]] cpu_isa isa) {
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512 && avx512::row_to_f32(t, src, dst, n)) return;)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2 && avx2::row_to_f32(t, src, dst, n)) return;)
    row_to_f32(t, src, dst, n);
}

float dot_f32(const float * a, const float * b, int64_t n, [[maybe_unused]] cpu_isa isa) {
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) return avx512::dot_f32(a, b, n);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) return avx2::dot_f32(a, b, n);)
    float sum = 0.0f;
    for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

void axpy_f32(float * y, const float * x, float w, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += x[i] * w;
}

void tile_qk_f32(const float * q, const float * k, int64_t k_stride, int64_t nt, int64_t n, float * out, [[maybe_unused]] cpu_isa isa) {
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) return avx512::tile_qk_f32(q, k, k_stride, nt, n, out);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) return avx2::tile_qk_f32(q, k, k_stride, nt, n, out);)
    for (int64_t j = 0; j < nt; ++j) out[j] = dot_f32(q, k + j * k_stride, n, isa);
}

void tile_scores_finish(float * s, const float * mv, int64_t nt, float scale, float softcap, float slope, [[maybe_unused]] cpu_isa isa) {
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) return avx512::tile_scores_finish(s, mv, nt, scale, softcap, slope);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) return avx2::tile_scores_finish(s, mv, nt, scale, softcap, slope);)
    scores_finish_tail(s, mv, 0, nt, scale, softcap, slope);
}

float tile_softmax(float * s, int64_t nt, float m, float * m_new, [[maybe_unused]] cpu_isa isa) {
    float mt = -INFINITY;
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) mt = avx512::tile_max(s, nt);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) mt = avx2::tile_max(s, nt);)
    if (isa != cpu_isa::avx2 && isa != cpu_isa::avx512) {  // scalar, and NEON (portable loops here)
        for (int64_t j = 0; j < nt; ++j) mt = s[j] > mt ? s[j] : mt;
    }
    *m_new = m;
    if (mt == -INFINITY) {
        for (int64_t j = 0; j < nt; ++j) s[j] = 0.0f;
        return 0.0f;
    }
    const float mn = std::fmax(m, mt);
    *m_new = mn;
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) return avx512::tile_exp_sum(s, nt, mn);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) return avx2::tile_exp_sum(s, nt, mn);)
    return softmax_exp_tail(s, 0, nt, mn);
}

void tile_pv_f32(float * acc, const float * p, const float * v, int64_t v_stride, int64_t nt, int64_t n, [[maybe_unused]] cpu_isa isa) {
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx512) return avx512::tile_pv_f32(acc, p, v, v_stride, nt, n);)
    KVSIM_X86_ONLY(if (isa == cpu_isa::avx2) return avx2::tile_pv_f32(acc, p, v, v_stride, nt, n);)
    pv_tail(acc, p, v, v_stride, nt, 0, n);
}

}  // namespace kvsim::cpu
