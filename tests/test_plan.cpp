// kvsim plan: the grid, the memory sizes, the metrics and the ranking with hand-worked values; a
// whole plan over the bundled sample trace against kvsim replay's own results; the CLI's refusals.
#include "cli_test_util.h"
#include "plan/plan.h"
#include "plan/plan_report.h"
#include "replay/run_replay.h"
#include "core/errors.h"
#include "util/interrupt.h"

#include <csignal>

#include <doctest/doctest.h>

using namespace kvsim;
using kvsim_test::run_kvsim;

namespace {
const std::string k_sample = std::string(KVSIM_SOURCE_DIR) + "/traces/requests/azure_sample.csv";

request_result req(double arrival, double first, double finish, int32_t n_gen, request_outcome o) {
    request_result r;
    r.arrival = arrival;
    r.admission = first < 0 ? -1 : arrival;
    r.first_token = first;
    r.finish = finish;
    r.n_gen = n_gen;
    r.outcome = o;
    return r;
}

plan_point ok_point(size_t index, double goodput, double ttft_p99, size_t device_bytes) {
    plan_point p;
    p.index = index;
    p.status = plan_status::ok;
    p.metrics.goodput_rps = goodput;
    p.metrics.ttft_p99 = ttft_p99;
    p.memory.model = device_bytes;
    return p;
}

plan_options small_plan() {
    plan_options o;
    o.base.trace = k_sample;
    o.base.model = model_preset("llama-3.1-8b");
    o.base.weights = &parse_weight_file_type("q4_K_M");
    o.memory_bytes = int64_t(24) << 30;
    o.grid.n_parallel = {1, 2};
    o.grid.n_ctx = {4096};
    o.grid.type_k = {ggml_type::f16};
    o.grid.kv_unified = {true};
    o.jobs = 2;
    return o;
}
}  // namespace

TEST_CASE("parse_memory_bytes: bytes and binary units") {
    CHECK(parse_memory_bytes("24GiB") == 25769803776);
    CHECK(parse_memory_bytes("24G") == 25769803776);
    CHECK(parse_memory_bytes("24576MiB") == 25769803776);
    CHECK(parse_memory_bytes("1.5t") == 1649267441664);
    CHECK(parse_memory_bytes("512") == 512);
    CHECK(parse_memory_bytes("4096B") == 4096);
    for (const char * bad : {"", "GiB", "24XB", "24 GiB", "-1G", "0", "0.1", "1e30G", "nan"}) {
        CHECK_THROWS_AS(parse_memory_bytes(bad), std::invalid_argument);
    }
}

TEST_CASE("plan_options: the grid's points in order, V type following K, refusals by field") {
    plan_options o = small_plan();
    o.grid.n_parallel = {1, 4};
    o.grid.n_ctx = {8192, 16384};
    o.grid.type_k = {ggml_type::f16, ggml_type::q8_0};
    o.grid.kv_unified = {false, true};
    CHECK(o.n_points() == 16);
    const auto pts = o.points();
    REQUIRE(pts.size() == 16);
    CHECK(pts[0].n_parallel == 1);
    CHECK(pts[0].n_ctx == 8192);
    CHECK(pts[0].type_k == ggml_type::f16);
    CHECK(pts[0].type_v == ggml_type::f16);
    CHECK(!pts[0].kv_unified);
    CHECK(pts[1].kv_unified);
    CHECK(pts[2].type_k == ggml_type::q8_0);
    CHECK(pts[2].type_v == ggml_type::q8_0);
    CHECK(pts[4].n_ctx == 16384);
    CHECK(pts[8].n_parallel == 4);
    o.grid.type_v = {ggml_type::f16, ggml_type::q4_0};
    CHECK(o.n_points() == 32);
    CHECK(o.points()[2].type_v == ggml_type::q4_0);   // [1]: the same V type with -kvu

    const replay_options r = o.replay_of(pts[11]);   // -np 4 -c 8192 -ctk q8_0 -kvu
    CHECK(r.ctx.n_seq_max == 4);
    CHECK(r.ctx.n_ctx == 8192);
    CHECK(r.ctx.type_k == ggml_type::q8_0);
    CHECK(r.ctx.kv_unified);
    CHECK(!r.n_parallel_auto);

    const auto refusal = [&](auto set) {
        plan_options p = small_plan();
        set(p);
        try {
            p.validate();
        } catch (const option_error & e) {
            return std::string(e.what()) + " [" + e.fields().front() + "]";
        }
        return std::string("(no error)");
    };
    CHECK(refusal([](plan_options &) {}) == "(no error)");
    CHECK(refusal([](plan_options & p) { p.grid.n_parallel.clear(); }) == "n_parallel: the grid needs at least one value [n_parallel]");
    CHECK(refusal([](plan_options & p) { p.grid.n_ctx = {0}; }) == "n_ctx must be >= 1, got 0 [n_ctx]");
    CHECK(refusal([](plan_options & p) { p.grid.cache_ram_mib = {-2}; }) ==
          "cache_ram_mib must be >= -1 (-1 = no limit), got -2 [cache_ram_mib]");
    CHECK(refusal([](plan_options & p) { p.slo.ttft_s = -1; }) ==
          "slo_ttft_s must be a finite number of seconds >= 0 (0 = none), got -1 [slo_ttft_s]");
    CHECK(refusal([](plan_options & p) { p.memory_bytes = 0; }) == "memory_bytes must be > 0, got 0 [memory_bytes]");
    CHECK(refusal([](plan_options & p) {
              p.grid.n_parallel = {1, 2, 3};
              p.max_points = 2;
          }) == "the grid has 3 points, more than max_points 2 [max_points]");
    CHECK(refusal([](plan_options & p) { p.base.model.n_layer = 0; }) ==
          "n_layer, n_head, n_head_kv and head_dim must be > 0 [n_layer]");
}

