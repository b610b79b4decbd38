// The aarch64 Advanced SIMD (NEON) inner loops of the grouped CPU flash attention (fa_group.h): the AVX2 loops'
// design (fa_group_avx2.cpp) on 4-lane vectors and 32 registers. Each K/V element is read from the cache once per
// block of 4 query rows and dequantized in registers (f16: FCVTL; q8_0/q4_0: widen, convert, times the block's
// scale), never copied to an f32 tile. Q.K of a q8_0 K against Q's q8_0 blocks runs in integers, as ggml's
// ggml_vec_dot_q8_0_q8_0 (ggml-cpu/arch/arm/quants.c): SDOT where the CPU has the dot-product extension
// (cpu_isa::neon_dotprod, checked at run time; that one function is compiled in a target region
// "arch=armv8.2-a+dotprod" (isa_target.h): GCC 12 rejects a bare "+dotprod" there), else SMULL + SADALP. Tested under qemu-user (scripts/test-aarch64.sh); its speed is unmeasured.
#include "cpu/fa_group_isa.h"

#if KVSIM_ARM  // other architectures take their own loops (cpu_isa.h)

#include <algorithm>  // fa_group_loops.h
#include <type_traits>
#include <utility>
#include <cstring>

#include <arm_neon.h>

#include "cpu/fa_group.h"
#include "quant.h"

#include "cpu/fa_group_loops.h"  // last: no target region, the loops are compiled for every ARMv8-A CPU

namespace kvsim::cpu::neon {

namespace {

inline float f16_to_f32(fp16_t h) {
    __fp16 x;
    std::memcpy(&x, &h, sizeof x);
    return x;  // FCVT
}

// Elements e..e+15 of one head row as four f32 vectors; e % 16 == 0 (a 16-run never straddles a 32-block).
template <ggml_type T> inline void load16(const char * row, int64_t e, float32x4_t * v);

template <> inline void load16<ggml_type::f32>(const char * row, int64_t e, float32x4_t * v) {
    const float * x = reinterpret_cast<const float *>(row) + e;
    for (int i = 0; i < 4; ++i) v[i] = vld1q_f32(x + 4 * i);
}

template <> inline void load16<ggml_type::f16>(const char * row, int64_t e, float32x4_t * v) {
    const uint16_t * x = reinterpret_cast<const uint16_t *>(row) + e;
    const float16x8_t a = vreinterpretq_f16_u16(vld1q_u16(x)), b = vreinterpretq_f16_u16(vld1q_u16(x + 8));
    v[0] = vcvt_f32_f16(vget_low_f16(a));
    v[1] = vcvt_high_f32_f16(a);
    v[2] = vcvt_f32_f16(vget_low_f16(b));
    v[3] = vcvt_high_f32_f16(b);
}

// 16 int8 times the block's scale.
inline void scale16(int8x16_t q, float d, float32x4_t * v) {
    const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    v[0] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d);
    v[1] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d);
    v[2] = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d);
    v[3] = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d);
}

template <> inline void load16<ggml_type::q8_0>(const char * row, int64_t e, float32x4_t * v) {
    const block_q8_0 * b = reinterpret_cast<const block_q8_0 *>(row) + e / QK8_0;
    scale16(vld1q_s8(b->qs + e % QK8_0), f16_to_f32(b->d), v);
}

template <> inline void load16<ggml_type::q4_0>(const char * row, int64_t e, float32x4_t * v) {
    // ggml q4_0: element i of a block is the low nibble of qs[i] (i < 16) or the high nibble of qs[i - 16]
    const block_q4_0 * b = reinterpret_cast<const block_q4_0 *>(row) + e / QK4_0;
    const uint8x16_t q = vld1q_u8(b->qs);
    const uint8x16_t n = e % QK4_0 ? vshrq_n_u8(q, 4) : vandq_u8(q, vdupq_n_u8(0x0f));
    scale16(vsubq_s8(vreinterpretq_s8_u8(n), vdupq_n_s8(8)), f16_to_f32(b->d), v);  // -8..7
}

