#include "util/timing_loop.h"

#include <algorithm>
#include <chrono>

namespace kvsim {

double host_clock_ns(const std::function<void()> & call) {
    const auto t0 = std::chrono::steady_clock::now();
    call();
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<double> sample_loop(const loop_spec & s, const std::function<double(int)> & sample,
                                const std::function<void(int, double)> & after) {
    std::vector<double> kept;
    kept.reserve((size_t) std::max(0, s.repeats));
    for (int i = 0; i < s.warmup + s.repeats; ++i) {
        if (s.stop && s.stop->load()) throw loop_interrupted();
        const double v = sample(i);
        if (i < s.warmup) continue;
        kept.push_back(v);
        if (after) after(i, v);
    }
    return kept;
}

std::vector<double> time_loop(const loop_spec & s, const std::function<void(int)> & call, const call_clock & clock,
                              const std::function<void(int, double)> & after) {
    const call_clock & c = clock ? clock : call_clock(host_clock_ns);
    return sample_loop(s, [&](int i) { return c([&] { call(i); }); }, after);
}

}  // namespace kvsim
