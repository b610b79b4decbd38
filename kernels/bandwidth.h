// STREAM-style memory bandwidth probe (McCalpin's STREAM "Copy", plus a read-only sum), used to express kernel
// bandwidth as a fraction of the machine's measured limit (replay, kvbench).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace kvsim {

// Probe buffers: huge-page aligned, released with std::free.
using float_buffer = std::unique_ptr<float, void (*)(void *)>;

struct bandwidth_result {
    double read_gbs = 0.0;  // bytes read / best time, GB/s (1e9 bytes/s)
    double copy_gbs = 0.0;  // (bytes read + bytes written) / best time, GB/s, STREAM's convention
};

// Measure with buffers of `bytes` each (use >> last-level cache, e.g. 1 GiB; the caches here hold ~32 MiB),
// n_threads threads each owning a contiguous slice, best of n_rep repetitions after one warm-up pass.
// Throws std::invalid_argument when bytes < 4096*n_threads, n_threads < 1 or n_rep < 1. Allocates 2*bytes.
bandwidth_result measure_bandwidth(size_t bytes, int n_threads, int n_rep);

// The read half of measure_bandwidth as single passes on demand: one buffer of `bytes` (first-touched by its
// n_threads threads, as STREAM does), and read_gbs() times one read pass over it (GB/s, no warm-up, no best-of).
// kvbench takes one right after each timed kernel call, so that a kernel's GB/s is compared with the bandwidth
// this host gave in the same second, not minutes earlier (its neighbours move both). Throws std::invalid_argument
// as measure_bandwidth does, std::bad_alloc when the buffer cannot be allocated.
class read_probe {
public:
    read_probe(size_t bytes, int n_threads);
    double read_gbs();

private:
    size_t n_ = 0;  // floats
    int n_threads_ = 1;
    float_buffer a_{nullptr, nullptr};
    std::vector<float> sink_;
};

}  // namespace kvsim
