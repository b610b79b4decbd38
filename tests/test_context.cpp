// context against llama_context (src/llama-context.cpp: constructor sizing, decode, memory_update;
// src/llama-kv-cache-iswa.cpp: SWA cache size; llama_kv_cache's size sums for the KV bytes).
#include "cache_test_util.h"
#include "kv/context.h"
#include "core/errors.h"

#include <doctest/doctest.h>

using namespace kvsim;
using kvsim::test::dump;

namespace {
llama_batch_in run(llama_seq_id s, llama_pos p0, uint32_t n) {
    llama_batch_in b;
    for (uint32_t i = 0; i < n; ++i) {
        b.add(p0 + (llama_pos) i, {s});
    }
    return b;
}

context_params params(uint32_t n_ctx, uint32_t n_seq_max = 1, bool unified = false) {
    context_params p;
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq_max;
    p.kv_unified = unified;
    return p;
}

const model_shape llama3 = model_preset("llama-3-8b");
const model_shape gemma3 = model_preset("gemma-3-12b");
}  // namespace

TEST_CASE("context sizing: n_ctx padding, per-stream n_ctx_seq, n_batch and n_ubatch clamps") {
    context_sizes s = compute_context_sizes(llama3, params(4096));
    CHECK(s.n_ctx == 4096);
    CHECK(s.n_ctx_seq == 4096);
    CHECK(s.n_batch == 2048);
    CHECK(s.n_ubatch == 512);
    CHECK(s.n_stream == 1);
    CHECK(s.kv_size == 4096);
    CHECK(s.swa_size == 0);

    s = compute_context_sizes(llama3, params(1000));
    CHECK(s.n_ctx == 1024);
    CHECK(s.n_batch == 1000);   // min with the requested, unpadded n_ctx
    CHECK(s.n_ubatch == 512);

    s = compute_context_sizes(llama3, params(300));
    CHECK(s.n_ctx == 512);
    CHECK(s.n_batch == 300);
    CHECK(s.n_ubatch == 300);

    s = compute_context_sizes(llama3, params(4096, 3, false));
    CHECK(s.n_ctx_seq == 1536);   // pad256(4096 / 3 = 1365)
    CHECK(s.n_ctx == 4608);
    CHECK(s.n_stream == 3);
    CHECK(s.kv_size == 1536);

    s = compute_context_sizes(llama3, params(4096, 3, true));
    CHECK(s.n_ctx == 4096);
    CHECK(s.n_ctx_seq == 4096);
    CHECK(s.n_stream == 1);
    CHECK(s.kv_size == 4096);

    context_params p = params(4096);
    p.n_batch = 256;
    p.n_ubatch = 1024;
    s = compute_context_sizes(llama3, p);
    CHECK(s.n_batch == 256);
    CHECK(s.n_ubatch == 256);
}

TEST_CASE("context sizing: SWA cache = pad256(min(kv_size, n_swa * (unified ? n_seq_max : 1) + n_ubatch))") {
    context_sizes s = compute_context_sizes(gemma3, params(4096));
    CHECK(s.kv_size == 4096);
    CHECK(s.swa_size == 1536);   // 1024 + 512

    context_params p = params(4096);
    p.swa_full = true;
    CHECK(compute_context_sizes(gemma3, p).swa_size == 4096);

    s = compute_context_sizes(gemma3, params(8192, 4, true));
    CHECK(s.kv_size == 8192);
    CHECK(s.swa_size == 4608);   // 4 * 1024 + 512

    s = compute_context_sizes(gemma3, params(8192, 4, false));
    CHECK(s.kv_size == 2048);
    CHECK(s.swa_size == 1536);
    CHECK(s.n_stream == 4);

    p = params(2048);
    p.n_ubatch = 100;
    CHECK(compute_context_sizes(gemma3, p).swa_size == 1280);   // pad256(1124)
    CHECK(compute_context_sizes(gemma3, params(512)).swa_size == 512);   // capped at kv_size
}

