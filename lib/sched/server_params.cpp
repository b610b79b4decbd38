#include "sched/server_params.h"

#include "core/errors.h"

#include <fmt/format.h>

namespace kvsim {

namespace {
// "FIELD must be >= MIN[ (what the low values mean)], got V"
void check_at_least(const char * field, int32_t v, int32_t min, const char * meaning = "") {
    if (v < min) throw option_error({field}, fmt::format("{} must be >= {}{}, got {}", field, min, meaning, v));
}
}  // namespace

void server_params::validate() const {
    check_at_least("n_keep", n_keep, -1, " (-1 = the whole prompt)");
    check_at_least("n_discard", n_discard, 0);
    if (!(slot_prompt_similarity >= 0 && slot_prompt_similarity <= 1)) {   // NaN fails both
        throw option_error({"slot_prompt_similarity"},
                           fmt::format("slot_prompt_similarity must be in [0, 1], got {}", slot_prompt_similarity));
    }
    if (cache_ram_mib < -1) {
        throw option_error({"cache_ram_mib"},
                           fmt::format("cache_ram_mib must be -1 (no limit), 0 (off) or a size in MiB, got {}", cache_ram_mib));
    }
    check_at_least("n_ctx_checkpoints", n_ctx_checkpoints, 0);
    check_at_least("checkpoint_min_step", checkpoint_min_step, 0);
    check_at_least("block_tokens", block_tokens, 1);
    check_at_least("kv_unified_per_slot", kv_unified_per_slot, 0, " (0 = unset)");
    check_at_least("n_cache_reuse", n_cache_reuse, 0, " (0 = off)");
    check_at_least("n_predict", n_predict, -1, " (-1 = no limit)");
    spec.validate();
}

}  // namespace kvsim
