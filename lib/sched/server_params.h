// llama-server's options that shape the simulated server (server_sim), and their checks.
#pragma once

#include "sched/spec_params.h"

#include <cstdint>

namespace kvsim {

enum class arrival_mode { trace, saturate };

// llama-server's flags, with its defaults (common/common.h: common_params).
struct server_params {
    arrival_mode arrivals = arrival_mode::trace;
    bool context_shift = false;          // --context-shift (off by default since llama.cpp PR #15416)
    int32_t n_keep = 0;                  // --keep: tokens kept at a shift; -1 = the whole prompt
    int32_t n_discard = 0;               // request n_discard; 0 = n_left / 2
    bool cache_prompt = true;            // request cache_prompt (default true)
    float slot_prompt_similarity = 0.1f; // -sps; 0 disables the similarity pass
    int32_t cache_ram_mib = 8192;        // -cram: host-RAM prompt cache; -1 = no limit, 0 = off
    bool cache_idle_slots = true;        // --cache-idle-slots (needs the RAM cache)
    int32_t n_ctx_checkpoints = 32;      // -ctxcp: checkpoints per slot (SWA models)
    int32_t checkpoint_min_step = 8192;  // -cms: minimum spacing of checkpoints in tokens
    int32_t block_tokens = 512;          // tokens per Mooncake hash_id block
    int32_t kv_unified_per_slot = 0;     // --kv-unified-per-slot: context cap per slot; 0 = unset
    bool cont_batching = true;           // -cb / -nocb: prompts join a batch of generated tokens (else wait for an empty one)
    int32_t n_cache_reuse = 0;           // --cache-reuse: minimum run of cached tokens moved by KV shifting; 0 = off
    int32_t n_predict = -1;              // -n / --predict: the generation limit of requests that send none; -1 = none
    spec_params spec;                    // speculative decoding with a draft model (-md, --spec-*)

    // Throws option_error (core/errors.h), naming the field, for a value server_sim cannot run with:
    // n_keep < -1, n_discard < 0, slot_prompt_similarity outside [0, 1] (or NaN), cache_ram_mib < -1,
    // n_ctx_checkpoints < 0, checkpoint_min_step < 0, block_tokens < 1, kv_unified_per_slot < 0, n_cache_reuse < 0, n_predict < -1; spec.validate()'s.
    void validate() const;
};

}  // namespace kvsim
