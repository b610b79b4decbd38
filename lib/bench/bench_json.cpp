#include "bench/bench_json.h"

#include "util/json_read.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvsim {

namespace {

nlohmann::json stats_json(const time_stats & t) {
    nlohmann::json j = {{time_stats_n_key, t.n}};
    for (const time_stats_key & k : time_stats_keys) j[k.key] = t.*k.member;
    return j;
}

time_stats stats_from(const nlohmann::json & j, const std::string & where) {
    time_stats t;
    for (const time_stats_key & k : time_stats_keys) t.*k.member = json_get<double>(j, k.key, where);
    t.n = json_int<int>(j, time_stats_n_key, where);
    return t;
}

nlohmann::json point_json(const point_result & r) {
    nlohmann::json j = {{"index", r.point.index},
            {"ctx", r.point.ctx},
            {"kv_type", ggml_type_name(r.point.type)},
            {"batch", r.point.batch},
            {"status", to_string(r.status)},
            {"note", r.note},
            {"kv_bytes", r.kv_bytes},
            {"mask_bytes", r.mask_bytes},
            {"kshift_bytes", r.kshift_bytes},
            {"copies", r.copies},
            {"limit_read_gbs", r.limit_read_gbs},
            {"adj_read_gbs", r.adj_read_gbs},
            {"adj_frac", r.adj_frac},
            {"roof_gbs", r.roof_gbs},
            {"roof_frac", r.roof_frac},
            {"roof_ctx", r.roof_ctx},
            {"err_vs_eigen", r.err_vs_eigen},
            {"err_vs_ref", r.err_vs_ref},
            {"err_check", r.err_check},
            {"gbs", r.gbs()},
            {"gbs_best", r.gbs_best()},
            {"frac_limit", r.frac_limit()},
            {"tokens_per_s", r.tokens_per_s()},
            {"eigen_ratio", r.eigen_ratio()},
            {"ref_ratio", r.ref_ratio()}};
    for (const point_timing_key & k : point_timing_keys) j[k.key] = stats_json(r.*k.member);
    return j;
}

point_result point_from(const nlohmann::json & j, const std::string & w) {
    point_result r;
    r.point = {json_int<int64_t>(j, "index", w), json_int<int64_t>(j, "ctx", w),
               parse_ggml_type(json_get<std::string>(j, "kv_type", w)), json_int<int64_t>(j, "batch", w)};
    try {
        r.status = parse_point_status(json_get<std::string>(j, "status", w));
    } catch (const std::invalid_argument & e) {
        throw std::invalid_argument(fmt::format("point {} has {}", r.point.index, e.what()));
    }
    r.note = json_get<std::string>(j, "note", w);
    r.kv_bytes = json_int<size_t>(j, "kv_bytes", w);
    r.mask_bytes = json_int<size_t>(j, "mask_bytes", w);
    r.kshift_bytes = json_int<size_t>(j, "kshift_bytes", w);
    r.copies = json_int<int>(j, "copies", w);
    r.limit_read_gbs = json_get<double>(j, "limit_read_gbs", w);
    // absent in runs written before they existed
    r.adj_read_gbs = json_get_or(j, "adj_read_gbs", w, 0.0);
    r.adj_frac = json_get_or(j, "adj_frac", w, 0.0);
    r.roof_gbs = json_get_or(j, "roof_gbs", w, 0.0);
    r.roof_frac = json_get_or(j, "roof_frac", w, 0.0);
    r.roof_ctx = json_get_or<int64_t>(j, "roof_ctx", w, 0);
    for (const point_timing_key & k : point_timing_keys) {
        r.*k.member = stats_from(json_field(j, k.key, w), w + k.key + ".");
    }
    r.err_vs_eigen = json_get<double>(j, "err_vs_eigen", w);
    r.err_vs_ref = json_get<double>(j, "err_vs_ref", w);
    r.err_check = json_get_or(j, "err_check", w, -1.0);
    return r;
}

}  // namespace

nlohmann::json to_json(const sweep_output & o) {
    nlohmann::json limits = nlohmann::json::array();
    for (const run_limit & l : o.limits) {
        limits.push_back({{"shard", l.shard},
                          {"host", l.host},
                          {"read_gbs", l.read_gbs},
                          {"copy_gbs", l.copy_gbs},
                          {"read_gbs_one_thread", l.read_gbs_one_thread}});
    }
    nlohmann::json points = nlohmann::json::array();
    for (const point_result & r : o.results) points.push_back(point_json(r));
    const machine_info & m = o.machine;
    return {{"schema", "kvbench-sweep/1"},
            {"config", config_to_json(o.config)},
            {"machine",
             {{"cpu_model", m.cpu_model},
              {"cores", m.cores},
              {"gpu", m.gpu},
              {"build_type", m.build_type},
              {"git_commit", m.git_commit},
              {"date", m.date},
              {"host", m.host},
              {"kernel_path", m.kernel_path}}},
            {"limits", limits},
            {"points", points},
            {"notes", o.notes},
            {"interrupted", o.interrupted}};
}

sweep_output sweep_output_from_json(const nlohmann::json & j) {
    sweep_output o;
    try {
        if (j.at("schema").get<std::string>() != "kvbench-sweep/1") throw std::runtime_error("unknown schema");
        o.config = config_from_json(j.at("config"));
        const auto & m = j.at("machine");
        const std::string mw = "machine.";
        o.machine = {json_get<std::string>(m, "cpu_model", mw), json_int<int>(m, "cores", mw),
                     json_get<std::string>(m, "gpu", mw), json_get<std::string>(m, "build_type", mw),
                     json_get<std::string>(m, "git_commit", mw), json_get<std::string>(m, "date", mw),
                     json_get<std::string>(m, "host", mw), json_get_or<std::string>(m, "kernel_path", mw, "")};
        size_t i = 0;
        for (const auto & l : j.at("limits")) {
            const std::string lw = fmt::format("limits[{}].", i++);
            o.limits.push_back({json_int<int>(l, "shard", lw), json_get<std::string>(l, "host", lw),
                                json_get<double>(l, "read_gbs", lw), json_get<double>(l, "copy_gbs", lw),
                                json_get_or(l, "read_gbs_one_thread", lw, 0.0)});
        }
        i = 0;
        for (const auto & p : j.at("points")) o.results.push_back(point_from(p, fmt::format("points[{}].", i++)));
        o.notes = j.at("notes").get<std::vector<std::string>>();
        o.interrupted = j.at("interrupted").get<bool>();
    } catch (const nlohmann::json::exception & e) {
        throw std::runtime_error(fmt::format("kvbench sweep output: {}", e.what()));
    } catch (const std::invalid_argument & e) {
        throw std::runtime_error(fmt::format("kvbench sweep output: {}", e.what()));
    }
    return o;
}

}  // namespace kvsim