TEST_CASE("plan_metrics_of: outcomes, objectives and goodput by hand") {
    // TTFTs 0.5, 1.5, 3.0 s; TPOTs (finish - first) / (n_gen - 1): 0.1, 0.05, 0.2 s
    const std::vector<request_result> rs = {
        req(0, 0.5, 1.5, 11, request_outcome::done),        // within TTFT 2 s and TPOT 0.1 s
        req(1, 2.5, 3.0, 11, request_outcome::done),        // within both
        req(2, 5.0, 7.0, 11, request_outcome::done),        // TTFT 3 s: misses
        req(3, 3.5, 4.0, 1, request_outcome::truncated),    // not done: misses
        req(4, -1, -1, 0, request_outcome::failed),
    };
    const plan_metrics m = plan_metrics_of(rs, 10.0, 400, {2.0, 0.1}, 3, 2, 77);
    CHECK(m.requests == 5);
    CHECK(m.done == 3);
    CHECK(m.truncated == 1);
    CHECK(m.failed == 1);
    CHECK(m.slo_met == 2);
    CHECK(m.goodput_rps == doctest::Approx(0.2));
    CHECK(m.gen_tokens_per_s == doctest::Approx(40.0));
    // four TTFTs 0.5 0.5 3.0 1.5 sorted 0.5 0.5 1.5 3.0: p50 index round(0.5 * 3) = 2 -> 1.5; p99 index 3 -> 3.0
    CHECK(m.ttft_p50 == doctest::Approx(1.5));
    CHECK(m.ttft_p99 == doctest::Approx(3.0));
    CHECK(m.tpot_p50 == doctest::Approx(0.1));
    CHECK(m.tpot_p99 == doctest::Approx(0.2));
    CHECK(m.idle_slot_purges == 3);
    CHECK(m.ram_restores == 2);
    CHECK(m.prefix_tokens_reused == 77);
    // without objectives every done request counts
    CHECK(plan_metrics_of(rs, 10.0, 400, {}, 0, 0, 0).slo_met == 3);
    // a TPOT objective alone: the third request (TPOT 0.2 s) misses
    CHECK(plan_metrics_of(rs, 10.0, 400, {0, 0.1}, 0, 0, 0).slo_met == 2);
}

