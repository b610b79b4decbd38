#include "replay/replay_options.h"

#include "core/errors.h"
#include "util/host_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvsim {

namespace {
// The model shape after overrides, and the context options that depend on it.
constexpr uint32_t k_max_layers = 512;   // LLAMA_MAX_LAYERS
// 1M elements: 40x the widest released model's n_head x head_dim (128 x 192); the kernels hold a ubatch's Q, 512 rows of
// this many floats (2 GiB): 16M let --n-head 100000 exhaust the memory (killed, hostile pass of session 27)
constexpr uint64_t k_max_row_width = uint64_t(1) << 20;
// llama.cpp's flash-attention kernels go up to 576 (ggml-cuda/fattn.cu, DeepSeek's MLA); --head-dim 100000 was minutes
// of RoPE tables and kernels per ubatch
constexpr uint32_t k_max_head_dim = 4096;

void check_model(const model_shape & m, const context_params & ctx) {
    if (ctx.swa_full && !m.has_swa()) {
        throw option_error({"swa_full", "n_swa"},
                           fmt::format("swa_full: model {} has no sliding-window layers (set n_swa to give it some)", m.name));
    }
    if (m.swa != swa_type::none && m.n_swa == 0) {
        throw option_error({"swa_type", "n_swa"}, fmt::format("swa_type {} needs n_swa > 0", swa_type_name(m.swa)));
    }
    if (m.n_layer == 0 || m.n_head == 0 || m.n_head_kv == 0 || m.head_dim == 0) {
        throw option_error({"n_layer", "n_head", "n_head_kv", "head_dim"}, "n_layer, n_head, n_head_kv and head_dim must be > 0");
    }
    // upstream's per-layer arrays hold LLAMA_MAX_LAYERS (src/llama-hparams.h); a larger count was a multi-minute
    // loop over layers that looked like a hang
    if (m.n_layer > k_max_layers) {
        throw option_error({"n_layer"}, fmt::format("n_layer {} exceeds llama.cpp's LLAMA_MAX_LAYERS {}", m.n_layer, k_max_layers));
    }
    if (m.head_dim > k_max_head_dim) {
        throw option_error({"head_dim"}, fmt::format("head_dim {} exceeds {} (llama.cpp's kernels take up to 576)", m.head_dim, k_max_head_dim));
    }
    // K/V row widths (head_dim x n_head_kv) and the query width are uint32 products in llama.cpp and
    // here: 65536 x 65536 wrapped to 0 and gave a smaller memory for a larger model
    for (const auto & [heads, name] : {std::pair{m.n_head, "n_head"}, std::pair{m.n_head_kv, "n_head_kv"}}) {
        if ((uint64_t) heads * m.head_dim > k_max_row_width) {
            throw option_error({name, "head_dim"}, fmt::format("{} {} x head_dim {} = {} exceeds {} elements per row", name, heads,
                                                               m.head_dim, (uint64_t) heads * m.head_dim, k_max_row_width));
        }
    }
    if (m.n_head % m.n_head_kv != 0) {
        throw option_error({"n_head", "n_head_kv"}, fmt::format("n_head {} is not a multiple of n_head_kv {}", m.n_head, m.n_head_kv));
    }
    if (ctx.n_ubatch > ctx.n_batch) {
        throw option_error({"n_ubatch", "n_batch"},
                           fmt::format("n_ubatch {} > n_batch {}: a ubatch cannot exceed its batch", ctx.n_ubatch, ctx.n_batch));
    }
}

void check_kernels(const kernel_options & k, const model_shape & m) {
    if (k.measured_step_time && k.backend == "none") throw option_error({"measured_step_time", "backend"}, "measured_step_time needs a kernel backend");
    if (k.verify && k.backend == "none") throw option_error({"verify", "backend"}, "verify needs a kernel backend (backend cpu or cuda)");
    if (!(std::isfinite(k.time_budget_s) && k.time_budget_s >= 0)) {
        throw option_error({"time_budget_s"}, fmt::format("time_budget_s must be a finite number of seconds >= 0, got {}", k.time_budget_s));
    }
    if (k.time_layers == 0) throw option_error({"time_layers"}, "time_layers must be >= 1 (layers with real K/V buffers), got 0");
    if (k.time_layers > m.n_layer) {
        throw option_error({"time_layers"}, fmt::format("time_layers {} exceeds the model's {} layers", k.time_layers, m.n_layer));
    }
}

void check_device(const device_profile & d) {
    if (!(d.bandwidth_gbs >= k_min_bandwidth_gbs && d.bandwidth_gbs <= k_max_bandwidth_gbs)) {
        throw option_error({"bandwidth_gbs"}, fmt::format("bandwidth_gbs must be in [{:g}, {:g}], got {}", k_min_bandwidth_gbs,
                                                          k_max_bandwidth_gbs, d.bandwidth_gbs));
    }
    if (!(d.peak_tflops >= k_min_peak_tflops && d.peak_tflops <= k_max_peak_tflops)) {
        throw option_error({"peak_tflops"}, fmt::format("peak_tflops must be in [{:g}, {:g}], got {}", k_min_peak_tflops,
                                                        k_max_peak_tflops, d.peak_tflops));
    }
}
}  // namespace

