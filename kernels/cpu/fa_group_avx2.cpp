// The AVX2 + FMA + F16C inner loops of the grouped CPU flash attention (fa_group.h): the same design as the
// AVX-512 loops (fa_group_avx512.cpp) on 8-lane vectors and 16 registers. Each K/V element is read from the
// cache once per block of 4 query rows and dequantized in registers (f16: F16C; q8_0/q4_0: widen, convert,
// times the block's scale), never copied to an f32 tile. Compiled for AVX2 whatever the build's -march, inside a
// target region (isa_target.h) after every include (see fa_group_avx512.cpp); called only when
// cpu_isa_supported(cpu_isa::avx2).
#include "cpu/fa_group_isa.h"

#if KVSIM_X86  // other architectures take the scalar loops (cpu_isa.h)

#include <algorithm>  // fa_group_loops.h, included inside the target region below
#include <type_traits>
#include <utility>

#include <immintrin.h>

#include "cpu/fa_group.h"
#include "quant.h"

KVSIM_TARGET_BEGIN("avx2,fma,f16c")

#include "cpu/fa_group_loops.h"

namespace kvsim::cpu::avx2 {

namespace {

// Elements e..e+15 of one head row as two f32 vectors; e % 16 == 0 (a 16-run never straddles a 32-block).
template <ggml_type T> inline void load16(const char * row, int64_t e, __m256 * v);

template <> inline void load16<ggml_type::f32>(const char * row, int64_t e, __m256 * v) {
    const float * x = reinterpret_cast<const float *>(row) + e;
    v[0] = _mm256_loadu_ps(x);
    v[1] = _mm256_loadu_ps(x + 8);
}

template <> inline void load16<ggml_type::f16>(const char * row, int64_t e, __m256 * v) {
    const __m128i * x = reinterpret_cast<const __m128i *>(row + e * 2);
    v[0] = _mm256_cvtph_ps(_mm_loadu_si128(x));
    v[1] = _mm256_cvtph_ps(_mm_loadu_si128(x + 1));
}

template <> inline void load16<ggml_type::q8_0>(const char * row, int64_t e, __m256 * v) {
    const block_q8_0 * b = reinterpret_cast<const block_q8_0 *>(row) + e / QK8_0;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs + e % QK8_0));
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
    v[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    v[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), d);
}

template <> inline void load16<ggml_type::q4_0>(const char * row, int64_t e, __m256 * v) {
    // ggml q4_0: element i of a block is the low nibble of qs[i] (i < 16) or the high nibble of qs[i - 16]
    const block_q4_0 * b = reinterpret_cast<const block_q4_0 *>(row) + e / QK4_0;
    __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs));
    if (e % QK4_0) q = _mm_srli_epi16(q, 4);
    q = _mm_sub_epi8(_mm_and_si128(q, _mm_set1_epi8(0x0f)), _mm_set1_epi8(8));  // -8..7 fits int8
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b->d));
    v[0] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
    v[1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), d);
}

// Horizontal sums of 8 vectors at once: lane i of the result is the sum of v[i]'s lanes.
inline __m256 reduce8(const __m256 * v) {
    const __m256 s01 = _mm256_hadd_ps(v[0], v[1]), s23 = _mm256_hadd_ps(v[2], v[3]);
    const __m256 s45 = _mm256_hadd_ps(v[4], v[5]), s67 = _mm256_hadd_ps(v[6], v[7]);
    const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);  // per 128-bit half
    return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// 4 query rows x 2 cells: acc[c*4 + r] accumulates q[r] . K_c over the head, so reduce8 puts row r's score of cell
// c in lane c*4 + r. 8 accumulators + 4 K vectors leave room for Q (read from L1 as FMA operands).
template <ggml_type T>
__m256 qk_4x2(const float * const * q, const char * const * k, int64_t dk, prefetch_stream & pf) {
    __m256 acc[8];
    for (auto & a : acc) a = _mm256_setzero_ps();
    const float * q0 = q[0], * q1 = q[1], * q2 = q[2], * q3 = q[3];
    for (int64_t e = 0; e < dk; e += 16) {
        if (e % 32 == 0) pf.step();
        __m256 kv[2][2];
        load16<T>(k[0], e, kv[0]);
        load16<T>(k[1], e, kv[1]);
        for (int h = 0; h < 2; ++h) {
            const int64_t x = e + 8 * h;
            const __m256 a0 = _mm256_loadu_ps(q0 + x), a1 = _mm256_loadu_ps(q1 + x);
            const __m256 a2 = _mm256_loadu_ps(q2 + x), a3 = _mm256_loadu_ps(q3 + x);
            for (int c = 0; c < 2; ++c) {
                acc[c * 4 + 0] = _mm256_fmadd_ps(a0, kv[c][h], acc[c * 4 + 0]);
                acc[c * 4 + 1] = _mm256_fmadd_ps(a1, kv[c][h], acc[c * 4 + 1]);
                acc[c * 4 + 2] = _mm256_fmadd_ps(a2, kv[c][h], acc[c * 4 + 2]);
                acc[c * 4 + 3] = _mm256_fmadd_ps(a3, kv[c][h], acc[c * 4 + 3]);
            }
        }
    }
    return reduce8(acc);
}