// The scores of 4 rows x 2 cells from their 8 accumulators: lanes[c*4 + r] = the sum of acc[c*4 + r]'s lanes.
inline void reduce_4x2(const float32x4_t * acc, float * lanes) {
    for (int c = 0; c < 2; ++c) {
        const float32x4_t * a = acc + 4 * c;
        vst1q_f32(lanes + 4 * c, vpaddq_f32(vpaddq_f32(a[0], a[1]), vpaddq_f32(a[2], a[3])));
    }
}

// 4 query rows x 2 cells: acc[c*4 + r] accumulates q[r] . K_c over the head. 8 accumulators, 8 K vectors and 4 Q
// vectors at a time: 20 of the 32 registers.
template <ggml_type T>
void qk_4x2(const float * const * q, const char * const * k, int64_t dk, prefetch_stream & pf, float * lanes) {
    float32x4_t acc[8];
    for (auto & a : acc) a = vdupq_n_f32(0.0f);
    for (int64_t e = 0; e < dk; e += 16) {
        if (e % 32 == 0) pf.step();
        float32x4_t kv[2][4];
        load16<T>(k[0], e, kv[0]);
        load16<T>(k[1], e, kv[1]);
        for (int h = 0; h < 4; ++h) {
            for (int r = 0; r < 4; ++r) {
                const float32x4_t a = vld1q_f32(q[r] + e + 4 * h);
                acc[r] = vfmaq_f32(acc[r], a, kv[0][h]);
                acc[4 + r] = vfmaq_f32(acc[4 + r], a, kv[1][h]);
            }
        }
    }
    reduce_4x2(acc, lanes);
}

// qk_4x2 for a q8_0 K against Q's own q8_0 blocks: per block the 32 int8 products summed in int32 (SMULL to int16:
// at most 2 x 127 x 127 per SADALP pair, no overflow), converted, one FMA with d_q * d_k per row and block.
void qk_4x2_q8(const block_q8_0 * const * q, const char * const * k, int64_t nblk, prefetch_stream & pf, float * lanes) {
    float32x4_t acc[8];
    for (auto & a : acc) a = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nblk; ++b) {
        pf.step();
        for (int c = 0; c < 2; ++c) {
            const block_q8_0 * kb = reinterpret_cast<const block_q8_0 *>(k[c]) + b;
            const int8x16_t k0 = vld1q_s8(kb->qs), k1 = vld1q_s8(kb->qs + 16);
            const float dk = f16_to_f32(kb->d);
            for (int r = 0; r < 4; ++r) {
                const int8x16_t q0 = vld1q_s8(q[r][b].qs), q1 = vld1q_s8(q[r][b].qs + 16);
                int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(k0), vget_low_s8(q0)));
                s = vpadalq_s16(s, vmull_high_s8(k0, q0));
                s = vpadalq_s16(s, vmull_s8(vget_low_s8(k1), vget_low_s8(q1)));
                s = vpadalq_s16(s, vmull_high_s8(k1, q1));
                acc[c * 4 + r] = vfmaq_n_f32(acc[c * 4 + r], vcvtq_f32_s32(s), f16_to_f32(q[r][b].d) * dk);
            }
        }
    }
    reduce_4x2(acc, lanes);
}

// qk_4x2_q8 with SDOT (4 int8 products summed into each int32 lane per instruction). Only this function is compiled
// for the extension: the rest of the file must run on any ARMv8-A CPU (noinline: its SDOTs stay in it).
KVSIM_TARGET_BEGIN("arch=armv8.2-a+dotprod")
__attribute__((noinline)) void qk_4x2_q8_sdot(const block_q8_0 * const * q, const char * const * k, int64_t nblk, prefetch_stream & pf, float * lanes) {
    float32x4_t acc[8];
    for (auto & a : acc) a = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nblk; ++b) {
        pf.step();
        for (int c = 0; c < 2; ++c) {
            const block_q8_0 * kb = reinterpret_cast<const block_q8_0 *>(k[c]) + b;
            const int8x16_t k0 = vld1q_s8(kb->qs), k1 = vld1q_s8(kb->qs + 16);
            const float dk = f16_to_f32(kb->d);
            for (int r = 0; r < 4; ++r) {
                const int8x16_t q0 = vld1q_s8(q[r][b].qs), q1 = vld1q_s8(q[r][b].qs + 16);
                const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), k0, q0), k1, q1);
                acc[c * 4 + r] = vfmaq_n_f32(acc[c * 4 + r], vcvtq_f32_s32(s), f16_to_f32(q[r][b].d) * dk);
            }
        }
    }
    reduce_4x2(acc, lanes);
}
KVSIM_TARGET_END

