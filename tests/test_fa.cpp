// Flash-attention decode: CPU backend vs the double-precision reference across head dims, GQA ratios, n_kv,
// KV types, masks with holes, SWA borders, fully masked rows, softcap, ALiBi and Hadamard rotation.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu/cpu_backend.h"
#include "cpu/fa_amx.h"
#include "cpu/fa_group.h"
#include "fp16.h"
#include "kv_content.h"
#include "kernel_test_util.h"
#include "reference.h"

using namespace kvsim;

namespace {

struct fa_case {
    int64_t head_dim = 128, gqa = 4, n_head_kv = 2, n_kv = 300, n_tps = 1, n_stream = 1;
    ggml_type tk = ggml_type::f16, tv = ggml_type::f16;
    float softcap = 0.0f, max_bias = 0.0f;
    float scale = 0.0f;      // 0 = 1/sqrt(head_dim)
    bool rot = false;
    int hole_every = 7;      // every n-th cell is empty (0 = none)
    uint32_t n_swa = 0;      // standard SWA window, 0 = none
    bool mask_all = false;   // mask every cell of token 0
    bool mask_f32 = false;   // f32 mask (flash attention off in llama.cpp) instead of f16
    int64_t stream0 = 0;     // first stream of the call inside a cache of stream0 + n_stream streams
    bool grouped = true;     // cpu_backend::set_fa_grouped
    bool amx = true;         // cpu_backend::set_fa_amx (q8_0 K on AMX where the CPU has it)
    bool quantize_q = true;  // cpu_backend::set_fa_quantize_q
    int seqs = 1;            // sequences sharing the stream round-robin (kernel_test_util.h build_case_mask)
    bool seq0_all = false;   // and seq 0 in every cell
};

// Tolerance on the max abs output error (|V| < 1): float accumulation vs double.
double tolerance(const fa_case & c) { return c.tk == ggml_type::f32 && c.tv == ggml_type::f32 ? 2e-5 : 1e-4; }

void run_case(const fa_case & c, cpu_backend & be, uint32_t seed) {
    std::mt19937 rng(seed);
    be.set_fa_grouped(c.grouped);
    be.set_fa_amx(c.amx);
    be.set_fa_quantize_q(c.quantize_q);
    const attn_rot rot = attn_rot_config(c.tk, c.tv, c.head_dim, c.head_dim, !c.rot);
    const int64_t kv_size = c.n_kv + 5;
    kv_tensor k{nullptr, c.tk, c.head_dim, c.n_head_kv, kv_size, c.stream0 + c.n_stream};
    kv_tensor v{nullptr, c.tv, c.head_dim, c.n_head_kv, kv_size, c.stream0 + c.n_stream};
    std::vector<char> kb(k.total_bytes()), vb(v.total_bytes());
    k.data = kb.data();
    v.data = vb.data();
    test::write_kv_cells(k, v, rot);
    const fa_desc d = test::fa_desc_of(c, rot);

    const test::case_mask cm = test::build_case_mask(c, kv_size, be);
    const std::vector<float> & mask = cm.data;
    const kq_mask_desc & md = cm.desc;

    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> q((size_t) (c.head_dim * d.n_head * c.n_tps * c.n_stream));
    for (auto & x : q) x = u(rng);
    const size_t n_out = (size_t) (c.head_dim * d.n_head * c.n_tps * c.n_stream);
    std::vector<float> out_ref(n_out), out(n_out, NAN);
    fa_args a{q.data(), k, v, c.stream0, mask.data(), md.type, nullptr};
    a.out = out_ref.data();
    ref_flash_attn(d, a, be.fa_q_dot_type(c.tk));
    a.out = out.data();
    be.flash_attn(d, be.plan_flash_attn(d), a);
    double err = 0.0;
    bool finite = true;
    for (size_t i = 0; i < n_out; ++i) {
        finite &= std::isfinite(out[i]);
        err = std::max(err, (double) std::fabs(out[i] - out_ref[i]));
    }
    INFO("hd " << c.head_dim << " gqa " << c.gqa << " n_kv " << c.n_kv << " tk " << std::string(ggml_type_name(c.tk)) << " tv "
               << std::string(ggml_type_name(c.tv)) << " rot " << c.rot << " err " << err);
    CHECK(finite);
    CHECK(err <= tolerance(c));
    if (c.mask_all) {
        for (int64_t e = 0; e < c.head_dim * d.n_head; ++e) CHECK(out[(size_t) e] == 0.0f);  // token 0, stream 0
    }
}

}  // namespace

