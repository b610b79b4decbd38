#include "timing/step_sampler.h"

namespace kvsim {

step_sample step_sampler::next(double spent_ns) {
    ++n_seen_;
    if (over_budget(spent_ns)) return {};
    if (n_seen_ - 1 < next_time_) return {};
    // geometric sampling without knowing the replay's length: every ubatch at first, then the
    // interval doubles every 64 timed steps (an explicit --time-every fixes it)
    if (o_.time_every > 0) {
        every_ = o_.time_every;
    } else if (n_timed_ > 0 && n_timed_ % 64 == 0) {
        every_ *= 2;
    }
    next_time_ = n_seen_ - 1 + every_;
    step_sample s;
    s.time = true;
    s.verify = o_.verify && (o_.verify_every == 0 || n_timed_ % o_.verify_every == 0);
    ++n_timed_;
    return s;
}

}  // namespace kvsim
