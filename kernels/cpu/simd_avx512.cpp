// AVX-512 bodies of the CPU vector helpers (simd.h), compiled for AVX-512 whatever the build's -march inside a
// target region (isa_target.h) after every include (see fa_group_avx512.cpp); simd.cpp calls them only when
// cpu_isa_supported(cpu_isa::avx512).
#include "cpu/simd_isa.h"

#if KVSIM_X86  // other architectures take the scalar loops (cpu_isa.h)

#include <immintrin.h>

#include "quant.h"

// GCC 12 flags the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics (GCC bug 105593).
#if !defined(__clang__)  // GCC's warnings; clang does not know them
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
KVSIM_TARGET_BEGIN("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")

namespace kvsim::cpu::avx512 {

namespace {
void f16_to_f32(const fp16_t * s, float * d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *) (s + i))));
    for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}

void q8_0_to_f32(const block_q8_0 * b, float * d, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const __m512 sc = _mm512_set1_ps(_cvtsh_ss(b[i].d));
        const __m128i lo = _mm_loadu_si128((const __m128i *) b[i].qs);
        const __m128i hi = _mm_loadu_si128((const __m128i *) (b[i].qs + 16));
        _mm512_storeu_ps(d + i * 32, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), sc));
        _mm512_storeu_ps(d + i * 32 + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), sc));
    }
}

void q4_0_to_f32(const block_q4_0 * b, float * d, int64_t n) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512i eight = _mm512_set1_epi32(8);
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const __m512 sc = _mm512_set1_ps(_cvtsh_ss(b[i].d));
        const __m128i q = _mm_loadu_si128((const __m128i *) b[i].qs);
        const __m128i lo = _mm_and_si128(q, m4);
        const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
        const __m512i l32 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(lo), eight);
        const __m512i h32 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(hi), eight);
        _mm512_storeu_ps(d + i * 32, _mm512_mul_ps(_mm512_cvtepi32_ps(l32), sc));
        _mm512_storeu_ps(d + i * 32 + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(h32), sc));
    }
}

// exp(x) for 16 floats: 2^n * p(r), r = x - n*ln2 in [-ln2/2, ln2/2], degree-6 Taylor/minimax polynomial
// (relative error < 2e-7); x < -87.3 gives 0 so exp(-INF) = 0.
__m512 exp16(__m512 x) {
    const __m512 lo = _mm512_set1_ps(-87.3f), hi = _mm512_set1_ps(88.3f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps((__mmask16) ~under, _mm512_scalef_ps(p, n));
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
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

void tile_qk_f32(const float * q, const float * k, int64_t k_stride, int64_t nt, int64_t n, float * out) {
    int64_t j = 0;
    if (n % 16 == 0) {
        for (; j + 8 <= nt; j += 8) {  // eight independent FMA chains (2 FMAs/cycle), q loaded once per eight cells
            const float * k0 = k + j * k_stride;
            __m512 acc[8];
            for (int c = 0; c < 8; ++c) acc[c] = _mm512_setzero_ps();
            for (int64_t e = 0; e < n; e += 16) {
                const __m512 qv = _mm512_loadu_ps(q + e);
                for (int c = 0; c < 8; ++c) acc[c] = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + c * k_stride + e), acc[c]);
            }
            for (int c = 0; c < 8; ++c) out[j + c] = _mm512_reduce_add_ps(acc[c]);
        }
    }
    for (; j < nt; ++j) out[j] = dot_f32(q, k + j * k_stride, n);
}

void tile_scores_finish(float * s, const float * mv, int64_t nt, float scale, float softcap, float slope) {
    int64_t j = 0;
    if (softcap == 0.0f) {
        const __m512 vs = _mm512_set1_ps(scale), vl = _mm512_set1_ps(slope), ninf = _mm512_set1_ps(-INFINITY);
        for (; j + 16 <= nt; j += 16) {
            const __m512 m = _mm512_loadu_ps(mv + j);
            const __mmask16 dead = _mm512_cmp_ps_mask(m, ninf, _CMP_EQ_OQ);
            const __m512 x = _mm512_fmadd_ps(vl, m, _mm512_mul_ps(_mm512_loadu_ps(s + j), vs));
            _mm512_storeu_ps(s + j, _mm512_mask_mov_ps(x, dead, ninf));
        }
    }
    scores_finish_tail(s, mv, j, nt, scale, softcap, slope);
}

float tile_max(const float * s, int64_t nt) {
    float mt = -INFINITY;
    int64_t j0 = 0;
    if (nt >= 16) {  // scores are never NaN here (finished scores are finite or -INF), so max_ps is exact
        __m512 mx = _mm512_loadu_ps(s);
        for (j0 = 16; j0 + 16 <= nt; j0 += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j0));
        mt = _mm512_reduce_max_ps(mx);
    }
    for (int64_t j = j0; j < nt; ++j) mt = s[j] > mt ? s[j] : mt;
    return mt;
}

float tile_exp_sum(float * s, int64_t nt, float mn) {
    int64_t j = 0;
    __m512 acc = _mm512_setzero_ps();
    for (; j + 16 <= nt; j += 16) {
        const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), _mm512_set1_ps(mn)));
        _mm512_storeu_ps(s + j, p);
        acc = _mm512_add_ps(acc, p);
    }
    return _mm512_reduce_add_ps(acc) + softmax_exp_tail(s, j, nt, mn);
}

void tile_pv_f32(float * acc, const float * p, const float * v, int64_t v_stride, int64_t nt, int64_t n) {
    int64_t e0 = 0;
    for (; e0 + 128 <= n; e0 += 128) {  // eight accumulators in registers across the tile
        __m512 a[8];
        for (int c = 0; c < 8; ++c) a[c] = _mm512_loadu_ps(acc + e0 + 16 * c);
        for (int64_t j = 0; j < nt; ++j) {
            if (p[j] == 0.0f) continue;
            const __m512 w = _mm512_set1_ps(p[j]);
            const float * vj = v + j * v_stride + e0;
            for (int c = 0; c < 8; ++c) a[c] = _mm512_fmadd_ps(w, _mm512_loadu_ps(vj + 16 * c), a[c]);
        }
        for (int c = 0; c < 8; ++c) _mm512_storeu_ps(acc + e0 + 16 * c, a[c]);
    }
    for (; e0 + 16 <= n; e0 += 16) {
        __m512 a0 = _mm512_loadu_ps(acc + e0);
        for (int64_t j = 0; j < nt; ++j) {
            if (p[j] != 0.0f) a0 = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), _mm512_loadu_ps(v + j * v_stride + e0), a0);
        }
        _mm512_storeu_ps(acc + e0, a0);
    }
    pv_tail(acc, p, v, v_stride, nt, e0, n);
}

}  // namespace kvsim::cpu::avx512

KVSIM_TARGET_END

#endif  // KVSIM_X86
