// Vector helpers of the CPU kernels: AVX-512 and AVX2 bodies chosen at run time (cpu_isa.h; `isa`, by default the
// best this CPU has, must be one cpu_isa_supported() allows), portable scalar fallback. Results equal the scalar
// ggml semantics up to float summation order (dot) and are bit-exact for conversions.
#pragma once

#include <cstdint>

#include "cpu/cpu_isa.h"
#include "core/ggml_type.h"

namespace kvsim::cpu {

// dst[0..n) = row of type t (f32/f16/q8_0/q4_0) at src, converted to f32 (bit-identical to row_to_f32).
void row_to_f32_fast(ggml_type t, const void * src, float * dst, int64_t n, cpu_isa isa = cpu_isa_best());
// sum a[i]*b[i] in float with vector partial sums.
float dot_f32(const float * a, const float * b, int64_t n, cpu_isa isa = cpu_isa_best());
// y[i] += x[i]*w.
void axpy_f32(float * y, const float * x, float w, int64_t n);
// out[j] = sum_e q[e] * k[j*k_stride + e] for j < nt (the scores of one query row over one tile).
void tile_qk_f32(const float * q, const float * k, int64_t k_stride, int64_t nt, int64_t n, float * out,
                 cpu_isa isa = cpu_isa_best());
// Finish one query row's tile scores in place: s[j] = raw*scale (softcap: softcap*tanh(raw*scale)) + slope*mv[j],
// and -INF wherever mv[j] is -INF (whatever raw holds there).
void tile_scores_finish(float * s, const float * mv, int64_t nt, float scale, float softcap, float slope,
                        cpu_isa isa = cpu_isa_best());
// Online-softmax step of one row over a tile (FlashAttention-2): with m the running max, sets m_new = max(m, max s),
// replaces s[j] by exp(s[j] - m_new) (0 for -INF) and returns their sum. When every s[j] is -INF, zero-fills s,
// leaves m_new = m and returns 0. The vector exp has a relative error < 2e-7.
float tile_softmax(float * s, int64_t nt, float m, float * m_new, cpu_isa isa = cpu_isa_best());
// acc[e] += sum_j p[j] * v[j*v_stride + e] for j < nt, e < n (the P.V product of one query row over one tile);
// accumulators stay in registers across the tile. Cells with p[j] == 0 are skipped.
void tile_pv_f32(float * acc, const float * p, const float * v, int64_t v_stride, int64_t nt, int64_t n,
                 cpu_isa isa = cpu_isa_best());

}  // namespace kvsim::cpu