TEST_CASE("flash attention matches the reference for every KV type, head dim and GQA ratio") {
    cpu_backend be(2);
    // every inner loop: K/V read in place per KV head (AVX-512 builds) with Q.K of a q8_0 K on AMX (where the CPU
    // has it) or on FMAs, the portable tile copy, and Q kept in f32 instead of rounded through q8_0
    bool grouped = true, amx = true, quantize_q = true;
    SUBCASE("K/V read in place per KV head, AMX Q.K") {}
    SUBCASE("K/V read in place per KV head, FMA Q.K") { amx = false; }
    SUBCASE("tiles converted to f32") { grouped = false; }
    SUBCASE("Q kept in f32") { quantize_q = false; }
    INFO("grouped " << grouped << " amx " << amx << " quantize_q " << quantize_q << " (supported here: grouped "
                    << cpu::fa_group_supported(ggml_type::f16, ggml_type::f16, 128, 128) << ", AMX "
                    << cpu::amx_int8_available() << ")");
    uint32_t seed = 1;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (int64_t hd : {64, 128, 256}) {
            for (int64_t gqa : {1, 4, 7, 8}) {  // 7: Qwen2.5-7B (28/4), a partial row block
                fa_case c;
                c.tk = c.tv = t;
                c.head_dim = hd;
                c.gqa = gqa;
                c.n_kv = 1 + (int64_t) (seed * 97 % 700);
                c.rot = ggml_is_quantized(t) && seed % 2 == 0;
                c.grouped = grouped;
                c.amx = amx;
                c.quantize_q = quantize_q;
                run_case(c, be, seed++);
            }
        }
    }
}

TEST_CASE("mixed K/V types, short prefill chunks, several streams") {
    cpu_backend be(2);
    fa_case c;
    c.tk = ggml_type::q8_0;
    c.tv = ggml_type::f16;
    c.n_tps = 3;
    c.n_stream = 2;
    c.n_kv = 1000;
    run_case(c, be, 11);
    c.tk = ggml_type::f16;
    c.tv = ggml_type::q4_0;
    c.rot = true;
    run_case(c, be, 12);
    c.mask_f32 = true;
    c.stream0 = 1;
    c.n_stream = 1;
    run_case(c, be, 13);
}

// A unified cache decoding several sequences together: each token sees only its own sequence's cells, a fraction of
// every tile, and takes Q.K and P.V over just those (cpu_flash_attn.cpp, sparse_token); seqs 2 puts tokens right on
// the half-tile threshold; seqs 3 (6 tokens) gives seq 0 every cell, so its tokens take the whole-tile loops and
// the others the sparse ones in the same call, with an SWA window on top.
TEST_CASE("multi-sequence unified stream: tokens that see a fraction of each tile") {
    cpu_backend be(2);
    uint32_t seed = 300;
    for (ggml_type t : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (int seqs : {2, 3, 4, 8}) {
            for (int64_t gqa : {1, 4, 8}) {
                fa_case c;
                c.tk = c.tv = t;
                c.seqs = seqs;
                c.n_tps = seqs == 3 ? 6 : seqs;
                c.gqa = gqa;
                c.n_kv = 200 + (int64_t) (seed * 37 % 900);
                c.hole_every = seed % 2 ? 7 : 0;
                c.seq0_all = seqs == 3;
                c.n_swa = seqs == 3 ? 150 : 0;
                c.rot = ggml_is_quantized(t) && seed % 2 == 0;
                c.mask_all = seqs == 8 && gqa == 4;
                run_case(c, be, seed++);
                c.amx = false;  // the FMA Q.K for the whole-tile tokens too
                run_case(c, be, seed++);
            }
        }
    }
}

