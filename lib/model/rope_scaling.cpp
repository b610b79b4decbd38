#include "model/rope_scaling.h"

#include <cmath>

#include <fmt/format.h>

#include "core/errors.h"

namespace kvsim {

rope_scaling_type parse_rope_scaling(const std::string & s) {
    if (s == "none") return rope_scaling_type::none;
    if (s == "linear") return rope_scaling_type::linear;
    if (s == "yarn") return rope_scaling_type::yarn;
    throw option_error({"rope_scaling"}, fmt::format("rope_scaling must be none, linear or yarn, got '{}'", s));
}

const char * rope_scaling_name(rope_scaling_type t) {
    switch (t) {
        case rope_scaling_type::none: return "none";
        case rope_scaling_type::linear: return "linear";
        case rope_scaling_type::yarn: return "yarn";
        default: return "unspecified";
    }
}

namespace {
void check_unset_or_positive(const char * field, float v, const char * unset) {
    if (!std::isfinite(v) || v < 0) {
        throw option_error({field}, fmt::format("{} must be > 0 ({} = {}), got {}", field, 0, unset, v));
    }
}
void check_finite(const char * field, float v) {
    if (!std::isfinite(v)) throw option_error({field}, fmt::format("{} must be a finite number, got {}", field, v));
}
}  // namespace

void rope_scaling::validate() const {
    check_unset_or_positive("rope_freq_base", freq_base, "the model's");
    check_unset_or_positive("rope_freq_scale", freq_scale, "the model's");
    check_unset_or_positive("rope_scale", rope_scale, "unset");
    if (rope_scale > 0 && !std::isnormal(1.0f / rope_scale)) {
        throw option_error({"rope_scale"}, fmt::format("rope_scale {} gives the frequency scale 1/{} = {}, not a usable number",
                                                       rope_scale, rope_scale, 1.0f / rope_scale));
    }
    if (yarn_orig_ctx > (uint32_t) INT32_MAX) {   // llama.cpp reads it with std::stoi
        throw option_error({"yarn_orig_ctx"}, fmt::format("yarn_orig_ctx must be <= {}, got {}", INT32_MAX, yarn_orig_ctx));
    }
    if (freq_scale > 0 && rope_scale > 0) {
        throw option_error({"rope_scale", "rope_freq_scale"},
                           "rope_scale and rope_freq_scale both set the frequency scale: give one");
    }
    check_finite("yarn_ext_factor", yarn_ext_factor);
    check_finite("yarn_attn_factor", yarn_attn_factor);
    check_finite("yarn_beta_fast", yarn_beta_fast);
    check_finite("yarn_beta_slow", yarn_beta_slow);
}

rope_cparams resolve_rope(const model_shape & m, const rope_scaling & s) {
    rope_cparams c;
    c.freq_base = s.freq_base != 0.0f ? s.freq_base : m.rope_freq_base;
    const float scale = s.rope_scale > 0.0f ? 1.0f / s.rope_scale : s.freq_scale;
    c.freq_scale = scale != 0.0f ? scale : m.rope_freq_scale;
    c.n_ctx_orig_yarn = s.yarn_orig_ctx != 0 ? s.yarn_orig_ctx : m.n_ctx_train;
    c.type = s.type == rope_scaling_type::unspecified ? rope_scaling_type::linear : s.type;
    if (c.type == rope_scaling_type::none) c.freq_scale = 1.0f;  // "never scale if scaling type is none"
    c.ext_factor = s.yarn_ext_factor >= 0.0f ? s.yarn_ext_factor : c.type == rope_scaling_type::yarn ? 1.0f : 0.0f;
    c.attn_factor = s.yarn_attn_factor >= 0.0f ? s.yarn_attn_factor : 1.0f;
    c.beta_fast = s.yarn_beta_fast >= 0.0f ? s.yarn_beta_fast : 32.0f;
    c.beta_slow = s.yarn_beta_slow >= 0.0f ? s.yarn_beta_slow : 1.0f;
    if (c.ext_factor != 0.0f) {
        // get_mscale(factor, 1), then its cancellation (ggml's rope applies the magnitude itself)
        const float factor = 1.0f / c.freq_scale;
        c.attn_factor = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
        c.attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    return c;
}

uint32_t n_ctx_train_after_init(const model_shape & m, const rope_scaling & s) {
    const rope_cparams c = resolve_rope(m, s);
    if (c.type != rope_scaling_type::yarn || c.freq_scale == m.rope_freq_scale) return m.n_ctx_train;
    const float n = (float) c.n_ctx_orig_yarn / c.freq_scale;  // uint32_t / float, stored as uint32_t
    if (!(n >= 1.0f && n <= (float) max_n_ctx_train)) {
        throw option_error({"rope_scale", "rope_freq_scale", "yarn_orig_ctx"},
                           fmt::format("rope_scale (or rope_freq_scale) and yarn_orig_ctx give custom YaRN scaling the training "
                                       "context n_ctx_orig_yarn / freq_scale = {} / {} = {}, outside [1, 2^30]",
                                       c.n_ctx_orig_yarn, c.freq_scale, n));
    }
    return (uint32_t) n;
}

}  // namespace kvsim
