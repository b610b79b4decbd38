// kvsim calibrate: parameter recovery from llama-bench results generated from a known profile,
// the llama-bench replay (ubatches, n_kv) against llama-bench's loop, and bad input (exit 2,
// one error naming file and field, no profile written).
#include "cli_test_util.h"
#include "sched/calibrate.h"
#include "core/errors.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>

using namespace kvsim;
using namespace kvsim_test;

namespace {
const char * k_data = "tests/data/llama-bench/synthetic-llama-3.2-1b-q4_0.json";

bench_point point(uint32_t p, uint32_t n, uint32_t d, uint32_t ub, const std::string & ctk = "f16") {
    bench_point b;
    b.file = "synthetic";
    b.model_type = "llama 1B Q4_0";
    b.model_size = 763097088;
    b.model_n_params = 1235814400;
    b.n_batch = 2048;
    b.n_ubatch = ub;
    b.n_threads = 2;
    b.type_k = ctk;
    b.type_v = ctk;
    b.flash_attn = 1;
    b.n_prompt = p;
    b.n_gen = n;
    b.n_depth = d;
    return b;
}

// A profile whose every term the fit determines: 25 GB/s achieved of 67, GEMMs at 0.12 of
// 0.4 TFLOP/s with 64-token ubatches and 0.15 with 512, attention 3e-11 s per K/V byte and 2e-12 s
// per FLOP. (A per-ubatch cost is not separable from per-size GEMM terms: see the next test.)
device_profile truth(double ubatch_overhead_s = 0) {
    device_profile d = device_preset("cpu");
    d.weight_read_fraction = 25.0 / 67.0;
    d.gemm_fraction = {{64, 0.12 / 0.4}, {512, 0.15 / 0.4}};
    d.ubatch_overhead_s = ubatch_overhead_s;
    d.attention = "linear";
    d.attn_s_per_kv_byte = 3e-11;
    d.attn_s_per_flop = 2e-12;
    return d;
}

std::vector<bench_point> synthetic_points(double ubatch_overhead_s = 0) {
    const model_shape m = model_preset("llama-3.2-1b");
    const step_time_model tm{truth(ubatch_overhead_s), m, &parse_weight_file_type("q4_0")};
    std::vector<bench_point> v;
    for (uint32_t d : {0u, 1024u, 4096u}) {
        for (uint32_t ub : {64u, 512u}) v.push_back(point(512, 0, d, ub));
        v.push_back(point(0, 16, d, 512));
        v.push_back(point(0, 16, d, 512, "q8_0"));
    }
    for (auto & p : v) {
        for (const auto & u : bench_point_ubatches(p, tm)) p.avg_s += tm.seconds_of(u);
    }
    return v;
}
}  // namespace

TEST_CASE("the llama-bench replay: ubatches and n_kv as llama-bench's test_prompt / test_gen drive the cache") {
    const step_time_model tm{device_preset("cpu"), model_preset("llama-3.2-1b"), &parse_weight_file_type("q4_0")};
    // pp512 at depth 1024 with -ub 128: 4 ubatches of 128; n_ctx 1536 -> n_kv = pad(used, 256), at most 1536
    const auto pp = bench_point_ubatches(point(512, 0, 1024, 128), tm);
    REQUIRE(pp.size() == 4);
    const double cell_bytes = 2.0 * 2 * 512 * 16;   // K + V f16 of 8 x 64 per layer, 16 layers
    for (size_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        CHECK(pp[i].n_tokens == 128);
        const double used = 1024 + 128.0 * (double) (i + 1);
        const double n_kv = std::min(1536.0, std::ceil(used / 256) * 256);
        CHECK(pp[i].kv_bytes == n_kv * cell_bytes);
    }
    // tg16 at depth 0: 16 one-token ubatches, the last reading 256 cells (n_ctx 16 pads to 256)
    const auto tg = bench_point_ubatches(point(0, 16, 0, 512), tm);
    REQUIRE(tg.size() == 16);
    CHECK(tg.back().n_tokens == 1);
    CHECK(tg.back().kv_bytes == 256 * cell_bytes);
    // one logits row per ubatch (llama_batch_get_one: the last token only)
    CHECK(pp[0].dense_flops == 2.0 * 16 * 60817408 * 128 + 2.0 * 2048 * 128256);
}