// A prompt chunk: tokens x GQA group >= 16 rows per KV head convert the head's K/V tile to f32 once and run the f32
// loops (cpu_flash_attn.cpp, f32_tile_min_rows); causal, with holes, every KV type, q8_0 K on AMX and FMA.
TEST_CASE("prompt chunks: many query rows per KV head") {
    cpu_backend be(2);
    uint32_t seed = 500;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (int64_t gqa : {1, 4, 8}) {
            for (bool amx : {true, false}) {
                fa_case c;
                c.tk = c.tv = t;
                c.gqa = gqa;
                c.n_tps = gqa == 1 ? 40 : 21;  // 40 / 84 / 168 rows per KV head
                c.n_kv = 300 + (int64_t) (seed * 53 % 900);
                c.hole_every = seed % 3 ? 5 : 0;
                c.rot = ggml_is_quantized(t) && seed % 2 == 0;
                c.amx = amx;
                run_case(c, be, seed++);
            }
        }
    }
    fa_case mixed;  // f16 K with q8_0 V, two streams
    mixed.tv = ggml_type::q8_0;
    mixed.n_tps = 17;
    mixed.n_stream = 2;
    mixed.n_kv = 777;
    run_case(mixed, be, 599);
}

TEST_CASE("n_kv edge sizes: 1, tile +- 1, large split-KV") {
    cpu_backend be(2);
    for (int64_t n : {1, 31, 32, 33, 257, 4097}) {
        fa_case c;
        c.n_kv = n;
        c.hole_every = n > 3 ? 5 : 0;
        run_case(c, be, (uint32_t) n);
    }
    fa_case big;
    big.n_kv = 65536;
    big.n_head_kv = 1;
    big.gqa = 8;
    big.head_dim = 64;
    big.tk = big.tv = ggml_type::q4_0;
    big.n_swa = 40000;  // SWA border far inside the cache: most early tiles skipped
    run_case(big, be, 99);
}

TEST_CASE("SWA borders, fully masked rows, softcap and ALiBi") {
    cpu_backend be(2);
    fa_case c;
    c.n_kv = 500;
    c.n_tps = 2;
    c.n_swa = 33;
    run_case(c, be, 5);
    c.mask_all = true;
    run_case(c, be, 6);
    c.mask_all = false;
    c.n_swa = 0;
    c.softcap = 5.0f;  // with scale 1 the scores (~4) sit on the bend of tanh
    c.scale = 1.0f;
    run_case(c, be, 7);
    c.scale = 0.0f;
    c.softcap = 0.0f;
    c.max_bias = 8.0f;
    c.gqa = 3;  // n_head 6: slopes use n_head_log2 = 4 and the m1 branch
    run_case(c, be, 8);
}

