// server_sim's slot and batch-token types, shared by its translation units (server_sim.cpp, server_spec.cpp).
#pragma once

#include "sched/server_sim.h"


namespace kvsim {

// server_slot: slot i owns sequence i.
struct server_sim::slot_t {
    // wait_other: an extra completion (n_cmpl) waiting for its parent slot's prompt (SLOT_STATE_WAIT_OTHER)
    enum class state { idle, started, wait_other, processing_prompt, done_prompt, generating };
    int id = 0;
    state st = state::idle;
    long task = -1;               // result index while processing: the request's, or one of its extra completions
    long req = -1;                // the trace request it serves
    bool parent = false, child = false;   // n_cmpl > 1: the first completion's slot, an extra completion's slot
    bool cancel = false;          // n_cmpl: another completion of its request failed; released at the next iteration
    server_prompt prompt;         // cached tokens and checkpoints
    int64_t t_last_used = -1;
    int32_t n_gen = 0;            // stats.n_gen
    int32_t i_batch = -1;         // batch index of the token whose logits the slot samples
    bool truncated = false;
    int32_t n_restored = 0;       // cells restored from the RAM cache for the task being launched
    int32_t n_predict_max = -1;   // the task's generation limit as the server reads it; -1 = none (n_remaining)
    int32_t n_draft = 0;          // spec_draft.size(): drafted tokens in the batch being decoded
    int32_t spec_i0 = -1;         // spec_i_batch[0]: batch index of its sampled token, the draft after it
    bool processing() const { return st != state::idle; }
};

// One token of the server batch: slot, position, prompt or generated.
struct server_sim::batch_tok {
    int slot;
    llama_pos pos;
    bool prompt;
};

}  // namespace kvsim
