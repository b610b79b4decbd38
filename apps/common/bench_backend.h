// Backend factory of kvbench: the one place that knows which attention backends this binary was built with.
#pragma once

#include <memory>
#include <string>

#include "attention.h"
#include "bench/sweep_runner.h"

namespace kvsim {

// An attention backend with the clock and limit probe that suit it (sweep_hooks::clock / measure_limit).
struct bench_backend {
    std::unique_ptr<attn_backend> be;
    call_clock clock;                                                                       // empty: host clock
    std::function<run_limit(const sweep_config &, const std::string & host)> measure_limit;  // empty: CPU probe
    std::string device;                                                                     // GPU name, "" on CPU
};

// "cpu" -> cpu_backend(n_threads), host clock, STREAM-style CPU probe.
// "cuda" -> the asynchronous CUDA backend on device 0, its calls timed with CUDA events after an L2 flush
// (cuda_event_timer as the one timing loop's clock), limit = device-to-device copy bandwidth (c.limit_bytes, 10 repeats,
// bytes read + written per second: issue 8 states its goals against it).
// Throws usage_error when this binary has no CUDA backend (built without KVSIM_HAVE_CUDA) or no usable CUDA
// device exists (with the runtime's reason); anything else: usage_error listing the choices.
bench_backend make_bench_backend(const std::string & name, int n_threads);

}  // namespace kvsim
