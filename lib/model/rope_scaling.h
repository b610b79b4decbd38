// llama.cpp's RoPE context parameters (llama_context_params: rope_scaling_type, rope_freq_base, rope_freq_scale,
// yarn_*; common/arg.cpp: --rope-scaling, --rope-scale, --rope-freq-base, --rope-freq-scale, --yarn-*). They change
// no cell, position or slot cap: llama-server caps a slot at the model's n_ctx_train whatever the scaling
// (server-context.cpp: n_ctx_slot, llama_model_n_ctx_train), so only the K-shift's rotation reads them
// (llama-kv-cache.cpp: build_rope_shift with the llama_context's cparams).
#pragma once

#include <cstdint>
#include <string>

namespace kvsim {

enum class rope_scaling_type { unspecified, none, linear, yarn };

// "none", "linear", "yarn" (--rope-scaling's values); throws option_error({"rope_scaling"}) for others.
rope_scaling_type parse_rope_scaling(const std::string & s);

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

}  // namespace kvsim
