// What `kvsim plan` is told: the workload and what every point shares (a replay's options), the grid
// of llama-server settings it searches, the device's memory and the service-level objectives.
// Checked here, in the library's field names (option_error); the CLI says them in its flags.
#pragma once

#include "core/ggml_type.h"
#include "replay/replay_options.h"
#include "util/shard.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

// One point of the grid: the llama-server settings a plan varies (llama.cpp's spelling in comments).
struct plan_config {
    uint32_t n_parallel = 4;       // -np
    uint32_t n_ctx = 0;            // -c: the whole context, shared by the slots as llama-server shares it
    ggml_type type_k = ggml_type::f16;   // -ctk
    ggml_type type_v = ggml_type::f16;   // -ctv
    bool kv_unified = true;        // -kvu
    uint32_t n_ubatch = 512;       // -ub
    int32_t cache_ram_mib = 8192;  // --cache-ram (-1 = no limit, 0 = off)
    bool operator==(const plan_config & o) const {
        return n_parallel == o.n_parallel && n_ctx == o.n_ctx && type_k == o.type_k && type_v == o.type_v &&
               kv_unified == o.kv_unified && n_ubatch == o.n_ubatch && cache_ram_mib == o.cache_ram_mib;
    }
};

// The values searched per setting; every combination is a point. type_v empty: each point's V type
// is its K type (the usual pairing), not a product with every K type.
struct plan_grid {
    std::vector<uint32_t> n_parallel = {1, 2, 4, 8};
    std::vector<uint32_t> n_ctx = {16384, 32768, 65536, 131072};
    std::vector<ggml_type> type_k = {ggml_type::f16, ggml_type::q8_0};
    std::vector<ggml_type> type_v;
    std::vector<bool> kv_unified = {false, true};
    std::vector<uint32_t> n_ubatch = {512};
    std::vector<int32_t> cache_ram_mib = {8192};
};

// A request meets the objectives when it is done (not truncated or failed) with TTFT <= ttft_s and,
// when it generated 2 tokens or more, TPOT <= tpot_s. 0 = no objective on that time.
struct plan_slo {
    double ttft_s = 0;
    double tpot_s = 0;
};

struct plan_options {
    replay_options base;          // trace, model, weights, device, server: shared by every point
    plan_grid grid;
    plan_slo slo;
    int64_t memory_bytes = 0;     // the device's memory (required: > 0)
    int64_t margin_bytes = int64_t(1024) << 20;   // left free, as llama-server's --fit target (-fitt)
    size_t max_points = 10000;    // a larger grid is refused (a typo such as -np 1-1000 in a list)
    unsigned jobs = 0;            // points replayed at once; 0 = every core
    bool find_rate = false;       // per point: the highest arrival rate it sustains within the objectives
    double slo_attainment = 0.9;  // find_rate: the fraction of requests that must meet the objectives
    int rate_steps = 6;           // find_rate: bisection steps after the bracket (each a replay)
    shard_spec shard;             // run only the points whose grid index % count == index (plan merge joins them)

    // Throws option_error naming the fields: an empty grid value list, a zero n_parallel, n_ctx or
    // n_ubatch, a cache_ram_mib below -1, a negative or non-finite objective, memory_bytes <= 0, a
    // negative margin, more points than max_points, find_rate without an objective, an attainment outside
    // (0, 1] or rate_steps outside [1, 20]; then base.validate()'s.
    void validate() const;
    // The grid's points in a fixed order (n_parallel outermost, then n_ctx, type_k, type_v,
    // kv_unified, n_ubatch, cache_ram_mib).
    std::vector<plan_config> points() const;
    size_t n_points() const;
    // The replay of one point: base with the point's settings.
    replay_options replay_of(const plan_config & c) const;
};

// What a plan's outputs say of it besides its points. `options` holds everything that shapes a point's
// replay (grid lists, model shape, device profile, server and context options): plan merge refuses
// shards whose headers differ in anything but `shard`.
struct plan_header {
    std::string trace, model, weights, device, device_source;
    std::string device_accuracy;   // time_accuracy_note: how far the simulated times are known to be from llama.cpp's
    int64_t memory_bytes = 0, margin_bytes = 0;
    plan_slo slo;
    size_t n_points = 0;   // the whole grid's, every shard's together
    shard_spec shard;
    nlohmann::json options;
    std::vector<std::string> warnings;   // profile_warnings: why the simulated times may not hold
};
plan_header plan_header_of(const plan_options & o);
// plan_header::options["grid"] read back (plan merge); throws std::runtime_error naming the field.
plan_grid plan_grid_from_json(const nlohmann::json & g);

// A memory size as people write it: bytes ("25769803776"), or a number with a binary unit
// ("24GiB", "24G", "24576MiB", "24576M", "1.5T"; K/M/G/T with or without "iB", case-insensitive).
// Throws std::invalid_argument naming the text for anything else, a non-positive size or one past int64.
int64_t parse_memory_bytes(const std::string & text);

}  // namespace kvsim
