// The AVX2 + FMA + F16C body of the CPU K-shift (cpu_k_shift.cpp): one cell's K row dequantized, un-rotated,
// RoPE'd, rotated and quantized back in 8-lane vectors. Same arithmetic as the portable path: the Walsh-Hadamard
// butterflies in the same stage order as hadamard.cpp fwht (bit-identical), q4_0 rounding and f16 conversion as
// quant.cpp (bit-identical), q8_0 rounding as llama.cpp's x86 CPU backend (quantize_q8_0 below); RoPE fused as llama.cpp's prebuilt CPU backend computes it (rope_norm8, rope_neox8:
// bit-identical to ggml_rope_ext, tests/test_rope.cpp's recording), which rope.cpp's portable loops match only
// where the compiler fused the same multiply-adds.
// Compiled for AVX2 whatever the build's -march (a target region (isa_target.h) after every include, see fa_group_avx512.cpp).
#include "cpu/kshift_isa.h"

#if KVSIM_X86  // other architectures take the scalar loops (cpu_isa.h)

#include <cmath>
#include <type_traits>

#include <immintrin.h>

#include "quant.h"

// ggml rounds x*id and x*id + 8.5f separately (quant.cpp); a fused multiply-add would change some quants.
KVSIM_FP_CONTRACT_OFF
KVSIM_TARGET_BEGIN("avx2,fma,f16c")

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

// rope_rotate for GGML_ROPE_TYPE_NORMAL on one 8-lane vector of pairs (2i, 2i+1): even lanes x0*c - x1*s, odd
// lanes x0*s + x1*c, with c and s each pair's cos and sin twice (kshift_tables). Fused as ggml's rotate_pairs is
// compiled for FMA targets (GCC: the first product of each line fused, the second rounded; rope_neox8 likewise), so
// the result is llama.cpp's bit for bit: fma(x0, c, -x1*s) and fma(x0, s, x1*c). One fmaddsub, fma(x1, c, x0*s) in
// the odd lanes, differed from it in about one value in 30,000.
inline __m256 rope_norm8(__m256 v, const float * c, const float * s) {
    const __m256 vc = _mm256_loadu_ps(c), vs = _mm256_loadu_ps(s), sw = _mm256_permute_ps(v, 0xB1);
    const __m256 even = _mm256_fmsub_ps(v, vc, _mm256_mul_ps(sw, vs));
    const __m256 odd = _mm256_fmadd_ps(sw, vs, _mm256_mul_ps(v, vc));
    return _mm256_blend_ps(even, odd, 0xAA);
}

// rope_rotate for GGML_ROPE_TYPE_NEOX on 8 pairs (x0[i], x1[i]) = (i, i + n_rot/2).
inline void rope_neox8(__m256 & x0, __m256 & x1, const float * c, const float * s) {
    const __m256 vc = _mm256_loadu_ps(c), vs = _mm256_loadu_ps(s);
    const __m256 a = x0, b = x1;
    x0 = _mm256_fmsub_ps(a, vc, _mm256_mul_ps(b, vs));
    x1 = _mm256_fmadd_ps(a, vs, _mm256_mul_ps(b, vc));
}

// RoPE of one head in place, 8 elements at a time: load converts to f32, store back; elements past n_rot are
// not touched. One loop for the f32 and f16 rows (f16 -> f32 is exact, so an f16 head gets the same values as
// through an f32 row).
template <typename E, typename Load, typename Store>
void rope_head(const rope_params & p, const float * tab, E * x, Load load, Store store) {
    const int n_rot = p.n_rot, half = n_rot / 2;
    if (p.mode == rope_mode::neox) {
        for (int i = 0; i < half; i += 8) {
            __m256 x0 = load(x + i), x1 = load(x + i + half);
            rope_neox8(x0, x1, tab + i, tab + half + i);
            store(x + i, x0);
            store(x + i + half, x1);
        }
        return;
    }
    for (int i = 0; i < n_rot; i += 8) store(x + i, rope_norm8(load(x + i), tab + i, tab + n_rot + i));
}

inline __m256 ld16(const fp16_t * h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *) h)); }
inline void st16(fp16_t * h, __m256 v) { _mm_storeu_si128((__m128i *) h, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT)); }

// RoPE of one f32 head in place.
void rope_f32(const rope_params & p, const float * tab, float * x) {
    rope_head(p, tab, x, [](const float * v) { return _mm256_loadu_ps(v); },
              [](float * v, __m256 r) { _mm256_storeu_ps(v, r); });
}

