// llama.cpp's RoPE context parameters (llama_context_params: rope_scaling_type, rope_freq_base, rope_freq_scale,
// yarn_*; common/arg.cpp: --rope-scaling, --rope-scale, --rope-freq-base, --rope-freq-scale, --yarn-*). The K-shift's
// rotation reads them (llama-kv-cache.cpp: build_rope_shift with the llama_context's cparams), and custom YaRN
// scaling raises the model's n_ctx_train once a context exists (llama_init_from_model), which llama-server's slot
// cap (server-context.cpp: n_ctx_slot) and --fit's sizing (common/fit.cpp reads it after its probe context) read.
#pragma once

#include <cstdint>
#include <string>

#include "model/model.h"

namespace kvsim {

enum class rope_scaling_type { unspecified, none, linear, yarn };

// "none", "linear", "yarn" (--rope-scaling's values); throws option_error({"rope_scaling"}) for others.
rope_scaling_type parse_rope_scaling(const std::string & s);
// "none", "linear", "yarn" ("unspecified" for the unresolved default).
const char * rope_scaling_name(rope_scaling_type t);

struct rope_scaling {
    rope_scaling_type type = rope_scaling_type::unspecified;  // unspecified: the model's (linear for every preset)
    float freq_base = 0.0f;        // --rope-freq-base; 0 = the model's
    float freq_scale = 0.0f;       // --rope-freq-scale; 0 = the model's
    float rope_scale = 0.0f;       // --rope-scale N: freq_scale = 1/N; 0 = unset
    uint32_t yarn_orig_ctx = 0;    // --yarn-orig-ctx; 0 = the model's (n_ctx_train)
    float yarn_ext_factor = -1.0f; // --yarn-ext-factor; < 0 = 1 for yarn, else 0
    float yarn_attn_factor = -1.0f;
    float yarn_beta_fast = -1.0f;  // < 0: 32
    float yarn_beta_slow = -1.0f;  // < 0: 1

    // Throws option_error naming the fields: a negative or non-finite base or scale, --rope-scale with
    // --rope-freq-scale (both set freq_scale upstream; kvsim refuses to pick one), a non-finite yarn value.
    void validate() const;
};

// The RoPE cparams llama_context::llama_context resolves from the model's trained values and the flags: scaling type
// "none" cancels the frequency scale, yarn_ext_factor 1 for YaRN, yarn_attn_factor through get_mscale and its
// cancellation. The presets' GGUF keys: scaling type linear, no trained scale, n_ctx_orig_yarn = n_ctx_train,
// rope_attn_factor 1, no rope_yarn_log_mul.
struct rope_cparams {
    rope_scaling_type type = rope_scaling_type::linear;
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    uint32_t n_ctx_orig_yarn = 0;
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
};
rope_cparams resolve_rope(const model_shape & m, const rope_scaling & s);

// The model's n_ctx_train once llama_init_from_model made a context with these flags: custom YaRN scaling (type yarn,
// a frequency scale other than the trained one) re-adjusts it to n_ctx_orig_yarn / freq_scale. Throws option_error
// naming the scaling flags when that is outside [1, max_n_ctx_train] (replay_options::validate checks it first).
constexpr uint32_t max_n_ctx_train = 1u << 30;   // kvsim's largest -c
uint32_t n_ctx_train_after_init(const model_shape & m, const rope_scaling & s);

}  // namespace kvsim
