// RoPE (ggml float path) vs a double reference; K-shift of f32/f16/quantized K vs the references; the
// null-rotation hazard.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/cpu_backend.h"
#include "kv_content.h"
#include "quant.h"
#include "reference.h"
#include "core/errors.h"

using namespace kvsim;

namespace {
std::vector<rope_params> param_sets() {
    std::vector<rope_params> v;
    rope_params p;
    v.push_back(p);
    p.mode = rope_mode::neox;
    p.freq_base = 500000.0f;
    v.push_back(p);
    p.n_rot = 64;  // partial RoPE: dims 64..127 untouched
    v.push_back(p);
    rope_params y;  // YaRN x4
    y.mode = rope_mode::neox;
    y.freq_scale = 0.25f;
    y.ext_factor = 1.0f;
    y.attn_factor = 1.0f;
    y.n_ctx_orig = 4096;
    v.push_back(y);
    return v;
}
}  // namespace

TEST_CASE("RoPE float path equals the double reference") {
    std::mt19937 rng(2);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const auto & p : param_sets()) {
        float corr[2];
        rope_yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr);
        std::vector<float> cache((size_t) p.n_rot);
        for (int64_t pos : {0, 1, 17, -300, 4000, 60000}) {
            std::vector<float> x(128), y;
            for (auto & e : x) e = u(rng);
            y = x;
            const auto x0 = x;
            rope_cache_init(p, pos, corr, cache.data());
            rope_rotate(p, cache.data(), x.data());
            ref_rope(p, pos, y.data());
            // ggml builds theta_i = pos*theta_scale^i by repeated float multiplication: the angle error grows
            // to ~|pos| * (n_rot/2) * 2^-24 rad, which the kernel reproduces on purpose
            const double tol = 2e-6 + 4e-6 * std::fabs((double) pos);
            for (int i = 0; i < 128; ++i) CHECK(std::fabs(x[(size_t) i] - y[(size_t) i]) <= tol);
            for (int i = p.n_rot; i < 128; ++i) CHECK(x[(size_t) i] == x0[(size_t) i]);
        }
    }
}

TEST_CASE("YaRN magnitude factor is applied on every shift, even shift 0") {
    rope_params p;
    p.freq_scale = 0.25f;
    p.ext_factor = 1.0f;
    p.n_ctx_orig = 4096;
    float corr[2], cache[128];
    rope_yarn_corr_dims(p.n_rot, p.n_ctx_orig, p.freq_base, p.beta_fast, p.beta_slow, corr);
    rope_cache_init(p, 0, corr, cache);
    CHECK(cache[0] == doctest::Approx(1.0f + 0.1f * std::log(4.0f)));  // semantics doc §5.3 item 1
}

// The instruction-set levels of the CPU K-shift this CPU runs (scalar: the portable loops; AVX2 and up: the
// vector row of kshift_avx2.cpp).
std::vector<cpu::cpu_isa> levels() {
    std::vector<cpu::cpu_isa> v;
    // neon: the portable row loops under the NEON level (no NEON K-shift row yet; the level must not break it)
    for (cpu::cpu_isa i : {cpu::cpu_isa::scalar, cpu::cpu_isa::avx2, cpu::cpu_isa::avx512, cpu::cpu_isa::neon}) {
        if (cpu::cpu_isa_supported(i)) v.push_back(i);
    }
    if (!cpu::cpu_isa_supported(cpu::cpu_isa::avx2)) MESSAGE("SKIPPED for this CPU: the AVX2 K-shift (no AVX2)");
    return v;
}

