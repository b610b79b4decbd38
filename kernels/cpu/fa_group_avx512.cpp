// The AVX-512 inner loops of the grouped CPU flash attention (fa_group.h), compiled for AVX-512 whatever the
// build's -march (a target region (isa_target.h) after every include, so no inline function of a header is
// instantiated with AVX-512 and then picked by the linker for code that runs on other CPUs); fa_group.cpp calls
// them only when cpu_isa_supported(cpu_isa::avx512).
#include "cpu/fa_group_isa.h"

#if KVSIM_X86  // other architectures take the scalar loops (cpu_isa.h)

#include <algorithm>  // fa_group_loops.h, included inside the target region below
#include <type_traits>
#include <utility>

#include <immintrin.h>

#include "cpu/fa_group.h"
#include "quant.h"

// GCC 12 flags the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics (GCC bug 105593).
#if !defined(__clang__)  // GCC's warnings; clang does not know them
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
KVSIM_TARGET_BEGIN("avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")

#include "cpu/fa_group_loops.h"

namespace kvsim::cpu::avx512 {

namespace {

// Elements e..e+15 of one head row as f32; e % 16 == 0 (so a 16-run never straddles a 32-block).
template <ggml_type T> inline __m512 load16(const char * row, int64_t e);

template <> inline __m512 load16<ggml_type::f32>(const char * row, int64_t e) {
    return _mm512_loadu_ps(reinterpret_cast<const float *>(row) + e);
}

template <> inline __m512 load16<ggml_type::f16>(const char * row, int64_t e) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + e * 2)));
}

template <> inline __m512 load16<ggml_type::q8_0>(const char * row, int64_t e) {
    const block_q8_0 * b = reinterpret_cast<const block_q8_0 *>(row) + e / QK8_0;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs + e % QK8_0));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(_cvtsh_ss(b->d)));
}

template <> inline __m512 load16<ggml_type::q4_0>(const char * row, int64_t e) {
    // ggml q4_0: element i of a block is the low nibble of qs[i] (i < 16) or the high nibble of qs[i - 16]
    const block_q4_0 * b = reinterpret_cast<const block_q4_0 *>(row) + e / QK4_0;
    __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs));
    if (e % QK4_0) q = _mm_srli_epi16(q, 4);
    q = _mm_and_si128(q, _mm_set1_epi8(0x0f));
    const __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(_cvtsh_ss(b->d)));
}

// Elements e..e+63 of one head row as four f32 vectors; e % 64 == 0. Quantized types convert each block's scale
// once for its two vectors.
template <ggml_type T> inline void load64(const char * row, int64_t e, __m512 * v) {
    for (int c = 0; c < 4; ++c) v[c] = load16<T>(row, e + 16 * c);
}

template <> inline void load64<ggml_type::q8_0>(const char * row, int64_t e, __m512 * v) {
    const block_q8_0 * b = reinterpret_cast<const block_q8_0 *>(row) + e / QK8_0;
    for (int i = 0; i < 2; ++i) {
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b[i].qs));
        v[2 * i] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))), d);
        v[2 * i + 1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))), d);
    }
}

// Horizontal sums of 16 vectors at once (a 4-level add tree instead of 16 reductions):
// lane 4*a + b of the result is the sum of v[4*b + a]. The levels are template arguments and the loops fixed
// counts, so the tree compiles to straight-line code in registers (with the level a run-time value, GCC 12 kept
// it a loop that spilled the 16 sums to the stack on every 4x4 block).
template <int level>
__attribute__((always_inline)) inline __m512 add_pairs(__m512 a, __m512 b) {
    if constexpr (level == 0) return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    if constexpr (level == 1) return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
}

template <int level, int n>
__attribute__((always_inline)) inline void add_level(__m512 * v) {
#pragma GCC unroll 8
    for (int i = 0; i < n / 2; ++i) v[i] = add_pairs<level>(v[2 * i], v[2 * i + 1]);
}

