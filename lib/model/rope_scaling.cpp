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
    if (freq_scale > 0 && rope_scale > 0) {
        throw option_error({"rope_scale", "rope_freq_scale"},
                           "rope_scale and rope_freq_scale both set the frequency scale: give one");
    }
    check_finite("yarn_ext_factor", yarn_ext_factor);
    check_finite("yarn_attn_factor", yarn_attn_factor);
    check_finite("yarn_beta_fast", yarn_beta_fast);
    check_finite("yarn_beta_slow", yarn_beta_slow);
}

}  // namespace kvsim