TEST_CASE("K-shift of f32/f16 K equals the reference") {
    cpu_backend be(2);
    for (cpu::cpu_isa isa : levels())
    for (ggml_type t : {ggml_type::f32, ggml_type::f16}) {
        be.set_isa(isa);
        for (const auto & p : param_sets()) {
            INFO("isa " << cpu::cpu_isa_name(isa) << " type " << std::string(ggml_type_name(t)) << " n_rot " << p.n_rot);
            kv_tensor k{nullptr, t, 128, 2, 300, 2};
            std::vector<char> a(k.total_bytes()), b(k.total_bytes());
            k.data = a.data();
            std::vector<int32_t> shift((size_t) (k.kv_size * k.n_stream));
            for (int64_t c = 0; c < k.kv_size * k.n_stream; ++c) {
                write_kv_cell(k, c / k.kv_size, c % k.kv_size, 1, kv_which::k, 0, (llama_pos) c, 0);
                shift[(size_t) c] = (int32_t) (c % 5) * 37 - 50;
            }
            b = a;
            kshift_desc d;
            d.rope = p;
            const auto rep = be.k_shift(d, k, shift.data());
            CHECK(rep.cells == 600);
            CHECK(!rep.null_rotation_hazard);
            k.data = b.data();
            ref_k_shift(d, k, shift.data());
            const int64_t n = k.head_dim * k.n_head_kv;
            std::vector<float> ra((size_t) n), rb((size_t) n);
            double err = 0.0;
            for (int64_t c = 0; c < 600; ++c) {
                row_to_f32(t, a.data() + c * k.row_bytes(), ra.data(), n);
                row_to_f32(t, b.data() + c * k.row_bytes(), rb.data(), n);
                for (int64_t i = 0; i < n; ++i) err = std::max(err, (double) std::fabs(ra[(size_t) i] - rb[(size_t) i]));
            }
            // f16: one ulp at |x| < 2 (float vs double rounding decides the last bit)
            CHECK(err <= (t == ggml_type::f16 ? 1e-3 : 2e-5));
        }
    }
}

TEST_CASE("K-shift of rotated quantized K stays within quantization error of the float path") {
    cpu_backend be(2);
    rope_params p;
    p.mode = rope_mode::neox;
    for (cpu::cpu_isa isa : levels())
    for (ggml_type t : {ggml_type::q8_0, ggml_type::q4_0}) {
        be.set_isa(isa);
        const attn_rot rot = attn_rot_config(t, t, 128, 128, false);
        REQUIRE(rot.n_k == 128);
        kv_tensor k{nullptr, t, 128, 2, 200, 1};
        std::vector<char> buf(k.total_bytes());
        k.data = buf.data();
        std::vector<int32_t> shift(200);
        for (int64_t c = 0; c < 200; ++c) {
            write_kv_cell(k, 0, c, 2, kv_which::k, 0, (llama_pos) c, rot.n_k);
            shift[(size_t) c] = (int32_t) c * 3 + 1;
        }
        kshift_desc d;
        d.rope = p;
        d.rot = rot;
        be.k_shift(d, k, shift.data());
        std::vector<float> row(256), want(128);
        double sq = 0.0;
        for (int64_t c = 0; c < 200; ++c) {
            row_to_f32(t, k.row(0, c), row.data(), 256);
            fwht_blocks(row.data(), 256, rot.n_k);  // back to the unrotated basis
            for (int64_t h = 0; h < 2; ++h) {
                for (int64_t e = 0; e < 128; ++e) want[(size_t) e] = kv_value(2, kv_which::k, 0, (llama_pos) c, h, e);
                ref_rope(p, shift[(size_t) c], want.data());
                for (int64_t e = 0; e < 128; ++e) {
                    const double diff = row[(size_t) (h * 128 + e)] - want[(size_t) e];
                    sq += diff * diff;
                }
            }
        }
        // two quantizations (cell write + requantization), each with RMS error step/sqrt(12), step = amax/127
        // (q8_0) or amax/8 (q4_0); rotated content has block amax < 2, so RMS < 0.5 * 2/127 or 0.5 * 2/8
        const double rms = std::sqrt(sq / (200.0 * 256.0));
        const double bound = 0.5 * (t == ggml_type::q8_0 ? 2.0 / 127 : 2.0 / 8);
        INFO(cpu::cpu_isa_name(isa) << " " << std::string(ggml_type_name(t)) << " rms " << rms);
        CHECK(rms < bound);
        CHECK(rms > 0.0);
    }
}