TEST_CASE("calibrate recovers the profile that generated the results") {
    const auto pts = synthetic_points();
    const calibration_result r = calibrate(pts, model_preset("llama-3.2-1b"), nullptr, device_preset("cpu"));
    const device_profile t = truth();
    CHECK(std::string(r.weights->name) == "q4_0");
    REQUIRE(r.notes.size() == 1);   // the per-ubatch cost: collinear with the per-size GEMM terms (next test)
    CHECK(r.notes[0].find("ubatch_overhead_s") != std::string::npos);
    CHECK(r.profile.weight_read_fraction == doctest::Approx(t.weight_read_fraction).epsilon(1e-6));
    REQUIRE(r.profile.gemm_fraction.size() == 2);
    CHECK(r.profile.gemm_fraction[0].first == 64);
    CHECK(r.profile.gemm_fraction[0].second == doctest::Approx(0.3).epsilon(1e-6));
    CHECK(r.profile.gemm_fraction[1].first == 512);
    CHECK(r.profile.gemm_fraction[1].second == doctest::Approx(0.375).epsilon(1e-6));
    CHECK(r.profile.ubatch_overhead_s == 0);
    CHECK(r.profile.attn_s_per_kv_byte == doctest::Approx(t.attn_s_per_kv_byte).epsilon(1e-6));
    CHECK(r.profile.attn_s_per_flop == doctest::Approx(t.attn_s_per_flop).epsilon(1e-6));
    CHECK(r.profile.attention_linear());
    CHECK(r.profile.source == "calibrated");
    CHECK(r.profile.threads == 2);
    for (const auto & p : r.points) CHECK(std::abs(p.error()) < 1e-6);
    // noise of +-2 % on every result: the fit still predicts each within a few percent
    auto noisy = pts;
    for (size_t i = 0; i < noisy.size(); ++i) noisy[i].avg_s *= i % 2 ? 1.02 : 0.98;
    const calibration_result rn = calibrate(noisy, model_preset("llama-3.2-1b"), nullptr, device_preset("cpu"));
    for (const auto & p : rn.points) CHECK(std::abs(p.error()) < 0.05);
}

TEST_CASE("calibrate: terms the results cannot separate are named and fixed") {
    // a per-ubatch cost is collinear with the per-size GEMM terms (and the weight reads): it is
    // fixed at 0, named, and absorbed by them; the results are still predicted exactly
    const auto pts = synthetic_points(2e-3);
    const model_shape m = model_preset("llama-3.2-1b");
    const calibration_result r = calibrate(pts, m, nullptr, device_preset("cpu"));
    REQUIRE(r.notes.size() == 1);
    CHECK(r.notes[0].find("ubatch_overhead_s") != std::string::npos);
    CHECK(r.profile.ubatch_overhead_s == 0);
    for (const auto & p : r.points) CHECK(std::abs(p.error()) < 1e-6);
    // two results for the free terms: refused
    CHECK_THROWS_AS(calibrate({pts[0], pts[2]}, m, nullptr, device_preset("cpu")), usage_error);
}

