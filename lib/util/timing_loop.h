// The one timing loop (llm.c's benchmark_kernel, dev/cuda/common.h): warm-up calls, then measured repeats, every
// sample kept, a stop flag checked between calls. kvbench's kernel and baseline timings, its compute roof and
// probe passes, and kvsim's --device host probe all go through sample_loop; only the clock differs.
#pragma once

#include <atomic>
#include <functional>
#include <stdexcept>
#include <vector>

namespace kvsim {

// Nanoseconds of one run of `call` (the clock runs it). The host clock suits synchronous calls; the CUDA replay and
// kvbench --backend cuda pass CUDA events around calls that only enqueue (kernels/cuda: cuda_event_timer), so
// launches and synchronisations are not counted.
using call_clock = std::function<double(const std::function<void()> &)>;

// steady_clock around call(), in ns.
double host_clock_ns(const std::function<void()> & call);

// Thrown by sample_loop when its stop flag is raised before a call: the measurement is abandoned.
struct loop_interrupted : std::runtime_error {
    loop_interrupted() : std::runtime_error("timing loop interrupted") {}
};

struct loop_spec {
    int warmup = 1;                             // unmeasured calls first (page faults, caches, lazy set-up)
    int repeats = 1;                            // measured calls after them
    const std::atomic<bool> * stop = nullptr;  // checked before every call, warm-up included; null: never stops
};

// Calls sample(i) for i = 0 .. warmup + repeats - 1, in order; sample runs call i and returns its measurement (a
// time, a bandwidth; warm-up calls are measured the same way). Returns the measurements of the calls after the
// warm-up, repeats of them in call order. after(i, value), when set, runs right after each of those calls, outside
// the measurement. Throws loop_interrupted when *stop is raised before a call; whatever sample or after throws
// passes through.
std::vector<double> sample_loop(const loop_spec & s, const std::function<double(int)> & sample,
                                const std::function<void(int, double)> & after = {});

// sample_loop timing call(i) with `clock` (empty: host_clock_ns): nanoseconds of each measured call.
std::vector<double> time_loop(const loop_spec & s, const std::function<void(int)> & call, const call_clock & clock = {},
                              const std::function<void(int, double)> & after = {});

}  // namespace kvsim