namespace {
// -md: the draft model's shape, its K/V types on the target's context, and the vocabulary test llama-server makes
// before it speculates (common/speculative.cpp: common_speculative_are_compatible, as far as presets say it).
void check_draft(const replay_options & o) {
    const model_shape & d = *o.draft_model;
    check_model(d, o.ctx);
    if (!o.ctx.flash_attn && ggml_is_quantized(o.type_v_draft)) {
        throw option_error({"type_v_draft", "flash_attn"}, fmt::format("type_v_draft {}: a quantized V cache requires Flash "
                                                                       "Attention (flash_attn on)", ggml_type_name(o.type_v_draft)));
    }
    for (const auto & [field, t] : {std::pair{"type_k_draft", o.type_k_draft}, std::pair{"type_v_draft", o.type_v_draft}}) {
        if (d.head_dim % ggml_blck_size(t) != 0) {
            throw option_error({field}, fmt::format("{} {}: its block size {} does not divide the draft model's head size {}", field,
                                                    ggml_type_name(t), ggml_blck_size(t), d.head_dim));
        }
    }
    if (!o.server.spec.enabled()) return;
    const int64_t dv = (int64_t) o.model.n_vocab - (int64_t) d.n_vocab;
    std::string why;
    if (o.model.add_bos != d.add_bos) {
        why = fmt::format("{} adds a BOS token and {} does not", o.model.add_bos ? o.model.name : d.name, o.model.add_bos ? d.name : o.model.name);
    } else if (o.model.n_vocab && d.n_vocab && std::abs(dv) > 128) {
        why = fmt::format("{} tokens against {}'s {} (more than 128 apart)", d.n_vocab, o.model.name, o.model.n_vocab);
    }
    if (!why.empty()) {
        throw option_error({"model_draft"}, fmt::format("model_draft {}: llama-server refuses to speculate with a draft whose vocabulary does "
                                                        "not match the target's: {}", d.name, why));
    }
}
}  // namespace

void replay_options::validate() const {
    check_model(model, ctx);
    if (!(std::isfinite(rate_scale) && rate_scale > 0)) {
        throw option_error({"rate_scale"}, fmt::format("rate_scale must be a finite number > 0, got {}", rate_scale));
    }
    server.validate();
    if (draft_model) check_draft(*this);
    ctx.rope.validate();
    (void) n_ctx_train_after_init(model, ctx.rope);   // its range
    check_device(device);
    if (fit.n_ctx_min == 0) throw option_error({"fit_ctx"}, "fit_ctx must be > 0 (the smallest context per slot --fit may choose)");
    if (fit.margin < 0) throw option_error({"fit_target"}, fmt::format("fit_target must be >= 0 MiB, got {} bytes", fit.margin));
    if (device_memory < -1) throw option_error({"device_memory"}, fmt::format("device_memory must be >= 0 bytes, got {}", device_memory));
    check_kernels(kernels, model);
    // measured CPU kernel times are this machine's: they may stand for the simulated device only when it is this
    // machine (a CUDA backend's GPU is taken to be the simulated one; docs/time-model.md)
    if (kernels.measured_step_time && kernels.backend == "cpu" && !device.source.starts_with("host")) {
        throw option_error({"measured_step_time", "device"},
                           fmt::format("measured_step_time times attention on this machine's CPU: it needs device host (this machine), "
                                       "not {}", device.name));
    }
}

void check_host_memory(const replay_options & o) {
    const context_sizes s = compute_context_sizes(o.model, o.ctx);
    size_t need = cell_metadata_bytes(s, o.model.has_swa());
    const bool timed = o.kernels.backend != "none";
    if (timed) {
        const size_t per_layer = compute_kv_bytes(o.model, o.ctx, s).total() / std::max<uint32_t>(1, o.model.n_layer);
        need += per_layer * std::max<uint32_t>(1, o.kernels.time_layers) * (o.model.has_swa() ? 2 : 1);
    }
    const size_t have = physical_memory_bytes();
    if (have == 0 || need <= memory_budget_bytes(have)) return;
    // with backend none only the cells remain: n_ctx and n_seq_max are the fix
    throw option_error(timed ? std::vector<std::string>{"n_ctx", "n_seq_max", "time_layers", "backend"}
                             : std::vector<std::string>{"n_ctx", "n_seq_max"},
                       fmt::format("this replay needs about {:.1f} GiB of host memory (cells {} per stream x {} streams{}), "
                                   "more than 80% of the machine's {:.1f} GiB; {}",
                                   (double) need / (1 << 30), s.kv_size, s.n_stream,
                                   timed ? fmt::format(", {} timed layer(s) of K/V", o.kernels.time_layers) : "",
                                   (double) have / (1 << 30),
                                   timed ? "lower n_ctx, n_seq_max or time_layers, or use backend none" : "lower n_ctx or n_seq_max"));
}

}  // namespace kvsim