TEST_CASE("rank_plan_points: goodput first, then TTFT p99 and memory; the Pareto front") {
    std::vector<plan_point> pts = {ok_point(0, 5.0, 0.2, 10), ok_point(1, 5.0, 0.1, 12), ok_point(2, 4.0, 0.05, 8),
                                   ok_point(3, 3.0, 0.3, 20), ok_point(4, 5.0, 0.2, 9)};
    plan_point nf;
    nf.index = 5;
    nf.status = plan_status::no_fit;
    pts.push_back(nf);
    rank_plan_points(pts);
    // ranks: goodput 5.0 (ttft 0.1: #1, then ttft 0.2 with 9 B: #4 before 10 B: #0), 4.0 (#2), 3.0 (#3)
    std::vector<size_t> order;
    for (const auto & p : pts) order.push_back(p.index);
    CHECK(order == std::vector<size_t>{1, 4, 0, 2, 3, 5});
    CHECK(pts[0].rank == 1);
    CHECK(pts[4].rank == 5);
    CHECK(pts[5].rank == 0);
    // front: #1 (best TTFT at 5.0), #4 (5.0 with less memory than #1), #2 (lowest TTFT and memory);
    // #0 is beaten by #4 (same goodput and TTFT, less memory), #3 by #0
    CHECK(pts[0].pareto);
    CHECK(pts[1].pareto);
    CHECK(!pts[2].pareto);
    CHECK(pts[3].pareto);
    CHECK(!pts[4].pareto);
    CHECK(!pts[5].pareto);
}

TEST_CASE("run_plan over the bundled sample: each point as kvsim replay finds it") {
    const plan_options o = small_plan();
    const plan_result r = run_plan(o, {}, {});
    REQUIRE(r.points.size() == 2);
    CHECK(!r.interrupted);
    for (const plan_point & p : r.points) {
        REQUIRE(p.status == plan_status::ok);
        const replay_result rr = run_replay_quiet(o.replay_of(p.config));
        const auto & lat = rr.summary["latency"];
        CHECK(p.metrics.requests == 12);
        CHECK(p.metrics.done == lat["outcomes"]["done"].get<uint64_t>());
        CHECK(p.metrics.ttft_p99 == lat["ttft_s"]["p99"].get<double>());
        CHECK(p.metrics.tpot_p50 == lat["tpot_s"]["p50"].get<double>());
        CHECK(p.metrics.sim_seconds == rr.summary["totals"]["sim_seconds"].get<double>());
        CHECK(p.memory.device() == rr.summary["memory"]["device_bytes"].get<size_t>());
    }
    CHECK(r.points[0].rank == 1);
    CHECK(r.points[1].rank == 2);
}

TEST_CASE("run_plan: a budget below the weights fits nothing, with the reason; an op trace is refused") {
    plan_options o = small_plan();
    o.memory_bytes = int64_t(1) << 30;
    const plan_result r = run_plan(o, {}, {});
    for (const plan_point & p : r.points) {
        CHECK(p.status == plan_status::no_fit);
        CHECK(p.reason.rfind("needs ", 0) == 0);
        CHECK(p.reason.find("> 1.00 GiB") != std::string::npos);
    }
    plan_options op = small_plan();
    op.base.trace = std::string(KVSIM_SOURCE_DIR) + "/traces/ops/context_shift.csv";
    CHECK_THROWS_AS(run_plan(op, {}, {}), usage_error);
}

TEST_CASE("run_plan: stop before the first point leaves every point not_run") {
    const plan_result r = run_plan(small_plan(), {}, [] { return true; });
    CHECK(r.interrupted);
    for (const plan_point & p : r.points) CHECK(p.status == plan_status::not_run);
}

TEST_CASE("kvsim plan CLI: the table and outputs; bad input exits 2 naming the flag") {
    const std::string dir = std::string(KVSIM_BINARY_DIR) + "/test_plan_out";
    std::filesystem::remove_all(dir);
    const auto ok = run_kvsim("plan " + k_sample + " --model llama-3.1-8b --weights q4_K_M --memory 24GiB -np 1,2 -c 4096 "
                              "-ctk f16 -kvu on --out " + dir);
    CHECK(ok.rc == 0);
    CHECK(ok.out.find("-np 1 -c 4096 -ctk f16 -ctv f16 -kvu -ub 512 -cram 8192") != std::string::npos);
    CHECK(kvsim_test::data_lines(dir + "/plan.csv") == 2);
    CHECK(std::filesystem::exists(dir + "/plan.html"));
    const auto j = nlohmann::json::parse(kvsim_test::read_text(dir + "/plan.json"));
    CHECK(j["points"].size() == 2);

    const auto none = run_kvsim("plan " + k_sample + " --model llama-3.1-8b --weights q4_K_M --memory 1GiB -np 1 -c 4096 -ctk f16");
    CHECK(none.rc == 0);
    CHECK(none.out.find("nothing fits") != std::string::npos);

    const struct {
        const char * args;
        const char * says;
    } bad[] = {
        {"--memory 24XB", "--memory: memory size '24XB': unknown unit"},
        {"--memory 24GiB -ctk q9_9", "-ctk q9_9"},
        {"--memory 24GiB -np 0", "-np must be >= 1, got 0"},
        {"--memory 24GiB -np 1,2,3,4,5 -c 1,2,3,4,5 --max-points 10", "more than --max-points 10"},
        {"--memory 24GiB --slo-ttft -1", "--slo-ttft must be a finite number"},
        {"--memory 24GiB --n-layer 0", "--n-layer, --n-head"},
    };
    for (const auto & b : bad) {
        const auto r = run_kvsim("plan " + k_sample + " " + b.args);
        CHECK_MESSAGE(r.rc == 2, std::string(b.args));
        const std::string what = std::string(b.args) + " -> " + r.err;
        CHECK_MESSAGE(r.err.find(b.says) != std::string::npos, what);
    }
}

