#include "bench/bench_result.h"

#include "core/errors.h"
#include "util/json_read.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

namespace kvsim {

time_stats summarize(std::vector<double> s) {
    time_stats t;
    if (s.empty()) return t;
    std::sort(s.begin(), s.end());
    t.n = (int) s.size();
    t.min_ns = s.front();
    t.max_ns = s.back();
    t.median_ns = s.size() % 2 ? s[s.size() / 2] : 0.5 * (s[s.size() / 2 - 1] + s[s.size() / 2]);
    return t;
}

double point_result::gbs() const { return fa.n ? (double) kv_bytes / fa.median_ns : 0.0; }
double point_result::gbs_best() const { return fa.n ? (double) kv_bytes / fa.min_ns : 0.0; }
double point_result::frac_limit() const { return limit_read_gbs > 0 ? gbs() / limit_read_gbs : 0.0; }
double point_result::tokens_per_s() const { return fa.n ? (double) point.batch * 1e9 / fa.median_ns : 0.0; }
double point_result::eigen_ratio() const { return fa.n && eigen.n ? eigen.median_ns / fa.median_ns : 0.0; }
double point_result::ref_ratio() const { return fa.n && ref.n ? ref.median_ns / fa.median_ns : 0.0; }

bool probe_core_bound(const run_limit & l, int threads) {
    return threads > 1 && l.read_gbs_one_thread > 0 && l.read_gbs >= 0.75 * threads * l.read_gbs_one_thread;
}

namespace {

std::string trim(const std::string & s) {
    const auto b = s.find_first_not_of(" \t");
    const auto e = s.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string field_after_colon(const std::string & path, const std::string & key) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(key, 0) == 0) {
            const auto c = line.find(':');
            if (c != std::string::npos) return trim(line.substr(c + 1));
        }
    }
    return {};
}

std::string command_output(const char * cmd) {
    std::unique_ptr<FILE, int (*)(FILE *)> p(popen(cmd, "r"), pclose);
    if (!p) return {};
    std::array<char, 256> buf{};
    std::string out;
    while (fgets(buf.data(), (int) buf.size(), p.get())) out += buf.data();
    return trim(out);
}

std::string find_gpu() {
    std::error_code ec;
    const std::filesystem::path dir = "/proc/driver/nvidia/gpus";
    if (!std::filesystem::is_directory(dir, ec)) return {};
    for (const auto & e : std::filesystem::directory_iterator(dir, ec)) {
        const std::string m = field_after_colon((e.path() / "information").string(), "Model");
        if (!m.empty()) return m;
    }
    return {};
}

nlohmann::json stats_json(const time_stats & t) {
    return {{"min_ns", t.min_ns}, {"median_ns", t.median_ns}, {"max_ns", t.max_ns}, {"n", t.n}};
}

time_stats stats_from(const nlohmann::json & j, const std::string & where) {
    return {json_get<double>(j, "min_ns", where), json_get<double>(j, "median_ns", where),
            json_get<double>(j, "max_ns", where), json_int<int>(j, "n", where)};
}

nlohmann::json point_json(const point_result & r) {
    return {{"index", r.point.index},
            {"ctx", r.point.ctx},
            {"kv_type", ggml_type_name(r.point.type)},
            {"batch", r.point.batch},
            {"status", r.status},
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
            {"flash_attn", stats_json(r.fa)},
            {"mask_full", stats_json(r.mask_full)},
            {"mask_update", stats_json(r.mask_update)},
            {"k_shift", stats_json(r.kshift)},
            {"eigen", stats_json(r.eigen)},
            {"reference", stats_json(r.ref)},
            {"err_vs_eigen", r.err_vs_eigen},
            {"err_vs_ref", r.err_vs_ref},
            {"err_check", r.err_check},
            {"gbs", r.gbs()},
            {"gbs_best", r.gbs_best()},
            {"frac_limit", r.frac_limit()},
            {"tokens_per_s", r.tokens_per_s()},
            {"eigen_ratio", r.eigen_ratio()},
            {"ref_ratio", r.ref_ratio()}};
}

point_result point_from(const nlohmann::json & j, const std::string & w) {
    point_result r;
    r.point = {json_int<int64_t>(j, "index", w), json_int<int64_t>(j, "ctx", w),
               parse_ggml_type(json_get<std::string>(j, "kv_type", w)), json_int<int64_t>(j, "batch", w)};
    r.status = json_get<std::string>(j, "status", w);
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
    r.fa = stats_from(json_field(j, "flash_attn", w), w + "flash_attn.");
    r.mask_full = stats_from(json_field(j, "mask_full", w), w + "mask_full.");
    r.mask_update = stats_from(json_field(j, "mask_update", w), w + "mask_update.");
    r.kshift = stats_from(json_field(j, "k_shift", w), w + "k_shift.");
    r.eigen = stats_from(json_field(j, "eigen", w), w + "eigen.");
    r.ref = stats_from(json_field(j, "reference", w), w + "reference.");
    r.err_vs_eigen = json_get<double>(j, "err_vs_eigen", w);
    r.err_vs_ref = json_get<double>(j, "err_vs_ref", w);
    r.err_check = json_get_or(j, "err_check", w, -1.0);
    return r;
}

}  // namespace

