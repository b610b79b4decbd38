#include "plan/plan_options.h"

#include "core/errors.h"
#include "time/device_profile.h"
#include "time/weight_types.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <fmt/format.h>

namespace kvsim {

namespace {
template <class T>
void check_values(const std::vector<T> & v, const char * field, bool zero_allowed) {
    if (v.empty()) throw option_error({field}, fmt::format("{}: the grid needs at least one value", field));
    for (size_t i = 0; i < v.size(); ++i) {
        if (!zero_allowed && v[i] == T{}) throw option_error({field}, fmt::format("{} must be >= 1, got 0", field));
        // a value twice would replay and rank the same configurations twice
        if (std::find(v.begin(), v.begin() + (long) i, v[i]) != v.begin() + (long) i) {
            throw option_error({field}, fmt::format("{} lists a value twice", field));
        }
    }
}

// Every point as its replay would check it, before any runs: a value no replay accepts (-np over 256,
// -c over 2^30, -ub over -b, a quantized V without flash attention) is the user's to fix, not a
// table of refused points. The error names the point's settings.
void check_points(const plan_options & o) {
    for (const plan_config & c : o.points()) {
        const replay_options r = o.replay_of(c);
        try {
            r.validate();
            (void) compute_context_sizes(r.model, r.ctx);
        } catch (const option_error & e) {
            throw option_error(e.fields(), fmt::format("grid point -np {} -c {} -ctk {} -ctv {} -ub {}: {}", c.n_parallel, c.n_ctx,
                                                       ggml_type_name(c.type_k), ggml_type_name(c.type_v), c.n_ubatch, e.what()));
        }
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
    if (find_rate && slo.ttft_s <= 0 && slo.tpot_s <= 0) {
        throw option_error({"find_rate", "slo_ttft_s", "slo_tpot_s"}, "find_rate needs an objective (slo_ttft_s or slo_tpot_s)");
    }
    if (find_rate && base.server.arrivals != arrival_mode::trace) {
        throw option_error({"find_rate", "arrivals"}, "find_rate scales the trace's arrival times, which arrivals saturate ignores");
    }
    if (!(slo_attainment > 0 && slo_attainment <= 1)) {
        throw option_error({"slo_attainment"}, fmt::format("slo_attainment must be in (0, 1], got {}", slo_attainment));
    }
    if (rate_steps < 1 || rate_steps > 20) throw option_error({"rate_steps"}, fmt::format("rate_steps must be in [1, 20], got {}", rate_steps));
    base.validate();
    check_points(*this);
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

namespace {
nlohmann::json grid_json(const plan_grid & g) {
    const auto names = [](const std::vector<ggml_type> & v) {
        std::vector<std::string> n;
        for (ggml_type t : v) n.emplace_back(ggml_type_name(t));
        return n;
    };
    return {{"n_parallel", g.n_parallel}, {"n_ctx", g.n_ctx},         {"type_k", names(g.type_k)},   {"type_v", names(g.type_v)},
            {"kv_unified", g.kv_unified}, {"n_ubatch", g.n_ubatch}, {"cache_ram_mib", g.cache_ram_mib}};
}

nlohmann::json base_json(const replay_options & b) {
    const model_shape & m = b.model;
    const server_params & s = b.server;
    return {{"model", {{"name", m.name}, {"n_layer", m.n_layer}, {"n_head", m.n_head}, {"n_head_kv", m.n_head_kv},
                       {"head_dim", m.head_dim}, {"n_swa", m.n_swa}, {"swa_type", swa_type_name(m.swa)}, {"swa_pattern", m.swa_pattern}}},
            {"context", {{"n_batch", b.ctx.n_batch}, {"flash_attn", b.ctx.flash_attn}, {"swa_full", b.ctx.swa_full}}},
            {"server", {{"arrivals", s.arrivals == arrival_mode::trace ? "trace" : "saturate"}, {"context_shift", s.context_shift},
                        {"n_keep", s.n_keep}, {"n_discard", s.n_discard}, {"cache_prompt", s.cache_prompt},
                        {"slot_prompt_similarity", s.slot_prompt_similarity}, {"cache_idle_slots", s.cache_idle_slots},
                        {"n_ctx_checkpoints", s.n_ctx_checkpoints}, {"checkpoint_min_step", s.checkpoint_min_step}}},
            {"format", b.format},
            {"limit", b.limit},
            {"rate_scale", b.rate_scale},
            {"device_profile", device_profile_json(b.device)}};
}
}  // namespace

plan_grid plan_grid_from_json(const nlohmann::json & g) {
    const auto list = [&](const char * key) -> const nlohmann::json & {
        if (!g.is_object() || !g.contains(key) || !g[key].is_array() || g[key].size() > 100000) {
            throw std::runtime_error(fmt::format("options.grid.{} is missing or not a list", key));
        }
        return g[key];
    };
    const auto types = [&](const char * key) {
        std::vector<ggml_type> v;
        for (const auto & t : list(key)) {
            if (!t.is_string()) throw std::runtime_error(fmt::format("options.grid.{} holds a value that is not a type name", key));
            v.push_back(parse_ggml_type(t.get<std::string>()));
        }
        return v;
    };
    plan_grid r;
    try {
        r.n_parallel = list("n_parallel").get<std::vector<uint32_t>>();
        r.n_ctx = list("n_ctx").get<std::vector<uint32_t>>();
        r.kv_unified = list("kv_unified").get<std::vector<bool>>();
        r.n_ubatch = list("n_ubatch").get<std::vector<uint32_t>>();
        r.cache_ram_mib = list("cache_ram_mib").get<std::vector<int32_t>>();
    } catch (const nlohmann::json::exception & e) {
        throw std::runtime_error(std::string("options.grid: ") + e.what());
    }
    r.type_k = types("type_k");
    r.type_v = types("type_v");
    return r;
}

namespace {
// The trace's bytes and their FNV-1a hash: plan merge compares content, not the path a shard was
// given (the same file by another path is one trace; an edited file is another).
nlohmann::json trace_fingerprint(const std::string & path) {
    std::ifstream in(path, std::ios::binary);
    uint64_t h = 1469598103934665603ull, n = 0;
    char buf[1 << 16];
    while (in.read(buf, sizeof buf) || in.gcount() > 0) {
        for (std::streamsize i = 0; i < in.gcount(); ++i) h = (h ^ (unsigned char) buf[i]) * 1099511628211ull;
        n += (uint64_t) in.gcount();
    }
    return {{"bytes", n}, {"fnv1a", fmt::format("{:016x}", h)}};
}
}  // namespace

plan_header plan_header_of(const plan_options & o) {
    plan_header h;
    h.trace = o.base.trace;
    h.model = o.base.model.name;
    h.weights = o.base.weights ? o.base.weights->name : "f16";
    h.device = o.base.device.name;
    h.device_source = o.base.device.source;
    h.device_accuracy = time_accuracy_note(o.base.device);
    h.memory_bytes = o.memory_bytes;
    h.margin_bytes = o.margin_bytes;
    h.slo = o.slo;
    h.n_points = o.n_points();
    h.shard = o.shard;
    h.options = {{"grid", grid_json(o.grid)}, {"base", base_json(o.base)}, {"trace", trace_fingerprint(o.base.trace)}};
    std::vector<std::string> kv;   // every K/V pair of the grid
    for (const ggml_type tk : o.grid.type_k) {
        for (const ggml_type tv : o.grid.type_v.empty() ? std::vector<ggml_type>{tk} : o.grid.type_v) kv.push_back(kv_types_name(tk, tv));
    }
    h.warnings = profile_warnings(o.base.device, o.base.model, h.weights, kv, o.base.ctx.flash_attn);
    if (o.find_rate) h.options["find_rate"] = {{"slo_attainment", o.slo_attainment}, {"rate_steps", o.rate_steps}};
    return h;
}

int64_t parse_memory_bytes(const std::string & text) {
    const auto bad = [&](const char * why) {
        return std::invalid_argument(fmt::format("memory size '{}': {} (e.g. 24GiB, 24576MiB or a number of bytes)", text, why));
    };
    // digits and one point only: stod also takes hex ("0x10"), "inf" and "nan"
    const size_t digits = text.find_first_not_of("0123456789.");
    if (digits == 0 || text.empty()) throw bad("not a number");
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text.substr(0, digits), &used);
    } catch (const std::exception &) {
        throw bad("not a number");
    }
    if (used != std::min(digits, text.size())) throw bad("not a number");
    std::string unit = text.substr(used);
    for (auto & ch : unit) ch = (char) std::tolower((unsigned char) ch);
    if (unit.size() == 3 && unit.substr(1) == "ib") unit.resize(1);
    int shift = 0;
    if (unit == "k") shift = 10;
    else if (unit == "m") shift = 20;
    else if (unit == "g") shift = 30;
    else if (unit == "t") shift = 40;
    else if (!unit.empty() && unit != "b") throw bad("unknown unit");
    if (shift == 0 && v != std::floor(v)) throw bad("a number of bytes must be whole");
    const double bytes = std::ldexp(v, shift);
    if (!(std::isfinite(bytes) && bytes >= 1)) throw bad("must be at least one byte");
    if (bytes >= 9.2e18) throw bad("too large");
    return (int64_t) bytes;
}

}  // namespace kvsim
