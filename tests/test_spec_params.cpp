// llama-server's speculative decoding options (lib/sched/spec_params.h): the acceptance rates llama-server resolves
// from --spec-synth-len, and the refusals. The expected rates are llama-server's own, printed by the server oracle's
// recordings of tests/server_golden/spec_*.scn (server.log: "synthetic acceptance: n_max = ..., mean length = ...,
// rates = [...]", llama.cpp de3ff815); the op traces of those scenarios hold the rest of the behaviour.
#include "core/errors.h"
#include "sched/spec_params.h"

#include <algorithm>
#include <doctest/doctest.h>
#include <string>

using namespace kvsim;

namespace {
spec_params speculating() {
    spec_params s;
    s.draft_simple = true;
    s.has_draft_model = true;
    return s;
}
}  // namespace

TEST_CASE("--spec-synth-len resolves to the rates llama-server prints") {
    spec_params s = speculating();
    s.n_max = 5;
    s.synth_len = 2.5;   // spec_synth_len.scn: "n_max = 5, mean length = 2.500000, rates = [0.623501, 0.388753, 0.242388, 0.151129, 0.0942291]"
    const std::vector<double> want = {0.623501, 0.388753, 0.242388, 0.151129, 0.0942291};
    const auto got = s.acceptance_rates();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(2e-6));
    s.synth_len = 6.0;   // n_max + 1: every token
    CHECK(s.acceptance_rates() == std::vector<double>(5, 1.0));
    s.synth_len = 1.0;   // none
    CHECK(s.acceptance_rates() == std::vector<double>(5, 0.0));
}

TEST_CASE("--spec-synth-rates are unconditional: each draw is rate_i / rate_i-1, 0 after a 0") {
    spec_params s = speculating();
    s.n_max = 4;
    s.synth_rates = {1, 1, 0.5, 0.5};   // spec_n_min.scn: the fourth draft token is always accepted after the third
    CHECK(s.acceptance_draws() == std::vector<double>{1, 1, 0.5, 1});
    s.synth_rates = {0.5, 0, 0, 0};
    CHECK(s.acceptance_draws() == std::vector<double>{0.5, 0, 0, 0});
}

TEST_CASE("speculative decoding options llama-server refuses, or kvsim cannot model, are refused naming the field") {
    const auto refused = [](const spec_params & s, const char * field) {
        try {
            s.validate();
        } catch (const option_error & e) {
            CHECK(std::find(e.fields().begin(), e.fields().end(), std::string(field)) != e.fields().end());
            return true;
        }
        return false;
    };
    spec_params s = speculating();
    CHECK(refused(s, "spec_synth_rates"));   // no acceptance given
    s.synth_rates = {0.9, 0.5, 0.2};
    CHECK_NOTHROW(s.validate());
    s.synth_rates = {0.9, 0.5};
    CHECK(refused(s, "spec_synth_rates"));   // not n_max values
    s.synth_rates = {0.5, 0.9, 0.2};
    CHECK(refused(s, "spec_synth_rates"));   // increasing
    s.synth_rates = {1.5, 0.9, 0.2};
    CHECK(refused(s, "spec_synth_rates"));   // outside [0, 1]
    s.synth_rates = {0.9, 0.5, 0.2};
    s.synth_len = 2.0;
    CHECK(refused(s, "spec_synth_len"));   // both
    s.synth_rates.clear();
    s.synth_len = 4.5;
    CHECK(refused(s, "spec_synth_len"));   // above n_max + 1
    s.synth_len = 2.0;
    s.p_min = 0.5;
    CHECK(refused(s, "spec_draft_p_min"));
    s.p_min = 0.0;
    s.n_max = -1;
    CHECK(refused(s, "spec_draft_n_max"));
    s.n_max = 0;
    CHECK(refused(s, "spec_draft_n_max"));   // synthetic acceptance needs a drafted token
    spec_params no_model = speculating();
    no_model.has_draft_model = false;
    CHECK(refused(no_model, "model_draft"));
    spec_params no_type;
    no_type.has_draft_model = true;
    no_type.synth_len = 2.0;
    CHECK(refused(no_type, "spec_type"));   // synthetic acceptance without a speculating server
    no_type.synth_len = -1.0;
    CHECK_NOTHROW(no_type.validate());      // -md alone: loaded and dropped, as llama-server
    CHECK_FALSE(no_type.enabled());
}
