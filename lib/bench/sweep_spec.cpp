#include "bench/sweep_spec.h"

#include "util/errors.h"

#include <algorithm>
#include <charconv>
#include <sstream>

namespace kvsim {

namespace {

constexpr size_t max_list = 4096;

int64_t parse_positive(const std::string & option, const std::string & spec, std::string_view s) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
        throw input_error(option, 0, spec, fmt::format("'{}' is not an integer", s));
    }
    if (v <= 0) throw input_error(option, 0, spec, fmt::format("'{}' must be positive", s));
    return v;
}

std::vector<std::string> split(const std::string & s, char sep) {
    if (s.empty()) return {std::string()};
    std::vector<std::string> out;
    std::string item;
    std::istringstream in(s);
    while (std::getline(in, item, sep)) out.push_back(item);
    if (!s.empty() && s.back() == sep) out.emplace_back();
    return out;
}

void push_unique(std::vector<int64_t> & out, int64_t v, const std::string & option, const std::string & spec) {
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    if (out.size() > max_list) throw input_error(option, 0, spec, fmt::format("more than {} values", max_list));
}

void expand_range(const std::string & option, const std::string & spec, const std::vector<std::string> & f,
                  std::vector<int64_t> & out) {
    const int64_t a = parse_positive(option, spec, f[0]);
    const int64_t b = parse_positive(option, spec, f[1]);
    if (a > b) throw input_error(option, 0, spec, fmt::format("range start {} is above its end {}", a, b));
    const std::string & step = f[2];
    if (step.size() < 2 || (step[0] != 'x' && step[0] != '+')) {
        throw input_error(option, 0, spec, fmt::format("step '{}' must be xF (multiply) or +S (add)", step));
    }
    const int64_t s = parse_positive(option, spec, std::string_view(step).substr(1));
    if (step[0] == 'x' && s < 2) throw input_error(option, 0, spec, "a geometric step needs a factor >= 2");
    for (int64_t v = a; v <= b; v = step[0] == 'x' ? v * s : v + s) push_unique(out, v, option, spec);
}

}  // namespace

std::vector<int64_t> parse_int_list(const std::string & option, const std::string & spec) {
    std::vector<int64_t> out;
    for (const std::string & item : split(spec, ',')) {
        const std::vector<std::string> f = split(item, ':');
        if (f.size() == 1) {
            push_unique(out, parse_positive(option, spec, f[0]), option, spec);
        } else if (f.size() == 3) {
            expand_range(option, spec, f, out);
        } else {
            throw input_error(option, 0, spec, fmt::format("'{}' is neither a value nor a range a:b:xF / a:b:+S", item));
        }
    }
    if (out.empty()) throw input_error(option, 0, spec, "empty list");
    return out;
}

