// KQ mask: CPU backend vs the naive rule (bit-exact), a hand-checked case, incremental == full rebuild.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/cpu_backend.h"
#include "fp16.h"
#include "kernel_test_util.h"
#include "reference.h"

using namespace kvsim;

namespace {

using test::random_stream;
using stream_data = test::mask_stream_data;

size_t elem_bytes(ggml_type t) { return t == ggml_type::f16 ? 2 : 4; }

}  // namespace

TEST_CASE("hand-checked mask: causal, holes, foreign seq, SWA, ALiBi") {
    stream_data s;
    s.cell_pos = {0, 1, 2, -1, 4, 5};
    s.cell_seq.resize(6);
    for (int j : {0, 1, 2, 4}) s.cell_seq[j].set(0);
    s.cell_seq[5].set(1);
    s.tok_pos = {3};
    s.tok_seq = {0};
    const auto v = s.view();
    kq_mask_desc d;
    d.n_kv = 6;
    d.n_tps = 1;
    d.type = ggml_type::f32;
    std::vector<float> m(6);
    cpu_backend be(1);
    be.build_kq_mask(d, &v, m.data());
    const float I = -INFINITY;
    CHECK(m == std::vector<float>{0, 0, 0, I, I, I});
    d.swa = swa_type::standard;
    d.n_swa = 2;  // p1 - p0 >= 2 masked
    be.build_kq_mask(d, &v, m.data());
    CHECK(m == std::vector<float>{I, I, 0, I, I, I});
    d.swa = swa_type::none;
    d.alibi = true;
    be.build_kq_mask(d, &v, m.data());
    CHECK(m == std::vector<float>{-3, -2, -1, I, I, I});
    d.causal = false;
    be.build_kq_mask(d, &v, m.data());
    CHECK(m == std::vector<float>{-3, -2, -1, I, -1, I});
}

TEST_CASE("CPU mask equals the reference for every SWA type, ALiBi, f16/f32, several streams") {
    std::mt19937 rng(42);
    cpu_backend be(2);
    for (ggml_type t : {ggml_type::f16, ggml_type::f32}) {
        for (swa_type sw : {swa_type::none, swa_type::standard, swa_type::chunked, swa_type::symmetric}) {
            for (bool alibi : {false, true}) {
                for (bool causal : {true, false}) {
                    kq_mask_desc d;
                    d.n_kv = 256 + rng() % 300;
                    d.n_tps = 1 + rng() % 5;
                    d.n_stream = 1 + rng() % 3;
                    d.causal = causal;
                    d.swa = sw;
                    d.n_swa = sw == swa_type::none ? 0 : 1 + rng() % 64;
                    d.alibi = alibi;
                    d.type = t;
                    std::vector<stream_data> sd;
                    std::vector<kq_mask_stream> views;
                    for (int64_t s = 0; s < d.n_stream; ++s) sd.push_back(random_stream(rng, d.n_kv, d.n_tps));
                    for (auto & s : sd) views.push_back(s.view());
                    const size_t bytes = (size_t) (d.n_kv * d.n_tps * d.n_stream) * elem_bytes(t);
                    std::vector<char> a(bytes), b(bytes);
                    ref_build_kq_mask(d, views.data(), a.data());
                    be.build_kq_mask(d, views.data(), b.data());
                    CHECK(std::memcmp(a.data(), b.data(), bytes) == 0);
                }
            }
        }
    }
}

TEST_CASE("incremental mask update equals a full rebuild over random edit sequences") {
    std::mt19937 rng(3);
    cpu_backend be(1);
    for (swa_type sw : {swa_type::none, swa_type::standard, swa_type::chunked, swa_type::symmetric}) {
        for (int variant = 0; variant < 3; ++variant) {
            const bool alibi = variant == 1;
            kq_mask_desc d;
            d.causal = variant != 2;  // non-causal: only SWA bounds the visible positions
            d.type = alibi ? ggml_type::f32 : ggml_type::f16;
            d.n_kv = 512;
            d.n_tps = 2;
            d.n_stream = 2;
            d.swa = sw;
            d.n_swa = sw == swa_type::none ? 0 : 16 + rng() % 100;
            d.alibi = alibi;
            std::vector<stream_data> sd;
            std::vector<kq_mask_stream> views(2);
            for (int s = 0; s < 2; ++s) sd.push_back(random_stream(rng, d.n_kv, d.n_tps));
            for (int s = 0; s < 2; ++s) views[s] = sd[s].view();
            const size_t n = (size_t) (d.n_kv * d.n_tps * d.n_stream) * elem_bytes(d.type);
            std::vector<char> inc(n), full(n);
            be.build_kq_mask(d, views.data(), inc.data());
            for (int step = 0; step < 60; ++step) {
                std::vector<kq_mask_change> ch(2);
                for (int s = 0; s < 2; ++s) {
                    auto & st = sd[s];
                    ch[s].prev_tok_pos = st.tok_pos;
                    ch[s].prev_tok_seq = st.tok_seq;
                    const int edits = rng() % 6;
                    for (int e = 0; e < edits; ++e) {  // decode writes, seq_rm holes, seq_cp
                        const uint32_t j = rng() % d.n_kv;
                        st.cell_pos[j] = rng() % 4 == 0 ? -1 : (llama_pos) (rng() % 800);
                        st.cell_seq[j].reset();
                        if (st.cell_pos[j] >= 0) st.cell_seq[j].set(rng() % 4);
                        ch[s].cells.push_back(j);
                    }
                    for (int64_t i = 0; i < d.n_tps; ++i) {
                        st.tok_pos[i] += (llama_pos) (rng() % 3);  // decode steps advance (sometimes stall)
                        if (rng() % 15 == 0) st.tok_pos[i] = std::max<llama_pos>(0, st.tok_pos[i] - (llama_pos) (rng() % 40));  // rollback
                        if (rng() % 10 == 0) st.tok_seq[i] = (llama_seq_id) (rng() % 4);
                    }
                    views[s] = st.view();
                }
                be.update_kq_mask(d, views.data(), ch.data(), inc.data());
                ref_build_kq_mask(d, views.data(), full.data());
                REQUIRE(inc == full);
            }
        }
    }
}

TEST_CASE("bad mask descriptions throw") {
    cpu_backend be(1);
    stream_data s;
    s.cell_pos = {0};
    s.cell_seq.resize(1);
    s.tok_pos = {0};
    s.tok_seq = {300};
    const auto v = s.view();
    kq_mask_desc d;
    d.n_kv = 1;
    d.n_tps = 1;
    float m;
    CHECK_THROWS_AS(be.build_kq_mask(d, &v, &m), std::invalid_argument);
    s.tok_seq = {0};
    d.type = ggml_type::q8_0;
    CHECK_THROWS_AS(be.build_kq_mask(d, &v, &m), std::invalid_argument);
}
