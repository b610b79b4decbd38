// AVX2 + FMA + F16C bodies of the CPU vector helpers (simd.h), compiled for AVX2 whatever the build's -march
// inside a target region (isa_target.h) after every include (see fa_group_avx512.cpp); simd.cpp calls them only
// when cpu_isa_supported(cpu_isa::avx2).
#include "cpu/simd_isa.h"

#if KVSIM_X86  // other architectures take the scalar loops (cpu_isa.h)

#include <immintrin.h>

#include "quant.h"

KVSIM_TARGET_BEGIN("avx2,fma,f16c")

namespace kvsim::cpu::avx2 {

namespace {
float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// exp(x) for 8 floats: the AVX-512 exp16 of simd_avx512.cpp (2^n * p(r), degree-6 polynomial, relative error
// < 2e-7), with 2^n built in the exponent bits instead of scalef; x < -87.3 gives 0 so exp(-INF) = 0.
__m256 exp8(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f), hi = _mm256_set1_ps(88.3f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    // n in [-126, 127] after the clamp: 2^n is a normal float
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

void f16_to_f32(const fp16_t * s, float * d, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (s + i))));
    for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}

// 8 int8 values at q as f32 times d.
inline __m256 widen8(const int8_t * q, __m256 d) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *) q))), d);
}

void q8_0_to_f32(const block_q8_0 * b, float * d, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const __m256 sc = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(d + i * 32 + 8 * c, widen8(b[i].qs + 8 * c, sc));
    }
}

void q4_0_to_f32(const block_q4_0 * b, float * d, int64_t n) {
    const __m128i m4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const __m256 sc = _mm256_set1_ps(_cvtsh_ss(b[i].d));
        const __m128i q = _mm_loadu_si128((const __m128i *) b[i].qs);
        const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), eight);
        const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int c = 0; c < 4; ++c) {
            _mm256_storeu_ps(d + i * 32 + 8 * c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[c])), sc));
        }
    }
}
}  // namespace

bool row_to_f32(ggml_type t, const void * src, float * dst, int64_t n) {
    switch (t) {
        case ggml_type::f16: f16_to_f32(static_cast<const fp16_t *>(src), dst, n); return true;
        case ggml_type::q8_0: q8_0_to_f32(static_cast<const block_q8_0 *>(src), dst, n); return true;
        case ggml_type::q4_0: q4_0_to_f32(static_cast<const block_q4_0 *>(src), dst, n); return true;
        default: return false;
    }
}

float dot_f32(const float * a, const float * b, int64_t n) {
    int64_t i = 0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    float sum = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

void tile_qk_f32(const float * q, const float * k, int64_t k_stride, int64_t nt, int64_t n, float * out) {
    int64_t j = 0;
    if (n % 8 == 0) {
        for (; j + 8 <= nt; j += 8) {  // eight independent FMA chains, q loaded once per eight cells
            const float * k0 = k + j * k_stride;
            __m256 acc[8];
            for (int c = 0; c < 8; ++c) acc[c] = _mm256_setzero_ps();
            for (int64_t e = 0; e < n; e += 8) {
                const __m256 qv = _mm256_loadu_ps(q + e);
                for (int c = 0; c < 8; ++c) acc[c] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + c * k_stride + e), acc[c]);
            }
            for (int c = 0; c < 8; ++c) out[j + c] = hsum(acc[c]);
        }
    }
    for (; j < nt; ++j) out[j] = dot_f32(q, k + j * k_stride, n);
}

void tile_scores_finish(float * s, const float * mv, int64_t nt, float scale, float softcap, float slope) {
    int64_t j = 0;
    if (softcap == 0.0f) {
        const __m256 vs = _mm256_set1_ps(scale), vl = _mm256_set1_ps(slope), ninf = _mm256_set1_ps(-INFINITY);
        for (; j + 8 <= nt; j += 8) {
            const __m256 m = _mm256_loadu_ps(mv + j);
            const __m256 dead = _mm256_cmp_ps(m, ninf, _CMP_EQ_OQ);
            const __m256 x = _mm256_fmadd_ps(vl, m, _mm256_mul_ps(_mm256_loadu_ps(s + j), vs));
            _mm256_storeu_ps(s + j, _mm256_blendv_ps(x, ninf, dead));
        }
    }
    scores_finish_tail(s, mv, j, nt, scale, softcap, slope);
}

float tile_max(const float * s, int64_t nt) {
    float mt = -INFINITY;
    int64_t j0 = 0;
    if (nt >= 8) {  // scores are never NaN here (finished scores are finite or -INF), so max_ps is exact
        __m256 mx = _mm256_loadu_ps(s);
        for (j0 = 8; j0 + 8 <= nt; j0 += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j0));
        mt = hmax(mx);
    }
    for (int64_t j = j0; j < nt; ++j) mt = s[j] > mt ? s[j] : mt;
    return mt;
}

float tile_exp_sum(float * s, int64_t nt, float mn) {
    int64_t j = 0;
    __m256 acc = _mm256_setzero_ps();
    for (; j + 8 <= nt; j += 8) {
        const __m256 p = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(mn)));
        _mm256_storeu_ps(s + j, p);
        acc = _mm256_add_ps(acc, p);
    }
    return hsum(acc) + softmax_exp_tail(s, j, nt, mn);
}

void tile_pv_f32(float * acc, const float * p, const float * v, int64_t v_stride, int64_t nt, int64_t n) {
    int64_t e0 = 0;
    for (; e0 + 64 <= n; e0 += 64) {  // eight accumulators in registers across the tile
        __m256 a[8];
        for (int c = 0; c < 8; ++c) a[c] = _mm256_loadu_ps(acc + e0 + 8 * c);
        for (int64_t j = 0; j < nt; ++j) {
            if (p[j] == 0.0f) continue;
            const __m256 w = _mm256_broadcast_ss(p + j);
            const float * vj = v + j * v_stride + e0;
            for (int c = 0; c < 8; ++c) a[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 8 * c), a[c]);
        }
        for (int c = 0; c < 8; ++c) _mm256_storeu_ps(acc + e0 + 8 * c, a[c]);
    }
    for (; e0 + 8 <= n; e0 += 8) {
        __m256 a0 = _mm256_loadu_ps(acc + e0);
        for (int64_t j = 0; j < nt; ++j) {
            if (p[j] != 0.0f) a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(p + j), _mm256_loadu_ps(v + j * v_stride + e0), a0);
        }
        _mm256_storeu_ps(acc + e0, a0);
    }
    pv_tail(acc, p, v, v_stride, nt, e0, n);
}

}  // namespace kvsim::cpu::avx2

KVSIM_TARGET_END

#endif  // KVSIM_X86