std::vector<ggml_type> parse_kv_types(const std::string & spec) {
    std::vector<ggml_type> out;
    for (const std::string & name : split(spec, ',')) {
        ggml_type t;
        try {
            t = parse_ggml_type(name);
        } catch (const std::invalid_argument &) {
            throw input_error("--kv-type", 0, name, "unknown KV cache type (kvbench: f32, f16, q8_0, q4_0)");
        }
        if (t != ggml_type::f32 && t != ggml_type::f16 && t != ggml_type::q8_0 && t != ggml_type::q4_0) {
            throw input_error("--kv-type", 0, name, "no attention kernel for this type (kvbench: f32, f16, q8_0, q4_0)");
        }
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
    if (out.empty()) throw input_error("--kv-type", 0, spec, "empty list");
    return out;
}

shard_spec parse_shard(const std::string & spec) {
    const std::vector<std::string> f = split(spec, '/');
    if (f.size() != 2) throw input_error("--shard", 0, spec, "expected i/n");
    int64_t i = 0;
    const auto [end, ec] = std::from_chars(f[0].data(), f[0].data() + f[0].size(), i);
    if (f[0].empty() || ec != std::errc() || end != f[0].data() + f[0].size()) {
        throw input_error("--shard", 0, spec, "shard index is not an integer");
    }
    const int64_t n = parse_positive("--shard", spec, f[1]);
    if (i < 0 || i >= n) throw input_error("--shard", 0, spec, fmt::format("shard index must be in [0, {})", n));
    return {(int) i, (int) n};
}

void sweep_config::validate() const {
    if (ctx.empty() || kv_types.empty() || batch.empty()) throw input_error("sweep", 0, "", "empty ctx/type/batch list");
    if (head_dim <= 0 || head_dim % 32 != 0) {
        throw input_error("--head-dim", 0, std::to_string(head_dim),
                          "head_dim must be a positive multiple of 32 (the q8_0/q4_0 block and the kernels' unit)");
    }
    if (n_head_kv <= 0 || n_head <= 0 || n_head % n_head_kv != 0) {
        throw input_error("--n-head", 0, fmt::format("{}/{}", n_head, n_head_kv),
                          "n_head must be a positive multiple of n_head_kv");
    }
    if (threads < 1) throw input_error("--threads", 0, std::to_string(threads), "must be >= 1");
    if (repeats < 1) throw input_error("--repeats", 0, std::to_string(repeats), "must be >= 1");
    if (shard.index < 0 || shard.index >= shard.count) {
        throw input_error("--shard", 0, fmt::format("{}/{}", shard.index, shard.count), "shard index out of range");
    }
}

std::vector<bench_point> plan_points(const sweep_config & c) {
    std::vector<bench_point> out;
    for (int64_t b : c.batch) {
        for (ggml_type t : c.kv_types) {
            for (int64_t n : c.ctx) out.push_back({(int64_t) out.size(), n, t, b});
        }
    }
    return out;
}

std::vector<bench_point> shard_points(const std::vector<bench_point> & all, const shard_spec & s) {
    std::vector<bench_point> out;
    for (const bench_point & p : all) {
        if (p.index % s.count == s.index) out.push_back(p);
    }
    return out;
}

size_t point_kv_bytes(const sweep_config & c, const bench_point & p) {
    return (size_t) (p.batch * p.ctx * c.n_head_kv) * 2 * ggml_row_size(p.type, c.head_dim);
}

nlohmann::json config_to_json(const sweep_config & c) {
    std::vector<std::string> types;
    for (ggml_type t : c.kv_types) types.emplace_back(ggml_type_name(t));
    return {{"ctx", c.ctx},
            {"kv_types", types},
            {"batch", c.batch},
            {"model", c.model},
            {"head_dim", c.head_dim},
            {"n_head", c.n_head},
            {"n_head_kv", c.n_head_kv},
            {"rope_neox", c.rope_neox},
            {"rope_freq_base", c.rope_freq_base},
            {"backend", c.backend},
            {"threads", c.threads},
            {"repeats", c.repeats},
            {"max_buffer_bytes", c.max_buffer_bytes},
            {"rotate_bytes", c.rotate_bytes},
            {"eigen_max_bytes", c.eigen_max_bytes},
            {"ref_max_cells", c.ref_max_cells},
            {"limit_bytes", c.limit_bytes},
            {"layout", "n_stream = batch (one sequence per stream)"},
            {"shard", fmt::format("{}/{}", c.shard.index, c.shard.count)}};
}

sweep_config config_from_json(const nlohmann::json & j) {
    sweep_config c;
    try {
        c.ctx = j.at("ctx").get<std::vector<int64_t>>();
        c.kv_types.clear();
        for (const auto & t : j.at("kv_types")) c.kv_types.push_back(parse_ggml_type(t.get<std::string>()));
        c.batch = j.at("batch").get<std::vector<int64_t>>();
        c.model = j.at("model").get<std::string>();
        c.head_dim = j.at("head_dim").get<int64_t>();
        c.n_head = j.at("n_head").get<int64_t>();
        c.n_head_kv = j.at("n_head_kv").get<int64_t>();
        c.rope_neox = j.at("rope_neox").get<bool>();
        c.rope_freq_base = j.at("rope_freq_base").get<float>();
        c.backend = j.at("backend").get<std::string>();
        c.threads = j.at("threads").get<int>();
        c.repeats = j.at("repeats").get<int>();
        c.max_buffer_bytes = j.at("max_buffer_bytes").get<size_t>();
        c.rotate_bytes = j.at("rotate_bytes").get<size_t>();
        c.eigen_max_bytes = j.at("eigen_max_bytes").get<size_t>();
        c.ref_max_cells = j.at("ref_max_cells").get<int64_t>();
        c.limit_bytes = j.at("limit_bytes").get<size_t>();
        c.shard = parse_shard(j.at("shard").get<std::string>());
    } catch (const nlohmann::json::exception & e) {
        throw std::runtime_error(fmt::format("kvbench config: {}", e.what()));
    }
    return c;
}

bool same_sweep(const sweep_config & a, const sweep_config & b) {
    nlohmann::json ja = config_to_json(a), jb = config_to_json(b);
    ja.erase("shard");
    jb.erase("shard");
    return ja == jb;
}

}  // namespace kvsim