TEST_CASE("plan shards: merged, they equal the whole plan; mismatched shards are refused") {
    plan_options o = small_plan();
    o.grid.n_parallel = {1, 2, 4};
    o.grid.kv_unified = {false, true};
    const nlohmann::json whole = plan_json(run_plan(o, {}, {}));
    std::vector<nlohmann::json> parts;
    std::vector<std::string> names;
    for (int i = 0; i < 3; ++i) {
        plan_options s = o;
        s.shard = {i, 3};
        const plan_result r = run_plan(s, {}, {});
        CHECK(r.points.size() == 2);   // 6 points, every third
        parts.push_back(plan_json(r));
        names.push_back("shard" + std::to_string(i));
    }
    CHECK(plan_json(merge_plan_shards(parts, names)).dump() == whole.dump());
    // refusals: a shard missing, one twice, another plan, a point moved to another shard
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], parts[1]}, {"a", "b"}), "plan merge: 2 of 3 shards given");
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], parts[0], parts[2]}, {"a", "b", "c"}), "b: shard given twice (value '0/3')");
    nlohmann::json other = parts[1];
    other["memory_bytes"] = 1;
    CHECK_THROWS_AS(merge_plan_shards({parts[0], other, parts[2]}, {"a", "b", "c"}), input_error);
    nlohmann::json moved = parts[1];
    moved["points"][0]["index"] = 0;
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], moved, parts[2]}, {"a", "b", "c"}),
                      "b: a point outside this shard or the grid, or held twice (value '0')");
    CHECK_THROWS_AS(merge_plan_shards({nlohmann::json::array()}, {"a"}), input_error);
    // the trace is compared by content: another path to the same bytes merges, edited bytes do not
    nlohmann::json moved_trace = parts[1];
    moved_trace["trace"] = "./elsewhere/azure_sample.csv";
    CHECK(merge_plan_shards({parts[0], moved_trace, parts[2]}, {"a", "b", "c"}).points.size() == 6);
    nlohmann::json edited = parts[1];
    edited["options"]["trace"]["fnv1a"] = "0000000000000000";
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], edited, parts[2]}, {"a", "b", "c"}), "b: another plan than a: options.trace.fnv1a differs");
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], other, parts[2]}, {"a", "b", "c"}), "b: another plan than a: memory_bytes differs");
}

TEST_CASE("find_rate: the scale found meets the objectives, a tenth more does not") {
    plan_options o = small_plan();
    o.base.trace = std::string(KVSIM_SOURCE_DIR) + "/traces/azure/AzureLLMInferenceTrace_conv_2023.csv";
    o.base.limit = 200;   // 200 requests in about 40 s of the bundled trace
    o.base.device = device_preset("h200-datasheet");   // a roofline: no fixed cost per ubatch
    o.base.device.bandwidth_gbs = 100;   // a slow device, so that a few times the trace's rate overloads it
    o.grid.n_parallel = {2};
    o.slo = {1.0, 0.05};
    o.slo_attainment = 0.75;
    o.find_rate = true;
    const plan_result r = run_plan(o, {}, {});
    REQUIRE(r.points.size() == 1);
    const plan_metrics & m = r.points[0].metrics;
    REQUIRE(m.max_rate_scale > 0);
    CHECK(!m.rate_capped);
    const auto attainment_at = [&](double scale) {
        plan_options p = o;
        p.find_rate = false;
        p.base.rate_scale = scale;
        const plan_metrics x = run_plan(p, {}, {}).points[0].metrics;
        return (double) x.slo_met / (double) x.requests;
    };
    CHECK(attainment_at(m.max_rate_scale) >= 0.75);
    CHECK(attainment_at(m.max_rate_scale * 1.1) < 0.75);
    CHECK(m.max_rate_rps > 0);

    plan_options bad = small_plan();
    bad.find_rate = true;
    CHECK_THROWS_WITH(bad.validate(), "find_rate needs an objective (slo_ttft_s or slo_tpot_s)");
    bad.slo.ttft_s = 1;
    bad.slo_attainment = 1.5;
    CHECK_THROWS_WITH(bad.validate(), "slo_attainment must be in (0, 1], got 1.5");
}