namespace {

// Each data or unified cache of cpu0 as (level, bytes), from /sys/devices/system/cpu/cpu0/cache/index*/ (sizes like
// "2048K" or "300M"); unreadable entries are left out.
std::vector<std::pair<int, size_t>> cpu0_caches() {
    std::vector<std::pair<int, size_t>> out;
    for (int i = 0; i < 16; ++i) {
        const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
        std::ifstream lf(dir + "level"), sf(dir + "size"), tf(dir + "type");
        int level = 0;
        std::string size, type;
        if (!(lf >> level) || !(sf >> size) || size.empty()) continue;
        if (tf >> type && type == "Instruction") continue;
        size_t mult = 1;
        if (size.back() == 'K') mult = (size_t) 1 << 10;
        if (size.back() == 'M') mult = (size_t) 1 << 20;
        if (size.back() == 'G') mult = (size_t) 1 << 30;
        if (mult != 1) size.pop_back();
        out.emplace_back(level, (size_t) std::strtoull(size.c_str(), nullptr, 10) * mult);
    }
    return out;
}

}  // namespace

size_t last_level_cache_bytes() {
    std::pair<int, size_t> best{0, 0};
    for (const auto & c : cpu0_caches()) best = std::max(best, c);
    return best.second;
}

size_t cpu_cache_bytes(int level) {
    size_t bytes = 0;
    for (const auto & c : cpu0_caches()) {
        if (c.first == level) bytes = std::max(bytes, c.second);
    }
    return bytes;
}

machine_info collect_machine_info(const std::string & build_type) {
    machine_info m;
    m.cpu_model = field_after_colon("/proc/cpuinfo", "model name");
    m.cores = (int) std::thread::hardware_concurrency();
    m.gpu = find_gpu();
    m.build_type = build_type;
    m.git_commit = command_output("git rev-parse --short HEAD 2>/dev/null");
    if (m.git_commit.empty()) m.git_commit = "unknown";
    const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm tm{};
    gmtime_r(&now, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    m.date = buf;
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) == 0) m.host = host;
    return m;
}

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
void check_point(const bench_point & pt, const std::string & name, const shard_spec & s, const std::vector<bench_point> & plan) {
    if (pt.index < 0 || pt.index >= (int64_t) plan.size()) {
        throw usage_error(fmt::format("kvbench merge: {}: point index {} is out of range: the sweep has {} points (0..{})", name,
                                      pt.index, plan.size(), (int64_t) plan.size() - 1));
    }
    if (pt.index % s.count != s.index) {
        throw usage_error(fmt::format("kvbench merge: {}: point index {} belongs to shard {}/{}, not to the file's shard {}/{}", name,
                                      pt.index, pt.index % s.count, s.count, s.index, s.count));
    }
    const bench_point & want = plan[(size_t) pt.index];
    if (pt.ctx != want.ctx || pt.type != want.type || pt.batch != want.batch) {
        throw usage_error(fmt::format("kvbench merge: {}: point {} is ctx {} {} batch {}, but the sweep's point {} is ctx {} {} batch {}",
                                      name, pt.index, pt.ctx, ggml_type_name(pt.type), pt.batch, want.index, want.ctx,
                                      ggml_type_name(want.type), want.batch));
    }
}

// Every point of a shard is the plan's, and an empty shard is refused (a run that measured
// nothing, or a file emptied by hand) unless the plan has no points for it.
void check_shard_points(const sweep_output & p, const std::string & name, const std::vector<bench_point> & plan) {
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
void check_shard_complete(const sweep_output & p, const std::string & name, const std::vector<bench_point> & plan) {
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
    check_value(t.min_ns, name, what + ".min_ns");
    check_value(t.median_ns, name, what + ".median_ns");
    check_value(t.max_ns, name, what + ".max_ns");
    check_value(t.n, name, what + ".n");
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
    const double ratio = l.read_gbs / l.read_gbs_one_thread;
    if (!(ratio >= 0.1 && ratio <= 4.0 * c.threads)) {
        throw usage_error(fmt::format("kvbench merge: {}: {}: read_gbs {} is x{:.3g} read_gbs_one_thread {}; a run's "
                                      "probe is 0.1 to 4 x threads ({}) times its one-thread probe",
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

// The values a writer produces: status ok/skipped/failed (all bench_point_run and run_sweep write), finite
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
        if (r.status != "ok" && r.status != "skipped" && r.status != "failed") {
            throw usage_error(fmt::format("kvbench merge: {}: point {} has status '{}'; expected 'ok', 'skipped' or "
                                          "'failed'", name,
                                          r.point.index, r.status));
        }
        const std::string pt = fmt::format("point {}: ", r.point.index);
        check_value(r.limit_read_gbs, name, pt + "limit_read_gbs", 1e6);
        check_value(r.adj_read_gbs, name, pt + "adj_read_gbs", 1e6);
        check_value(r.adj_frac, name, pt + "adj_frac", 1e3);
        check_value(r.roof_gbs, name, pt + "roof_gbs", 1e6);
        check_value(r.roof_frac, name, pt + "roof_frac", 1e3);
        check_roof(p.config, r, name, pt);
        check_stats(r.fa, name, pt + "flash_attn");
        check_stats(r.mask_full, name, pt + "mask_full");
        check_stats(r.mask_update, name, pt + "mask_update");
        check_stats(r.kshift, name, pt + "k_shift");
        check_stats(r.eigen, name, pt + "eigen");
        check_stats(r.ref, name, pt + "reference");
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
    const std::vector<bench_point> plan = plan_points(parts.front().config);
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
