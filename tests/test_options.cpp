// The library's checks of its option structs (the leveldb habit: the library that uses options
// checks them): server_params::validate, replay_options::validate, check_host_memory. Each refusal
// is an option_error naming the struct's fields, never a CLI flag (apps/ translate them; the CLI
// tests in test_replay_cli.cpp check the flag names). Expected messages are literals.
#include "replay/replay_options.h"
#include "timing/step_kernels.h"
#include "sched/server_params.h"
#include "core/errors.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

using namespace kvsim;

namespace {

struct refusal {
    std::string what;
    std::vector<std::string> fields;
};

// The option_error f throws; what "(no error)" when it throws none.
refusal refusal_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const option_error & e) {
        return {e.what(), e.fields()};
    }
    return {"(no error)", {}};
}

refusal server_refusal(const std::function<void(server_params &)> & set) {
    server_params p;
    set(p);
    return refusal_of([&] { p.validate(); });
}

replay_options tiny_replay() {
    replay_options o;
    o.model = model_preset("tiny-llama");
    o.ctx.n_ctx = 256;
    o.kernels.backend = "none";
    return o;
}

refusal replay_refusal(const std::function<void(replay_options &)> & set) {
    replay_options o = tiny_replay();
    set(o);
    return refusal_of([&] { o.validate(); });
}

}  // namespace

TEST_CASE("server_params::validate: llama-server's defaults and the edge values pass") {
    CHECK(server_refusal([](server_params &) {}).what == "(no error)");
    CHECK(server_refusal([](server_params & p) { p.n_keep = -1; }).what == "(no error)");   // the whole prompt
    CHECK(server_refusal([](server_params & p) { p.slot_prompt_similarity = 0; }).what == "(no error)");
    CHECK(server_refusal([](server_params & p) { p.slot_prompt_similarity = 1; }).what == "(no error)");
    CHECK(server_refusal([](server_params & p) { p.cache_ram_mib = -1; }).what == "(no error)");   // no limit
    CHECK(server_refusal([](server_params & p) { p.cache_ram_mib = 0; }).what == "(no error)");    // off
    CHECK(server_refusal([](server_params & p) { p.n_ctx_checkpoints = 0; }).what == "(no error)");
    CHECK(server_refusal([](server_params & p) { p.checkpoint_min_step = 0; }).what == "(no error)");
    CHECK(server_refusal([](server_params & p) { p.block_tokens = 1; }).what == "(no error)");
}

TEST_CASE("server_params::validate names the field and the value") {
    struct bad_case {
        std::function<void(server_params &)> set;
        std::string what, field;
    };
    const std::vector<bad_case> cases = {
        {[](server_params & p) { p.n_keep = -2; }, "n_keep must be >= -1 (-1 = the whole prompt), got -2", "n_keep"},
        {[](server_params & p) { p.n_discard = -1; }, "n_discard must be >= 0, got -1", "n_discard"},
        {[](server_params & p) { p.slot_prompt_similarity = 1.5f; }, "slot_prompt_similarity must be in [0, 1], got 1.5",
         "slot_prompt_similarity"},
        {[](server_params & p) { p.slot_prompt_similarity = -0.25f; }, "slot_prompt_similarity must be in [0, 1], got -0.25",
         "slot_prompt_similarity"},
        {[](server_params & p) { p.slot_prompt_similarity = std::nanf(""); }, "slot_prompt_similarity must be in [0, 1], got nan",
         "slot_prompt_similarity"},
        {[](server_params & p) { p.cache_ram_mib = -2; }, "cache_ram_mib must be -1 (no limit), 0 (off) or a size in MiB, got -2",
         "cache_ram_mib"},
        {[](server_params & p) { p.n_ctx_checkpoints = -1; }, "n_ctx_checkpoints must be >= 0, got -1", "n_ctx_checkpoints"},
        {[](server_params & p) { p.checkpoint_min_step = -8; }, "checkpoint_min_step must be >= 0, got -8", "checkpoint_min_step"},
        {[](server_params & p) { p.block_tokens = 0; }, "block_tokens must be >= 1, got 0", "block_tokens"},
        {[](server_params & p) { p.kv_unified_per_slot = -1; }, "kv_unified_per_slot must be >= 0 (0 = unset), got -1",
         "kv_unified_per_slot"},
    };
    for (const auto & c : cases) {
        CAPTURE(c.what);
        const refusal r = server_refusal(c.set);
        CHECK(r.what == c.what);
        CHECK(r.fields == std::vector<std::string>{c.field});
    }
}