__attribute__((always_inline)) inline __m512 reduce16(__m512 * v) {
    add_level<0, 16>(v);
    add_level<1, 8>(v);
    add_level<2, 4>(v);
    add_level<3, 2>(v);
    return v[0];
}

// Row r of a 4x4 score block sits in lanes 4r..4r+3 (reduce16): rows r < n_valid, cells c < n_cells of out.
inline void store_scores(__m512 s, float * out, int64_t ld, int64_t n_valid, int64_t n_cells) {
    if (n_cells == 4) {
        if (n_valid > 0) _mm_storeu_ps(out + 0 * ld, _mm512_extractf32x4_ps(s, 0));
        if (n_valid > 1) _mm_storeu_ps(out + 1 * ld, _mm512_extractf32x4_ps(s, 1));
        if (n_valid > 2) _mm_storeu_ps(out + 2 * ld, _mm512_extractf32x4_ps(s, 2));
        if (n_valid > 3) _mm_storeu_ps(out + 3 * ld, _mm512_extractf32x4_ps(s, 3));
        return;
    }
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, s);
    fa_loops::store_lanes<4, 1>(lanes, out, ld, n_valid, n_cells);
}

// 4 query rows x 4 cells: acc[c*4 + r] accumulates q[r] . K_c, so reduce16 puts row r's four scores in lanes 4r..4r+3.
// Inlined, with the prefetch credit and the K row pointers in locals: through the caller's references they went to
// memory and back on every step (measured: about 8 % of the 2-thread decode rate from memory).
template <ggml_type T>
__attribute__((always_inline)) inline __m512 qk_4x4(const float * const * q, const char * const * k, int64_t dk,
                                                    prefetch_stream & pf_out) {
    prefetch_stream pf = pf_out;
    const char * const kp[4] = {k[0], k[1], k[2], k[3]};
    __m512 acc[16];
    for (auto & a : acc) a = _mm512_setzero_ps();
    const float * q0p = q[0], * q1p = q[1], * q2p = q[2], * q3p = q[3];
    for (int64_t e = 0; e < dk; e += 16) {
        pf.step();
        __m512 q0 = _mm512_loadu_ps(q0p + e), q1 = _mm512_loadu_ps(q1p + e);
        __m512 q2 = _mm512_loadu_ps(q2p + e), q3 = _mm512_loadu_ps(q3p + e);
        // Q in registers: without this GCC 12 folds each Q load into its four FMAs (16 loads instead of 4 per
        // step, more than the two vector loads a cycle the core has left next to the K loads)
        __asm__("" : "+v"(q0), "+v"(q1), "+v"(q2), "+v"(q3));
        for (int c = 0; c < 4; ++c) {
            const __m512 kv = load16<T>(kp[c], e);
            acc[c * 4 + 0] = _mm512_fmadd_ps(q0, kv, acc[c * 4 + 0]);
            acc[c * 4 + 1] = _mm512_fmadd_ps(q1, kv, acc[c * 4 + 1]);
            acc[c * 4 + 2] = _mm512_fmadd_ps(q2, kv, acc[c * 4 + 2]);
            acc[c * 4 + 3] = _mm512_fmadd_ps(q3, kv, acc[c * 4 + 3]);
        }
    }
    pf_out = pf;
    return reduce16(acc);
}

