// kvbench: sweep grammar, point plan and shards, JSON/CSV schema, merge of shards, a tiny in-process sweep whose
// byte counts are checked against an independent count, and the bookkeeping micro-benchmark's counters.
#include <doctest/doctest.h>

// csv.h copies file names with strncpy into fixed buffers; GCC 12 flags the intended truncation
#pragma GCC diagnostic push
#if !defined(__clang__)  // GCC's warning; clang does not know it
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#endif
#include <libfccp/csv.h>
#pragma GCC diagnostic pop

#include <sys/stat.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "cli_test_util.h"

#include "bench/bench_json.h"
#include "bench/bench_merge.h"
#include "bench/bench_writers.h"
#include "bench/cache_bench.h"
#include "bench/machine_probe.h"
#include "bench/sweep_runner.h"
#include "bytes.h"
#include "cpu/cpu_backend.h"
#include "core/errors.h"

using namespace kvsim;
using kvsim_test::run_kvbench;
using kvsim_test::scratch_dir;
namespace fs = std::filesystem;

namespace {

// The message of the E thrown by f, or "(no error)".
template <class E = input_error>
std::string error_of(const std::function<void()> & f) {
    try {
        f();
    } catch (const E & e) {
        return e.what();
    }
    return "(no error)";
}

// CHECK that msg contains part, showing msg when it does not.
void has(const std::string & msg, const std::string & part) {
    INFO(msg);
    CHECK(msg.find(part) != std::string::npos);
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

point_result fake_point(const sweep_point & p) {
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
    for (const sweep_point & p : shard_points(plan_points(c), s)) o.results.push_back(fake_point(p));
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
    CHECK(parse_kv_types("--kv-type", "f16,q8_0,q4_0,f16") ==
          std::vector<ggml_type>{ggml_type::f16, ggml_type::q8_0, ggml_type::q4_0});
    CHECK(error_of([] { parse_kv_types("--kv-type", "q5_7"); }).find("unknown KV cache type") != std::string::npos);
    CHECK(error_of([] { parse_kv_types("--kv-type", "q5_0"); }).find("no attention kernel") != std::string::npos);
    const shard_spec s = parse_shard("--shard", "2/5");
    CHECK(s.index == 2);
    CHECK(s.count == 5);
    CHECK(error_of([] { parse_shard("--shard", "5/5"); }).find("[0, 5)") != std::string::npos);
    CHECK(error_of([] { parse_shard("--shard", "-1/5"); }).find("[0, 5)") != std::string::npos);
    CHECK(error_of([] { parse_shard("--shard", "1"); }).find("expected i/n") != std::string::npos);
    CHECK(error_of([] { parse_shard("--shard", "1/0"); }).find("must be positive") != std::string::npos);
    sweep_config c = tiny_config();
    c.head_dim = 80;
    CHECK(error_of<option_error>([&] { c.validate(); }).find("multiple of 32") != std::string::npos);
    c.head_dim = 128;
    c.n_head = 30;
    CHECK(error_of<option_error>([&] { c.validate(); }).find("multiple of n_head_kv") != std::string::npos);
}

TEST_CASE("point plan and shards partition the plan") {
    sweep_config c = tiny_config();
    c.batch = {1, 4};
    const std::vector<sweep_point> all = plan_points(c);
    REQUIRE(all.size() == 12);
    CHECK(all[0].batch == 1);
    CHECK(all[0].ctx == 256);
    CHECK(all[1].ctx == 1024);
    CHECK(all[2].type == ggml_type::q8_0);
    CHECK(all[11].batch == 4);
    std::vector<int> hits(all.size());
    for (int i = 0; i < 5; ++i) {
        for (const sweep_point & p : shard_points(all, {i, 5})) {
            CHECK(p.index % 5 == i);
            ++hits[(size_t) p.index];
        }
    }
    for (int h : hits) CHECK(h == 1);
    // point 11: batch 4, q4_0, ctx 1024, 8 KV heads of 128: a q4_0 row of 128 is 4 blocks of 18 bytes = 72;
    // 4 sequences x 1024 cells x 8 heads x (K + V) x 72 = 4,718,592
    CHECK(point_kv_bytes(c, all[11]) == 4718592);
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

    // a kvbench.json written before the adjacent probe existed reads as "not measured"
    a.results[0].adj_read_gbs = 25;
    a.results[0].adj_frac = 0.5;
    nlohmann::json old = to_json(a);
    CHECK(sweep_output_from_json(old).results[0].adj_frac == 0.5);
    old["points"][0].erase("adj_read_gbs");
    old["points"][0].erase("adj_frac");
    CHECK(sweep_output_from_json(old).results[0].adj_read_gbs == 0);
    CHECK(sweep_output_from_json(old).results[0].adj_frac == 0);
    a.results[0].roof_gbs = 30;
    a.results[0].roof_frac = 1.2;
    a.results[0].roof_ctx = 256;
    old = to_json(a);
    CHECK(sweep_output_from_json(old).results[0].roof_frac == 1.2);
    for (const char * f : {"roof_gbs", "roof_frac", "roof_ctx"}) old["points"][0].erase(f);
    CHECK(sweep_output_from_json(old).results[0].roof_gbs == 0);
    CHECK(sweep_output_from_json(old).results[0].roof_frac == 0);
    CHECK(sweep_output_from_json(old).results[0].roof_ctx == 0);
}

// docs/reliability.md, bad-input run: kvbench merge accepted a shard with no points and point
// indices outside the sweep.
TEST_CASE("merge refuses empty shards, points outside the plan or the shard, duplicates and foreign sweeps, naming the file") {
    const sweep_config c = tiny_config();   // 6 points
    const sweep_output a = fake_shard(c, {0, 2}), b = fake_shard(c, {1, 2});
    const std::vector<std::string> names = {"s0/kvbench.json", "s1/kvbench.json"};
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

TEST_CASE("tiny sweep in process: outputs well-formed, bytes and roof cells by hand, kernel agrees with both baselines") {
    const sweep_config c = tiny_config();
    cpu_backend be(c.threads);
    machine_info m = collect_machine_info("test");
    CHECK(!m.cpu_model.empty());
    const sweep_output o = run_sweep(be, c, m, {});
    REQUIRE(o.results.size() == 6);
    REQUIRE(o.limits.size() == 1);
    CHECK(o.limits[0].read_gbs > 0);
    CHECK(o.limits[0].read_gbs_one_thread > 0);  // 2 threads: the one-thread probe runs too
    CHECK(!o.interrupted);
    // K+V bytes one call reads: ctx cells x 8 KV heads x (K + V) x one head's row of 128; the row is 256 bytes
    // in f16, 4 blocks of (2 + 32) = 136 in q8_0, 4 blocks of (2 + 16) = 72 in q4_0 (ggml-common.h):
    // per cell 8 x 2 x {256, 136, 72} = {4096, 2176, 1152} bytes.
    // Compute roof's cells (roof_ctx), from the per-cell bytes and half the L2 in whole 128-cell tiles, at
    // least one tile: fit = max(128, floor(L2 / 2 / per cell / 128) x 128); roof_ctx = min(fit, ctx in whole
    // tiles) when that is two tiles or more, else min(ctx, fit). Written out for the L2 sizes of common
    // server cores (1 MiB is also what kvbench assumes when sysfs does not say):
    //   L2 512 KiB: fit {64 -> 128, 120 -> 128, 227 -> 128}: roof_ctx 128 everywhere
    //   L2 1 MiB:   fit {128, 240 -> 128, 455 -> 384}: f16 and q8_0 128; q4_0 ctx 256: 256, ctx 1024: 384
    //   L2 2 MiB:   fit {256, 481 -> 384, 910 -> 896}: ctx 256: 256; ctx 1024: f16 256, q8_0 384, q4_0 896
    struct want_point {
        int64_t ctx;
        ggml_type type;
        size_t kv_bytes;
        int64_t roof_ctx_512k, roof_ctx_1m, roof_ctx_2m;
    };
    const want_point want[6] = {
        {256, ggml_type::f16, 256 * 4096, 128, 128, 256},     // 1,048,576 bytes
        {1024, ggml_type::f16, 1024 * 4096, 128, 128, 256},   // 4,194,304
        {256, ggml_type::q8_0, 256 * 2176, 128, 128, 256},    // 557,056
        {1024, ggml_type::q8_0, 1024 * 2176, 128, 128, 384},  // 2,228,224
        {256, ggml_type::q4_0, 256 * 1152, 128, 256, 256},    // 294,912
        {1024, ggml_type::q4_0, 1024 * 1152, 128, 384, 896},  // 1,179,648
    };
    const size_t l2 = cpu_cache_bytes(2) > 0 ? cpu_cache_bytes(2) : (size_t) 1 << 20;
    if (l2 != 512 * 1024 && l2 != 1024 * 1024 && l2 != 2048 * 1024) MESSAGE("L2 of " << l2 << " bytes: roof_ctx not checked");
    for (size_t i = 0; i < o.results.size(); ++i) {
        const point_result & r = o.results[i];
        INFO("ctx " << r.point.ctx << " " << ggml_type_name(r.point.type));
        CHECK(r.point.ctx == want[i].ctx);
        CHECK(r.point.type == want[i].type);
        CHECK(r.status == point_status::ok);
        CHECK(r.kv_bytes == want[i].kv_bytes);
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
        // measured (their values are timings: docs/benchmarks.md, not pass/fail)
        CHECK(r.adj_read_gbs > 0);
        CHECK(r.adj_frac > 0);
        CHECK(r.roof_gbs > 0);
        CHECK(r.roof_frac > 0);
        if (l2 == 512 * 1024) CHECK(r.roof_ctx == want[i].roof_ctx_512k);
        if (l2 == 1024 * 1024) CHECK(r.roof_ctx == want[i].roof_ctx_1m);
        if (l2 == 2048 * 1024) CHECK(r.roof_ctx == want[i].roof_ctx_2m);
    }

    const std::filesystem::path dir = std::filesystem::path(KVSIM_BINARY_DIR) / "test_bench_out";
    std::filesystem::remove_all(dir);
    write_outputs(dir.string(), o);
    const sweep_output back = read_output(dir.string());
    CHECK(to_json(back) == to_json(o));

    io::CSVReader<9, io::trim_chars<' '>, io::double_quote_escape<',', '"'>> csv((dir / "kvbench.csv").string());
    csv.read_header(io::ignore_extra_column, "index", "ctx", "kv_type", "batch", "kv_bytes", "fa_median_ns", "adj_frac",
                    "roof_frac", "roof_ctx");
    int64_t index = 0, ctx = 0, batch = 0, roof_ctx = 0;
    std::string type;
    size_t bytes = 0;
    double med = 0, adj = 0, roof = 0;
    size_t rows = 0;
    while (csv.read_row(index, ctx, type, batch, bytes, med, adj, roof, roof_ctx)) {
        const point_result & r = o.results[rows++];
        CHECK(index == r.point.index);
        CHECK(ctx == r.point.ctx);
        CHECK(type == ggml_type_name(r.point.type));
        CHECK(bytes == r.kv_bytes);
        CHECK(med == doctest::Approx(r.fa.median_ns).epsilon(1e-6));
        CHECK(adj == doctest::Approx(r.adj_frac).epsilon(1e-4));
        CHECK(roof == doctest::Approx(r.roof_frac).epsilon(1e-4));
        CHECK(roof_ctx == r.roof_ctx);
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
    CHECK(table.str().find("read on 1 thread") != std::string::npos);
    // tiny_config's 16 MiB probe fits in any last-level cache of 16 MiB or more: the run says so
    const bool in_cache = last_level_cache_bytes() >= c.limit_bytes;
    CHECK((table.str().find("fits in the") != std::string::npos) == in_cache);
    std::filesystem::remove_all(dir);
}

TEST_CASE("a point's derived rates from its times, by hand") {
    point_result r;
    r.point = {0, 256, ggml_type::f16, 1};
    r.kv_bytes = 1048576;
    r.limit_read_gbs = 16;
    r.fa = {131072, 262144, 524288, 3};   // min, median, max ns, n
    r.eigen = {300000, 786432, 900000, 3};
    r.ref = {1000000, 2621440, 3000000, 3};
    CHECK(r.gbs() == 4.0);                 // 1,048,576 bytes / 262,144 ns = 4 bytes per ns = 4 GB/s
    CHECK(r.gbs_best() == 8.0);            // / 131,072 ns (the fastest call)
    CHECK(r.frac_limit() == 0.25);         // 4 of 16 GB/s
    CHECK(r.tokens_per_s() == 1e9 / 262144.0);   // 1 token per call: 3814.697265625
    CHECK(r.eigen_ratio() == 3.0);         // 786,432 / 262,144
    CHECK(r.ref_ratio() == 10.0);          // 2,621,440 / 262,144
    r.fa.n = 0;                            // not timed: no rates
    CHECK(r.gbs() == 0);
    CHECK(r.frac_limit() == 0);
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

// A CPU backend whose flash attention is wrong in one value: the kernel's output, then out[0] = bad.
struct broken_backend final : attn_backend {
    cpu_backend cpu{2};
    float bad = 0;
    explicit broken_backend(float b) : bad(b) {}
    backend_kind kind() const override { return backend_kind::cpu; }
    void build_kq_mask(const kq_mask_desc & d, const kq_mask_stream * s, void * dst) override { cpu.build_kq_mask(d, s, dst); }
    void update_kq_mask(const kq_mask_desc & d, const kq_mask_stream * s, const kq_mask_change * ch, void * dst) override {
        cpu.update_kq_mask(d, s, ch, dst);
    }
    fa_plan plan_flash_attn(const fa_desc & d) const override { return cpu.plan_flash_attn(d); }
    void flash_attn(const fa_desc & d, const fa_plan & p, const fa_args & a) override {
        cpu.flash_attn(d, p, a);
        a.out[0] = bad;
    }
    ggml_type fa_q_dot_type(ggml_type t) const override { return cpu.fa_q_dot_type(t); }
    kshift_report k_shift(const kshift_desc & d, const kv_tensor & k, const int32_t * shift) override {
        return cpu.k_shift(d, k, shift);
    }
};

TEST_CASE("max_abs_diff propagates NaN; fa_tolerance is the backends' stated one") {
    CHECK(max_abs_diff({1.0f, 2.0f}, {1.0f, 2.5f}) == 0.5);
    CHECK(std::isnan(max_abs_diff({1.0f, NAN, 3.0f}, {1.0f, 2.0f, 3.0f})));
    CHECK(std::isnan(max_abs_diff({1.0f, 2.0f}, {NAN, 2.0f})));  // NaN first: std::max(0, NaN) would keep 0
    CHECK(std::isnan(max_abs_diff({INFINITY}, {INFINITY})));     // inf - inf
    CHECK(max_abs_diff({}, {}) == 0.0);
    CHECK_THROWS_AS(max_abs_diff({1.0f}, {1.0f, 2.0f}), std::invalid_argument);
    CHECK(fa_tolerance(ggml_type::f32, ggml_type::f32) == 2e-5);
    CHECK(fa_tolerance(ggml_type::f16, ggml_type::f16) == 1e-4);
    CHECK(fa_tolerance(ggml_type::q8_0, ggml_type::f32) == 1e-4);
    CHECK_FALSE(within_tolerance(NAN, ggml_type::f16, ggml_type::f16));
    CHECK_FALSE(within_tolerance(-1, ggml_type::f16, ggml_type::f16));
    CHECK(within_tolerance(1e-4, ggml_type::f16, ggml_type::f16));
}

TEST_CASE("kvbench validates before it times: a wrong or NaN output fails the point, with no time, exit 1") {
    sweep_config c = tiny_config();
    c.ctx = {256};
    c.kv_types = {ggml_type::f16, ggml_type::q4_0};
    for (float bad : {NAN, 0.5f}) {
        broken_backend be(bad);
        const sweep_output o = run_sweep(be, c, collect_machine_info("test"), {});
        REQUIRE(o.results.size() == 2);
        for (const point_result & r : o.results) {
            INFO("bad " << bad << " note " << r.note);
            CHECK(r.status == point_status::failed);
            CHECK(r.fa.n == 0);  // not timed
            CHECK(r.note.find(std::isnan(bad) ? "NaN" : "tolerance") != std::string::npos);
            CHECK(std::isnan(bad) == std::isnan(r.err_check));
        }
        std::ostringstream table;
        write_table(table, o);
        CHECK(table.str().find("FAILED: 2 point(s)") != std::string::npos);
        CHECK(sweep_exit_code(o) == 1);
        // the status survives the JSON round trip and a merge
        const sweep_output back = sweep_output_from_json(to_json(o));
        CHECK(back.results[0].status == point_status::failed);
        CHECK(sweep_exit_code(merge_outputs({back})) == 1);
    }
    cpu_backend be(2);
    const sweep_output good = run_sweep(be, c, collect_machine_info("test"), {});
    for (const point_result & r : good.results) {
        CHECK(r.status == point_status::ok);
        CHECK(r.err_check >= 0);
        CHECK(r.err_check <= fa_tolerance(r.point.type, r.point.type));
        CHECK(r.fa.n == 1);
    }
    CHECK(sweep_exit_code(good) == 0);
}

TEST_CASE("points above the buffer cap are skipped with a reason") {
    sweep_config c = tiny_config();
    c.max_buffer_bytes = 1 << 20;
    cpu_backend be(1);
    thread_pool pool(1);
    const point_result r = run_sweep_point(be, pool, c, {0, 4096, ggml_type::f16, 1}, 1.0);
    CHECK(r.status == point_status::skipped);
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

// The counters `kvbench cache --ops 3000 -c 4096` printed before the benchmark went through the op
// door (commit f203b56, its own decode and seq-op calls on the context): the same trace must make
// the same calls.
TEST_CASE("bookkeeping micro-benchmark: the counters recorded before it went through the op door") {
    cache_bench_params p;
    p.n_ops = 3000;
    p.n_ctx = 4096;
    struct expected {
        bool unified;
        uint64_t n_ops, n_decode, n_no_slot, n_tokens_placed;
    };
    for (const expected & e : {expected{true, 2980, 2409, 1, 66486}, expected{false, 3031, 2409, 56, 48406}}) {
        CAPTURE(e.unified);
        p.unified = e.unified;
        const cache_bench_result r = run_cache_bench(p);
        CHECK(r.n_ops == e.n_ops);
        CHECK(r.n_decode == e.n_decode);
        CHECK(r.n_no_slot == e.n_no_slot);
        CHECK(r.n_tokens_placed == e.n_tokens_placed);
    }
}

// ---- bad-input run 2 (docs/reliability.md): kvbench sweep/merge options and files ----

namespace {

std::string usage_error_of(const std::function<void()> & f) { return error_of<usage_error>(f); }

// kvbench sweep with a tiny default workload plus ARGS, output into DIR.
kvsim_test::cli_result tiny_sweep_cli(const std::string & args) {
    return run_kvbench("sweep --ctx 16 --kv-type f16 --limit-mib 16 -r 1 " + args);
}

}  // namespace

TEST_CASE("sweep grammar: values above the cap and overflowing range steps are refused, never wrapped") {
    has(error_of([] { parse_int_list("--ctx", "2305843009213693952"); }), "'2305843009213693952' is above the maximum 2147483647");
    has(error_of([] { parse_int_list("--ctx", "9223372036854775807"); }), "above the maximum 2147483647");
    has(error_of([] { parse_int_list("--ctx", "99999999999999999999"); }), "'99999999999999999999' is out of range");
    has(error_of([] { parse_int_list("--ctx", "1:9223372036854775807:x2"); }), "above the maximum");
    has(error_of([] { parse_int_list("--ctx", "1:9223372036854775807:x2"); }), "--ctx");
    // the largest legal ranges end without overflowing (x2 and +S steps past INT64_MAX stop the range)
    const auto pow2 = parse_int_list("--ctx", "1:2147483647:x2");
    CHECK(pow2.size() == 31);
    CHECK(pow2.back() == (int64_t) 1 << 30);
    CHECK(parse_int_list("--n", "1:9223372036854775807:x2", INT64_MAX).size() == 63);
    CHECK(parse_int_list("--n", "9223372036854775806:9223372036854775807:+5", INT64_MAX).size() == 1);
    CHECK(parse_int_list("--ctx", "2147483647") == std::vector<int64_t>{2147483647});
    // byte counts of the largest legal shapes either fit or are refused up front
    sweep_config c = tiny_config();
    c.ctx = {max_ctx};
    c.batch = {max_batch};
    CHECK_NOTHROW(c.validate());
    CHECK(point_kv_bytes(c, {0, max_ctx, ggml_type::f16, max_batch}) == (size_t) max_ctx * 256 * 8 * 2 * 256);
    c.head_dim = max_head_dim;
    c.n_head = c.n_head_kv = max_heads;
    c.kv_types = {ggml_type::f32};
    has(error_of<option_error>([&] { c.validate(); }), "too large");
    CHECK_THROWS_AS(point_kv_bytes(c, {0, max_ctx, ggml_type::f32, max_batch}), std::overflow_error);
    CHECK_THROWS_AS(fa_kv_bytes(max_ctx, max_batch, max_heads, ggml_type::f32, max_head_dim, ggml_type::f32, max_head_dim),
                    std::overflow_error);
    CHECK_THROWS_AS(kshift_bytes((int64_t) 1 << 40, 256, 65536, ggml_type::f32, 65536), std::overflow_error);
    CHECK(fa_kv_bytes(max_ctx, 1, 8, ggml_type::f16, 128, ggml_type::f16, 128) == (size_t) max_ctx * 8 * 512);
}

TEST_CASE("kvbench sweep: --ctx above the cap and --batch above 256 exit 2 naming option and value, no output") {
    scratch_dir dir("bench_caps");
    for (const std::string ctx : {"2305843009213693952", "1:9223372036854775807:x2", "9223372036854775807"}) {
        const auto r = run_kvbench("sweep --ctx " + ctx + " --kv-type f16 -o " + (dir / "out"));
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find("--ctx") != std::string::npos, r.err);
        CHECK_MESSAGE(r.err.find(ctx) != std::string::npos, r.err);
    }
    const auto b = run_kvbench("sweep --ctx 16 --batch 257 -o " + (dir / "out"));
    CHECK(b.rc == 2);
    CHECK_MESSAGE(b.err.find("--batch: '257' is above the maximum 256") != std::string::npos, b.err);
    CHECK(error_of([] { parse_int_list("--batch", "1:1000:x2", max_batch); }).find("'1000' is above the maximum 256") != std::string::npos);
    sweep_config c = tiny_config();
    c.batch = {300};
    // the library names its field; kvbench says --batch (the CLI check above)
    CHECK(error_of<option_error>([&] { c.validate(); }) == "batch 300 must be in [1, 256] (one sequence per stream, LLAMA_MAX_SEQ)");
    CHECK_FALSE(fs::exists(dir / "out"));
}

TEST_CASE("kvbench: sweep_config::validate's and compute_context_sizes' refusals come out in kvbench's flags") {
    scratch_dir dir("bench_flags");
    const auto h = run_kvbench("sweep --head-dim 48 --n-head 8 --n-head-kv 8 -o " + (dir / "out"));
    CHECK(h.rc == 2);
    CHECK_MESSAGE(h.err.find("kvbench: error: --head-dim 48 must be a positive multiple of 32") != std::string::npos, h.err);
    const auto n = run_kvbench("sweep --head-dim 64 --n-head 6 --n-head-kv 4 -o " + (dir / "out"));
    CHECK(n.rc == 2);
    CHECK_MESSAGE(n.err.find("kvbench: error: --n-head 6 must be a positive multiple of --n-head-kv 4") != std::string::npos, n.err);
    CHECK_FALSE(fs::exists(dir / "out"));
    const auto c = run_kvbench("cache --ops 10 -c 0");
    CHECK(c.rc == 2);
    CHECK_MESSAGE(c.err.find("kvbench: error: --ctx-size must be in [1, 2^30], got 0") != std::string::npos, c.err);
    CHECK(c.out.empty());   // refused before the table's header
    // a negative count wrapped to 2^64 - 1 (exit 1, "cannot create std::vector larger than max_size()")
    for (const char * ops : {"-1", "0", "100000001"}) CHECK(run_kvbench(std::string("cache --ops ") + ops).rc == 2);
}

TEST_CASE("kvbench sweep: probe and buffer sizes beyond 80 % of RAM exit 2; a bad_alloc point is skipped") {
    sweep_config c = tiny_config();
    c.limit_bytes = (size_t) 512 << 20;
    const std::string m = usage_error_of([&] { c.validate((size_t) 1 << 30); });
    CHECK_MESSAGE(m.find("limit_bytes 512 MiB") != std::string::npos, m);
    CHECK_MESSAGE(m.find("1024 MiB of physical memory") != std::string::npos, m);
    c.limit_bytes = (size_t) 16 << 20;
    c.max_buffer_bytes = (size_t) 1 << 30;
    CHECK(usage_error_of([&] { c.validate((size_t) 1 << 30); }).find("max_buffer_bytes 1024 MiB") != std::string::npos);
    c.max_buffer_bytes = (size_t) 512 << 20;
    CHECK_NOTHROW(c.validate((size_t) 1 << 30));

    scratch_dir dir("bench_mem");
    for (const std::string args : {"--limit-mib 100000000", "--limit-mib 9223372036854775807",
                                     "--ctx 2147483647 --max-buffer-mib 2147483647"}) {
        const auto r = run_kvbench("sweep --kv-type f16 " + args + " -o " + (dir / "out"));
        CHECK(r.rc == 2);
        CHECK_MESSAGE(r.err.find("of physical memory") != std::string::npos, r.err);
        CHECK_MESSAGE(r.err.find(args.substr(args.rfind("--"))) != std::string::npos, r.err);
    }
    CHECK_FALSE(fs::exists(dir / "out"));

    // a point that runs out of memory is kept as skipped, with a note; the sweep goes on
    cpu_backend be(c.threads);
    sweep_hooks hooks;
    hooks.clock = [](const std::function<void()> &) -> double { throw std::bad_alloc(); };
    hooks.measure_limit = [](const sweep_config & cc, const std::string & host) { return run_limit{cc.shard.index, host, 10, 20}; };
    c = tiny_config();
    const sweep_output o = run_sweep(be, c, collect_machine_info("test"), hooks);
    REQUIRE(o.results.size() == 6);
    for (const point_result & r : o.results) {
        CHECK(r.status == point_status::skipped);
        CHECK(r.note.find("out of memory") != std::string::npos);
        CHECK(r.kv_bytes > 0);
    }
    CHECK_FALSE(o.interrupted);
}

TEST_CASE("kvbench sweep/merge: a bad --out is refused before any measuring") {
    scratch_dir dir("bench_outdir");
    { std::ofstream(dir / "file") << "x"; }
    const auto f = tiny_sweep_cli("-o " + (dir / "file"));
    CHECK(f.rc == 2);
    CHECK_MESSAGE(f.err.find("--out: exists and is not a directory (value '" + (dir / "file") + "')") != std::string::npos, f.err);
    CHECK(f.out.empty());
    CHECK(kvsim_test::read_text(dir / "file") == "x");
    const auto sub = tiny_sweep_cli("-o " + (dir / "file/sub"));
    CHECK(sub.rc == 2);
    CHECK_MESSAGE(sub.err.find("is not a directory") != std::string::npos, sub.err);
    const auto e = tiny_sweep_cli("-o ''");
    CHECK(e.rc == 2);
    CHECK_MESSAGE(e.err.find("--out: the output directory name is empty") != std::string::npos, e.err);
    CHECK(error_of([&] { check_output_dir("--out", dir / "new/deeper"); }) == "(no error)");
    CHECK_FALSE(fs::exists(dir / "new"));   // checking creates nothing

    const sweep_config c = tiny_config();
    write_outputs(dir / "s0", fake_shard(c, {0, 2}));
    write_outputs(dir / "s1", fake_shard(c, {1, 2}));
    const auto m = run_kvbench("merge " + (dir / "s0") + " " + (dir / "s1") + " -o " + (dir / "file"));
    CHECK(m.rc == 2);
    CHECK_MESSAGE(m.err.find("--out: exists and is not a directory") != std::string::npos, m.err);
    const auto me = run_kvbench("merge " + (dir / "s0") + " " + (dir / "s1") + " -o ''");
    CHECK(me.rc == 2);
    CHECK_MESSAGE(me.err.find("empty") != std::string::npos, me.err);
}

TEST_CASE("a stop request abandons the point in progress between timed calls") {
    const sweep_config c = tiny_config();
    cpu_backend be(c.threads);
    thread_pool pool(c.threads);
    std::atomic<bool> stop{true};
    CHECK_THROWS_AS(run_sweep_point(be, pool, c, {0, 256, ggml_type::f16, 1}, 1.0, {}, &stop), loop_interrupted);

    // raised during the 2nd point's timing: the 1st point is kept, the 2nd dropped, the run flagged
    stop = false;
    int calls = 0;
    sweep_hooks hooks;
    hooks.stop = &stop;
    hooks.measure_limit = [](const sweep_config & cc, const std::string & host) { return run_limit{cc.shard.index, host, 10, 20}; };
    hooks.clock = [&](const std::function<void()> & call) {
        call();
        // point 1 has 4 backend-timed loops (mask, update, fa, K-shift) of 2 calls (warm-up, 1 repeat)
        if (++calls == 10) stop = true;
        return 1.0;
    };
    const sweep_output o = run_sweep(be, c, collect_machine_info("test"), hooks);
    CHECK(o.results.size() == 1);
    CHECK(o.interrupted);
}

TEST_CASE("kvbench sweep: SIGINT, SIGTERM or SIGHUP stops a long point promptly and writes the finished points") {
    scratch_dir dir("bench_sigint");
    for (const std::string sig : {"INT", "TERM", "HUP"}) {
        const std::string out = dir / ("out_" + sig);
        // -r 1000000 (the most) at 4096 cells would run for minutes; the signal after 3 s must end it within seconds
        const std::string cmd = "timeout -s KILL 60 timeout --preserve-status -s " + sig + " 3 " + KVSIM_BINARY_DIR +
                                "/kvbench sweep --ctx 4096 --kv-type f16 --limit-mib 16 -r 1000000 -o " + out + " >" +
                                (dir / "stdout") + " 2>" + (dir / "stderr");
        const auto t0 = std::chrono::steady_clock::now();
        const int st = std::system(cmd.c_str());
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string err = kvsim_test::read_text(dir / "stderr");
        INFO(sig << ": " << err);
        CHECK(secs < 30);
        REQUIRE(WIFEXITED(st));
        CHECK(WEXITSTATUS(st) == (sig == "INT" ? 130 : sig == "TERM" ? 143 : 129));
        CHECK(err.find("kvbench: stopping after the current point (press Ctrl-C again to stop now)") != std::string::npos);
        const sweep_output o = read_output(out);
        CHECK(o.interrupted);
        CHECK(o.results.empty());
    }
}

TEST_CASE("sweep grammar: --shard range checks show the text typed") {
    has(error_of([] { parse_shard("--shard", "0/4294967297"); }), "'4294967297' is above the maximum 1048576 (value '0/4294967297')");
    has(error_of([] { parse_shard("--shard", "0/9223372036854775807"); }), "(value '0/9223372036854775807')");
    has(error_of([] { parse_shard("--shard", "0/99999999999999999999"); }), "out of range");
    has(error_of([] { parse_shard("--shard", "99999999999999999999/4"); }), "shard index must be in [0, 4) (value '99999999999999999999/4')");
    const shard_spec s = parse_shard("--shard", "1048575/1048576");
    CHECK(s.index == 1048575);
    CHECK(s.count == 1048576);
    const auto r = run_kvbench("sweep --ctx 16 --shard 0/4294967297");
    CHECK(r.rc == 2);
    CHECK_MESSAGE(r.err.find("'0/4294967297'") != std::string::npos, r.err);
}

// Found by a hostile-input pass (2026-11-30): get<int>() of 1e308 was an out-of-range float-to-int conversion
// (undefined behaviour; merged with exit 0 as copies -2147483648), type errors did not name the field, impossible
// values merged, SVG text was not escaped, and a failing third output file left the first two written.
TEST_CASE("kvbench.json fields: whole numbers in range, typed, plausible; outputs escaped and written together") {
    const sweep_config c = tiny_config();
    const sweep_output a = fake_shard(c, {0, 1});
    const auto read_error = [&](const std::function<void(nlohmann::json &)> & edit) {
        nlohmann::json j = to_json(a);
        edit(j);
        try {
            (void) sweep_output_from_json(j);
        } catch (const std::exception & e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    has(read_error([](nlohmann::json & j) { j["points"][0]["copies"] = 1e308; }),
        "points[0].copies is 1e+308; expected a whole number");
    has(read_error([](nlohmann::json & j) { j["points"][1]["kv_bytes"] = -1; }), "points[1].kv_bytes is -1");
    has(read_error([](nlohmann::json & j) { j["points"][0]["flash_attn"]["n"] = 2.5; }), "points[0].flash_attn.n is 2.5");
    has(read_error([](nlohmann::json & j) { j["points"][0]["adj_frac"] = nullptr; }), "points[0].adj_frac is null; expected a number");
    has(read_error([](nlohmann::json & j) { j["points"][0]["kv_type"] = 7; }), "points[0].kv_type is 7; expected a string");
    has(read_error([](nlohmann::json & j) { j["machine"]["cores"] = 1e19; }), "machine.cores is 1e+19");
    has(read_error([](nlohmann::json & j) { j["config"]["ctx"] = {512, 1e308}; }), "config.ctx[1] is 1e+308");
    has(read_error([](nlohmann::json & j) { j["config"]["threads"] = "2"; }), "config.threads is \"2\"");
    has(read_error([](nlohmann::json & j) { j["limits"][0]["shard"] = -1e300; }), "limits[0].shard is -1e+300");
    CHECK(read_error([](nlohmann::json & j) { j["points"][0]["copies"] = 3.0; }) == "(no error)");  // a whole float

    const auto merged_error = [&](const std::function<void(sweep_output &)> & edit) {
        sweep_output y = a;
        edit(y);
        return merge_error({y});
    };
    has(merged_error([](sweep_output & y) { y.results[0].adj_frac = 1e308; }),
        "adj_frac is 1e+308; it must be a finite number in [0, 1000]");
    has(merged_error([](sweep_output & y) { y.limits[0].read_gbs_one_thread = -1; }), "read_gbs_one_thread is -1");
    has(merged_error([](sweep_output & y) { y.limits[0].read_gbs_one_thread = 5e-324; }),  // would print "xinf"
        "a run's probe is at most 4 x threads");
    // a run's probe far below its one-thread probe is a loaded host, not a bad file: merged (it failed ctest -j2 once)
    CHECK(merged_error([](sweep_output & y) { y.limits[0].read_gbs_one_thread = 16 * y.limits[0].read_gbs; }) == "(no error)");
    has(merged_error([](sweep_output & y) {
            y.config.threads = 1;
            y.limits[0].read_gbs_one_thread = y.limits[0].read_gbs;
        }),
        "only CPU runs with more threads measure it");
    has(merged_error([](sweep_output & y) { y.results[0].roof_ctx = y.results[0].point.ctx + 1; }), "roof_ctx is");
    has(merged_error([](sweep_output & y) { y.results[0].roof_ctx = -64; }), "roof_ctx is -64");
    has(merged_error([](sweep_output & y) {
            y.config.backend = "cuda";
            y.results[0].roof_gbs = 5;
        }),
        "only the CPU backend measures a compute roof");
    has(merged_error([](sweep_output & y) { y.results[0].roof_frac = -1; }),
        "roof_frac is -1; it must be a finite number in [0, 1000]");
    has(merged_error([](sweep_output & y) { y.results[0].fa.median_ns = 0; }),
        "measured times must satisfy 0 < min <= median <= max");
    has(merged_error([](sweep_output & y) { y.limits[0].read_gbs = 1e9; }),
        "read_gbs is 1000000000; it must be a finite number in [0, 1e+06]");

    scratch_dir dir("bench_hostile_outputs");
    sweep_output x = a;
    x.machine.cpu_model = "</text><script>alert(1)</script>&";
    write_outputs(dir / "esc", x);
    std::ifstream svg(dir / "esc/kvbench.svg");
    const std::string text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
    CHECK(text.find("<script>") == std::string::npos);
    CHECK(text.find("&lt;/text&gt;&lt;script&gt;alert(1)&lt;/script&gt;&amp;") != std::string::npos);

    fs::create_directories(dir / "oz/kvbench.svg");  // the third file cannot land: none of them may
    CHECK_THROWS(write_outputs(dir / "oz", a));
    CHECK_FALSE(fs::exists(dir / "oz/kvbench.csv"));
    CHECK_FALSE(fs::exists(dir / "oz/kvbench.json"));
    CHECK_THROWS_AS(check_output_dir("--out", dir / "oz"), input_error);  // refused before a sweep measures

    const fs::path fifo = dir / "fifo.json";  // no writer: opening it would block the merge forever
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_AS(read_output(fifo.string()), input_error);
}

TEST_CASE("merge refuses unknown statuses, negative or non-finite bandwidths and a missing limit, naming the file") {
    const sweep_config c = tiny_config();
    const sweep_output a = fake_shard(c, {0, 2}), b = fake_shard(c, {1, 2});
    const std::vector<std::string> names = {"s0/kvbench.json", "s1/kvbench.json"};
    sweep_output x = b;
    x.results[0].status = point_status::skipped;
    CHECK(merge_error({a, x}, names) == "(no error)");
    x = b;
    x.limits[0].read_gbs = -5;
    has(merge_error({a, x}, names), "s1/kvbench.json: limit of shard 1: read_gbs is -5");
    x = b;
    x.limits[0].copy_gbs = std::numeric_limits<double>::infinity();
    has(merge_error({a, x}, names), "copy_gbs is inf");
    x = b;
    x.results[1].limit_read_gbs = -1;
    has(merge_error({a, x}, names), "point 3: limit_read_gbs is -1");
    x = b;
    x.results[1].fa.median_ns = std::nan("");
    has(merge_error({a, x}, names), "point 3: flash_attn.median_ns is nan");
    x = b;
    x.limits.clear();
    has(merge_error({a, x}, names), "s1/kvbench.json (shard 1/2) has no \"limits\" entry for shard 1");
    x.limits = {{0, "h0", 50, 60}};
    has(merge_error({a, x}, names), "has no \"limits\" entry for shard 1");

    // the same through the CLI, from hand-edited files
    scratch_dir dir("bench_merge_values");
    write_outputs(dir / "s0", a);
    nlohmann::json j = to_json(b);
    j["points"][0]["status"] = "weird";
    fs::create_directories(dir / "bad");
    std::ofstream(dir / "bad/kvbench.json") << j.dump();
    const auto r = run_kvbench("merge " + (dir / "s0") + " " + (dir / "bad") + " -o " + (dir / "merged"));
    CHECK(r.rc == 2);
    CHECK_MESSAGE(r.err.find("point 1 has status 'weird'; expected 'ok', 'skipped' or 'failed'") != std::string::npos, r.err);
    CHECK_FALSE(fs::exists(dir / "merged"));
}

TEST_CASE("cpu_cache_bytes: per level, data or unified caches only") {
    CHECK(cpu_cache_bytes(0) == 0);  // no level-0 cache
    CHECK(cpu_cache_bytes(9) == 0);
    const size_t l1 = cpu_cache_bytes(1), l2 = cpu_cache_bytes(2), llc = last_level_cache_bytes();
    if (!std::filesystem::exists("/sys/devices/system/cpu/cpu0/cache/index2/size")) {
        MESSAGE("no cache sizes in sysfs: only the unknown-level values are checked");
        return;
    }
    CHECK(l2 > 0);
    CHECK(l1 > 0);
    CHECK(l1 < l2);
    CHECK(l2 <= llc);
}

TEST_CASE("probe_core_bound: the probe scaled with its threads") {
    run_limit l{0, "h", 20, 30, 10};
    CHECK(probe_core_bound(l, 2));       // 2.0x on 2 threads
    l.read_gbs = 15;
    CHECK(probe_core_bound(l, 2));       // 1.5x = 0.75 x 2
    l.read_gbs = 14.9;
    CHECK_FALSE(probe_core_bound(l, 2));
    CHECK_FALSE(probe_core_bound(l, 16));  // 1.49x on 16 threads: memory-bound
    l.read_gbs = 20;
    CHECK_FALSE(probe_core_bound(l, 1));   // one thread: nothing to compare
    l.read_gbs_one_thread = 0;
    CHECK_FALSE(probe_core_bound(l, 2));   // not measured

    // kvbench.json: written and read back; a file from before it existed reads 0
    sweep_output o;
    o.config = tiny_config();
    o.limits.push_back({0, "h", 20, 30, 11.5});
    nlohmann::json j = to_json(o);
    CHECK(sweep_output_from_json(j).limits[0].read_gbs_one_thread == 11.5);
    j["limits"][0].erase("read_gbs_one_thread");
    CHECK(sweep_output_from_json(j).limits[0].read_gbs_one_thread == 0);
}

TEST_CASE("write_outputs: an output directory that cannot be created is bad input naming --out") {
    if (!std::filesystem::is_directory("/proc/self")) {
        MESSAGE("no /proc here: skipped");
        return;
    }
    sweep_output o;
    o.config = tiny_config();
    // /proc passes check_output_dir's permission test as root, and mkdir under it fails
    try {
        write_outputs("/proc/kvsim-no-such-dir", o);
        FAIL("write_outputs did not throw");
    } catch (const input_error & e) {
        const std::string what = e.what();
        CHECK_MESSAGE(what.find("--out") != std::string::npos, what);
        CHECK_MESSAGE(what.find("/proc/kvsim-no-such-dir") != std::string::npos, what);
    }
}
