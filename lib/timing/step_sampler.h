// Which ubatches the replay's kernels time, and which timed ones --verify checks. Timing every
// ubatch of a long replay would take longer than the replay itself, and the replay's length is not
// known ahead, so the default is geometric: every ubatch at first, then the interval doubles every
// 64 timed ubatches; --time-every N fixes the interval; --time-budget stops timing once the kernels
// used that much wall time (kernel_options, replay/replay_options.h). No upstream counterpart.
#pragma once

#include "replay/replay_options.h"

#include <cstdint>

namespace kvsim {

// The decision for one ubatch.
struct step_sample {
    bool time = false;     // run and time the kernels of this ubatch
    bool verify = false;   // (time only) check its output against naive attention
};

class step_sampler {
public:
    explicit step_sampler(const kernel_options & o) : o_(o) {}

    // Called once per placed ubatch, in order; spent_ns: kernel wall time so far (ns).
    step_sample next(double spent_ns);
    // True once the kernels used more than --time-budget (never with --time-budget 0).
    bool over_budget(double spent_ns) const { return o_.time_budget_s > 0 && spent_ns > o_.time_budget_s * 1e9; }

    uint64_t seen() const { return n_seen_; }    // ubatches passed to next()
    uint64_t timed() const { return n_timed_; }  // of which timed

private:
    kernel_options o_;
    uint64_t n_seen_ = 0, n_timed_ = 0, next_time_ = 0, every_ = 1;
};

}  // namespace kvsim