// 4 accumulator rows x 64 V elements (16 of the 32 registers) across the tile; each V vector is loaded and
// converted once for the four rows. GCC 12 keeps this a[4][4] in registers (unlike the AVX2 loops' a[4][2],
// fa_group_avx2.cpp); the prefetch credit had gone through memory every cell until for_each_cell's local copy.
template <ggml_type T, bool Listed>
void pv_4x64(float * const * acc, const float * const * p, int64_t n_valid, const char * v0, size_t stride, int64_t nt,
             int64_t e0, const char * live, const int32_t * cells, prefetch_stream & pf) {
    __m512 a[4][4];
    for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 4; ++c) a[r][c] = r < n_valid ? _mm512_loadu_ps(acc[r] + e0 + 16 * c) : _mm512_setzero_ps();
    const float * p0 = p[0], * p1 = p[1], * p2 = p[2], * p3 = p[3];
    fa_loops::for_each_cell<Listed>(v0, stride, nt, live, cells, pf, [&](int64_t j, const char * row) {
        __m512 v[4];
        load64<T>(row, e0, v);
        const __m512 w0 = _mm512_set1_ps(p0[j]), w1 = _mm512_set1_ps(p1[j]);
        const __m512 w2 = _mm512_set1_ps(p2[j]), w3 = _mm512_set1_ps(p3[j]);
        for (int c = 0; c < 4; ++c) {
            a[0][c] = _mm512_fmadd_ps(w0, v[c], a[0][c]);
            a[1][c] = _mm512_fmadd_ps(w1, v[c], a[1][c]);
            a[2][c] = _mm512_fmadd_ps(w2, v[c], a[2][c]);
            a[3][c] = _mm512_fmadd_ps(w3, v[c], a[3][c]);
        }
    });
    for (int r = 0; r < n_valid; ++r)
        for (int c = 0; c < 4; ++c) _mm512_storeu_ps(acc[r] + e0 + 16 * c, a[r][c]);
}

template <ggml_type T, bool Listed>
void pv_4x16(float * const * acc, const float * const * p, int64_t n_valid, const char * v0, size_t stride, int64_t nt,
             int64_t e0, const char * live, const int32_t * cells, prefetch_stream & pf) {
    __m512 a[4];
    for (int r = 0; r < 4; ++r) a[r] = r < n_valid ? _mm512_loadu_ps(acc[r] + e0) : _mm512_setzero_ps();
    fa_loops::for_each_cell<Listed>(v0, stride, nt, live, cells, pf, [&](int64_t j, const char * row) {
        const __m512 v = load16<T>(row, e0);
        for (int r = 0; r < 4; ++r) a[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r][j]), v, a[r]);
    });
    for (int r = 0; r < n_valid; ++r) _mm512_storeu_ps(acc[r] + e0, a[r]);
}

// The traits of fa_group_loops.h: 4 rows x 4 cells (Q.K), 4 rows x 64 elements (P.V; 16 for a head's rest).
struct isa {
    static constexpr int qk_cells = 4;
    static constexpr int64_t pv_wide = 64;

    // f32 FMAs for every K type (a q8_0 K's integer Q.K runs on AMX where the build has it, fa_amx.h)
    template <ggml_type T>
    static void qk_block(const float * const * q, const block_q8_0 * const *, const char * const * k, int64_t dk,
                         prefetch_stream & pf, float * out, int64_t ld, int64_t n_valid, int64_t n_cells) {
        store_scores(qk_4x4<T>(q, k, dk, pf), out, ld, n_valid, n_cells);
    }

    template <ggml_type T, bool Listed, int W>
    static void pv_cols(float * const * acc, const float * const * p, int64_t n_valid, const char * v0, size_t stride,
                        int64_t nt, int64_t e0, const char * live, const int32_t * cells, prefetch_stream & pf) {
        if constexpr (W == 64) {
            pv_4x64<T, Listed>(acc, p, n_valid, v0, stride, nt, e0, live, cells, pf);
        } else {
            static_assert(W == 16);
            pv_4x16<T, Listed>(acc, p, n_valid, v0, stride, nt, e0, live, cells, pf);
        }
    }
};

}  // namespace

void fa_qk(ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride, int64_t nt,
           int64_t head_dim_k, float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells,
           const block_q8_0 * const * qq) {
    fa_loops::fa_qk<isa>(tk, q, n_rows, k0, stride, nt, head_dim_k, scores, ld, pf, cells, qq);
}

void fa_pv(ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0,
           size_t stride, int64_t nt, int64_t head_dim_v, const char * live, prefetch_stream & pf, const int32_t * cells) {
    fa_loops::fa_pv<isa>(tv, acc, p, ld, n_rows, v0, stride, nt, head_dim_v, live, pf, cells);
}

}  // namespace kvsim::cpu::avx512

KVSIM_TARGET_END

#endif  // KVSIM_X86