TEST_CASE("run_plan: a replay stopped by a signal is not_run, never ranked (hostile-input pass H1)") {
    install_interrupt_handler();
    std::raise(SIGINT);   // the flag is set before the first replay's first step
    const plan_result r = run_plan(small_plan(), {}, {});
    reset_interrupt();
    for (const plan_point & p : r.points) {
        CHECK(p.status == plan_status::not_run);
        CHECK(p.rank == 0);
        CHECK(!p.pareto);
        CHECK(p.reason == "interrupted");
    }
}

TEST_CASE("find_rate answers the same from any --rate-scale (hostile-input pass H2)") {
    plan_options o = small_plan();
    o.base.trace = std::string(KVSIM_SOURCE_DIR) + "/traces/azure/AzureLLMInferenceTrace_conv_2023.csv";
    o.base.limit = 200;
    o.base.device = device_preset("h200-datasheet");   // a roofline: no fixed cost per ubatch
    o.base.device.bandwidth_gbs = 100;
    o.grid.n_parallel = {2};
    o.slo = {1.0, 0.05};
    o.slo_attainment = 0.75;
    o.find_rate = true;
    const double from_1 = run_plan(o, {}, {}).points[0].metrics.max_rate_scale;
    REQUIRE(from_1 > 0);
    for (double s0 : {1e4, 1e-3}) {
        o.base.rate_scale = s0;
        CHECK(run_plan(o, {}, {}).points[0].metrics.max_rate_scale == from_1);
    }
}

TEST_CASE("plan_options: values no replay accepts and repeated values are refused up front (hostile-input pass M1, M3)") {
    const auto refusal = [](auto set) {
        plan_options p = small_plan();
        set(p);
        try {
            p.validate();
        } catch (const option_error & e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    CHECK(refusal([](plan_options & p) { p.grid.n_parallel = {300}; }) ==
          "grid point -np 300 -c 4096 -ctk f16 -ctv f16 -ub 512: n_seq_max must be in [1, 256], got 300");
    CHECK(refusal([](plan_options & p) { p.grid.n_ubatch = {4096}; }) ==
          "grid point -np 1 -c 4096 -ctk f16 -ctv f16 -ub 4096: n_ubatch 4096 > n_batch 2048: a ubatch cannot exceed its batch");
    CHECK(refusal([](plan_options & p) { p.grid.n_parallel = {1, 2, 1}; }) == "n_parallel lists a value twice");
    CHECK(refusal([](plan_options & p) { p.base.rate_scale = 0; }) == "rate_scale must be a finite number > 0, got 0");
}

TEST_CASE("plan merge: a point whose settings are not the grid's, or metrics that cannot be, are refused (hostile-input pass M4)") {
    plan_options o = small_plan();
    std::vector<nlohmann::json> parts;
    for (int i = 0; i < 2; ++i) {
        plan_options s = o;
        s.shard = {i, 2};
        parts.push_back(plan_json(run_plan(s, {}, {})));
    }
    nlohmann::json bad = parts[1];
    bad["points"][0]["config"]["n_parallel"] = 3;
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], bad}, {"a", "b"}), "b: a point whose settings are not the grid's at its index (value '1')");
    bad = parts[1];
    bad["points"][0]["metrics"]["goodput_rps"] = -1;
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], bad}, {"a", "b"}), "b: points[0].metrics: a time or rate that is negative or not finite");
    bad = parts[1];
    bad["shard"] = "0/0";
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], bad}, {"a", "b"}), "b: shard: '0' must be positive (value '0/0')");
    bad = parts[1];
    bad["points"][0]["metrics"].erase("done");
    CHECK_THROWS_WITH(merge_plan_shards({parts[0], bad}, {"a", "b"}), "b: points[0].metrics.done is missing");
}
