// lib/kv/memory_breakdown against the sizes the real llama.cpp reports when it creates a context.
// Expected values: tests/data/memory/compute_buffer.jsonl, recorded from kvoracle's prebuilt
// libllama (CPU backend) by scripts/memory-probe/record.sh (WORK=... scripts/memory-probe/record.sh):
// each line is a model shape, the llama.cpp flags, and the "compute buffer size" and "output
// buffer size" llama_context logged (MiB, two decimals).
#include "kv/fit.h"
#include "kv/memory_breakdown.h"
#include "core/errors.h"

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <string>

using namespace kvsim;

namespace {
struct record {
    std::string model, args;
    nlohmann::json probe;
};

std::vector<record> recorded() {
    std::ifstream in(std::string(KVSIM_SOURCE_DIR) + "/tests/data/memory/compute_buffer.jsonl");
    std::vector<record> out;
    std::string line;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        out.push_back({j["model"], j["args"], j["probe"]});
    }
    return out;
}

context_params params_of(const record & r) {
    context_params p;
    p.n_ctx = r.probe["n_ctx"];
    p.n_ubatch = r.probe["n_ubatch"];
    p.n_batch = r.probe["n_batch"];
    p.n_seq_max = r.probe["n_seq_max"];
    p.flash_attn = r.probe["flash_attn"];
    p.kv_unified = r.probe["kv_unified"];
    if (r.args.find("-ctk q8_0") != std::string::npos) p.type_k = ggml_type::q8_0;
    if (r.args.find("-ctv q8_0") != std::string::npos) p.type_v = ggml_type::q8_0;
    return p;
}

constexpr double mib = 1024.0 * 1024.0;
}  // namespace

TEST_CASE("compute buffer within 5 % of the size llama.cpp reserves, on every recorded shape and flag set") {
    const auto rs = recorded();
    REQUIRE(rs.size() == 81);
    double worst = 0;
    for (const auto & r : rs) {
        const model_shape m = model_preset(r.model);
        REQUIRE(m.n_vocab == r.probe["n_vocab"].get<uint32_t>());   // the preset is the recorded shape
        REQUIRE(m.n_embd == r.probe["n_embd"].get<uint32_t>());
        const context_params p = params_of(r);
        const double got = (double) compute_buffer_bytes(m, p, compute_context_sizes(m, p)) / mib;
        const double want = r.probe["compute_mib"];
        INFO(fmt::format("{} {}: formula {:.2f} MiB, llama.cpp {:.2f} MiB", r.model, r.args, got, want));
        CHECK(std::abs(got / want - 1) <= 0.05);
        worst = std::max(worst, std::abs(got / want - 1));
    }
    MESSAGE(fmt::format("largest deviation {:.2f} %", worst * 100));
}

TEST_CASE("output buffer: n_vocab floats per sequence, as llama.cpp reports it") {
    for (const auto & r : recorded()) {
        const model_shape m = model_preset(r.model);
        const double got = (double) output_buffer_bytes(m, params_of(r)) / mib;
        CHECK(std::abs(got - r.probe["output_mib"].get<double>()) <= 0.005);   // the log's two decimals
    }
}

TEST_CASE("compute buffer, written out: llama-3.1-8b, -c 32768 -ub 512, one stream") {
    const model_shape m = model_preset("llama-3.1-8b");
    context_params p;
    p.n_ctx = 32768;
    p.kv_unified = true;
    // flash attention: the logits dominate: 512 * (128256 + 2 * 4096) * 4 bytes
    CHECK(compute_buffer_bytes(m, p, compute_context_sizes(m, p)) == 512ull * (128256 + 2 * 4096) * 4);
    // without: the f32 mask (32768 * 512 * 4) and the scores of 32 heads (32768 * 512 * 32 * 4) beside
    // q/k/v rows (5 * 4096 + 2 * 1024 per token, f32)
    p.flash_attn = false;
    CHECK(compute_buffer_bytes(m, p, compute_context_sizes(m, p)) ==
          32768ull * 512 * 4 + 512ull * (32768ull * 32 + 5 * 4096 + 2 * 1024) * 4);
}

