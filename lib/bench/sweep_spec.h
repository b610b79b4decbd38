// kvbench sweep configuration: the --ctx/--batch range grammar, KV types, head shape, sharding, and the plan of
// points (ctx, kv type, batch) a run measures. No kernels here; sweep_runner times the points.
#pragma once

#include "core/ggml_type.h"
#include "util/shard.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kvsim {

// Largest --ctx value: cells per sequence are llama_pos (int32) positions.
constexpr int64_t max_ctx = 2147483647;
// Largest --batch value: one sequence per stream, at most LLAMA_MAX_SEQ (256) sequences.
constexpr int64_t max_batch = 256;
// Largest --head-dim and --n-head / --n-head-kv of a custom shape.
constexpr int64_t max_head_dim = 65536;
constexpr int64_t max_heads = 65536;

// Parse a list of positive integers: comma-separated items, each a value ("4096"), a geometric range
// "a:b:xF" (a, a*F, ... <= b, F >= 2) or an arithmetic range "a:b:+S" (a, a+S, ... <= b, S >= 1). Duplicates are
// dropped, order kept. Throws input_error(option, 0, spec, why) for a malformed item, a value <= 0 or above
// max_value, a > b, or a list longer than 4096 values. Range steps never overflow: a range stops at its last value <= b.
std::vector<int64_t> parse_int_list(const std::string & option, const std::string & spec, int64_t max_value = max_ctx);

// Parse comma-separated KV cache types the attention kernels support (f32, f16, q8_0, q4_0).
// Throws input_error(option, 0, name, why) for an unknown or unsupported type.
std::vector<ggml_type> parse_kv_types(const std::string & option, const std::string & spec);

// Everything that defines what a sweep measures. Points run with one sequence per stream: n_stream = batch
// (llama.cpp's default multi-stream layout without -kvu), each stream holding ctx cells of its sequence, the
// decoded token at position ctx-1 (so the causal mask admits every cell).
struct sweep_config {
    std::vector<int64_t> ctx;          // cells attended per stream (n_kv), tokens
    std::vector<ggml_type> kv_types;   // K and V use the same type
    std::vector<int64_t> batch;        // sequences decoding one token each
    std::string model = "llama-3-8b";  // preset name or "custom"
    int64_t head_dim = 128;
    int64_t n_head = 32;
    int64_t n_head_kv = 8;
    bool rope_neox = false;            // K-shift RoPE mode of the model
    float rope_freq_base = 500000.0f;
    std::string backend = "cpu";
    int threads = 2;
    int repeats = 5;                   // timed calls per kernel and point (after one warm-up call)
    static constexpr int max_repeats = 1000000;
    size_t max_buffer_bytes = (size_t) 6 << 30;   // skip points whose K+V (one copy) exceed this
    size_t rotate_bytes = (size_t) 64 << 20;      // K/V copies rotated per call so >= this many bytes cycle (kvbench: >= 2x LLC)
    size_t eigen_max_bytes = (size_t) 2 << 30;    // skip the Eigen baseline when its f32 K+V exceed this
    int64_t ref_max_cells = 4096;                 // skip the naive reference above ctx*batch cells
    size_t limit_bytes = (size_t) 512 << 20;      // buffer size of the bandwidth probe
    shard_spec shard;

    // Throws option_error (core/errors.h), naming the fields, for head_dim not a positive multiple of 32 (or above
    // max_head_dim), n_head not a multiple of n_head_kv (or above max_heads), threads < 1, repeats outside
    // [1, max_repeats], empty lists, ctx above max_ctx, batch above max_batch, a shard index out of range, or a
    // point whose byte counts (K+V of any type, its f32 copy, mask, K-shift) overflow 64 bits. phys_bytes > 0
    // (physical memory): also when the bandwidth probe (2 x limit_bytes) or one point's K+V (max_buffer_bytes)
    // would need more than memory_budget_bytes (util/host_memory.h).
    void validate(size_t phys_bytes = 0) const;
};

// One point of the sweep grid (ctx, KV type, batch); index is its position in the full (unsharded) plan.
struct sweep_point {
    int64_t index = 0;
    int64_t ctx = 0;
    ggml_type type = ggml_type::f16;
    int64_t batch = 1;
};

// All points in plan order (batch, then type, then ctx), then those of c.shard.
std::vector<sweep_point> plan_points(const sweep_config & c);
std::vector<sweep_point> shard_points(const std::vector<sweep_point> & all, const shard_spec & s);

// K+V bytes of one copy of a point's cache: batch * ctx * n_head_kv * 2 * row_size(type, head_dim). Throws
// std::overflow_error instead of wrapping (validate() refuses such sweeps up front).
size_t point_kv_bytes(const sweep_config & c, const sweep_point & p);

// JSON form of the configuration (shard included); config_from_json throws std::runtime_error on a missing field.
nlohmann::json config_to_json(const sweep_config & c);
sweep_config config_from_json(const nlohmann::json & j);
// True when a and b describe the same sweep apart from the shard.
bool same_sweep(const sweep_config & a, const sweep_config & b);

}  // namespace kvsim
