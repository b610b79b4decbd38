// Simulated time of a llama_decode step: a roofline estimate per ubatch from the model shape and
// a device profile (weights + KV bytes over memory bandwidth vs FLOPs over peak compute).
// Measured attention kernel times can replace the attention part (see replace_attention).
#pragma once

#include "model/model.h"

#include <optional>
#include <string>
#include <vector>

namespace kvsim {

struct device_profile {
    std::string name = "h200";
    double bandwidth_gbs = 4800.0;   // HBM bandwidth, GB/s (1e9 bytes/s)
    double peak_tflops = 989.0;      // dense bf16 tensor-core peak, TFLOP/s
};

// h200 (4800 GB/s, 989 TFLOP/s), h100 (SXM: 3350, 989), a100 (80 GB SXM: 2039, 312),
// cpu (this kind of 2-vCPU machine: 67 GB/s measured STREAM read, 0.4 TFLOP/s fp32 AVX-512).
// Vendor datasheet numbers, not measured here. Throws std::invalid_argument for other names.
device_profile device_preset(const std::string & name);

// Work of one ubatch in one cache, as placed.
struct ubatch_work {
    uint32_t n_tokens = 0;
    uint32_t n_kv = 0;        // cells read per stream
    uint32_t n_stream = 1;    // streams the ubatch spans
    uint32_t n_layer = 0;     // layers backed by this cache
    size_t bytes_per_cell_layer = 0;
};

struct step_time_model {
    device_profile device;
    model_shape model;
    double weight_bytes_per_param = 2.0;   // f16/bf16 weights
    // When > 0, the attention part of a ubatch is this many seconds per K/V byte read (fitted
    // from measured kernel times), added to the dense part's roofline, instead of the roofline.
    double measured_s_per_kv_byte = 0;

    // Seconds for one forward pass over the ubatches of one decode call (one entry per cache
    // per ubatch; the weights are read once per ubatch, counted on the first cache's entry).
    // Roofline per ubatch: max(bytes / bandwidth, flops / peak); bytes = weights + K/V read;
    // flops = 2 * n_params * n_tokens + 4 * n_tokens * n_kv * n_head * head_dim per layer.
    double seconds(const std::vector<std::vector<ubatch_work>> & ubatches) const;
    // The attention part alone (K/V bytes over bandwidth vs attention FLOPs over peak).
    double attention_seconds(const ubatch_work & w) const;
    std::string describe() const;
};

}  // namespace kvsim