// Q.K of a q8_0 K takes Q rounded through q8_0 (ggml's vec_dot_type); the AMX tiles and the FMA loops must then
// agree to float summation order, and the rounding must be visible against an f32 Q (else the test proves nothing).
TEST_CASE("q8_0 K: AMX and FMA Q.K agree on the quantized Q, which differs from an f32 Q") {
    if (!cpu::amx_int8_available()) MESSAGE("AMX-INT8 not available here: both runs take the FMA loops");
    cpu_backend be(2);
    for (int64_t n_kv : {15, 16, 47, 300, 2049}) {
        for (int64_t hd : {64, 128, 256}) {
            fa_case c;
            c.tk = c.tv = ggml_type::q8_0;
            c.head_dim = hd;
            c.n_kv = n_kv;
            c.gqa = n_kv % 2 ? 4 : 6;  // 6: a partial 4-row block
            c.rot = n_kv % 3 == 0;
            const attn_rot rot = attn_rot_config(c.tk, c.tv, c.head_dim, c.head_dim, !c.rot);
            kv_tensor k{nullptr, c.tk, c.head_dim, c.n_head_kv, c.n_kv, 1}, v{nullptr, c.tv, c.head_dim, c.n_head_kv, c.n_kv, 1};
            std::vector<char> kb(k.total_bytes()), vb(v.total_bytes());
            k.data = kb.data();
            v.data = vb.data();
            test::write_kv_cells(k, v, rot);
            const fa_desc d = test::fa_desc_of(c, rot);
            std::mt19937 rng((uint32_t) (n_kv * hd));
            std::uniform_real_distribution<float> u(-1.0f, 1.0f);
            std::vector<float> q((size_t) (hd * d.n_head));
            for (auto & x : q) x = u(rng);
            std::vector<float> o_amx(q.size()), o_fma(q.size()), r_q8(q.size()), r_f32(q.size());
            fa_args a{q.data(), k, v, 0, nullptr, ggml_type::f16, o_amx.data()};
            be.set_fa_amx(true);
            be.flash_attn(d, be.plan_flash_attn(d), a);
            be.set_fa_amx(false);
            a.out = o_fma.data();
            be.flash_attn(d, be.plan_flash_attn(d), a);
            a.out = r_q8.data();
            ref_flash_attn(d, a, ggml_type::q8_0);
            a.out = r_f32.data();
            ref_flash_attn(d, a, ggml_type::f32);
            double amx_fma = 0, amx_ref = 0, q8_f32 = 0;
            for (size_t i = 0; i < q.size(); ++i) {
                amx_fma = std::max(amx_fma, (double) std::fabs(o_amx[i] - o_fma[i]));
                amx_ref = std::max(amx_ref, (double) std::fabs(o_amx[i] - r_q8[i]));
                q8_f32 = std::max(q8_f32, (double) std::fabs(r_q8[i] - r_f32[i]));
            }
            INFO("n_kv " << n_kv << " hd " << hd << " amx-fma " << amx_fma << " amx-ref " << amx_ref << " q8-f32 " << q8_f32);
            CHECK(amx_fma <= 2e-6);
            CHECK(amx_ref <= 1e-4);
            CHECK(q8_f32 > 1e-5);
        }
    }
}

TEST_CASE("flash attention rejects bad shapes") {
    cpu_backend be(1);
    std::vector<char> buf(1 << 16);
    kv_tensor k{buf.data(), ggml_type::f16, 128, 2, 16, 1};
    std::vector<float> q(128 * 8), out(128 * 8);
    fa_desc d;
    d.n_head = 8;
    d.n_head_kv = 2;
    d.n_kv = 17;  // > kv_size
    fa_args a{q.data(), k, k, 0, nullptr, ggml_type::f16, out.data()};
    CHECK_THROWS_AS(be.flash_attn(d, be.plan_flash_attn(d), a), std::invalid_argument);
    d.n_kv = 16;
    d.n_head = 7;
    CHECK_THROWS_AS(be.flash_attn(d, be.plan_flash_attn(d), a), std::invalid_argument);
    d.n_head = 8;
    d.max_bias = 1.0f;  // ALiBi without a mask
    CHECK_THROWS_AS(be.flash_attn(d, be.plan_flash_attn(d), a), std::invalid_argument);
    d.max_bias = 0.0f;
    CHECK_NOTHROW(be.flash_attn(d, be.plan_flash_attn(d), a));
    d.rot.n_k = 64;  // divides 128 but is a power of two: accepted
    CHECK_NOTHROW(be.flash_attn(d, be.plan_flash_attn(d), a));
    d.rot.n_k = 32 * 3;  // not a power of two: the Walsh-Hadamard transform is undefined (CUDA wrote out of bounds)
    kv_tensor k96{buf.data(), ggml_type::f16, 96, 2, 16, 1};
    fa_args a96{q.data(), k96, k96, 0, nullptr, ggml_type::f16, out.data()};
    d.head_dim_k = d.head_dim_v = 96;
    CHECK_THROWS_WITH_AS(be.flash_attn(d, be.plan_flash_attn(d), a96), doctest::Contains("power of two"), std::invalid_argument);
}