// 4 accumulator rows x 16 V elements (16 registers) across the tile; each V vector is loaded and dequantized once
// for the four rows.
template <ggml_type T, bool Listed>
void pv_4x16(float * const * acc, const float * const * p, int64_t n_valid, const char * v0, size_t stride, int64_t nt,
             int64_t e0, const char * live, const int32_t * cells, prefetch_stream & pf) {
    float32x4_t a[4][4];
    for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 4; ++c) a[r][c] = r < n_valid ? vld1q_f32(acc[r] + e0 + 4 * c) : vdupq_n_f32(0.0f);
    }
    const float * p0 = p[0], * p1 = p[1], * p2 = p[2], * p3 = p[3];
    fa_loops::for_each_cell<Listed>(v0, stride, nt, live, cells, pf, [&](int64_t j, const char * row) {
        float32x4_t v[4];
        load16<T>(row, e0, v);
        const float w[4] = {p0[j], p1[j], p2[j], p3[j]};
        for (int r = 0; r < 4; ++r) {
            for (int c = 0; c < 4; ++c) a[r][c] = vfmaq_n_f32(a[r][c], v[c], w[r]);
        }
    });
    for (int r = 0; r < n_valid; ++r) {
        for (int c = 0; c < 4; ++c) vst1q_f32(acc[r] + e0 + 4 * c, a[r][c]);
    }
}

// The kernels behind fa_group_loops.h's isa_4x2_by_16. Dotprod: a q8_0 K's integer Q.K with SDOT
// (qk_4x2_q8_sdot), else SMULL + SADALP (qk_4x2_q8).
template <bool Dotprod>
struct kern {
    template <ggml_type T>
    static void qk_lanes(const float * const * q, const block_q8_0 * const * qq, const char * const * k, int64_t dk,
                         prefetch_stream & pf, float * lanes) {
        if (T != ggml_type::q8_0 || !qq[0]) return qk_4x2<T>(q, k, dk, pf, lanes);
        if constexpr (Dotprod) return qk_4x2_q8_sdot(qq, k, dk / QK8_0, pf, lanes);
        qk_4x2_q8(qq, k, dk / QK8_0, pf, lanes);
    }

    template <ggml_type T, bool Listed, class... Args>
    static void pv16(Args &&... args) { pv_4x16<T, Listed>(std::forward<Args>(args)...); }
};
template <bool Dotprod>
using isa = fa_loops::isa_4x2_by_16<kern<Dotprod>>;

}  // namespace

void fa_qk(bool dotprod, ggml_type tk, const float * const * q, int64_t n_rows, const char * k0, size_t stride,
           int64_t nt, int64_t head_dim_k, float * scores, int64_t ld, prefetch_stream & pf, const int32_t * cells,
           const block_q8_0 * const * qq) {
    if (dotprod) return fa_loops::fa_qk<isa<true>>(tk, q, n_rows, k0, stride, nt, head_dim_k, scores, ld, pf, cells, qq);
    fa_loops::fa_qk<isa<false>>(tk, q, n_rows, k0, stride, nt, head_dim_k, scores, ld, pf, cells, qq);
}

void fa_pv(ggml_type tv, float * const * acc, const float * p, int64_t ld, int64_t n_rows, const char * v0,
           size_t stride, int64_t nt, int64_t head_dim_v, const char * live, prefetch_stream & pf, const int32_t * cells) {
    fa_loops::fa_pv<isa<false>>(tv, acc, p, ld, n_rows, v0, stride, nt, head_dim_v, live, pf, cells);
}

}  // namespace kvsim::cpu::neon

#endif  // KVSIM_ARM