// RoPE of one f16 head in place, memory to memory (each 8 elements converted, rotated and converted back).
void rope_f16(const rope_params & p, const float * tab, fp16_t * h) { rope_head(p, tab, h, ld16, st16); }

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

// ggml-cpu/arch/x86/quants.c quantize_row_q8_0, what llama.cpp's CPU backend runs on every x86 build when the K-shift
// graph copies the shifted K back into a q8_0 cache: d = amax / 127, id = 127 / amax (not 1 / d) and round half to
// even (_mm256_round_ps, not ggml's reference roundf). The reference rule (quant.cpp, the portable loops) differed
// in about one value in 400,000 of a 64K-cell Llama-3-8B K (tests/tools/kshift_vs_ggml.cpp).
void quantize_q8_0(const float * x, block_q8_0 * y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float * xb = x + i * QK8_0;
        const float amax = block_amax(xb);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = (fp16_t) _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int c = 0; c < 4; ++c) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xb + 8 * c), vid);
            q[c] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT));
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

// The 32 elements of one q8_0 / q4_0 block as 4 vectors (simd_avx2.cpp q8_0_to_f32 / q4_0_to_f32 arithmetic).
inline void dequant_block(const block_q8_0 & b, __m256 * v) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
    for (int c = 0; c < 4; ++c) {
        const __m128i q = _mm_loadl_epi64((const __m128i *) (b.qs + 8 * c));
        v[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    }
}

inline void dequant_block(const block_q4_0 & b, __m256 * v) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b.d));
    const __m128i m4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
    const __m128i q = _mm_loadu_si128((const __m128i *) b.qs);
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, m4), eight);
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), m4), eight);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int c = 0; c < 4; ++c) v[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[c])), d);
}

inline void bfly(__m256 & a, __m256 & b) {
    const __m256 t = a;
    a = _mm256_add_ps(t, b);
    b = _mm256_sub_ps(t, b);
}

// The fwht stages h = 8 and 16 of 4 vectors holding 32 consecutive elements.
inline void stages_8_16(__m256 * v) {
    bfly(v[0], v[1]);
    bfly(v[2], v[3]);
    bfly(v[0], v[2]);
    bfly(v[1], v[3]);
}

// The fwht stages h = 32 and 64 of vectors j, j+4, j+8, j+12 of a 128-element head (a, b, c, d).
inline void stages_32_64(__m256 & a, __m256 & b, __m256 & c, __m256 & d) {
    bfly(a, b);
    bfly(c, d);
    bfly(a, c);
    bfly(b, d);
}

// One q8_0 / q4_0 head of 128 elements with a 128-point rotation and RoPE of all 128 dims: un-rotate (fwht), RoPE,
// rotate (fwht), requantize, in five passes over x (128 floats, L1) instead of whole-row passes. 16 vectors would
// fill AVX2's 16 registers, so each pass keeps 4 in registers through every butterfly stage they close (radix 4):
//   1. per 32-element block: dequantize, scale, the first fwht's h = 1 .. 16;
//   2. per vectors j, j+4, j+8, j+12: its h = 32, 64; RoPE; the second fwht's scale and h = 1 .. 4;
//   3. per block: the second fwht's h = 8, 16;  4. per j, j+4, j+8, j+12: its h = 32, 64;  5. quantize.
// Every butterfly, scale and rounding is the per-row path's (fwht_fixed, rope_*, quantize_*) in the same order: the
// same bits. (Tried: the second fwht's stages reordered to need three passes, quantizing from registers: no
// measurable change, 0.98-0.99 us per cell either way, so the bit-identical order stays.)
template <typename Block>
void head128_rotated(const rope_params & p, const float * tab, Block * blk, __m256 s, float * x) {
    for (int b = 0; b < 4; ++b) {  // 1.
        __m256 v[4];
        dequant_block(blk[b], v);
        for (auto & e : v) e = fwht_in_vector(_mm256_mul_ps(e, s));
        stages_8_16(v);
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(x + 32 * b + 8 * c, v[c]);
    }
    for (int j = 0; j < 4; ++j) {  // 2.
        float * px[4] = {x + 8 * j, x + 8 * j + 32, x + 8 * j + 64, x + 8 * j + 96};
        __m256 v[4];
        for (int c = 0; c < 4; ++c) v[c] = _mm256_loadu_ps(px[c]);
        stages_32_64(v[0], v[1], v[2], v[3]);
        if (p.mode == rope_mode::neox) {  // pairs (i, i + 64): vectors j and j+8, j+4 and j+12
            rope_neox8(v[0], v[2], tab + 8 * j, tab + 64 + 8 * j);
            rope_neox8(v[1], v[3], tab + 8 * j + 32, tab + 64 + 8 * j + 32);
        } else {
            for (int c = 0; c < 4; ++c) v[c] = rope_norm8(v[c], tab + (px[c] - x), tab + 128 + (px[c] - x));
        }
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(px[c], fwht_in_vector(_mm256_mul_ps(v[c], s)));
    }
    for (int b = 0; b < 4; ++b) {  // 3.
        __m256 v[4];
        for (int c = 0; c < 4; ++c) v[c] = _mm256_loadu_ps(x + 32 * b + 8 * c);
        stages_8_16(v);
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(x + 32 * b + 8 * c, v[c]);
    }
    for (int j = 0; j < 4; ++j) {  // 4.
        float * px[4] = {x + 8 * j, x + 8 * j + 32, x + 8 * j + 64, x + 8 * j + 96};
        __m256 v[4];
        for (int c = 0; c < 4; ++c) v[c] = _mm256_loadu_ps(px[c]);
        stages_32_64(v[0], v[1], v[2], v[3]);
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(px[c], v[c]);
    }
    if constexpr (std::is_same_v<Block, block_q8_0>) {  // 5.
        quantize_q8_0(x, blk, 128);
    } else {
        quantize_q4_0(x, blk, 128);
    }
}

}  // namespace