TEST_CASE("replay_options::validate: the model, the batch, the device and the kernel options") {
    CHECK(replay_refusal([](replay_options &) {}).what == "(no error)");
    struct bad_case {
        std::function<void(replay_options &)> set;
        std::string what;
        std::vector<std::string> fields;
    };
    const std::vector<bad_case> cases = {
        {[](replay_options & o) { o.ctx.swa_full = true; },
         "swa_full: model tiny-llama has no sliding-window layers (set n_swa to give it some)", {"swa_full", "n_swa"}},
        {[](replay_options & o) { o.model.swa = swa_type::chunked; }, "swa_type chunked needs n_swa > 0", {"swa_type", "n_swa"}},
        {[](replay_options & o) { o.model.n_head_kv = 0; }, "n_layer, n_head, n_head_kv and head_dim must be > 0",
         {"n_layer", "n_head", "n_head_kv", "head_dim"}},
        {[](replay_options & o) { o.model.n_layer = 2147483647; }, "n_layer 2147483647 exceeds llama.cpp's LLAMA_MAX_LAYERS 512",
         {"n_layer"}},
        {[](replay_options & o) {
             o.model.n_head = 65536;
             o.model.n_head_kv = 65536;
             o.model.head_dim = 4096;
         },
         "n_head 65536 x head_dim 4096 = 268435456 exceeds 1048576 elements per row", {"n_head", "head_dim"}},
        {[](replay_options & o) { o.model.n_head = 100000; }, "n_head 100000 x head_dim 32 = 3200000 exceeds 1048576 elements per row",
         {"n_head", "head_dim"}},
        {[](replay_options & o) { o.model.head_dim = 100000; }, "head_dim 100000 exceeds 4096 (llama.cpp's kernels take up to 576)",
         {"head_dim"}},
        {[](replay_options & o) { o.rate_scale = -1; }, "rate_scale must be a finite number > 0, got -1", {"rate_scale"}},
        {[](replay_options & o) {
             o.model.n_head = 6;
             o.model.n_head_kv = 4;
         },
         "n_head 6 is not a multiple of n_head_kv 4", {"n_head", "n_head_kv"}},
        {[](replay_options & o) {
             o.ctx.n_batch = 512;
             o.ctx.n_ubatch = 1024;
         },
         "n_ubatch 1024 > n_batch 512: a ubatch cannot exceed its batch", {"n_ubatch", "n_batch"}},
        {[](replay_options & o) { o.server.n_keep = -3; }, "n_keep must be >= -1 (-1 = the whole prompt), got -3", {"n_keep"}},
        {[](replay_options & o) { o.device.bandwidth_gbs = 0.001; }, "bandwidth_gbs must be in [0.01, 1e+06], got 0.001",
         {"bandwidth_gbs"}},
        {[](replay_options & o) { o.device.peak_tflops = 2e6; }, "peak_tflops must be in [1e-06, 1e+06], got 2000000",
         {"peak_tflops"}},
        {[](replay_options & o) { o.kernels.verify = true; }, "verify needs a kernel backend (backend cpu or cuda)",
         {"verify", "backend"}},
        {[](replay_options & o) { o.kernels.measured_step_time = true; }, "measured_step_time needs a kernel backend",
         {"measured_step_time", "backend"}},
        {[](replay_options & o) {
             o.kernels.backend = "cpu";
             o.kernels.measured_step_time = true;
         },
         "measured_step_time times attention on this machine's CPU: it needs device host (this machine), not h200",
         {"measured_step_time", "device"}},
        {[](replay_options & o) { o.kernels.time_budget_s = INFINITY; },
         "time_budget_s must be a finite number of seconds >= 0, got inf", {"time_budget_s"}},
        {[](replay_options & o) { o.kernels.time_layers = 0; }, "time_layers must be >= 1 (layers with real K/V buffers), got 0",
         {"time_layers"}},
        {[](replay_options & o) { o.kernels.time_layers = 3; }, "time_layers 3 exceeds the model's 2 layers", {"time_layers"}},
    };
    for (const auto & c : cases) {
        CAPTURE(c.what);
        const refusal r = replay_refusal(c.set);
        CHECK(r.what == c.what);
        CHECK(r.fields == c.fields);
    }
}

