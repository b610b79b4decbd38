// plan merge: shards' plan.json back into one plan (plan.h: merge_plan_shards).
#include "plan/plan.h"

#include "core/errors.h"
#include "util/json_read.h"

#include <fmt/format.h>
#include <cmath>
#include <set>

namespace kvsim {

namespace {
plan_status status_of(const std::string & s, const std::string & where) {
    for (plan_status v : {plan_status::ok, plan_status::no_fit, plan_status::refused, plan_status::not_run}) {
        if (s == plan_status_name(v)) return v;
    }
    throw std::runtime_error(fmt::format("{}status '{}' is not ok, no_fit, refused or not_run", where, cut_text(s)));
}

plan_config config_of(const nlohmann::json & j, const std::string & w) {
    plan_config c;
    c.n_parallel = json_int<uint32_t>(j, "n_parallel", w);
    c.n_ctx = json_int<uint32_t>(j, "n_ctx", w);
    c.type_k = parse_ggml_type(json_get<std::string>(j, "type_k", w));
    c.type_v = parse_ggml_type(json_get<std::string>(j, "type_v", w));
    c.kv_unified = json_get<bool>(j, "kv_unified", w);
    c.n_ubatch = json_int<uint32_t>(j, "n_ubatch", w);
    c.cache_ram_mib = json_int<int32_t>(j, "cache_ram_mib", w);
    return c;
}

plan_metrics metrics_of(const nlohmann::json & j, const std::string & w) {
    plan_metrics m;
    for (const auto & [key, member] : k_plan_metric_counts) m.*member = json_int<uint64_t>(j, key, w);
    for (const auto & [key, member] : k_plan_metric_reals) {
        m.*member = json_get<double>(j, key, w);
        if (!(std::isfinite(m.*member) && m.*member >= 0)) {
            throw std::runtime_error(fmt::format("{}: a time or rate that is negative or not finite", w.substr(0, w.size() - 1)));
        }
    }
    m.rate_capped = json_get<bool>(j, "rate_capped", w);
    if (m.done + m.truncated + m.failed + m.pending != m.requests || m.slo_met > m.done) {
        throw std::runtime_error(fmt::format("{}: outcomes that do not add up to requests", w.substr(0, w.size() - 1)));
    }
    return m;
}

plan_point point_of(const nlohmann::json & j, const std::string & w) {
    plan_point p;
    p.index = json_int<size_t>(j, "index", w);
    p.status = status_of(json_get<std::string>(j, "status", w), w);
    p.config = config_of(json_field(j, "config", w), w + "config.");
    const auto & m = json_field(j, "memory", w);
    p.memory.model = json_int<size_t>(m, "model_bytes", w + "memory.");
    p.memory.context = json_int<size_t>(m, "context_bytes", w + "memory.");
    p.memory.compute = json_int<size_t>(m, "compute_bytes", w + "memory.");
    if (p.status == plan_status::ok) p.metrics = metrics_of(json_field(j, "metrics", w), w + "metrics.");
    p.reason = json_get_or<std::string>(j, "reason", w, "");
    return p;
}

plan_header header_of(const nlohmann::json & j, const std::string & w) {
    plan_header h;
    h.trace = json_get<std::string>(j, "trace", w);
    h.model = json_get<std::string>(j, "model", w);
    h.weights = json_get<std::string>(j, "weights", w);
    const auto & d = json_field(j, "device", w);
    h.device = json_get<std::string>(d, "name", w + "device.");
    h.device_source = json_get<std::string>(d, "source", w + "device.");
    // absent from shards written before it existed
    if (d.contains("time_accuracy")) h.device_accuracy = json_get<std::string>(d, "time_accuracy", w + "device.");
    h.memory_bytes = json_int<int64_t>(j, "memory_bytes", w);
    h.margin_bytes = json_int<int64_t>(j, "margin_bytes", w);
    const auto & s = json_field(j, "slo", w);
    h.slo = {json_get<double>(s, "ttft_s", w + "slo."), json_get<double>(s, "tpot_s", w + "slo.")};
    h.n_points = json_int<size_t>(j, "n_points", w);
    h.shard = parse_shard(w + "shard", json_get<std::string>(j, "shard", w));
    h.options = json_field(j, "options", w);
    try {
        h.warnings = json_field(j, "warnings", w).get<std::vector<std::string>>();
    } catch (const nlohmann::json::exception &) {
        throw std::runtime_error("warnings is not a list of strings");
    }
    return h;
}

// One shard's file, read without trusting it; errors name the file.
plan_result read_part(const nlohmann::json & j, const std::string & name) {
    try {
        if (!j.is_object() || j.value("kind", "") != "plan") throw std::runtime_error("not a kvsim plan.json (kind is not \"plan\")");
        plan_result r;
        r.header = header_of(j, "");
        r.interrupted = json_get<bool>(j, "interrupted", "");
        const auto & pts = json_field(j, "points", "");
        if (!pts.is_array()) throw std::runtime_error("points is not an array");
        for (size_t i = 0; i < pts.size(); ++i) r.points.push_back(point_of(pts[i], fmt::format("points[{}].", i)));
        return r;
    } catch (const std::exception & e) {   // a field's error (input_error too: a bad shard) named in this file
        throw input_error(name, 0, "", e.what());
    }
}

// The header without its shard: what every shard of one plan shares. The trace is compared by content
// (options.trace), not by the path each shard was given.
nlohmann::json shared_part(const nlohmann::json & j) {
    nlohmann::json c = j;
    for (const char * k : {"shard", "points", "interrupted", "trace"}) c.erase(k);
    return c;
}

// The first field where two headers differ, as a path ("options.base.device_profile.bandwidth_gbs").
std::string first_difference(const nlohmann::json & a, const nlohmann::json & b, const std::string & at = "") {
    if (!a.is_object() || !b.is_object()) return at.empty() ? "(the whole file)" : at.substr(0, at.size() - 1);   // no trailing '.' 
    for (const auto & [k, v] : a.items()) {
        if (!b.contains(k)) return at + k;
        if (v != b[k]) return first_difference(v, b[k], at + k + ".");
    }
    for (const auto & [k, v] : b.items()) {
        if (!a.contains(k)) return at + k;
    }
    return at;
}
}  // namespace

plan_result merge_plan_shards(const std::vector<nlohmann::json> & parts, const std::vector<std::string> & names) {
    if (parts.empty()) throw usage_error("plan merge: no plan.json given");
    plan_result out;
    std::set<int> shards;
    std::set<size_t> seen;
    std::vector<plan_config> grid;   // the grid's points, from the first file's options (every file's are equal)
    for (size_t f = 0; f < parts.size(); ++f) {
        plan_result r = read_part(parts[f], names[f]);
        if (f == 0) {
            try {
                plan_options o;
                o.grid = plan_grid_from_json(json_field(r.header.options, "grid", "options."));
                if (o.n_points() != r.header.n_points) throw std::runtime_error("n_points is not the size of options.grid");
                grid = o.points();
            } catch (const std::exception & e) {
                throw input_error(names[f], 0, "", e.what());
            }
        }
        const shard_spec & s = r.header.shard;
        if (f == 0) out.header = r.header;
        if (shared_part(parts[f]) != shared_part(parts[0])) {
            const std::string field = first_difference(shared_part(parts[0]), shared_part(parts[f]));
            throw input_error(names[f], 0, "", fmt::format("another plan than {}: {} differs", names[0], cut_text(field, 120)));
        }
        if (s.count != out.header.shard.count) {
            throw input_error(names[f], 0, shard_text(s), fmt::format("shard count differs from {}'s {}", names[0], out.header.shard.count));
        }
        if (!shards.insert(s.index).second) throw input_error(names[f], 0, shard_text(s), "shard given twice");
        for (plan_point & p : r.points) {
            if (p.index >= out.header.n_points || !s.takes(p.index) || !seen.insert(p.index).second) {
                throw input_error(names[f], 0, std::to_string(p.index), "a point outside this shard or the grid, or held twice");
            }
            if (!(p.config == grid[p.index])) {
                throw input_error(names[f], 0, std::to_string(p.index), "a point whose settings are not the grid's at its index");
            }
            out.points.push_back(std::move(p));
        }
        out.interrupted = out.interrupted || r.interrupted;
    }
    if ((int) shards.size() != out.header.shard.count) {
        throw usage_error(fmt::format("plan merge: {} of {} shards given", shards.size(), out.header.shard.count));
    }
    if (seen.size() != out.header.n_points) {
        throw usage_error(fmt::format("plan merge: the shards hold {} of the grid's {} points", seen.size(), out.header.n_points));
    }
    out.header.shard = {};
    rank_plan_points(out.points);
    return out;
}

}  // namespace kvsim
