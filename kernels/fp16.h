// IEEE binary16 <-> binary32 conversion, bit-identical to ggml's GGML_FP32_TO_FP16 / GGML_FP16_TO_FP32
// (ggml/src/ggml-impl.h: ggml_compute_fp32_to_fp16, round to nearest even; NaN -> quiet NaN).
// The F16C instructions are used when the compiler targets them; the software path gives the same bits
// for every finite input and every infinity (tests/test_quant.cpp checks all 65,536 halves and a random
// sample of floats against the hardware path).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace kvsim {

using fp16_t = uint16_t;  // raw binary16 bits, as ggml_fp16_t

// Software binary32 -> binary16, round to nearest even; overflow to +-inf, NaN -> 0x7e00 | sign.
inline fp16_t fp32_to_fp16_soft(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) return (fp16_t) (sign | 0x7e00u);
    if (x >= 0x477ff000u) return (fp16_t) (sign | 0x7c00u);  // >= 65520 rounds past 65504
    if (x < 0x38800000u) {                                    // half subnormal range (< 2^-14)
        if (x <= 0x33000000u) return (fp16_t) sign;            // <= 2^-25 rounds to (even) zero
        const uint32_t e = x >> 23;
        const uint32_t m = (x & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - e;
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u))) ++h;
        return (fp16_t) (sign | h);
    }
    uint32_t h = (x - 0x38000000u) >> 13;
    const uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return (fp16_t) (sign | h);
}

// Software binary16 -> binary32 (exact).
inline float fp16_to_fp32_soft(fp16_t h) {
    const uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    uint32_t x;
    if (e == 0x1fu) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else if (m == 0) {
        x = sign;
    } else {
        uint32_t ex = 113u;
        while ((m & 0x400u) == 0) {
            m <<= 1;
            --ex;
        }
        x = sign | (ex << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}

inline fp16_t fp32_to_fp16(float f) {
#if defined(__F16C__)
    return (fp16_t) _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    return fp32_to_fp16_soft(f);
#endif
}

inline float fp16_to_fp32(fp16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return fp16_to_fp32_soft(h);
#endif
}

}  // namespace kvsim