// The vector K-shift (AVX2) against the portable loops on the same cells: identical up to the RoPE's fused
// multiply-adds (which the compiler chooses in the portable loops; the vector ones are pinned to llama.cpp's, below) (f32 within 1e-6, f16 within one ulp), so a requantized value differs by at most one quant step and
// rarely; with and without rotation, NORMAL and NEOX, partial RoPE.
TEST_CASE("K-shift: the AVX2 row equals the portable loops") {
    if (!cpu::cpu_isa_supported(cpu::cpu_isa::avx2)) {
        MESSAGE("SKIPPED for this CPU: the AVX2 K-shift (no AVX2)");
        return;
    }
    cpu_backend be(2);
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (const auto & p : param_sets()) {
            for (bool rotated : {true, false}) {
                if (rotated && !ggml_is_quantized(t)) continue;
                const attn_rot rot = attn_rot_config(t, t, 128, 128, !rotated);
                kv_tensor k{nullptr, t, 128, 4, 97, 1};
                std::vector<char> scalar(k.total_bytes()), vec;
                k.data = scalar.data();
                std::vector<int32_t> shift(97);
                for (int64_t c = 0; c < 97; ++c) {
                    write_kv_cell(k, 0, c, 3, kv_which::k, 0, (llama_pos) c, rot.n_k);
                    shift[(size_t) c] = (int32_t) (c % 7) * 1001 - 3000;
                }
                vec = scalar;
                kshift_desc d;
                d.rope = p;
                d.rot = rot;
                d.on_null_rot = null_rot_policy::plain;
                be.set_isa(cpu::cpu_isa::scalar);
                be.k_shift(d, k, shift.data());
                k.data = vec.data();
                be.set_isa(cpu::cpu_isa::avx2);
                be.k_shift(d, k, shift.data());
                const int64_t n = 512;
                std::vector<float> a((size_t) n), b((size_t) n);
                double err = 0.0;
                int64_t differ = 0;
                for (int64_t c = 0; c < 97; ++c) {
                    row_to_f32(t, scalar.data() + c * k.row_bytes(), a.data(), n);
                    row_to_f32(t, vec.data() + c * k.row_bytes(), b.data(), n);
                    for (int64_t i = 0; i < n; ++i) {
                        err = std::max(err, (double) std::fabs(a[(size_t) i] - b[(size_t) i]));
                        differ += a[(size_t) i] != b[(size_t) i];
                    }
                }
                INFO(std::string(ggml_type_name(t)) << " mode " << (int) p.mode << " n_rot " << p.n_rot << " rotated " << rotated
                                       << " err " << err << " differing " << differ);
                const double step = t == ggml_type::q8_0 ? 2.0 / 127 : t == ggml_type::q4_0 ? 2.0 / 8 : 0.0;
                CHECK(err <= (t == ggml_type::f32 ? 1e-6 : t == ggml_type::f16 ? 1e-3 : step * 1.01));
                if (t != ggml_type::f32) CHECK(differ <= 97 * n / 100);  // one stored value in a hundred at most
            }
        }
    }
}

