// The flash-attention cases of test_fa.cpp (scalar and AVX2 loops) and test_fa_avx512.cpp (AVX-512 and AMX
// loops, skipped on CPUs without them): CPU backend vs the double-precision reference across head dims, GQA
// ratios, n_kv, KV types, masks with holes, SWA borders, fully masked rows, softcap, ALiBi and Hadamard rotation,
// each suite run on one instruction-set level (cpu/cpu_isa.h) given by the caller.
#pragma once

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

namespace kvsim::fa_suite {

using cpu::cpu_isa;

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
    cpu_isa isa = cpu_isa::scalar;  // cpu_backend::set_isa
    int seqs = 1;            // sequences sharing the stream round-robin (kernel_test_util.h build_case_mask)
    bool seq0_all = false;   // and seq 0 in every cell
};

// Tolerance on the max abs output error (|V| < 1): float accumulation vs double.
inline double tolerance(const fa_case & c) { return c.tk == ggml_type::f32 && c.tv == ggml_type::f32 ? 2e-5 : 1e-4; }

inline void run_case(const fa_case & c, cpu_backend & be, uint32_t seed) {
    std::mt19937 rng(seed);
    be.set_isa(c.isa);
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
    INFO("isa " << cpu::cpu_isa_name(c.isa) << " hd " << c.head_dim << " gqa " << c.gqa << " n_kv " << c.n_kv << " tk " << std::string(ggml_type_name(c.tk)) << " tv "
               << std::string(ggml_type_name(c.tv)) << " rot " << c.rot << " err " << err);
    CHECK(finite);
    CHECK(err <= tolerance(c));
    if (c.mask_all) {
        for (int64_t e = 0; e < c.head_dim * d.n_head; ++e) CHECK(out[(size_t) e] == 0.0f);  // token 0, stream 0
    }
}


// Every inner loop of `isa`: K/V read in place per KV head (AVX2 and up) with Q.K of a q8_0 K on AMX (AVX-512 CPUs
// that have it) or on FMAs, the portable tile copy, and Q kept in f32 instead of rounded through q8_0.
inline void every_type_head_dim_gqa(cpu_isa isa) {
    cpu_backend be(2);
    struct variant {
        const char * name;
        bool grouped, amx, quantize_q;
    };
    for (const variant & v : {variant{"grouped, AMX Q.K", true, true, true}, variant{"grouped, FMA Q.K", true, false, true},
                              variant{"tiles converted to f32", false, true, true}, variant{"Q kept in f32", true, true, false}}) {
        if (v.grouped && !cpu::fa_group_supported(isa, ggml_type::f16, ggml_type::f16, 128, 128)) continue;
        if (v.amx && v.grouped && v.quantize_q && !(isa == cpu_isa::avx512 && cpu::amx_int8_available())) continue;
        INFO("variant " << v.name);
        uint32_t seed = 1;
        for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
            for (int64_t hd : {64, 128, 256}) {
                for (int64_t gqa : {1, 4, 7, 8}) {  // 7: Qwen2.5-7B (28/4), a partial row block
                    fa_case c;
                    c.isa = isa;
                    c.tk = c.tv = t;
                    c.head_dim = hd;
                    c.gqa = gqa;
                    c.n_kv = 1 + (int64_t) (seed * 97 % 700);
                    c.rot = ggml_is_quantized(t) && seed % 2 == 0;
                    c.grouped = v.grouped;
                    c.amx = v.amx;
                    c.quantize_q = v.quantize_q;
                    run_case(c, be, seed++);
                }
            }
        }
    }
}

// Mixed K/V types, short prefill chunks, several streams.
inline void mixed_types(cpu_isa isa) {
    cpu_backend be(2);
    fa_case c;
    c.isa = isa;
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
    c.tk = ggml_type::q4_0;  // the remaining pairs of quantized types, odd n_kv
    c.tv = ggml_type::q8_0;
    c.n_kv = 777;
    run_case(c, be, 14);
    c.tk = ggml_type::q8_0;
    c.tv = ggml_type::q4_0;
    c.gqa = 8;
    run_case(c, be, 15);
}

// A unified cache decoding several sequences together: each token sees only its own sequence's cells, a fraction of
// every tile, and takes Q.K and P.V over just those (cpu_flash_attn.cpp, sparse_token); seqs 2 puts tokens right on
// the half-tile threshold; seqs 3 (6 tokens) gives seq 0 every cell, so its tokens take the whole-tile loops and
// the others the sparse ones in the same call, with an SWA window on top.
inline void multi_sequence(cpu_isa isa) {
    cpu_backend be(2);
    uint32_t seed = 300;
    for (ggml_type t : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (int seqs : {2, 3, 4, 8}) {
            for (int64_t gqa : {1, 4, 8}) {
                fa_case c;
                c.isa = isa;
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
inline void prompt_chunks(cpu_isa isa) {
    cpu_backend be(2);
    uint32_t seed = 500;
    for (ggml_type t : {ggml_type::f32, ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (int64_t gqa : {1, 4, 8}) {
            for (bool amx : {true, false}) {
                fa_case c;
                c.isa = isa;
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
    mixed.isa = isa;
    mixed.tv = ggml_type::q8_0;
    mixed.n_tps = 17;
    mixed.n_stream = 2;
    mixed.n_kv = 777;
    run_case(mixed, be, 599);
}

// n_kv edge sizes: 1, tile +- 1, an odd count past a chunk, a large split-KV with most tiles masked (SWA).
inline void n_kv_edges(cpu_isa isa) {
    cpu_backend be(2);
    for (ggml_type t : {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0}) {
        for (int64_t n : {1, 31, 32, 33, 127, 129, 257, 4097}) {
            fa_case c;
            c.isa = isa;
            c.tk = c.tv = t;
            c.n_kv = n;
            c.hole_every = n > 3 ? 5 : 0;
            run_case(c, be, (uint32_t) n);
        }
    }
    fa_case big;
    big.isa = isa;
    big.n_kv = 65536;
    big.n_head_kv = 1;
    big.gqa = 8;
    big.head_dim = 64;
    big.tk = big.tv = ggml_type::q4_0;
    big.n_swa = 40000;  // SWA border far inside the cache: most early tiles skipped
    run_case(big, be, 99);
}

// SWA borders, fully masked rows, softcap and ALiBi.
inline void masks_softcap_alibi(cpu_isa isa) {
    cpu_backend be(2);
    fa_case c;
    c.isa = isa;
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

}  // namespace kvsim::fa_suite
