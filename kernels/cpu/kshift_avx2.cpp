// The AVX2 + FMA + F16C body of the CPU K-shift (cpu_k_shift.cpp): one cell's K row dequantized, un-rotated,
// RoPE'd, rotated and quantized back in 8-lane vectors. Same arithmetic as the portable path: the Walsh-Hadamard
// butterflies in the same stage order as hadamard.cpp fwht (bit-identical), q8_0/q4_0 rounding and f16 conversion
// as quant.cpp (bit-identical); RoPE differs from rope.cpp rope_rotate only where the compiler fused a multiply-add.
// Compiled for AVX2 whatever the build's -march (`#pragma GCC target` after every include, see fa_group_avx512.cpp).
#include "cpu/kshift_isa.h"

#if KVSIM_X86  // other architectures take the scalar loops (cpu_isa.h)

#include <cmath>

#include <immintrin.h>

#include "quant.h"

// ggml rounds x*id and x*id + 8.5f separately (quant.cpp); a fused multiply-add would change some quants.
#pragma GCC optimize("fp-contract=off")
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace kvsim::cpu::avx2 {

namespace {

// Butterflies at distance 1, 2 and 4 inside one 8-lane vector, in that order: lane i becomes x[i] + x[i^h] (lower
// of the pair) or x[i^h] - x[i] (upper), computed as fma(x, +-1, swapped), exact like the add or subtract itself.
inline __m256 fwht_in_vector(__m256 v) {
    v = _mm256_fmadd_ps(v, _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1), _mm256_permute_ps(v, 0xB1));
    v = _mm256_fmadd_ps(v, _mm256_setr_ps(1, 1, -1, -1, 1, 1, -1, -1), _mm256_permute_ps(v, 0x4E));
    return _mm256_fmadd_ps(v, _mm256_setr_ps(1, 1, 1, 1, -1, -1, -1, -1), _mm256_permute2f128_ps(v, v, 0x01));
}

// fwht of n floats (a power of two, >= 8) in place: scale first, then butterflies h = 1, 2, 4 inside each vector
// and h = 8 .. n/2 across vectors, the order of hadamard.cpp fwht. N = 128 (Llama heads): the 16 vectors stay in
// registers through all stages.
template <int N>
void fwht_fixed(float * x, __m256 s) {
    __m256 v[N / 8];
    for (int i = 0; i < N / 8; ++i) v[i] = fwht_in_vector(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), s));
    for (int h = 1; h < N / 8; h *= 2) {
        for (int i = 0; i < N / 8; i += 2 * h) {
            for (int j = i; j < i + h; ++j) {
                const __m256 a = v[j], b = v[j + h];
                v[j] = _mm256_add_ps(a, b);
                v[j + h] = _mm256_sub_ps(a, b);
            }
        }
    }
    for (int i = 0; i < N / 8; ++i) _mm256_storeu_ps(x + 8 * i, v[i]);
}

void fwht(float * x, int n, float scale) {
    const __m256 s = _mm256_set1_ps(scale);
    if (n == 128) return fwht_fixed<128>(x, s);
    if (n == 64) return fwht_fixed<64>(x, s);
    for (int i = 0; i < n; i += 8) _mm256_storeu_ps(x + i, fwht_in_vector(_mm256_mul_ps(_mm256_loadu_ps(x + i), s)));
    for (int h = 8; h < n; h *= 2) {
        for (int i = 0; i < n; i += 2 * h) {
            for (int j = i; j < i + h; j += 8) {
                const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
                _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
                _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
            }
        }
    }
}

// rope_rotate for GGML_ROPE_TYPE_NORMAL: pairs (2i, 2i+1), cache (cos, sin) interleaved the same way.
void rope_norm(const float * cache, int n_rot, float * x) {
    for (int i0 = 0; i0 < n_rot; i0 += 8) {
        const __m256 v = _mm256_loadu_ps(x + i0), cs = _mm256_loadu_ps(cache + i0);
        const __m256 c = _mm256_moveldup_ps(cs), s = _mm256_movehdup_ps(cs);
        const __m256 swapped = _mm256_permute_ps(v, 0xB1);
        // even lanes x0*c - x1*s, odd lanes x1*c + x0*s
        _mm256_storeu_ps(x + i0, _mm256_fmaddsub_ps(v, c, _mm256_mul_ps(swapped, s)));
    }
}

// rope_rotate for GGML_ROPE_TYPE_NEOX: pairs (i, i + n_rot/2), pair i's (cos, sin) at cache[2i].
void rope_neox(const float * cache, int n_rot, float * x) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i += 8) {
        const __m256 a = _mm256_loadu_ps(cache + 2 * i), b = _mm256_loadu_ps(cache + 2 * i + 8);
        // even (cos) and odd (sin) elements of a then b; shuffle_ps works per 128-bit half, permute4x64 reorders
        const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
        const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
        const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + half);
        _mm256_storeu_ps(x + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(x + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
    }
}