// An upstream recording: ggml_rope_ext_inplace of llama.cpp's prebuilt CPU backend (node-llama-cpp 3.22.1,
// libggml-cpu-zen4.so, the graph of build_rope_shift for an f16 K) on one head of 128 f16 values
// x[i] = ((i * 7919 + 203 * 104729) % 2001) / 1000 - 1, shifted by -2048 with Llama-3's RoPE (NORMAL, n_rot 128,
// freq_base 500000, n_ctx_orig 8192), recorded with tests/tools/kshift_vs_ggml.cpp's graph. The vector K-shift
// must give these bits: value 37 is where an fmaddsub (fma(x1, c, x0 * s) in the odd lanes) was one ulp off.
TEST_CASE("K-shift of an f16 head equals llama.cpp's rope bit for bit (recorded)") {
    static const uint16_t expected[128] = {
        0x3420, 0x360b, 0xb2a0, 0xacfb, 0xac3b, 0x993b, 0xb43e, 0x2c92, 0x366c, 0x3516, 0xb200, 0xb9d2,
        0xb9e4, 0x3950, 0x3cc7, 0x34d1, 0x3913, 0x3ccb, 0xba54, 0xba5b, 0x36e7, 0x3a25, 0x38c6, 0xb37f,
        0xa92f, 0x3669, 0xb035, 0x2ec8, 0x98b1, 0x2e8b, 0xb41d, 0xb28f, 0xb6c6, 0x3607, 0xb77a, 0xb941,
        0xbc2f, 0x0d38, 0x3d24, 0x2a64, 0xb3e1, 0xbd21, 0xb2a3, 0xbc2f, 0xba7b, 0xb12e, 0x32d6, 0x385f,
        0xac20, 0xb579, 0x2e08, 0x2ca2, 0x2f4d, 0x2e47, 0xb40f, 0x3498, 0xb823, 0xb585, 0x31bd, 0xbabd,
        0x3c16, 0xb695, 0x3ce8, 0x3858, 0xb98d, 0xbc29, 0xac0d, 0xbc09, 0x344d, 0xb9c8, 0x3555, 0xb6a1,
        0x3338, 0xb208, 0x27e1, 0xac7c, 0xb248, 0xaa2b, 0xb6d0, 0xae7f, 0xb927, 0xb2a9, 0xbac5, 0xb59f,
        0xbc22, 0xb825, 0xb8e1, 0x3cd7, 0x3c3a, 0x387b, 0x3aa1, 0x379c, 0x38ec, 0x35dd, 0x369a, 0x33a7,
        0x3303, 0x2e52, 0x282c, 0xaa8a, 0xb0c0, 0xb2a7, 0xb534, 0xb5e9, 0xb7fc, 0xb847, 0xb95e, 0xb99e,
        0xbabb, 0xbaf9, 0xbbab, 0x3bab, 0x3aea, 0x39f6, 0x3982, 0x38a6, 0x381c, 0x36a8, 0x3574, 0x33f8,
        0x3166, 0x2d36, 0x9972, 0xad91, 0xb18e, 0xb419, 0xb582, 0xb6ce};
    std::vector<float> x(128);
    for (int i = 0; i < 128; ++i) x[(size_t) i] = (float) ((i * 7919 + 203 * 104729) % 2001) / 1000.0f - 1.0f;
    kshift_desc d;
    d.rope.n_rot = 128;
    d.rope.freq_base = 500000.0f;
    d.rope.n_ctx_orig = 8192;
    const int32_t shift = -2048;
    cpu_backend be(1);
    // the vector K-shift (kshift_avx2.cpp) serves both x86 levels; the portable loops' fusion is the compiler's
    for (cpu::cpu_isa isa : {cpu::cpu_isa::avx2, cpu::cpu_isa::avx512}) {
        if (!cpu::cpu_isa_supported(isa)) {
            MESSAGE("SKIPPED for this CPU: the vector K-shift at " << cpu::cpu_isa_name(isa));
            continue;
        }
        be.set_isa(isa);
        std::vector<fp16_t> h(128);
        row_from_f32(ggml_type::f16, x.data(), h.data(), 128);
        kv_tensor k{h.data(), ggml_type::f16, 128, 1, 1, 1};
        be.k_shift(d, k, &shift);
        for (int i = 0; i < 128; ++i) {
            INFO(std::string(cpu::cpu_isa_name(isa)) << " value " << i);
            CHECK(h[(size_t) i] == expected[i]);
        }
    }
}

TEST_CASE("quantized K without rotation: the upstream null-rotation hazard is refused or reported") {
    cpu_backend be(1);
    kv_tensor k{nullptr, ggml_type::q8_0, 64, 1, 4, 1};
    std::vector<char> buf(k.total_bytes(), 0);
    k.data = buf.data();
    std::vector<int32_t> shift(4, 1);
    kshift_desc d;
    d.rope.n_rot = 64;
    CHECK_THROWS_AS(be.k_shift(d, k, shift.data()), usage_error);
    d.on_null_rot = null_rot_policy::plain;
    CHECK(be.k_shift(d, k, shift.data()).null_rotation_hazard);
    d.rope.n_rot = 65;
    CHECK_THROWS_AS(be.k_shift(d, k, shift.data()), std::invalid_argument);
}
