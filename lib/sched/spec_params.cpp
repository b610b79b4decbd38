#include "sched/spec_params.h"

#include "core/errors.h"

#include <cmath>
#include <fmt/format.h>
#include <string>

namespace kvsim {

namespace {
[[noreturn]] void refuse(std::vector<std::string> fields, const std::string & why) { throw option_error(std::move(fields), why); }

void check_rates(const std::vector<double> & r, int32_t n_max) {
    if (r.size() != (size_t) n_max) {
        refuse({"spec_synth_rates", "spec_draft_n_max"}, fmt::format("spec_synth_rates must hold {} values (spec_draft_n_max), got {}", n_max, r.size()));
    }
    for (size_t i = 0; i < r.size(); ++i) {
        if (!std::isfinite(r[i]) || r[i] < 0.0 || r[i] > 1.0) {
            refuse({"spec_synth_rates"}, fmt::format("spec_synth_rates must be finite and within [0, 1], got {}", r[i]));
        }
        if (i > 0 && r[i] > r[i - 1]) {
            refuse({"spec_synth_rates"}, fmt::format("spec_synth_rates must not increase: {} after {}", r[i], r[i - 1]));
        }
    }
}
}  // namespace

void spec_params::validate() const {
    // llama-server allocates n_max acceptance rates and drafts one decode per token: past 2^20 that is memory, not a draft
    if (n_max < 0 || n_max > (1 << 20)) {
        refuse({"spec_draft_n_max"}, fmt::format("spec_draft_n_max must be in [0, 1048576], got {}", n_max));
    }
    if (draft_simple && !has_draft_model) {
        refuse({"spec_type", "model_draft"}, "spec_type draft-simple needs a draft model (model_draft): llama-server fails to "
                              "initialize speculative decoding without one");
    }
    if (has_synth() && !enabled()) {
        refuse({"spec_synth_rates", "spec_synth_len", "model_draft", "spec_type"},
               "synthetic acceptance requires an initialized speculative decoding context (llama-server's words): give "
               "model_draft and spec_type draft-simple");
    }
    if (!enabled()) return;
    if (!has_synth()) {
        refuse({"spec_synth_rates", "spec_synth_len"}, "speculative decoding: which drafted tokens the target accepts depends on the two "
                                     "models' outputs; give the acceptance as llama-server's synthetic acceptance, "
                                     "spec_synth_rates P0,P1,... (one per drafted position) or spec_synth_len L");
    }
    if (p_min != 0.0) {
        refuse({"spec_draft_p_min", "spec_draft_n_max"}, fmt::format("spec_draft_p_min {}: a draft that stops where the draft model is less "
                                                 "confident is not modelled (kvsim drafts spec_draft_n_max tokens, as "
                                                 "llama-server does with the default 0)", p_min));
    }
    (void) acceptance_rates();
}

std::vector<double> spec_params::acceptance_draws() const {
    std::vector<double> p;
    double prev = 1.0;
    for (const double r : acceptance_rates()) {
        p.push_back(prev > 0.0 ? r / prev : 0.0);
        prev = r;
    }
    return p;
}

std::vector<double> spec_params::acceptance_rates() const {
    if (!has_synth()) return {};
    if (synth_len != -1.0 && !synth_rates.empty()) {
        refuse({"spec_synth_len", "spec_synth_rates"}, "spec_synth_len and spec_synth_rates are mutually exclusive");
    }
    if (n_max <= 0) refuse({"spec_draft_n_max"}, "synthetic acceptance requires at least one speculative token (spec_draft_n_max > 0)");
    if (!synth_rates.empty()) {
        check_rates(synth_rates, n_max);
        return synth_rates;
    }
    const double len_max = (double) n_max + 1.0;
    if (!std::isfinite(synth_len) || synth_len < 1.0 || synth_len > len_max) {
        refuse({"spec_synth_len", "spec_draft_n_max"}, fmt::format("spec_synth_len must be finite and within [1, {:.0f}] (spec_draft_n_max + 1), got {}", len_max, synth_len));
    }
    // the per-position rate p, p^2, ... whose expected accepted length is synth_len - 1 (bisection, as upstream)
    double p = 0.0;
    if (synth_len == len_max) {
        p = 1.0;
    } else if (synth_len > 1.0) {
        double lo = 0.0, hi = 1.0;
        for (int i = 0; i < 32; ++i) {
            const double mid = 0.5 * (lo + hi);
            double sum = 0.0, term = mid;
            for (int32_t j = 0; j < n_max; ++j) {
                sum += term;
                term *= mid;
            }
            (sum < synth_len - 1.0 ? lo : hi) = mid;
        }
        p = 0.5 * (lo + hi);
    }
    std::vector<double> rates;
    double rate = p;
    for (int32_t i = 0; i < n_max; ++i) {
        rates.push_back(rate);
        rate *= p;
    }
    return rates;
}

}  // namespace kvsim