TEST_CASE("compute_kv_bytes: Llama-3-8B per token for every cache type (semantics doc section 11)") {
    // 32 layers x (K row + V row) of n_embd_k_gqa = 8 x 128 = 1024 elements
    struct row {
        ggml_type t;
        size_t per_token;
    };
    const row rows[] = {
        {ggml_type::f32, 256 * 1024},  {ggml_type::f16, 128 * 1024},  {ggml_type::bf16, 128 * 1024},
        {ggml_type::q8_0, 68 * 1024},  {ggml_type::q4_0, 36 * 1024},  {ggml_type::q4_1, 40 * 1024},
        {ggml_type::q5_0, 44 * 1024},  {ggml_type::q5_1, 48 * 1024},
    };
    for (const auto & r : rows) {
        CAPTURE(ggml_type_name(r.t));
        context_params p = params(4096);
        p.type_k = p.type_v = r.t;
        const auto b = compute_kv_bytes(llama3, p, compute_context_sizes(llama3, p));
        CHECK(b.total() == r.per_token * 4096);
        CHECK(b.k == b.v);
        CHECK(kv_bytes_per_cell_layer(llama3, r.t, r.t) * 32 == r.per_token);
    }
    context_params p = params(4096, 2, false);
    p.type_k = ggml_type::q8_0;
    const auto b = compute_kv_bytes(llama3, p, compute_context_sizes(llama3, p));
    CHECK(b.k == (size_t) 1088 * 32 * 4096);   // 2 streams x 2048 cells
    CHECK(b.v == (size_t) 2048 * 32 * 4096);
}

TEST_CASE("compute_kv_bytes: Gemma-3-12B iSWA sums 8 full layers and 40 SWA layers") {
    // n_embd_k_gqa = 8 x 256 = 2048; f16 row = 4096 bytes
    CHECK(gemma3.n_layer_swa() == 40);
    CHECK_FALSE(gemma3.is_swa(5));
    CHECK(gemma3.is_swa(4));
    CHECK(gemma3.is_swa(6));
    context_params p = params(4096);
    auto b = compute_kv_bytes(gemma3, p, compute_context_sizes(gemma3, p));
    CHECK(b.k == (size_t) 4096 * (4096 * 8 + 1536 * 40));   // 128 MiB base + 240 MiB SWA
    CHECK(b.total() == (size_t) 736 * 1024 * 1024);
    p.swa_full = true;
    b = compute_kv_bytes(gemma3, p, compute_context_sizes(gemma3, p));
    CHECK(b.total() == (size_t) 4096 * 48 * 8192);
    p = params(8192, 4, false);
    p.type_k = p.type_v = ggml_type::q4_0;   // row = 64 blocks x 18 = 1152 bytes
    b = compute_kv_bytes(gemma3, p, compute_context_sizes(gemma3, p));
    CHECK(b.k == (size_t) 1152 * 4 * (2048 * 8 + 1536 * 40));
}

TEST_CASE("context: usage errors") {
    context_params p = params(4096);
    p.flash_attn = false;
    p.type_v = ggml_type::q8_0;
    CHECK_THROWS_AS(compute_context_sizes(llama3, p), usage_error);
    p.type_v = ggml_type::f16;
    p.type_k = ggml_type::q8_0;   // quantized K alone is fine without flash attention
    CHECK_NOTHROW(compute_context_sizes(llama3, p));

    model_shape odd = llama3;
    odd.head_dim = 48;
    p = params(4096);
    CHECK_NOTHROW(compute_context_sizes(odd, p));
    p.type_k = ggml_type::q4_0;
    CHECK_THROWS_AS(compute_context_sizes(odd, p), usage_error);
    p.type_k = ggml_type::f16;
    p.type_v = ggml_type::q5_1;
    CHECK_THROWS_AS(compute_context_sizes(odd, p), usage_error);

    CHECK_THROWS_AS(compute_context_sizes(llama3, params(0)), usage_error);
    CHECK_THROWS_AS(compute_context_sizes(llama3, params(4096, 0)), usage_error);
    CHECK_THROWS_AS(compute_context_sizes(llama3, params(4096, 257)), usage_error);
    p = params(4096);
    p.n_ubatch = 0;
    CHECK_THROWS_AS(compute_context_sizes(llama3, p), usage_error);
}

TEST_CASE("decode: 0 placed, -1 invalid, 1 no slot; the cache is unchanged after -1 and 1") {
    context ctx(model_preset("tiny-llama"), params(256, 2, true));
    const kv_cache & kv = *ctx.memory().caches()[0];
    CHECK(ctx.decode(run(0, 0, 10)) == DECODE_OK);
    CHECK(kv.cells(0).get_used() == 10);
    const std::string after_ok = dump(kv.cells(0));

    CHECK(ctx.decode(run(0, 11, 1)) == DECODE_INVALID);
    CHECK(ctx.last_error().find("Y = X + 1") != std::string::npos);
    CHECK(ctx.decode(llama_batch_in{}) == DECODE_INVALID);
    CHECK(dump(kv.cells(0)) == after_ok);

    CHECK(ctx.decode(run(1, 0, 246)) == DECODE_OK);
    REQUIRE(kv.cells(0).get_used() == 256);
    const std::string full = dump(kv.cells(0));
    CHECK(ctx.decode(run(0, 10, 1)) == DECODE_NO_SLOT);
    CHECK(ctx.last_error() == "failed to find a memory slot for batch of size 1");
    CHECK(dump(kv.cells(0)) == full);
    CHECK(kv.head(0) == 256);

    CHECK_THROWS_AS(ctx.decode(run(0, 10, 257)), usage_error);   // over n_batch = 256
}