TEST_CASE("read_llama_bench: llama-bench's json layout, jsonl, and bad files") {
    const auto pts = read_llama_bench(k_data);
    REQUIRE(pts.size() == 9);
    CHECK(pts[0].model_type == "llama 1B Q4_0");
    CHECK(pts[0].n_ubatch == 128);
    CHECK(pts[0].avg_s == doctest::Approx(4.24));
    CHECK(pts[2].test_name() == "tg32");
    CHECK(pts[3].test_name() == "pp512 @ d1024");
    scratch_dir dir("bench");
    {
        // -o jsonl: one object per line
        std::ofstream f(dir / "b.jsonl");
        const auto j = nlohmann::json::parse(read_text(k_data));
        for (const auto & e : j) f << e.dump() << '\n';
    }
    CHECK(read_llama_bench(dir / "b.jsonl").size() == 9);
    auto error_of = [&](const std::string & text) {
        std::ofstream(dir / "x.json") << text;
        try {
            read_llama_bench(dir / "x.json");
        } catch (const input_error & e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(error_of("hello").find("not JSON") != std::string::npos);
    CHECK(error_of("[]").find("no llama-bench results") != std::string::npos);
    CHECK(error_of("{\"a\": 1}").find("array") != std::string::npos);
    auto j = nlohmann::json::parse(read_text(k_data));
    j[4].erase("n_depth");
    CHECK(error_of(j.dump()).find("entry 4: field n_depth is missing") != std::string::npos);
    j = nlohmann::json::parse(read_text(k_data));
    j[1]["avg_ns"] = "fast";
    CHECK(error_of(j.dump()).find("entry 1: field avg_ns") != std::string::npos);
}

TEST_CASE("kvsim calibrate: the CLI fits, prints residuals and writes the profile; bad input exits 2 and writes nothing") {
    scratch_dir dir("calcli");
    auto r = run_kvsim(std::string("calibrate ") + k_data + " --model llama-3.2-1b -o " + (dir / "p.json"));
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("pp512 @ d4096") != std::string::npos);
    CHECK(r.out.find("|error| median") != std::string::npos);
    const auto p = load_device_profile(dir / "p.json");
    CHECK(p.source == "calibrated");
    // the written profile drives a replay
    r = run_kvsim("replay traces/requests/azure_sample.csv --model llama-3.2-1b --weights q4_0 --backend none -q --limit 5 --device " +
                  (dir / "p.json"));
    CHECK(r.rc == 0);

    auto refused = [&](const std::string & file, const std::string & extra, const std::string & needle) {
        const std::string out = dir / "never.json";
        const auto res = run_kvsim("calibrate " + file + " --model llama-3.2-1b -o " + out + " " + extra);
        CHECK(res.rc == 2);
        CHECK(res.err.find(needle) != std::string::npos);
        CHECK(lines_of(res.err).size() == 1);
        CHECK_FALSE(fs::exists(out));
    };
    std::ofstream(dir / "notjson.json") << "llama-bench: error";
    refused(dir / "notjson.json", "", "notjson.json: not JSON");
    auto j = nlohmann::json::parse(read_text(k_data));
    j[0].erase("model_n_params");
    std::ofstream(dir / "missing.json") << j.dump();
    refused(dir / "missing.json", "", "field model_n_params is missing");
    j = nlohmann::json::parse(read_text(k_data));
    for (auto & e : j) {   // a Llama-3.1-8B result
        e["model_type"] = "llama 8B Q4_0";
        e["model_n_params"] = 8030261248ull;
        e["model_size"] = 4653375488ull;
    }
    std::ofstream(dir / "other.json") << j.dump();
    refused(dir / "other.json", "", "field model_n_params is not model llama-3.2-1b's");
    refused(k_data, "--weights q8_0", "field model_type says the weights are q4_0, not --weights q8_0");
    j = nlohmann::json::parse(read_text(k_data));
    std::ofstream(dir / "few.json") << nlohmann::json::array({j[0], j[2]}).dump();
    refused(dir / "few.json", "", "free terms");
    refused(dir / "nosuch.json", "", "nosuch.json: cannot open");
}

TEST_CASE("a real llama-bench -o json file (noisy times) reads and fits without error") {
    const std::string f = "tests/data/llama-bench/measured-noisy-llama-3.2-1b-q4_0-cpu.json";
    const auto pts = read_llama_bench(f);
    REQUIRE(pts.size() == 9);
    CHECK(pts[0].model_type == "llama 1B Q4_0");
    CHECK(pts[0].flash_attn == -1);   // -fa auto
    const model_shape m = model_preset("llama-3.2-1b");
    for (const auto & p : pts) CHECK_NOTHROW(check_bench_model(p, m, bench_weight_type(p, nullptr)));
    CHECK(pts[0].model_size == model_weight_bytes(m, parse_weight_file_type("q4_0")).file_bytes());
    const calibration_result r = calibrate(pts, m, nullptr, device_preset("cpu"));
    CHECK(r.points.size() == 9);
    CHECK(r.profile.weight_read_fraction > 0);
}