// qk_4x2 for a q8_0 K against Q's own q8_0 blocks, in integers as ggml_vec_dot_q8_0_q8_0 (x86 AVX2 path): per
// block |k| x sign(q, k) with vpmaddubsw (32 int8 products in one instruction, pairs summed to int16: at most
// 2 x 127 x 127, no saturation), vpmaddwd to int32, then one FMA with d_q * d_k. One FMA per row and block instead
// of four, and no K dequantization: on a host where the FMA ports are the limit this is the cheaper Q.K.
__m256 qk_4x2_q8(const block_q8_0 * const * q, const char * const * k, int64_t nblk, prefetch_stream & pf) {
    __m256 acc[8];
    for (auto & a : acc) a = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nblk; ++b) {
        pf.step();
        for (int c = 0; c < 2; ++c) {
            const block_q8_0 * kb = reinterpret_cast<const block_q8_0 *>(k[c]) + b;
            const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(kb->qs));
            const __m256i ka = _mm256_sign_epi8(kv, kv);
            const float dk = _cvtsh_ss(kb->d);
            for (int r = 0; r < 4; ++r) {
                const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q[r][b].qs));
                const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(ka, _mm256_sign_epi8(qv, kv)), ones);
                const __m256 d = _mm256_set1_ps(_cvtsh_ss(q[r][b].d) * dk);
                acc[c * 4 + r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, acc[c * 4 + r]);
            }
        }
    }
    return reduce8(acc);
}

// 4 accumulator rows x 16 V elements in registers across the tile; each V vector is loaded and dequantized once
// for the four rows. Eight named accumulators: as an array (a[4][2]) GCC 12 kept them on the stack, and every FMA
// then waited on a store-to-load round trip (2.7x slower, docs/kernels.md).
template <ggml_type T, bool Listed>
void pv_4x16(float * const * acc, const float * const * p, int64_t n_valid, const char * v0, size_t stride, int64_t nt,
             int64_t e0, const char * live, const int32_t * cells, prefetch_stream & pf) {
    const auto load = [&](int r, int c) { return r < n_valid ? _mm256_loadu_ps(acc[r] + e0 + 8 * c) : _mm256_setzero_ps(); };
    __m256 a00 = load(0, 0), a01 = load(0, 1), a10 = load(1, 0), a11 = load(1, 1);
    __m256 a20 = load(2, 0), a21 = load(2, 1), a30 = load(3, 0), a31 = load(3, 1);
    const float * p0 = p[0], * p1 = p[1], * p2 = p[2], * p3 = p[3];
    fa_loops::for_each_cell<Listed>(v0, stride, nt, live, cells, pf, [&](int64_t j, const char * row) {
        __m256 v[2];
        load16<T>(row, e0, v);
        const __m256 w0 = _mm256_broadcast_ss(p0 + j), w1 = _mm256_broadcast_ss(p1 + j);
        const __m256 w2 = _mm256_broadcast_ss(p2 + j), w3 = _mm256_broadcast_ss(p3 + j);
        a00 = _mm256_fmadd_ps(w0, v[0], a00);
        a01 = _mm256_fmadd_ps(w0, v[1], a01);
        a10 = _mm256_fmadd_ps(w1, v[0], a10);
        a11 = _mm256_fmadd_ps(w1, v[1], a11);
        a20 = _mm256_fmadd_ps(w2, v[0], a20);
        a21 = _mm256_fmadd_ps(w2, v[1], a21);
        a30 = _mm256_fmadd_ps(w3, v[0], a30);
        a31 = _mm256_fmadd_ps(w3, v[1], a31);
    });
    const __m256 out[4][2] = {{a00, a01}, {a10, a11}, {a20, a21}, {a30, a31}};
    for (int r = 0; r < n_valid; ++r) {
        for (int c = 0; c < 2; ++c) _mm256_storeu_ps(acc[r] + e0 + 8 * c, out[r][c]);
    }
}

// The kernels behind fa_group_loops.h's isa_4x2_by_16. A q8_0 K with Q's q8_0 blocks takes the integer Q.K
// (qk_4x2_q8).
struct kern {
    template <ggml_type T>
    static void qk_lanes(const float * const * q, const block_q8_0 * const * qq, const char * const * k, int64_t dk,
                         prefetch_stream & pf, float * lanes) {
        if constexpr (T == ggml_type::q8_0) {
            if (qq[0]) return _mm256_store_ps(lanes, qk_4x2_q8(qq, k, dk / QK8_0, pf));
        }
        _mm256_store_ps(lanes, qk_4x2<T>(q, k, dk, pf));
    }

    template <ggml_type T, bool Listed, class... Args>
    static void pv16(Args &&... args) { pv_4x16<T, Listed>(std::forward<Args>(args)...); }
};
using isa = fa_loops::isa_4x2_by_16<kern>;

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

}  // namespace kvsim::cpu::avx2

KVSIM_TARGET_END

#endif  // KVSIM_X86
