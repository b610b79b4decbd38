// kvbench: sweep grammar, point plan and shards, JSON/CSV schema, merge of shards, a tiny in-process sweep whose
// byte counts are checked against an independent count, and the bookkeeping micro-benchmark's counters.
#include <doctest/doctest.h>

// csv.h copies file names with strncpy into fixed buffers; GCC 12 flags the intended truncation
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#include <libfccp/csv.h>
#pragma GCC diagnostic pop

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli_test_util.h"

#include "bench/bench_writers.h"
#include "bench/cache_bench.h"
#include "bench/sweep_runner.h"
#include "cpu/cpu_backend.h"
#include "util/errors.h"

using namespace kvsim;
using kvsim_test::run_kvbench;
using kvsim_test::scratch_dir;
namespace fs = std::filesystem;

namespace {

std::string error_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const input_error & e) {
        return e.what();
    }
    return "(no error)";
}

sweep_config tiny_config() {
    sweep_config c;
    c.ctx = {256, 1024};
    c.kv_types = {ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0};
    c.batch = {1};
    c.repeats = 1;
    c.threads = 2;
    c.limit_bytes = (size_t) 16 << 20;
    c.rotate_bytes = (size_t) 4 << 20;
    return c;
}

// Independent byte count: per sequence, n_kv cells x n_head_kv heads x (K row + V row) of one head.
size_t expected_kv_bytes(int64_t n_kv, int64_t batch, int64_t n_head_kv, ggml_type t, int64_t head_dim) {
    size_t head_row = 0;
    switch (t) {
        case ggml_type::f16: head_row = (size_t) head_dim * 2; break;
        case ggml_type::q8_0: head_row = (size_t) head_dim / 32 * (2 + 32); break;
        case ggml_type::q4_0: head_row = (size_t) head_dim / 32 * (2 + 16); break;
        default: FAIL("unexpected type");
    }
    return (size_t) (n_kv * n_head_kv * batch) * 2 * head_row;
}

point_result fake_point(const bench_point & p) {
    point_result r;
    r.point = p;
    r.kv_bytes = 1000 + (size_t) p.index;
    r.limit_read_gbs = 50;
    r.fa = {100, 200, 300, 3};
    r.eigen = {400, 800, 900, 3};
    r.note = "a, \"quoted\" note";
    return r;
}

// The plan's points of one shard of c, with made-up timings: what a finished shard run holds.
sweep_output fake_shard(const sweep_config & c, shard_spec s) {
    sweep_output o;
    o.config = c;
    o.config.shard = s;
    o.machine.cpu_model = "test cpu";
    o.machine.date = "2026-11-29T00:00:00Z";
    o.limits = {{s.index, "h" + std::to_string(s.index), 50, 60}};
    for (const bench_point & p : shard_points(plan_points(c), s)) o.results.push_back(fake_point(p));
    return o;
}

