#include "bench/bench_merge.h"

#include "core/errors.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace kvsim {

namespace {

// "ctx [256,1024] vs [256]" for each config key two shards disagree on (their shard aside).
std::string config_diff(const sweep_config & a, const sweep_config & b) {
    const nlohmann::json ja = config_to_json(a), jb = config_to_json(b);
    std::vector<std::string> diffs;
    for (auto it = ja.begin(); it != ja.end(); ++it) {
        if (it.key() == "shard" || (jb.contains(it.key()) && jb[it.key()] == it.value())) continue;
        diffs.push_back(fmt::format("{} {} vs {}", it.key(), it.value().dump(), jb.value(it.key(), nlohmann::json()).dump()));
    }
    return fmt::format("{}", fmt::join(diffs, ", "));
}

// A point must be the plan's point at its index, and that index must be in the file's shard:
// anything else is a hand-edited or foreign file whose numbers would be merged under wrong labels.
void check_point(const sweep_point & pt, const std::string & name, const shard_spec & s, const std::vector<sweep_point> & plan) {
    if (pt.index < 0 || pt.index >= (int64_t) plan.size()) {
        throw usage_error(fmt::format("kvbench merge: {}: point index {} is out of range: the sweep has {} points (0..{})", name,
                                      pt.index, plan.size(), (int64_t) plan.size() - 1));
    }
    if (pt.index % s.count != s.index) {
        throw usage_error(fmt::format("kvbench merge: {}: point index {} belongs to shard {}/{}, not to the file's shard {}/{}", name,
                                      pt.index, pt.index % s.count, s.count, s.index, s.count));
    }
    const sweep_point & want = plan[(size_t) pt.index];
    if (pt.ctx != want.ctx || pt.type != want.type || pt.batch != want.batch) {
        throw usage_error(fmt::format("kvbench merge: {}: point {} is ctx {} {} batch {}, but the sweep's point {} is ctx {} {} batch {}",
                                      name, pt.index, pt.ctx, ggml_type_name(pt.type), pt.batch, want.index, want.ctx,
                                      ggml_type_name(want.type), want.batch));
    }
}

// Every point of a shard is the plan's, and an empty shard is refused (a run that measured
// nothing, or a file emptied by hand) unless the plan has no points for it.
void check_shard_points(const sweep_output & p, const std::string & name, const std::vector<sweep_point> & plan) {
    const shard_spec & s = p.config.shard;
    const size_t share = shard_points(plan, s).size();
    if (p.results.empty() && share > 0) {
        throw usage_error(fmt::format("kvbench merge: {} (shard {}/{}) has no points; its share of the sweep is {}", name, s.index,
                                      s.count, share));
    }
    for (const point_result & r : p.results) check_point(r.point, name, s, plan);
}

// With distinct points of its own shard, a shard is complete when it has its whole share; only an
// interrupted run may stop short (and the merge is then flagged interrupted).
void check_shard_complete(const sweep_output & p, const std::string & name, const std::vector<sweep_point> & plan) {
    const shard_spec & s = p.config.shard;
    const size_t share = shard_points(plan, s).size();
    if (!p.interrupted && p.results.size() != share) {
        throw usage_error(fmt::format("kvbench merge: {} (shard {}/{}) has {} of its {} points and is not marked interrupted", name,
                                      s.index, s.count, p.results.size(), share));
    }
}

// A number read from a shard that must be finite and >= 0 (a bandwidth, a time, a count).
// hi: the largest value a run can produce (1e6 GB/s for a bandwidth, 1e3 for a ratio to the probe); a larger one
// would print as inf or break the table's columns.
void check_value(double v, const std::string & name, const std::string & what, double hi = 1e300) {
    if (!std::isfinite(v) || v < 0 || v > hi) {
        throw usage_error(fmt::format("kvbench merge: {}: {} is {}; it must be a finite number in [0, {:g}]", name, what,
                                      v, hi));
    }
}

void check_stats(const time_stats & t, const std::string & name, const std::string & what) {
    for (const time_stats_key & k : time_stats_keys) check_value(t.*k.member, name, what + "." + k.key);
    check_value(t.n, name, what + "." + time_stats_n_key);
    if (t.n > 0 && !(t.min_ns > 0 && t.min_ns <= t.median_ns && t.median_ns <= t.max_ns)) {
        throw usage_error(fmt::format("kvbench merge: {}: {} has n {} and min/median/max {}/{}/{} ns; measured times "
                                      "must satisfy 0 < min <= median <= max",
                                      name, what, t.n, t.min_ns, t.median_ns, t.max_ns));
    }
}

// The one-thread probe exists only for a CPU run with more than one thread, and is a plausible fraction of the run's
// probe (x0.1 to x4 per thread: the N-thread probe is neither ten times slower nor far beyond N one-thread ones).
void check_one_thread_probe(const sweep_config & c, const run_limit & l, const std::string & name,
                            const std::string & where) {
    if (l.read_gbs_one_thread == 0) return;
    if (c.backend != "cpu" || c.threads == 1) {
        throw usage_error(fmt::format("kvbench merge: {}: {}: read_gbs_one_thread is {} in a {} run with {} thread(s); "
                                      "only CPU runs with more threads measure it (0 otherwise)",
                                      name, where, l.read_gbs_one_thread, c.backend, c.threads));
    }
    // no lower bound: on a loaded host a run's probe can be far below its one-thread probe (2 threads 4.2 GB/s beside
    // 69 GB/s with one, measured under ctest -j2); above 4x per thread it is no measurement
    const double ratio = l.read_gbs / l.read_gbs_one_thread;
    if (!(ratio > 0.0 && ratio <= 4.0 * c.threads)) {
        throw usage_error(fmt::format("kvbench merge: {}: {}: read_gbs {} is x{:.3g} read_gbs_one_thread {}; a run's "
                                      "probe is at most 4 x threads ({}) times its one-thread probe",
                                      name, where, l.read_gbs, ratio, l.read_gbs_one_thread, c.threads));
    }
}

// Roof values come from CPU runs only; roof_ctx is 0 (none) or 1..ctx cells.
void check_roof(const sweep_config & c, const point_result & r, const std::string & name, const std::string & pt) {
    if (r.roof_ctx < 0 || r.roof_ctx > r.point.ctx) {
        throw usage_error(fmt::format("kvbench merge: {}: {}roof_ctx is {}; it must be 0 (not measured) or 1..{} (the "
                                      "point's ctx)",
                                      name, pt, r.roof_ctx, r.point.ctx));
    }
    if (c.backend != "cpu" && (r.roof_gbs != 0 || r.roof_frac != 0 || r.roof_ctx != 0)) {
        throw usage_error(fmt::format("kvbench merge: {}: {}roof values in a {} run; only the CPU backend measures a "
                                      "compute roof",
                                      name, pt, c.backend));
    }
}

// The values a writer produces: finite
// non-negative bandwidths and times, and the shard's own measured limit (the roofline and %lim of its points).
void check_shard_values(const sweep_output & p, const std::string & name) {
    const shard_spec & s = p.config.shard;
    bool own_limit = false;
    for (const run_limit & l : p.limits) {
        const std::string where = fmt::format("limit of shard {}", l.shard);
        check_value(l.read_gbs, name, where + ": read_gbs", 1e6);
        check_value(l.copy_gbs, name, where + ": copy_gbs", 1e6);
        check_value(l.read_gbs_one_thread, name, where + ": read_gbs_one_thread", 1e6);
        check_one_thread_probe(p.config, l, name, where);
        own_limit = own_limit || l.shard == s.index;
    }
    if (!own_limit) {
        throw usage_error(fmt::format("kvbench merge: {} (shard {}/{}) has no \"limits\" entry for shard {}: its measured "
                                      "bandwidth limit is missing",
                                      name, s.index, s.count, s.index));
    }
    for (const point_result & r : p.results) {
        const std::string pt = fmt::format("point {}: ", r.point.index);
        check_value(r.limit_read_gbs, name, pt + "limit_read_gbs", 1e6);
        check_value(r.adj_read_gbs, name, pt + "adj_read_gbs", 1e6);
        check_value(r.adj_frac, name, pt + "adj_frac", 1e3);
        check_value(r.roof_gbs, name, pt + "roof_gbs", 1e6);
        check_value(r.roof_frac, name, pt + "roof_frac", 1e3);
        check_roof(p.config, r, name, pt);
        for (const point_timing_key & k : point_timing_keys) check_stats(r.*k.member, name, pt + k.key);
    }
}

// The file-level checks: same sweep and shard count as the first input, each shard once.
void check_shard_header(const sweep_output & p, const std::string & name, const sweep_output & first,
                        const std::string & first_name, std::map<int, std::string> & shards) {
    if (!same_sweep(p.config, first.config)) {
        throw usage_error(fmt::format("kvbench merge: {} and {} describe different sweeps ({})", first_name, name,
                                      config_diff(first.config, p.config)));
    }
    const shard_spec & s = p.config.shard;
    if (s.count != first.config.shard.count) {
        throw usage_error(fmt::format("kvbench merge: {} is shard {}/{} but {} is shard {}/{}: different shard counts", name, s.index,
                                      s.count, first_name, first.config.shard.index, first.config.shard.count));
    }
    const auto [it, fresh] = shards.emplace(s.index, name);
    if (!fresh) throw usage_error(fmt::format("kvbench merge: shard {}/{} given twice ({} and {})", s.index, s.count, it->second, name));
}

}  // namespace