TEST_CASE("decode: pending shifts are applied by the next decode, but not by an invalid one") {
    // llama_context::decode validates the batch (balloc->init, return -1) before memory_update
    context ctx(model_preset("tiny-llama"), params(256, 3, true));
    kv_memory & mem = ctx.memory();
    REQUIRE(ctx.decode(run(0, 0, 10)) == DECODE_OK);
    mem.seq_rm(0, 2, 4);
    mem.seq_add(0, 4, -1, -2);
    REQUIRE(mem.get_has_shift());
    REQUIRE(mem.seq_pos_max(0) == 7);
    CHECK(ctx.decode(run(0, 9, 1)) == DECODE_INVALID);
    CHECK(mem.get_has_shift());
    CHECK(mem.caches()[0]->cells(0).get_shift(9) == -2);
    CHECK(ctx.decode(run(1, 0, 1)) == DECODE_OK);
    CHECK_FALSE(mem.get_has_shift());
    CHECK(dump(mem.caches()[0]->cells(0)) ==
          "0:0{0} 1:1{0} 2:0{1} 4:2{0} 5:3{0} 6:4{0} 7:5{0} 8:6{0} 9:7{0}");
}

TEST_CASE("decode: a decode returning 1 still applies pending shifts") {
    context ctx(model_preset("tiny-llama"), params(256));
    kv_memory & mem = ctx.memory();
    REQUIRE(ctx.decode(run(0, 0, 256)) == DECODE_OK);
    mem.seq_add(0, 100, -1, 1);
    REQUIRE(mem.get_has_shift());
    CHECK(ctx.decode(run(0, 257, 1)) == DECODE_NO_SLOT);
    CHECK_FALSE(mem.get_has_shift());
}

TEST_CASE("decode multi-stream: after a failed prepare stream 1's head is stream 0's (llama.cpp quirk)") {
    // Oracle: printf 'decode 0 12\ndecode 1 10\nrm 1 5 -1\ndecode 1 252\ndecode 1 1\n' |
    //   LLAMA_KV_CACHE_DEBUG=1 kvoracle -m tiny-llama.gguf --ctx 512 --seqs 2 --unified 0 --batch 256 --ubatch 8
    //   -> decode 1 252: rc 1; next find_slot logs head 12 for stream 1 and places at cell 5
    context_params p = params(512, 2, false);
    p.n_batch = 256;
    p.n_ubatch = 8;
    context ctx(model_preset("tiny-llama"), p);
    const kv_cache & kv = *ctx.memory().caches()[0];
    REQUIRE(ctx.decode(run(0, 0, 12)) == DECODE_OK);
    REQUIRE(ctx.decode(run(1, 0, 10)) == DECODE_OK);
    ctx.memory().seq_rm(1, 5, -1);
    REQUIRE(kv.head(1) == 5);
    CHECK(ctx.decode(run(1, 5, 252)) == DECODE_NO_SLOT);
    CHECK(kv.head(1) == 12);
    CHECK(kv.cells(1).get_used() == 5);
    CHECK(ctx.decode(run(1, 5, 1)) == DECODE_OK);
    CHECK(dump(kv.cells(1)) == "0:0{1} 1:1{1} 2:2{1} 3:3{1} 4:4{1} 5:5{1}");
}

TEST_CASE("decode iSWA: both caches receive every ubatch; seq_pos_max comes from the SWA cache") {
    context_params p = params(512);
    p.n_ubatch = 8;
    context ctx(model_preset("tiny-gemma3-swa"), p);
    auto caches = ctx.memory().caches();
    REQUIRE(caches.size() == 2);
    CHECK(caches[0]->get_size() == 512);
    CHECK(caches[1]->get_size() == 256);   // pad256(min(512, 8 + 8))
    REQUIRE(ctx.decode(run(0, 0, 300)) == DECODE_OK);
    CHECK(caches[0]->cells(0).get_used() == 300);
    CHECK(caches[1]->cells(0).get_used() == 256);
    // SWA cells were reused from pos 256 on: the SWA cache holds positions 44..299
    CHECK(caches[1]->seq_pos_min(0) == 44);
    CHECK(ctx.memory().seq_pos_min(0) == 44);
    CHECK(ctx.memory().seq_pos_max(0) == 299);
    CHECK(caches[0]->seq_pos_min(0) == 0);
}
