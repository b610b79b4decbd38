#include "bench/sweep_spec.h"
#include "util/host_memory.h"
#include "util/json_read.h"

#include "core/errors.h"

#include <algorithm>
#include <charconv>
#include <sstream>
#include <stdexcept>

namespace kvsim {

namespace {

constexpr size_t max_list = 4096;

// a * b, throwing std::overflow_error instead of wrapping.
size_t mul_checked(size_t a, size_t b, const char * what) {
    size_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) throw std::overflow_error(fmt::format("{}: byte count overflows 64 bits", what));
    return r;
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
                  int64_t max_value, std::vector<int64_t> & out) {
    const int64_t a = parse_positive(option, spec, f[0], max_value);
    const int64_t b = parse_positive(option, spec, f[1], max_value);
    if (a > b) throw input_error(option, 0, spec, fmt::format("range start {} is above its end {}", a, b));
    const std::string & step = f[2];
    if (step.size() < 2 || (step[0] != 'x' && step[0] != '+')) {
        throw input_error(option, 0, spec, fmt::format("step '{}' must be xF (multiply) or +S (add)", step));
    }
    const int64_t s = parse_positive(option, spec, std::string_view(step).substr(1));
    if (step[0] == 'x' && s < 2) throw input_error(option, 0, spec, "a geometric step needs a factor >= 2");
    // the next value is computed without overflow: a step past b (or past INT64_MAX) ends the range
    for (int64_t v = a;;) {
        push_unique(out, v, option, spec);
        int64_t next = 0;
        const bool ovf = step[0] == 'x' ? __builtin_mul_overflow(v, s, &next) : __builtin_add_overflow(v, s, &next);
        if (ovf || next > b) break;
        v = next;
    }
}

}  // namespace

std::vector<int64_t> parse_int_list(const std::string & option, const std::string & spec, int64_t max_value) {
    std::vector<int64_t> out;
    for (const std::string & item : split(spec, ',')) {
        const std::vector<std::string> f = split(item, ':');
        if (f.size() == 1) {
            push_unique(out, parse_positive(option, spec, f[0], max_value), option, spec);
        } else if (f.size() == 3) {
            expand_range(option, spec, f, max_value, out);
        } else {
            throw input_error(option, 0, spec, fmt::format("'{}' is neither a value nor a range a:b:xF / a:b:+S", item));
        }
    }
    if (out.empty()) throw input_error(option, 0, spec, "empty list");
    return out;
}

std::vector<ggml_type> parse_kv_types(const std::string & option, const std::string & spec) {
    std::vector<ggml_type> out;
    for (const std::string & name : split(spec, ',')) {
        ggml_type t;
        try {
            t = parse_ggml_type(name);
        } catch (const std::invalid_argument &) {
            throw input_error(option, 0, name, "unknown KV cache type (kvbench: f32, f16, q8_0, q4_0)");
        }
        if (t != ggml_type::f32 && t != ggml_type::f16 && t != ggml_type::q8_0 && t != ggml_type::q4_0) {
            throw input_error(option, 0, name, "no attention kernel for this type (kvbench: f32, f16, q8_0, q4_0)");
        }
        if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    }
    if (out.empty()) throw input_error(option, 0, spec, "empty list");
    return out;
}