// 2^30 cells of a Llama-3-8B layer: 2^30 x 8 KV heads x 128 x 2 bytes (f16) x 2 (K and V) = 4 TiB for the
// one timed layer, more than 80 % of any machine this runs on; without kernels only the cell metadata remains.
TEST_CASE("check_host_memory: a replay that cannot fit names the fields that lower it") {
    replay_options o;
    o.model = model_preset("llama-3-8b");
    o.ctx.n_ctx = 1u << 30;
    o.ctx.n_seq_max = 1;
    o.kernels.backend = "cpu";
    const refusal r = refusal_of([&] { check_host_memory(o); });
    CHECK(r.what.rfind("this replay needs about ", 0) == 0);
    CHECK(r.what.find("cells 1073741824 per stream x 1 streams, 1 timed layer(s) of K/V") != std::string::npos);
    CHECK(r.what.find("; lower n_ctx, n_seq_max or time_layers, or use backend none") != std::string::npos);
    CHECK(r.fields == std::vector<std::string>{"n_ctx", "n_seq_max", "time_layers", "backend"});

    o.ctx.n_ctx = 256;
    CHECK(refusal_of([&] { check_host_memory(o); }).what == "(no error)");
}

TEST_CASE("rope_scaling::validate names the flag's field; context_rope resolves the flags as llama_context") {
    rope_scaling r;
    r.validate();  // every field unset
    const auto field_of = [](const rope_scaling & bad) {
        try {
            bad.validate();
        } catch (const option_error & e) {
            return e.fields().front();
        }
        return std::string("none");
    };
    rope_scaling bad;
    bad.rope_scale = -2;
    CHECK(field_of(bad) == "rope_scale");
    bad = {};
    bad.freq_base = NAN;
    CHECK(field_of(bad) == "rope_freq_base");
    bad = {};
    bad.rope_scale = 2;
    bad.freq_scale = 0.5f;
    CHECK(field_of(bad) == "rope_scale");
    bad = {};
    bad.yarn_beta_fast = INFINITY;
    CHECK(field_of(bad) == "yarn_beta_fast");
    CHECK_THROWS_AS(parse_rope_scaling("ntk"), option_error);

    // the real server's log of these flags (llama_context: "freq_base = 10000.0", "freq_scale = 0.25"): the scale is
    // 1/N, the base and n_ctx_orig the model's; YaRN turns the extrapolation on (ext_factor 1) with a unit magnitude
    const model_shape m = model_preset("tiny-llama");
    r.type = rope_scaling_type::yarn;
    r.rope_scale = 4;
    rope_params p = context_rope(m, r);
    CHECK(p.freq_scale == 0.25f);
    CHECK(p.freq_base == m.rope_freq_base);
    CHECK(p.n_ctx_orig == (int) m.n_ctx_train);
    CHECK(p.ext_factor == 1.0f);
    CHECK(p.attn_factor == doctest::Approx(1.0f).epsilon(1e-6));
    // the server's "the slot context (16384) exceeds the training context of the model (8192)" with --rope-scaling
    // yarn --rope-scale 2 (tests/server_golden/rope_yarn_sizing.scn); linear scaling leaves it (rope_linear_shift)
    r.rope_scale = 2;
    CHECK(n_ctx_train_after_init(m, r) == 8192);
    r.type = rope_scaling_type::linear;
    CHECK(n_ctx_train_after_init(m, r) == m.n_ctx_train);
    r.type = rope_scaling_type::none;  // "never scale if scaling type is none"
    r.rope_scale = 4;
    CHECK(context_rope(m, r).freq_scale == 1.0f);
    CHECK(context_rope(m, r).ext_factor == 0.0f);
    CHECK(context_rope(m, rope_scaling{}).freq_scale == m.rope_freq_scale);
}
