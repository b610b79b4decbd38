#include "sched/step_time.h"

#include <algorithm>
#include <fmt/format.h>
#include <stdexcept>

namespace kvsim {

device_profile device_preset(const std::string & name) {
    if (name == "h200") return {"h200", 4800.0, 989.0};
    if (name == "h100") return {"h100", 3350.0, 989.0};
    if (name == "a100") return {"a100", 2039.0, 312.0};
    if (name == "cpu") return {"cpu", 67.0, 0.4};
    throw std::invalid_argument("unknown device '" + name + "' (expected h200, h100, a100, cpu)");
}

static double attn_flops(const model_shape & m, const ubatch_work & w) {
    return 4.0 * w.n_tokens * (double) w.n_kv * m.n_head * m.head_dim * w.n_layer;
}

double step_time_model::attention_seconds(const ubatch_work & w) const {
    const double bytes = (double) w.n_kv * w.n_stream * w.bytes_per_cell_layer * w.n_layer;
    return std::max(bytes / (device.bandwidth_gbs * 1e9), attn_flops(model, w) / (device.peak_tflops * 1e12));
}

double step_time_model::seconds(const std::vector<std::vector<ubatch_work>> & ubatches) const {
    double t = 0;
    for (const auto & per_cache : ubatches) {
        if (per_cache.empty()) continue;
        double bytes = model.n_params * weight_bytes_per_param;
        double flops = 2.0 * model.n_params * per_cache.front().n_tokens;
        double attn_measured = 0;
        for (const auto & w : per_cache) {
            const double kv = (double) w.n_kv * w.n_stream * w.bytes_per_cell_layer * w.n_layer;
            if (measured_s_per_kv_byte > 0) {
                attn_measured += kv * measured_s_per_kv_byte;
            } else {
                bytes += kv;
                flops += attn_flops(model, w);
            }
        }
        t += std::max(bytes / (device.bandwidth_gbs * 1e9), flops / (device.peak_tflops * 1e12)) + attn_measured;
    }
    return t;
}

std::string step_time_model::describe() const {
    if (measured_s_per_kv_byte > 0) {
        return fmt::format("dense part: roofline max(weights {:.2f} GB / {:.0f} GB/s, FLOPs / {:.1f} TFLOP/s) on {}; "
                           "attention part: measured kernel time, {:.3f} ns per K/V KiB read (all layers)",
                           model.n_params * weight_bytes_per_param / 1e9, device.bandwidth_gbs, device.peak_tflops,
                           device.name, measured_s_per_kv_byte * 1e9 * 1024);
    }
    return fmt::format("roofline per ubatch: max((weights {:.2f} GB + K/V read) / {:.0f} GB/s, FLOPs / {:.1f} TFLOP/s) on {}",
                       model.n_params * weight_bytes_per_param / 1e9, device.bandwidth_gbs, device.peak_tflops, device.name);
}

}  // namespace kvsim
