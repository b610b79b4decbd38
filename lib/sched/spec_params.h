// llama-server's speculative decoding with a draft model (--spec-type draft-simple, -md), as far as kvsim models it.
// Source (llama.cpp at the oracles' commit): common/common.h: common_params_speculative(_draft) (defaults);
// common/arg.cpp: --spec-type, --spec-draft-n-max, --spec-draft-n-min, --spec-draft-p-min, --spec-synth-rates,
// --spec-synth-len; common/speculative.cpp: common_speculative_synth_rates_resolve, common_speculative_impl_draft_simple.
#pragma once

#include <cstdint>
#include <vector>

namespace kvsim {

// The acceptance of drafted tokens depends on the two models' outputs; kvsim takes it from llama-server's own
// synthetic acceptance (benchmarking mode): drafted token i of a step is accepted with the unconditional probability
// rates[i] (non-increasing), i.e. with rates[i] / rates[i-1] once the ones before it were, one draw per position from
// the slot's std::mt19937 seeded with the request's seed (server-context.cpp: server_sample_and_accept_synth;
// common/speculative.cpp: common_speculative_init's synth_probs). A recording made without it is replayed by giving
// its acceptance as rates.
struct spec_params {
    bool draft_simple = false;          // --spec-type draft-simple (llama-server's default type is none)
    bool has_draft_model = false;       // -md given (the replay's draft model; set by whoever reads the options)
    int32_t n_max = 3;                  // --spec-draft-n-max: tokens drafted per step
    int32_t n_min = 0;                  // --spec-draft-n-min: a shorter draft is dropped
    double p_min = 0.0;                 // --spec-draft-p-min (a float upstream): kvsim models 0 only (a draft stopped by confidence)
    std::vector<double> synth_rates;    // --spec-synth-rates P0,P1,...
    double synth_len = -1.0;            // --spec-synth-len L; -1 = unset

    // llama-server speculates: a draft-simple type with a draft model (-md alone loads the draft and drops it).
    bool enabled() const { return draft_simple && has_draft_model; }
    bool has_synth() const { return synth_len != -1.0 || !synth_rates.empty(); }
    // Throws option_error naming the flag: n_max < 0; draft-simple without -md; synthetic acceptance without a
    // speculating server, or rates/length that llama-server refuses; speculation without synthetic acceptance (the
    // acceptance kvsim needs) or with p_min > 0 (kvsim does not model the draft model's confidence).
    void validate() const;
    // common_speculative_synth_rates_resolve: per drafted position, the unconditional probability of accepting it.
    std::vector<double> acceptance_rates() const;
    // common_speculative_init's synth_probs: per drafted position, the probability of accepting it once the ones
    // before it were (rates[i] / rates[i-1]; 0 after a rate of 0).
    std::vector<double> acceptance_draws() const;
};

}  // namespace kvsim
