#include "quant.h"

#include "cpu/isa_target.h"

// ggml rounds x*id and x*id + 8.5f separately; a fused multiply-add would change some nibbles.
KVSIM_FP_CONTRACT_OFF

#include <cmath>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <cstring>
#include <stdexcept>
#include <string>

namespace kvsim {

namespace {
// roundf (halves away from zero) for |x| < 2^23, equal to it for every float with |x| <= 128 (checked
// exhaustively); inline arithmetic instead of the libm call, so that the q8_0 loop runs in vector lanes.
inline float round_half_away(float x) { return std::trunc(x + std::copysign(0.49999997f, x)); }

// ggml's MAX() over |x| of one block (order-free for the non-NaN values a block holds).
float block_amax(const float * xb) {
#if defined(__AVX512F__)
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(xb)), b = _mm512_abs_ps(_mm512_loadu_ps(xb + 16));
    return _mm512_reduce_max_ps(_mm512_max_ps(a, b));
#else
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; ++j) amax = amax > std::fabs(xb[j]) ? amax : std::fabs(xb[j]);
    return amax;
#endif
}

// qs[j] = round_half_away(xb[j] * id); |xb[j] * id| <= 127.
void round_block(const float * xb, float id, int8_t * qs) {
#if defined(__AVX512F__)
    const __m512 vid = _mm512_set1_ps(id), sign = _mm512_set1_ps(-0.0f), half = _mm512_set1_ps(0.49999997f);
    for (int h = 0; h < 2; ++h) {
        const __m512 v = _mm512_mul_ps(_mm512_loadu_ps(xb + 16 * h), vid);
        const __m512 r = _mm512_add_ps(v, _mm512_or_ps(_mm512_and_ps(v, sign), half));  // round_half_away in lanes
        _mm_storeu_si128(reinterpret_cast<__m128i *>(qs + 16 * h), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r)));
    }
#else
    for (int j = 0; j < QK8_0; ++j) qs[j] = (int8_t) round_half_away(xb[j] * id);
#endif
}
}  // namespace

void quantize_row_q8_0(const float * x, block_q8_0 * y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float * xb = x + i * QK8_0;
        const float d = block_amax(xb) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        round_block(xb, id, y[i].qs);
    }
}

void quantize_row_q4_0(const float * x, block_q4_0 * y, int64_t n) {
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const float * xb = x + i * QK4_0;
        float amax = 0.0f;
        float max = 0.0f;
        for (int j = 0; j < QK4_0; ++j) {
            if (amax < std::fabs(xb[j])) {
                amax = std::fabs(xb[j]);
                max = xb[j];
            }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const int8_t t0 = (int8_t) (xb[j] * id + 8.5f);
            const int8_t t1 = (int8_t) (xb[j + QK4_0 / 2] * id + 8.5f);
            const uint8_t q0 = (uint8_t) (t0 < 15 ? t0 : 15);
            const uint8_t q1 = (uint8_t) (t1 < 15 ? t1 : 15);
            y[i].qs[j] = (uint8_t) (q0 | (q1 << 4));
        }
    }
}

void dequantize_row_q8_0(const block_q8_0 * x, float * y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; ++j) y[i * QK8_0 + j] = x[i].qs[j] * d;
    }
}

void round_row_q8_0(float * x, block_q8_0 * y, int64_t n) {
    quantize_row_q8_0(x, y, n);
    dequantize_row_q8_0(y, x, n);
}

void dequantize_row_q4_0(const block_q4_0 * x, float * y, int64_t n) {
    for (int64_t i = 0; i < n / QK4_0; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            y[i * QK4_0 + j] = ((x[i].qs[j] & 0x0f) - 8) * d;
            y[i * QK4_0 + j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

bool kernel_supports_type(ggml_type t) {
    return t == ggml_type::f32 || t == ggml_type::f16 || t == ggml_type::q8_0 || t == ggml_type::q4_0;
}

namespace {
void check_row(ggml_type t, int64_t n) {
    if (!kernel_supports_type(t)) {
        throw std::invalid_argument(std::string("attention kernels do not support cache type ") + ggml_type_name(t));
    }
    ggml_row_size(t, n);  // throws on a partial block
}
}  // namespace

void row_to_f32(ggml_type t, const void * src, float * dst, int64_t n) {
    check_row(t, n);
    switch (t) {
        case ggml_type::f32: std::memcpy(dst, src, (size_t) n * sizeof(float)); break;
        case ggml_type::f16: {
            const fp16_t * h = static_cast<const fp16_t *>(src);
            for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
            break;
        }
        case ggml_type::q8_0: dequantize_row_q8_0(static_cast<const block_q8_0 *>(src), dst, n); break;
        case ggml_type::q4_0: dequantize_row_q4_0(static_cast<const block_q4_0 *>(src), dst, n); break;
        default: break;
    }
}

void row_from_f32(ggml_type t, const float * src, void * dst, int64_t n) {
    check_row(t, n);
    switch (t) {
        case ggml_type::f32: std::memcpy(dst, src, (size_t) n * sizeof(float)); break;
        case ggml_type::f16: {
            fp16_t * h = static_cast<fp16_t *>(dst);
            for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
            break;
        }
        case ggml_type::q8_0: quantize_row_q8_0(src, static_cast<block_q8_0 *>(dst), n); break;
        case ggml_type::q4_0: quantize_row_q4_0(src, static_cast<block_q4_0 *>(dst), n); break;
        default: break;
    }
}

}  // namespace kvsim