sweep_output merge_outputs(const std::vector<sweep_output> & parts, const std::vector<std::string> & names) {
    if (parts.empty()) throw usage_error("kvbench merge: no inputs");
    auto name_of = [&](size_t i) { return i < names.size() ? names[i] : fmt::format("input {}", i + 1); };
    sweep_output out = parts.front();
    out.results.clear();
    out.limits.clear();
    out.notes.clear();
    out.interrupted = false;
    const std::vector<sweep_point> plan = plan_points(parts.front().config);
    std::map<int, std::string> shards;
    std::map<int64_t, std::string> owner;   // point index -> input holding it
    for (size_t i = 0; i < parts.size(); ++i) {
        const sweep_output & p = parts[i];
        check_shard_header(p, name_of(i), parts.front(), name_of(0), shards);
        check_shard_points(p, name_of(i), plan);
        check_shard_values(p, name_of(i));
        for (const point_result & r : p.results) {
            const auto [it, fresh] = owner.emplace(r.point.index, name_of(i));
            if (!fresh) {
                throw usage_error(it->second == name_of(i)
                                      ? fmt::format("kvbench merge: point {} appears twice in {}", r.point.index, it->second)
                                      : fmt::format("kvbench merge: point {} appears twice ({} and {})", r.point.index,
                                                    it->second, name_of(i)));
            }
            out.results.push_back(r);
        }
        check_shard_complete(p, name_of(i), plan);
        out.limits.insert(out.limits.end(), p.limits.begin(), p.limits.end());
        for (const std::string & note : p.notes) {
            if (std::find(out.notes.begin(), out.notes.end(), note) == out.notes.end()) out.notes.push_back(note);
        }
        out.interrupted = out.interrupted || p.interrupted;
    }
    const int n = parts.front().config.shard.count;
    if ((int) shards.size() != n) throw usage_error(fmt::format("kvbench merge: {} of {} shards given", shards.size(), n));
    std::sort(out.results.begin(), out.results.end(),
              [](const point_result & a, const point_result & b) { return a.point.index < b.point.index; });
    out.config.shard = {0, 1};
    return out;
}

}  // namespace kvsim