void kshift_tables(const rope_params & p, const float * cache, float * tab) {
    const int n_rot = p.n_rot, half = n_rot / 2;
    for (int i = 0; i < half; ++i) {
        if (p.mode == rope_mode::neox) {
            tab[i] = cache[2 * i];
            tab[half + i] = cache[2 * i + 1];
        } else {
            tab[2 * i] = tab[2 * i + 1] = cache[2 * i];
            tab[n_rot + 2 * i] = tab[n_rot + 2 * i + 1] = cache[2 * i + 1];
        }
    }
}

void kshift_row(ggml_type t, void * row, int64_t n_head, int64_t head_dim, const rope_params & p, const float * tab,
                int rot_n, float * x) {
    const int64_t n = n_head * head_dim;
    if (rot_n == 0 && t == ggml_type::f16) {
        for (int64_t h = 0; h < n_head; ++h) rope_f16(p, tab, static_cast<fp16_t *>(row) + h * head_dim);
        return;
    }
    if (rot_n == 0 && t == ggml_type::f32) {
        for (int64_t h = 0; h < n_head; ++h) rope_f32(p, tab, static_cast<float *>(row) + h * head_dim);
        return;
    }
    if (head_dim == 128 && rot_n == 128 && p.n_rot == 128) {
        const __m256 s = _mm256_set1_ps(1.0f / std::sqrt(128.0f));  // as hadamard.cpp fwht
        if (t == ggml_type::q8_0) {
            for (int64_t h = 0; h < n_head; ++h) head128_rotated(p, tab, static_cast<block_q8_0 *>(row) + 4 * h, s, x);
            return;
        }
        if (t == ggml_type::q4_0) {
            for (int64_t h = 0; h < n_head; ++h) head128_rotated(p, tab, static_cast<block_q4_0 *>(row) + 4 * h, s, x);
            return;
        }
    }
    float * v = t == ggml_type::f32 ? static_cast<float *>(row) : x;
    if (t != ggml_type::f32) load_row(t, row, v, n);
    const float scale = rot_n > 0 ? 1.0f / std::sqrt((float) rot_n) : 1.0f;  // as hadamard.cpp fwht
    for (int64_t i = 0; rot_n > 0 && i < n; i += rot_n) fwht(v + i, rot_n, scale);
    for (int64_t h = 0; h < n_head; ++h) rope_f32(p, tab, v + h * head_dim);
    for (int64_t i = 0; rot_n > 0 && i < n; i += rot_n) fwht(v + i, rot_n, scale);
    if (t != ggml_type::f32) store_row(t, v, row, n);
}

}  // namespace kvsim::cpu::avx2

KVSIM_TARGET_END
#endif  // KVSIM_X86