void sweep_config::validate(size_t phys_bytes) const {
    if (ctx.empty() || kv_types.empty() || batch.empty()) throw option_error({"ctx", "kv_types", "batch"}, "empty ctx, kv_types or batch list");
    if (head_dim <= 0 || head_dim % 32 != 0 || head_dim > max_head_dim) {
        throw option_error({"head_dim"}, fmt::format("head_dim {} must be a positive multiple of 32 (the q8_0/q4_0 block and the "
                                                     "kernels' unit), at most {}", head_dim, max_head_dim));
    }
    if (n_head_kv <= 0 || n_head <= 0 || n_head % n_head_kv != 0 || n_head > max_heads) {
        throw option_error({"n_head", "n_head_kv"}, fmt::format("n_head {} must be a positive multiple of n_head_kv {}, at most {}",
                                                                n_head, n_head_kv, max_heads));
    }
    for (int64_t v : ctx) {
        if (v < 1 || v > max_ctx) throw option_error({"ctx"}, fmt::format("ctx {} must be in [1, {}]", v, max_ctx));
    }
    for (int64_t v : batch) {
        if (v < 1 || v > max_batch) {
            throw option_error({"batch"}, fmt::format("batch {} must be in [1, {}] (one sequence per stream, LLAMA_MAX_SEQ)", v, max_batch));
        }
    }
    // The largest point's byte counts must fit in 64 bits: K+V of each type and the f32 copy the Eigen baseline
    // converts to (the largest row), plus the 4-byte shift input per cell. All smaller points then fit too.
    const int64_t ctx_max = *std::max_element(ctx.begin(), ctx.end());
    const int64_t batch_max = *std::max_element(batch.begin(), batch.end());
    try {
        const size_t cells = mul_checked((size_t) ctx_max, (size_t) batch_max, "ctx x batch");
        const size_t f32_row = mul_checked(mul_checked((size_t) head_dim, (size_t) n_head_kv, "row"), sizeof(float), "row");
        const size_t f32_kv = mul_checked(mul_checked(cells, f32_row, "K+V"), 2, "K+V");
        if (f32_kv > SIZE_MAX - mul_checked(cells, 8, "K-shift")) throw std::overflow_error("K-shift: byte count overflows 64 bits");
        for (ggml_type t : kv_types) point_kv_bytes(*this, {0, ctx_max, t, batch_max});
    } catch (const std::overflow_error & e) {
        throw option_error({"ctx", "batch"}, fmt::format("the largest point, ctx {} x batch {}, is too large ({})", ctx_max,
                                                         batch_max, e.what()));
    }
    if (phys_bytes > 0) {
        const size_t budget = memory_budget_bytes(phys_bytes);
        if (limit_bytes > budget / 2) {
            throw option_error({"limit_bytes"}, fmt::format("limit_bytes {} MiB: the bandwidth probe needs 2 x {} MiB, more than 80 % "
                                                            "of the {} MiB of physical memory (at most {} MiB)",
                                                            limit_bytes >> 20, limit_bytes >> 20, phys_bytes >> 20, (budget / 2) >> 20));
        }
        if (max_buffer_bytes > budget) {
            throw option_error({"max_buffer_bytes"}, fmt::format("max_buffer_bytes {} MiB: a point of that K+V size would need more "
                                                                 "than 80 % of the {} MiB of physical memory (at most {} MiB)",
                                                                 max_buffer_bytes >> 20, phys_bytes >> 20, budget >> 20));
        }
    }
    if (threads < 1) throw option_error({"threads"}, fmt::format("threads must be >= 1, got {}", threads));
    // each timed call keeps one sample (a few ns calls of the mask kernel would fill memory at 2^31 repeats)
    if (repeats < 1 || repeats > max_repeats) {
        throw option_error({"repeats"}, fmt::format("repeats must be in [1, {}], got {}", max_repeats, repeats));
    }
    if (shard.index < 0 || shard.index >= shard.count) {
        throw option_error({"shard"}, fmt::format("shard {}/{}: shard index out of range", shard.index, shard.count));
    }
}

std::vector<sweep_point> plan_points(const sweep_config & c) {
    std::vector<sweep_point> out;
    for (int64_t b : c.batch) {
        for (ggml_type t : c.kv_types) {
            for (int64_t n : c.ctx) out.push_back({(int64_t) out.size(), n, t, b});
        }
    }
    return out;
}

std::vector<sweep_point> shard_points(const std::vector<sweep_point> & all, const shard_spec & s) {
    std::vector<sweep_point> out;
    for (const sweep_point & p : all) {
        if (p.index % s.count == s.index) out.push_back(p);
    }
    return out;
}

size_t point_kv_bytes(const sweep_config & c, const sweep_point & p) {
    const size_t cells = mul_checked((size_t) p.batch, (size_t) p.ctx, "K+V");
    const size_t rows = mul_checked(cells, (size_t) c.n_head_kv, "K+V");
    return mul_checked(mul_checked(rows, 2, "K+V"), ggml_row_size(p.type, c.head_dim), "K+V");
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
        const std::string w = "config.";
        c.ctx = json_int_array<int64_t>(j, "ctx", w);
        c.kv_types.clear();
        for (const auto & t : j.at("kv_types")) c.kv_types.push_back(parse_ggml_type(t.get<std::string>()));
        c.batch = json_int_array<int64_t>(j, "batch", w);
        c.model = json_get<std::string>(j, "model", w);
        c.head_dim = json_int<int64_t>(j, "head_dim", w);
        c.n_head = json_int<int64_t>(j, "n_head", w);
        c.n_head_kv = json_int<int64_t>(j, "n_head_kv", w);
        c.rope_neox = json_get<bool>(j, "rope_neox", w);
        c.rope_freq_base = (float) json_get<double>(j, "rope_freq_base", w);
        c.backend = json_get<std::string>(j, "backend", w);
        c.threads = json_int<int>(j, "threads", w);
        c.repeats = json_int<int>(j, "repeats", w);
        c.max_buffer_bytes = json_int<size_t>(j, "max_buffer_bytes", w);
        c.rotate_bytes = json_int<size_t>(j, "rotate_bytes", w);
        c.eigen_max_bytes = json_int<size_t>(j, "eigen_max_bytes", w);
        c.ref_max_cells = json_int<int64_t>(j, "ref_max_cells", w);
        c.limit_bytes = json_int<size_t>(j, "limit_bytes", w);
        c.shard = parse_shard("config.shard", j.at("shard").get<std::string>());
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