TEST_CASE("breakdown: device = weights + K/V + compute; host RAM cache in bytes, -1 kept as no limit") {
    const model_shape m = model_preset("llama-3.1-8b");
    context_params p;
    p.n_ctx = 8192;
    const context_sizes s = compute_context_sizes(m, p);
    const memory_breakdown b = compute_memory_breakdown(m, p, s, 4.9e9, 8192);
    CHECK(b.model == 4900000000ull);
    CHECK(b.context == 8192ull * 32 * 2 * 1024 * 2);   // cells x layers x (K + V) x 1024 f16 values
    CHECK(b.device() == b.model + b.context + b.compute);
    CHECK(b.cache_ram == 8192ll << 20);
    CHECK(compute_memory_breakdown(m, p, s, 0, -1).cache_ram == -1);
    CHECK(compute_memory_breakdown(model_preset("tiny-llama"), p, s, 0, 0).compute == 0);   // no n_embd: unknown
}

TEST_CASE("fit: the context llama.cpp's own --fit chooses, on the memory it measured") {
    // tests/data/memory/fit.jsonl: common_fit_params of the prebuilt libllama-common, run by
    // tests/tools/fit_probe on a CPU device whose memory the probe sets (--memory), with upstream's
    // measured use at the largest (used_max) and the smallest (used_min) context. status 0 = fits.
    std::ifstream in(std::string(KVSIM_SOURCE_DIR) + "/tests/data/memory/fit.jsonl");
    std::string line;
    int n = 0, reduced = 0, failed = 0;
    while (std::getline(in, line)) {
        const auto j = nlohmann::json::parse(line);
        const auto & pr = j["probe"];
        fit_params fp;
        fp.n_ctx_min = pr["fitc"];
        fp.margin = pr["fitt_mib"].get<int64_t>() << 20;
        const uint32_t n_seq_max = pr["n_seq_max"], n_ctx_train = pr["n_ctx_train"];
        const bool unified = pr["kv_unified"];
        const uint32_t n_ctx_given = pr["n_ctx_given"];
        const uint32_t n_max = n_ctx_given ? n_ctx_given : n_ctx_train * n_seq_max;
        const uint32_t n_min = fp.n_ctx_min * (unified ? 1 : n_seq_max);
        // upstream's measurements: only these two contexts are ever asked for
        const auto used_at = [&](uint32_t n_ctx) -> int64_t {
            REQUIRE((n_ctx == n_max || n_ctx == n_min));
            return n_ctx == n_max ? pr["used_max"].get<int64_t>() : pr["used_min"].get<int64_t>();
        };
        const fit_result r = fit_context(n_ctx_given, n_ctx_train, n_seq_max, unified, pr["memory"], fp, used_at);
        INFO(j["model"].get<std::string>() << " " << j["args"].get<std::string>());
        CHECK(r.fits == (pr["status"] == 0));
        if (r.fits) CHECK(r.n_ctx == pr["n_ctx"].get<uint32_t>());
        ++n;
        reduced += r.reduced && r.fits;
        failed += !r.fits;
    }
    CHECK(n == 108);
    CHECK(reduced > 10);   // the interpolation is exercised, not only "fits as asked"
    CHECK(failed > 5);
}

TEST_CASE("fit: interpolation written out; off and a given -c change nothing") {
    // 1 GiB margin; 2 GiB used at 4096 cells, 18 GiB at 131072 x 4 = 524288: with 10 GiB free the
    // target is 9 GiB -> 4096 + 520192 * 7/16 = 231680 cells (a multiple of 256 already)
    const int64_t gib = int64_t(1) << 30;
    const auto used_at = [&](uint32_t n) { return n == 4096 ? 2 * gib : 18 * gib; };
    const fit_result r = fit_context(0, 131072, 4, true, 10 * gib, fit_params{}, used_at);
    CHECK(r.n_ctx == 231680);
    CHECK(r.fits);
    CHECK(r.reduced);
    // non-unified: 4 streams, so the minimum is 4 x 4096 and the rounding 4 x 256
    const auto used_at4 = [&](uint32_t n) { return n == 16384 ? 2 * gib : 18 * gib; };
    CHECK(fit_context(0, 131072, 4, false, 10 * gib, fit_params{}, used_at4).n_ctx == 238592);   // 16384 + 507904 * 7/16
    fit_params off;
    off.enabled = false;
    CHECK(fit_context(0, 131072, 4, true, 10 * gib, off, used_at).n_ctx == 131072);   // llama_context's own default
    CHECK_FALSE(fit_context(8192, 131072, 4, true, 10 * gib, fit_params{}, used_at).fits);   // given: kept, 18 GiB > 9
    CHECK(fit_context(8192, 131072, 4, true, 10 * gib, fit_params{}, used_at).n_ctx == 8192);
    fit_params bad;
    bad.n_ctx_min = 0;
    CHECK_THROWS_AS(bad.validate(), usage_error);
}
