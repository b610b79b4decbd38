// f16 conversion and q8_0/q4_0 blocks against values computed by hand from ggml's reference algorithms.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "cpu/simd.h"
#include "quant.h"

using namespace kvsim;

TEST_CASE("software f16 conversion matches the hardware path bit for bit") {
    for (uint32_t h = 0; h < 65536; ++h) {
        const float a = fp16_to_fp32_soft((fp16_t) h), b = fp16_to_fp32((fp16_t) h);
        if (std::isnan(b)) {
            CHECK(std::isnan(a));
        } else {
            uint32_t ua, ub;
            std::memcpy(&ua, &a, 4);
            std::memcpy(&ub, &b, 4);
            CHECK(ua == ub);
        }
    }
    std::mt19937 rng(1);
    for (int i = 0; i < 2000000; ++i) {
        uint32_t u = rng();
        float f;
        std::memcpy(&f, &u, 4);
        if (std::isnan(f)) continue;
        if (fp32_to_fp16_soft(f) != fp32_to_fp16(f)) {
            FAIL("f32 bits " << u);
        }
    }
    CHECK(fp32_to_fp16_soft(65520.0f) == 0x7c00);   // ties to even past the largest half
    CHECK(fp32_to_fp16_soft(65519.0f) == 0x7bff);
    CHECK(fp32_to_fp16_soft(std::ldexp(1.0f, -25)) == 0x0000);
    CHECK(fp32_to_fp16_soft(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
    CHECK(fp32_to_fp16_soft(-INFINITY) == 0xfc00);
}

TEST_CASE("q8_0 blocks equal hand-computed ggml values") {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = (j - 16) * 0.25f;
    block_q8_0 b;
    quantize_row_q8_0(x.data(), &b, 32);
    const int8_t want[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48, -40, -32, -24, -16, -8,
                             0,    8,    16,   24,   32,  40,  48,  56,  64,  71,  79,  87,  95,  103, 111, 119};
    CHECK(b.d == 0x2808);  // f16(4/127)
    for (int j = 0; j < 32; ++j) CHECK(b.qs[j] == want[j]);  // -63.5 -> -64: roundf ties away from zero

    for (int j = 0; j < 32; ++j) x[j] = (float) (std::sin((double) j) * (j + 1) / 7);
    quantize_row_q8_0(x.data(), &b, 32);
    const int8_t want2[32] = {0,   7,  11,  2,   -16, -24, -8, 22,  37,  17,  -25, -50, -29, 24,   62,  43,
                              -20, -72, -59, 12, 79,  76,  -1, -84, -94, -14, 85,  111, 33,  -83, -127, -54};
    CHECK(b.d == 0x2869);
    for (int j = 0; j < 32; ++j) CHECK(b.qs[j] == want2[j]);

    std::vector<float> y(32);
    dequantize_row_q8_0(&b, y.data(), 32);
    for (int j = 0; j < 32; ++j) CHECK(y[j] == want2[j] * fp16_to_fp32(0x2869));

    // round_row_q8_0 (Q for a q8_0 K): the same block, and the row overwritten by its dequantized values
    block_q8_0 r;
    round_row_q8_0(x.data(), &r, 32);
    CHECK(r.d == 0x2869);
    for (int j = 0; j < 32; ++j) CHECK(r.qs[j] == want2[j]);
    for (int j = 0; j < 32; ++j) CHECK(x[j] == want2[j] * fp16_to_fp32(0x2869));
}

// ggml's quantize_row_q8_0_ref written out with roundf; the kernel's (vectorized where the build allows) must give
// the same blocks bit for bit, ties included.
TEST_CASE("q8_0 quantization equals ggml's roundf reference on random rows and exact ties") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    std::vector<float> x(32 * 256);
    for (auto & v : x) v = u(rng);
    for (int blk = 0; blk < 64; ++blk) {  // blocks whose x * id lands on k + 0.5 and on its float neighbours
        float * b = x.data() + blk * 32;
        b[0] = 127.0f;  // amax 127: d = 1, id = 1
        for (int j = 1; j < 32; ++j) {
            const float t = (float) ((j * 7 + blk) % 253 - 126) + 0.5f;
            b[j] = j % 3 == 0 ? t : std::nextafter(t, j % 3 == 1 ? 200.0f : -200.0f);
        }
        if (blk % 2) b[0] = -127.0f;
    }
    std::vector<block_q8_0> got(x.size() / 32);
    quantize_row_q8_0(x.data(), got.data(), (int64_t) x.size());
    for (size_t i = 0; i < got.size(); ++i) {
        const float * xb = x.data() + i * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = amax > std::fabs(xb[j]) ? amax : std::fabs(xb[j]);
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        INFO("block " << i);
        CHECK(got[i].d == fp32_to_fp16(d));
        for (int j = 0; j < 32; ++j) {
            const float v = xb[j] * id;  // a separate statement: no fused multiply-add
            CHECK(got[i].qs[j] == (int8_t) std::roundf(v));
        }
    }
}

TEST_CASE("q4_0 blocks equal hand-computed ggml values") {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = (float) ((j - 10) * 0.3);
    block_q4_0 b;
    quantize_row_q4_0(x.data(), &b, 32);
    const uint8_t want[16] = {0x6c, 0x5b, 0x5b, 0x5b, 0x4a, 0x4a, 0x3a, 0x39, 0x39, 0x28, 0x28, 0x28, 0x17, 0x17, 0x06, 0x06};
    CHECK(b.d == 0xba4d);  // max = +6.3 -> d = -0.7875 (negative scale)
    for (int j = 0; j < 16; ++j) CHECK(b.qs[j] == want[j]);

    for (int j = 0; j < 32; ++j) x[j] = (float) (std::sin((double) j) * (j + 1) / 7);
    quantize_row_q4_0(x.data(), &b, 32);
    const uint8_t want2[16] = {0x78, 0x38, 0x49, 0x98, 0xd7, 0xd6, 0x87, 0x39, 0x2a, 0x79, 0xd6, 0xf5, 0xa6, 0x3a, 0x0c, 0x5b};
    CHECK(b.d == 0x3860);
    for (int j = 0; j < 16; ++j) CHECK(b.qs[j] == want2[j]);

    std::vector<float> y(32);
    dequantize_row_q4_0(&b, y.data(), 32);
    const float d = fp16_to_fp32(0x3860);
    for (int j = 0; j < 16; ++j) {
        CHECK(y[j] == ((want2[j] & 15) - 8) * d);
        CHECK(y[j + 16] == ((want2[j] >> 4) - 8) * d);
    }
}

TEST_CASE("all-zero blocks quantize to zero scale") {
    std::vector<float> x(64, 0.0f), y(64, 1.0f);
    block_q4_0 b[2];
    quantize_row_q4_0(x.data(), b, 64);
    CHECK(b[0].d == 0x8000);  // 0/-8 = -0.0f, as ggml stores it
    CHECK(b[1].qs[3] == 0x88);
    dequantize_row_q4_0(b, y.data(), 64);
    for (float v : y) CHECK(v == 0.0f);
}

TEST_CASE("SIMD row conversion is bit-identical to the scalar one for every type") {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    const int64_t n = 256;
    std::vector<float> x(n), a(n), b(n);
    for (auto & v : x) v = u(rng);
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        std::vector<char> buf(ggml_row_size(t, n));
        row_from_f32(t, x.data(), buf.data(), n);
        row_to_f32(t, buf.data(), a.data(), n);
        cpu::row_to_f32_fast(t, buf.data(), b.data(), n);
        CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
    }
    CHECK_THROWS_AS(row_to_f32(ggml_type::q8_0, x.data(), a.data(), 33), std::invalid_argument);
    CHECK_THROWS_AS(row_to_f32(ggml_type::q5_1, x.data(), a.data(), 32), std::invalid_argument);
}
