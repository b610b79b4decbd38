#include "plan/plan_options.h"

#include "core/errors.h"

#include <cctype>
#include <cmath>
#include <stdexcept>
#include <fmt/format.h>

namespace kvsim {

namespace {
template <class T>
void check_values(const std::vector<T> & v, const char * field, bool zero_allowed) {
    if (v.empty()) throw option_error({field}, fmt::format("{}: the grid needs at least one value", field));
    for (const T & x : v) {
        if (!zero_allowed && x == T{}) throw option_error({field}, fmt::format("{} must be >= 1, got 0", field));
    }
}

void check_grid(const plan_grid & g) {
    check_values(g.n_parallel, "n_parallel", false);
    check_values(g.n_ctx, "n_ctx", false);
    check_values(g.type_k, "type_k", true);
    if (!g.type_v.empty()) check_values(g.type_v, "type_v", true);
    check_values(g.kv_unified, "kv_unified", true);
    check_values(g.n_ubatch, "n_ubatch", false);
    check_values(g.cache_ram_mib, "cache_ram_mib", true);
    for (int32_t m : g.cache_ram_mib) {
        if (m < -1) throw option_error({"cache_ram_mib"}, fmt::format("cache_ram_mib must be >= -1 (-1 = no limit), got {}", m));
    }
}

void check_slo(double s, const char * field) {
    if (!(std::isfinite(s) && s >= 0)) {
        throw option_error({field}, fmt::format("{} must be a finite number of seconds >= 0 (0 = none), got {}", field, s));
    }
}
}  // namespace

size_t plan_options::n_points() const {
    const auto & g = grid;
    // saturating: a product of six list sizes cannot wrap, but say "more than max" rather than a wrong count
    size_t n = 1;
    for (size_t k : {g.n_parallel.size(), g.n_ctx.size(), g.type_k.size(), std::max<size_t>(1, g.type_v.size()),
                     g.kv_unified.size(), g.n_ubatch.size(), g.cache_ram_mib.size()}) {
        n = (k != 0 && n > SIZE_MAX / k) ? SIZE_MAX : n * k;
    }
    return n;
}

void plan_options::validate() const {
    check_grid(grid);
    check_slo(slo.ttft_s, "slo_ttft_s");
    check_slo(slo.tpot_s, "slo_tpot_s");
    if (memory_bytes <= 0) throw option_error({"memory_bytes"}, fmt::format("memory_bytes must be > 0, got {}", memory_bytes));
    if (margin_bytes < 0) throw option_error({"margin_bytes"}, fmt::format("margin_bytes must be >= 0, got {}", margin_bytes));
    if (n_points() > max_points) {
        throw option_error({"max_points"}, fmt::format("the grid has {} points, more than max_points {}", n_points(), max_points));
    }
    base.validate();
}

std::vector<plan_config> plan_options::points() const {
    const auto & g = grid;
    std::vector<plan_config> out;
    for (uint32_t np : g.n_parallel)
        for (uint32_t c : g.n_ctx)
            for (ggml_type tk : g.type_k)
                for (size_t iv = 0; iv < std::max<size_t>(1, g.type_v.size()); ++iv)
                    for (bool kvu : g.kv_unified)
                        for (uint32_t ub : g.n_ubatch)
                            for (int32_t ram : g.cache_ram_mib) {
                                out.push_back({np, c, tk, g.type_v.empty() ? tk : g.type_v[iv], kvu, ub, ram});
                            }
    return out;
}

replay_options plan_options::replay_of(const plan_config & c) const {
    replay_options o = base;
    o.n_parallel_auto = false;
    o.ctx.n_seq_max = c.n_parallel;
    o.ctx.n_ctx = c.n_ctx;
    o.ctx.type_k = c.type_k;
    o.ctx.type_v = c.type_v;
    o.ctx.kv_unified = c.kv_unified;
    o.ctx.n_ubatch = c.n_ubatch;
    o.server.cache_ram_mib = c.cache_ram_mib;
    return o;
}

int64_t parse_memory_bytes(const std::string & text) {
    const auto bad = [&](const char * why) {
        return std::invalid_argument(fmt::format("memory size '{}': {} (e.g. 24GiB, 24576MiB or a number of bytes)", text, why));
    };
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception &) {
        throw bad("not a number");
    }
    std::string unit = text.substr(used);
    for (auto & ch : unit) ch = (char) std::tolower((unsigned char) ch);
    if (unit.size() == 3 && unit.substr(1) == "ib") unit.resize(1);
    int shift = 0;
    if (unit == "k") shift = 10;
    else if (unit == "m") shift = 20;
    else if (unit == "g") shift = 30;
    else if (unit == "t") shift = 40;
    else if (!unit.empty() && unit != "b") throw bad("unknown unit");
    const double bytes = std::ldexp(v, shift);
    if (!(std::isfinite(bytes) && bytes >= 1)) throw bad("must be at least one byte");
    if (bytes >= 9.2e18) throw bad("too large");
    return (int64_t) bytes;
}

}  // namespace kvsim
