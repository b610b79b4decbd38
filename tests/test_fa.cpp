// Flash-attention decode on the scalar and AVX2 loops (fa_cases.h has the cases; test_fa_avx512.cpp runs them on
// AVX-512 and AMX): CPU backend vs the double-precision reference.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "fa_cases.h"

using namespace kvsim;
using namespace kvsim::fa_suite;

namespace {

// The levels below AVX-512 this CPU runs: scalar always (the tile-copy path with portable loops, as on a CPU without
// AVX2), AVX2 where it has AVX2 + FMA + F16C. A missing AVX2 is said, not hidden.
std::vector<cpu_isa> levels() {
    std::vector<cpu_isa> v{cpu_isa::scalar};
    if (cpu::cpu_isa_supported(cpu_isa::avx2)) {
        v.push_back(cpu_isa::avx2);
    } else if (!cpu::cpu_isa_supported(cpu_isa::neon)) {
        MESSAGE("SKIPPED for this CPU: the AVX2 loops (no AVX2 + FMA + F16C); the scalar loops ran");
    }
    // aarch64 (scripts/test-aarch64.sh runs this file under qemu-user): NEON, and SDOT where the CPU has it
    for (cpu_isa i : {cpu_isa::neon, cpu_isa::neon_dotprod}) {
        if (cpu::cpu_isa_supported(i)) v.push_back(i);
    }
    if (cpu::cpu_isa_supported(cpu_isa::neon) && !cpu::cpu_isa_supported(cpu_isa::neon_dotprod)) {
        MESSAGE("SKIPPED for this CPU: the NEON SDOT loop (no dot-product extension); the SMULL one ran");
    }
    return v;
}

}  // namespace

TEST_CASE("flash attention matches the reference for every KV type, head dim and GQA ratio") {
    for (cpu_isa isa : levels()) every_type_head_dim_gqa(isa);
}

TEST_CASE("mixed K/V types, short prefill chunks, several streams") {
    for (cpu_isa isa : levels()) mixed_types(isa);
}

TEST_CASE("multi-sequence unified stream: tokens that see a fraction of each tile") {
    for (cpu_isa isa : levels()) multi_sequence(isa);
}

TEST_CASE("prompt chunks: many query rows per KV head") {
    for (cpu_isa isa : levels()) prompt_chunks(isa);
}

TEST_CASE("n_kv edge sizes: 1, tile +- 1, large split-KV") {
    for (cpu_isa isa : levels()) n_kv_edges(isa);
}

TEST_CASE("SWA borders, fully masked rows, softcap and ALiBi") {
    for (cpu_isa isa : levels()) masks_softcap_alibi(isa);
}

TEST_CASE("the backend runs the best loops this CPU has, and refuses a level it lacks") {
    cpu_backend be(1);
    CHECK(be.isa() == cpu::cpu_isa_best());
    for (cpu_isa isa : {cpu_isa::scalar, cpu_isa::avx2, cpu_isa::avx512, cpu_isa::neon, cpu_isa::neon_dotprod}) {
        if (cpu::cpu_isa_supported(isa)) {
            CHECK_NOTHROW(be.set_isa(isa));
            CHECK(be.isa() == isa);
        } else {
            CHECK_THROWS_WITH_AS(be.set_isa(isa), doctest::Contains(cpu::cpu_isa_name(isa)), std::invalid_argument);
        }
    }
    CHECK(cpu::cpu_isa_supported(cpu_isa::scalar));
    CHECK_FALSE(cpu::fa_group_supported(cpu_isa::scalar, ggml_type::f16, ggml_type::f16, 128, 128));
    CHECK(cpu::fa_group_supported(cpu_isa::avx2, ggml_type::q4_0, ggml_type::f16, 64, 128) ==
          cpu::cpu_isa_supported(cpu_isa::avx2));
    CHECK_FALSE(cpu::fa_group_supported(cpu::cpu_isa_best(), ggml_type::f16, ggml_type::f16, 72, 72));  // 72 % 16
    // scripts/test-aarch64.sh names the level each emulated CPU must get (Cortex-A53: neon; qemu's max: neon_dotprod)
    if (const char * want = std::getenv("KVSIM_EXPECT_ISA")) CHECK(std::string(cpu::cpu_isa_name(cpu::cpu_isa_best())) == want);
    // the two families never mix: an x86-64 CPU has no NEON level, an aarch64 CPU no AVX level
    CHECK_FALSE((cpu::cpu_isa_supported(cpu_isa::avx2) && cpu::cpu_isa_supported(cpu_isa::neon)));
    CHECK(cpu::fa_group_supported(cpu_isa::neon, ggml_type::q8_0, ggml_type::q4_0, 64, 128) ==
          cpu::cpu_isa_supported(cpu_isa::neon));
}

// Q.K of a q8_0 K takes Q rounded through q8_0 (ggml's vec_dot_type); the AMX tiles and the FMA loops must then
// agree to float summation order, and the rounding must be visible against an f32 Q (else the test proves nothing).
TEST_CASE("q8_0 K: AMX and FMA Q.K agree on the quantized Q, which differs from an f32 Q") {
    if (!cpu::amx_int8_available()) MESSAGE("AMX-INT8 not available here: both runs take the FMA loops");
    cpu_backend be(2);  // the best loops this CPU has (AVX-512 for AMX)
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