// The usage_error message merge_outputs raises, or "(no error)".
std::string merge_error(const std::vector<sweep_output> & parts, const std::vector<std::string> & names = {}) {
    try {
        merge_outputs(parts, names);
    } catch (const usage_error & e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("sweep grammar: ranges, lists and their errors") {
    CHECK(parse_int_list("--ctx", "512:4096:x2") == std::vector<int64_t>{512, 1024, 2048, 4096});
    CHECK(parse_int_list("--ctx", "512:5000:x2") == std::vector<int64_t>{512, 1024, 2048, 4096});
    CHECK(parse_int_list("--ctx", "100:130:+10") == std::vector<int64_t>{100, 110, 120, 130});
    CHECK(parse_int_list("--ctx", "1024,4096,32768") == std::vector<int64_t>{1024, 4096, 32768});
    CHECK(parse_int_list("--ctx", "8,1:4:x2,8") == std::vector<int64_t>{8, 1, 2, 4});
    CHECK(parse_int_list("--batch", "7") == std::vector<int64_t>{7});
    CHECK(error_of([] { parse_int_list("--ctx", "512:128:x2"); }).find("above its end") != std::string::npos);
    CHECK(error_of([] { parse_int_list("--ctx", "512:4096:x1"); }).find("factor >= 2") != std::string::npos);
    CHECK(error_of([] { parse_int_list("--ctx", "512:4096:*2"); }).find("xF (multiply) or +S") != std::string::npos);
    CHECK(error_of([] { parse_int_list("--ctx", "512:4096"); }).find("neither a value nor a range") != std::string::npos);
    CHECK(error_of([] { parse_int_list("--ctx", "12a"); }).find("'12a' is not an integer") != std::string::npos);
    CHECK(error_of([] { parse_int_list("--ctx", "0,4"); }).find("must be positive") != std::string::npos);
    CHECK(error_of([] { parse_int_list("--ctx", "1,,2"); }).find("is not an integer") != std::string::npos);
    CHECK(error_of([] { parse_int_list("--ctx", "1:100000:+1"); }).find("more than 4096") != std::string::npos);
    CHECK_NOTHROW(parse_int_list("--ctx", "4:8:x2"));
    CHECK(error_of([] { parse_int_list("--batch", "-1"); }).rfind("--batch", 0) == 0);
}

TEST_CASE("sweep grammar: kv types, shards, head shape") {
    CHECK(parse_kv_types("f16,q8_0,q4_0,f16") ==
          std::vector<ggml_type>{ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0});
    CHECK(error_of([] { parse_kv_types("q5_7"); }).find("unknown KV cache type") != std::string::npos);
    CHECK(error_of([] { parse_kv_types("q5_0"); }).find("no attention kernel") != std::string::npos);
    const shard_spec s = parse_shard("2/5");
    CHECK(s.index == 2);
    CHECK(s.count == 5);
    CHECK(error_of([] { parse_shard("5/5"); }).find("[0, 5)") != std::string::npos);
    CHECK(error_of([] { parse_shard("-1/5"); }).find("[0, 5)") != std::string::npos);
    CHECK(error_of([] { parse_shard("1"); }).find("expected i/n") != std::string::npos);
    CHECK(error_of([] { parse_shard("1/0"); }).find("must be positive") != std::string::npos);
    sweep_config c = tiny_config();
    c.head_dim = 80;
    CHECK(error_of([&] { c.validate(); }).find("multiple of 32") != std::string::npos);
    c.head_dim = 128;
    c.n_head = 30;
    CHECK(error_of([&] { c.validate(); }).find("multiple of n_head_kv") != std::string::npos);
}

TEST_CASE("point plan and shards partition the plan") {
    sweep_config c = tiny_config();
    c.batch = {1, 4};
    const std::vector<bench_point> all = plan_points(c);
    REQUIRE(all.size() == 12);
    CHECK(all[0].batch == 1);
    CHECK(all[0].ctx == 256);
    CHECK(all[1].ctx == 1024);
    CHECK(all[2].type == ggml_type::q8_0);
    CHECK(all[11].batch == 4);
    std::vector<int> hits(all.size());
    for (int i = 0; i < 5; ++i) {
        for (const bench_point & p : shard_points(all, {i, 5})) {
            CHECK(p.index % 5 == i);
            ++hits[(size_t) p.index];
        }
    }
    for (int h : hits) CHECK(h == 1);
    CHECK(point_kv_bytes(c, all[11]) == expected_kv_bytes(1024, 4, 8, ggml_type::q4_0, 128));
}

TEST_CASE("JSON round trip and merge of shards") {
    sweep_output a = fake_shard(tiny_config(), {0, 2});   // points 0, 2, 4
    a.notes = {"n1"};
    sweep_output b = fake_shard(tiny_config(), {1, 2});   // points 1, 3, 5
    b.limits = {{1, "h1", 40, 45}};
    b.notes = {"n1", "n2"};

    const sweep_output back = sweep_output_from_json(nlohmann::json::parse(to_json(a).dump()));
    CHECK(to_json(back) == to_json(a));
    CHECK(back.results[1].fa.median_ns == 200);
    CHECK(back.results[1].eigen_ratio() == doctest::Approx(4.0));

    const sweep_output m = merge_outputs({b, a});
    REQUIRE(m.results.size() == 6);
    for (size_t i = 0; i < 6; ++i) CHECK(m.results[i].point.index == (int64_t) i);
    CHECK(m.limits.size() == 2);
    CHECK(m.notes == std::vector<std::string>{"n1", "n2"});
    CHECK(m.config.shard.count == 1);

    CHECK_THROWS_AS(merge_outputs({a}), usage_error);      // shard 1/2 missing
    CHECK_THROWS_AS(merge_outputs({a, a}), usage_error);   // shard given twice
    sweep_output other = b;
    other.config.repeats = 9;
    CHECK_THROWS_AS(merge_outputs({a, other}), usage_error);  // different sweep
    other = b;
    other.config.shard = {1, 3};
    CHECK_THROWS_AS(merge_outputs({a, other}), usage_error);  // different shard count
    other = a;
    other.results.push_back(a.results.front());
    CHECK_THROWS_AS(merge_outputs({other, b}), usage_error);  // duplicate point
    CHECK_THROWS_AS(merge_outputs({}), usage_error);
    nlohmann::json broken = to_json(a);
    broken["points"][0].erase("flash_attn");
    CHECK_THROWS_AS(sweep_output_from_json(broken), std::runtime_error);
}

// docs/reliability.md, bad-input run: kvbench merge accepted a shard with no points and point
// indices outside the sweep.
TEST_CASE("merge refuses empty shards, points outside the plan or the shard, duplicates and foreign sweeps, naming the file") {
    const sweep_config c = tiny_config();   // 6 points
    const sweep_output a = fake_shard(c, {0, 2}), b = fake_shard(c, {1, 2});
    const std::vector<std::string> names = {"s0/kvbench.json", "s1/kvbench.json"};
    auto has = [](const std::string & msg, const std::string & part) {
        INFO(msg);
        CHECK(msg.find(part) != std::string::npos);
    };
    sweep_output x = b;
    x.results.clear();
    has(merge_error({a, x}, names), "s1/kvbench.json (shard 1/2) has no points; its share of the sweep is 3");
    x.interrupted = true;   // an interrupted run that measured nothing is no better
    has(merge_error({a, x}, names), "has no points");

    x = b;
    x.results.back().point.index = 7;
    has(merge_error({a, x}, names), "s1/kvbench.json: point index 7 is out of range: the sweep has 6 points (0..5)");
    x.results.back().point.index = -1;
    has(merge_error({a, x}, names), "point index -1 is out of range");
    x.results.back().point.index = 4;
    has(merge_error({a, x}, names), "s1/kvbench.json: point index 4 belongs to shard 0/2, not to the file's shard 1/2");
    x = b;
    x.results.back().point.ctx = 512;
    has(merge_error({a, x}, names), "s1/kvbench.json: point 5 is ctx 512 q4_0 batch 1, but the sweep's point 5 is ctx 1024 q4_0 batch 1");

    x = b;
    x.results.push_back(x.results.front());
    x.interrupted = true;
    has(merge_error({a, x}, names), "point 1 appears twice in s1/kvbench.json");
    x = b;
    x.results.pop_back();
    has(merge_error({a, x}, names), "s1/kvbench.json (shard 1/2) has 2 of its 3 points and is not marked interrupted");
    x.interrupted = true;
    CHECK(merge_outputs({a, x}, names).interrupted);

    x = b;
    x.config.ctx = {256, 2048};
    has(merge_error({a, x}, names), "s0/kvbench.json and s1/kvbench.json describe different sweeps (ctx [256,1024] vs [256,2048])");
    has(merge_error({a, a}, names), "shard 0/2 given twice (s0/kvbench.json and s1/kvbench.json)");
    x = fake_shard(c, {1, 3});
    has(merge_error({a, x}, names), "s1/kvbench.json is shard 1/3 but s0/kvbench.json is shard 0/2");

    // more shards than points: a shard with no share of the plan is empty and fine
    sweep_config one = c;
    one.ctx = {256};
    one.kv_types = {ggml_type::f16};
    CHECK(merge_outputs({fake_shard(one, {0, 2}), fake_shard(one, {1, 2})}).results.size() == 1);
}

TEST_CASE("kvbench merge CLI: a bad shard exits 2 naming its kvbench.json; good shards merge") {
    scratch_dir dir("bench_merge");
    const sweep_config c = tiny_config();
    write_outputs(dir / "s0", fake_shard(c, {0, 2}));
    sweep_output bad = fake_shard(c, {1, 2});
    bad.results.front().point.index = 99;
    write_outputs(dir / "bad", bad);
    const auto r = run_kvbench("merge " + (dir / "s0") + " " + (dir / "bad") + " --out " + (dir / "merged"));
    CHECK(r.rc == 2);
    CHECK_MESSAGE(r.err.find(dir / "bad/kvbench.json") != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find("point index 99 is out of range") != std::string::npos, r.err);
    CHECK_FALSE(fs::exists(dir / "merged"));

    write_outputs(dir / "s1", fake_shard(c, {1, 2}));
    const auto ok = run_kvbench("merge " + (dir / "s0") + " " + (dir / "s1/kvbench.json") + " --out " + (dir / "merged") + " --format csv");
    REQUIRE_MESSAGE(ok.rc == 0, ok.err);
    CHECK(read_output(dir / "merged").results.size() == 6);
}

TEST_CASE("tiny sweep in process: outputs well-formed, bytes analytical, kernel agrees with both baselines") {
    const sweep_config c = tiny_config();
    cpu_backend be(c.threads);
    machine_info m = collect_machine_info("test");
    CHECK(!m.cpu_model.empty());
    const sweep_output o = run_sweep(be, c, m, {});
    REQUIRE(o.results.size() == 6);
    REQUIRE(o.limits.size() == 1);
    CHECK(o.limits[0].read_gbs > 0);
    CHECK(!o.interrupted);
    for (const point_result & r : o.results) {
        INFO("ctx " << r.point.ctx << " " << ggml_type_name(r.point.type));
        CHECK(r.status == "ok");
        CHECK(r.kv_bytes == expected_kv_bytes(r.point.ctx, 1, 8, r.point.type, 128));
        CHECK(r.copies * r.kv_bytes >= c.rotate_bytes);
        CHECK(r.fa.n == 1);
        CHECK(r.fa.median_ns > 0);
        CHECK(r.mask_full.n == 1);
        CHECK(r.mask_update.n == 1);
        CHECK(r.kshift.n == 1);
        CHECK(r.eigen.n == 1);
        CHECK(r.ref.n == 1);
        CHECK(r.err_vs_eigen >= 0);
        CHECK(r.err_vs_eigen < 1e-4);
        CHECK(r.err_vs_ref >= 0);
        CHECK(r.err_vs_ref < 1e-4);
        CHECK(r.gbs() == doctest::Approx((double) r.kv_bytes / r.fa.median_ns));
    }

    const std::filesystem::path dir = std::filesystem::path(KVSIM_BINARY_DIR) / "test_bench_out";
    std::filesystem::remove_all(dir);
    write_outputs(dir.string(), o);
    const sweep_output back = read_output(dir.string());
    CHECK(to_json(back) == to_json(o));

    io::CSVReader<6, io::trim_chars<' '>, io::double_quote_escape<',', '"'>> csv((dir / "kvbench.csv").string());
    csv.read_header(io::ignore_extra_column, "index", "ctx", "kv_type", "batch", "kv_bytes", "fa_median_ns");
    int64_t index = 0, ctx = 0, batch = 0;
    std::string type;
    size_t bytes = 0;
    double med = 0;
    size_t rows = 0;
    while (csv.read_row(index, ctx, type, batch, bytes, med)) {
        const point_result & r = o.results[rows++];
        CHECK(index == r.point.index);
        CHECK(ctx == r.point.ctx);
        CHECK(type == ggml_type_name(r.point.type));
        CHECK(bytes == r.kv_bytes);
        CHECK(med == doctest::Approx(r.fa.median_ns).epsilon(1e-6));
    }
    CHECK(rows == o.results.size());
    std::ifstream svg(dir / "kvbench.svg");
    std::stringstream ss;
    ss << svg.rdbuf();
    const std::string s = ss.str();
    CHECK(s.rfind("<svg xmlns='http://www.w3.org/2000/svg'", 0) == 0);
    CHECK(s.find("</svg>") != std::string::npos);
    CHECK(s.find("measured read limit") != std::string::npos);
    CHECK(s.find("q4_0 batch 1") != std::string::npos);
    std::ostringstream table;
    write_table(table, o);
    CHECK(table.str().find("measured limit") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a stop request keeps the measured points and flags the run") {
    const sweep_config c = tiny_config();
    cpu_backend be(c.threads);
    std::atomic<bool> stop{false};
    sweep_hooks hooks;
    hooks.stop = &stop;
    hooks.progress = [&](size_t done, size_t) { stop = done >= 2; };
    const sweep_output o = run_sweep(be, c, collect_machine_info("test"), hooks);
    CHECK(o.results.size() == 2);
    CHECK(o.interrupted);
}

TEST_CASE("points above the buffer cap are skipped with a reason") {
    sweep_config c = tiny_config();
    c.max_buffer_bytes = 1 << 20;
    cpu_backend be(1);
    thread_pool pool(1);
    const point_result r = bench_point_run(be, pool, c, {0, 4096, ggml_type::f16, 1}, 1.0);
    CHECK(r.status == "skipped");
    CHECK(r.note.find("--max-buffer-mib") != std::string::npos);
    CHECK(r.fa.n == 0);
}

TEST_CASE("bookkeeping micro-benchmark: counters add up, same seed same trace") {
    cache_bench_params p;
    p.n_ops = 3000;
    p.n_ctx = 4096;
    for (bool unified : {true, false}) {
        p.unified = unified;
        const cache_bench_result a = run_cache_bench(p);
        const cache_bench_result b = run_cache_bench(p);
        CHECK(a.n_stream == (unified ? 1u : 8u));
        CHECK(a.kv_size == (unified ? 4096u : 512u));
        CHECK(a.n_tokens_placed > 0);
        CHECK(a.n_decode > 0);
        CHECK(a.n_ops >= p.n_ops / 2);
        CHECK(a.n_tokens_placed == b.n_tokens_placed);
        CHECK(a.n_no_slot == b.n_no_slot);
        CHECK(a.n_ops == b.n_ops);
    }
}