float hmax(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// max |x| of one 32-element block.
float block_amax(const float * x) {
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_and_ps(_mm256_loadu_ps(x), abs);
    for (int c = 1; c < 4; ++c) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + 8 * c), abs));
    return hmax(m);
}

// quant.cpp quantize_row_q8_0: d = amax / 127, qs = round_half_away(x * id).
void quantize_q8_0(const float * x, block_q8_0 * y, int64_t n) {
    const __m256 sign = _mm256_set1_ps(-0.0f), half = _mm256_set1_ps(0.49999997f);
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float * xb = x + i * QK8_0;
        const float d = block_amax(xb) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = (fp16_t) _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int c = 0; c < 4; ++c) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * c), vid);
            q[c] = _mm256_cvttps_epi32(_mm256_add_ps(v, _mm256_or_ps(_mm256_and_ps(v, sign), half)));
        }
        // packs work per 128-bit half: dwords come out as q0[0:4] q1[0:4] q2[0:4] q3[0:4] q0[4:8] ...
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *) y[i].qs, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

// quant.cpp quantize_row_q4_0: d = (the first element of largest |x|) / -8, q = min(15, (int) (x * id + 8.5f)).
void quantize_q4_0(const float * x, block_q4_0 * y, int64_t n) {
    const __m256 bias = _mm256_set1_ps(8.5f);
    const __m256i fifteen = _mm256_set1_epi32(15);
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const float * xb = x + i * QK4_0;
        const float amax = block_amax(xb);
        float max = 0.0f;  // the first element with |x| == amax, found 8 lanes at a time
        const __m256 va = _mm256_set1_ps(amax), abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        for (int c = 0; c < 4; ++c) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(xb + 8 * c), abs), va, _CMP_EQ_OQ));
            if (m != 0) {
                max = xb[8 * c + __builtin_ctz((unsigned) m)];
                break;
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = (fp16_t) _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int c = 0; c < 4; ++c) {
            const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(xb + 8 * c), vid), bias);
            q[c] = _mm256_min_epi32(_mm256_cvttps_epi32(v), fifteen);
        }
        // byte j = q(j) | q(j + 16) << 4: elements 0..15 in q[0..1], 16..31 in q[2..3]
        const __m256i lo = _mm256_or_si256(q[0], _mm256_slli_epi32(q[2], 4));
        const __m256i hi = _mm256_or_si256(q[1], _mm256_slli_epi32(q[3], 4));
        const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);  // 16 words in order
        _mm_storeu_si128((__m128i *) y[i].qs,
                         _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
    }
}

void load_row(ggml_type t, const void * src, float * x, int64_t n) {
    if (t == ggml_type::f16) {
        const fp16_t * h = static_cast<const fp16_t *>(src);
        for (int64_t i = 0; i < n; i += 8) _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) (h + i))));
        return;
    }
    avx2::row_to_f32(t, src, x, n);  // simd_avx2.cpp: q8_0 / q4_0 vector loops
}

void store_row(ggml_type t, const float * x, void * dst, int64_t n) {
    switch (t) {
        case ggml_type::f16: {
            fp16_t * h = static_cast<fp16_t *>(dst);
            for (int64_t i = 0; i < n; i += 8) {
                _mm_storeu_si128((__m128i *) (h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
            }
            return;
        }
        case ggml_type::q8_0: return quantize_q8_0(x, static_cast<block_q8_0 *>(dst), n);
        case ggml_type::q4_0: return quantize_q4_0(x, static_cast<block_q4_0 *>(dst), n);
        default: return;
    }
}

}  // namespace

void kshift_row(ggml_type t, void * row, int64_t n_head, int64_t head_dim, const rope_params & p, const float * cache,
                int rot_n, float * x) {
    const int64_t n = n_head * head_dim;
    float * v = t == ggml_type::f32 ? static_cast<float *>(row) : x;
    if (t != ggml_type::f32) load_row(t, row, v, n);
    const float scale = rot_n > 0 ? 1.0f / std::sqrt((float) rot_n) : 1.0f;  // as hadamard.cpp fwht
    for (int64_t i = 0; rot_n > 0 && i < n; i += rot_n) fwht(v + i, rot_n, scale);
    for (int64_t h = 0; h < n_head; ++h) {
        if (p.mode == rope_mode::neox) {
            rope_neox(cache, p.n_rot, v + h * head_dim);
        } else {
            rope_norm(cache, p.n_rot, v + h * head_dim);
        }
    }
    for (int64_t i = 0; rot_n > 0 && i < n; i += rot_n) fwht(v + i, rot_n, scale);
    if (t != ggml_type::f32) store_row(t, v, row, n);
}

}  // namespace kvsim::cpu::avx2

#pragma GCC pop_options
#endif  // KVSIM_X86
