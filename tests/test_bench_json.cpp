// kvbench.json's form (bench/bench_json.h): its key set, written out here as literals from the files kvbench wrote
// before the writer and reader moved to one key table, so that old files still merge and tools reading them still
// find every field; and the point status as an enum with its text form.
#include <doctest/doctest.h>

#include "bench/bench_json.h"

#include <set>
#include <stdexcept>
#include <string>

using namespace kvsim;

namespace {

// Every key path of j: "a.b" for an object's member, "a[]" for an array's elements ("config" not descended: its
// keys belong to sweep_spec's config_to_json).
void key_paths(const nlohmann::json & j, const std::string & at, std::set<std::string> & out) {
    if (j.is_object()) {
        for (auto it = j.begin(); it != j.end(); ++it) {
            const std::string p = at.empty() ? it.key() : at + "." + it.key();
            out.insert(p);
            if (p != "config") key_paths(it.value(), p, out);
        }
    } else if (j.is_array()) {
        for (const auto & e : j) key_paths(e, at + "[]", out);
    }
}

sweep_output one_point_output() {
    sweep_output o;
    o.config.ctx = {256};
    o.config.kv_types = {ggml_type::f16};
    o.config.batch = {1};
    o.limits = {{0, "h", 50, 60, 20}};
    point_result r;
    r.point = {0, 256, ggml_type::f16, 1};
    r.fa = {100, 200, 300, 3};
    o.results = {r};
    o.notes = {"a note"};
    return o;
}

std::set<std::string> with_stats(std::set<std::string> s, const std::string & at) {
    s.insert(at);
    for (const char * k : {"min_ns", "median_ns", "max_ns", "n"}) s.insert(at + "." + k);
    return s;
}

}  // namespace

TEST_CASE("kvbench.json: the keys kvbench wrote before the key tables, no more and no fewer") {
    std::set<std::string> want = {"schema", "config", "machine", "limits", "points", "notes", "interrupted",
                                  "machine.cpu_model", "machine.cores", "machine.gpu", "machine.build_type",
                                  "machine.git_commit", "machine.date", "machine.host", "machine.kernel_path",
                                  "limits[].shard", "limits[].host", "limits[].read_gbs", "limits[].copy_gbs",
                                  "limits[].read_gbs_one_thread"};
    for (const char * k : {"index", "ctx", "kv_type", "batch", "status", "note", "kv_bytes", "mask_bytes",
                           "kshift_bytes", "copies", "limit_read_gbs", "adj_read_gbs", "adj_frac", "roof_gbs",
                           "roof_frac", "roof_ctx", "err_vs_eigen", "err_vs_ref", "err_check", "gbs", "gbs_best",
                           "frac_limit", "tokens_per_s", "eigen_ratio", "ref_ratio"}) {
        want.insert(std::string("points[].") + k);
    }
    for (const char * k : {"flash_attn", "mask_full", "mask_update", "k_shift", "eigen", "reference"}) {
        want = with_stats(want, std::string("points[].") + k);
    }
    std::set<std::string> got;
    key_paths(to_json(one_point_output()), "", got);
    CHECK(got == want);
    for (const std::string & k : got) CHECK_MESSAGE(want.count(k), "unexpected key " << k);
    for (const std::string & k : want) CHECK_MESSAGE(got.count(k), "missing key " << k);
}

TEST_CASE("kvbench.json: a point's timings land under their keys and read back into the same fields") {
    sweep_output o = one_point_output();
    o.results[0].mask_full = {1, 2, 3, 1};
    o.results[0].mask_update = {4, 5, 6, 1};
    o.results[0].kshift = {7, 8, 9, 1};
    o.results[0].eigen = {10, 11, 12, 1};
    o.results[0].ref = {13, 14, 15, 1};
    const nlohmann::json j = to_json(o);
    const nlohmann::json & p = j["points"][0];
    CHECK(p["flash_attn"] == nlohmann::json({{"min_ns", 100.0}, {"median_ns", 200.0}, {"max_ns", 300.0}, {"n", 3}}));
    CHECK(p["mask_full"]["median_ns"] == 2.0);
    CHECK(p["mask_update"]["median_ns"] == 5.0);
    CHECK(p["k_shift"]["median_ns"] == 8.0);
    CHECK(p["eigen"]["median_ns"] == 11.0);
    CHECK(p["reference"]["median_ns"] == 14.0);
    const point_result back = sweep_output_from_json(j).results.at(0);
    CHECK(back.fa.min_ns == 100);
    CHECK(back.fa.max_ns == 300);
    CHECK(back.fa.n == 3);
    CHECK(back.mask_full.min_ns == 1);
    CHECK(back.mask_update.max_ns == 6);
    CHECK(back.kshift.median_ns == 8);
    CHECK(back.eigen.median_ns == 11);
    CHECK(back.ref.median_ns == 14);
}

TEST_CASE("point status: written as ok / skipped / failed, anything else refused when read") {
    CHECK(std::string(to_string(point_status::ok)) == "ok");
    CHECK(std::string(to_string(point_status::skipped)) == "skipped");
    CHECK(std::string(to_string(point_status::failed)) == "failed");
    CHECK(parse_point_status("skipped") == point_status::skipped);
    CHECK_THROWS_AS(parse_point_status("OK"), std::invalid_argument);

    sweep_output o = one_point_output();
    o.results[0].status = point_status::failed;
    nlohmann::json j = to_json(o);
    CHECK(j["points"][0]["status"] == "failed");
    CHECK(sweep_output_from_json(j).results[0].status == point_status::failed);
    j["points"][0]["status"] = "weird";
    std::string err;
    try {
        (void) sweep_output_from_json(j);
    } catch (const std::runtime_error & e) {
        err = e.what();
    }
    CHECK(err == "kvbench sweep output: point 0 has status 'weird'; expected 'ok', 'skipped' or 'failed'");
}
