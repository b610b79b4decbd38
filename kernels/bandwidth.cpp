#include "bandwidth.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include <cstdlib>

#include <sys/mman.h>

#include "cpu/cpu_isa.h"
#if KVSIM_X86
#include <immintrin.h>
#endif

namespace kvsim {

namespace {

// Sum of a slice with four independent vector accumulators (one add chain would cap a core below its load rate);
// the result is kept so the compiler cannot drop the loads. Vector bodies per instruction set, chosen at run time
// (cpu/cpu_isa.h): a probe weaker than the kernels it judges would flatter them.
#if KVSIM_X86
// GCC 12 flags the _mm512_undefined_* placeholders inside its own AVX-512 intrinsics (GCC bug 105593).
#if !defined(__clang__)  // GCC's warnings; clang does not know them
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
KVSIM_TARGET_BEGIN("avx512f")
float read_sum_avx512(const float * x, size_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    }
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; ++i) s += x[i];
    return s;
}
KVSIM_TARGET_END

KVSIM_TARGET_BEGIN("avx2")
float read_sum_avx2(const float * x, size_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    alignas(32) float l[8];
    _mm256_store_ps(l, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    float s = l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
    for (; i < n; ++i) s += x[i];
    return s;
}
KVSIM_TARGET_END
#endif

float read_sum(const float * x, size_t n) {
#if KVSIM_X86
    if (cpu::cpu_isa_best() == cpu::cpu_isa::avx512) return read_sum_avx512(x, n);
    if (cpu::cpu_isa_best() == cpu::cpu_isa::avx2) return read_sum_avx2(x, n);
#endif
    float s[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; ++k) s[k] += x[i + k];
    }
    for (; i < n; ++i) s[0] += x[i];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

// n floats, 2 MiB aligned and advised into huge pages (as ggml-fa-bench's STREAM probe: 4 KiB pages would add TLB
// misses to every pass and measure the page walker, not memory). Throws std::bad_alloc.
float_buffer probe_alloc(size_t n) {
    constexpr size_t huge = (size_t) 2 << 20;
    const size_t bytes = (n * sizeof(float) + huge - 1) / huge * huge;
    float * p = static_cast<float *>(std::aligned_alloc(huge, bytes));
    if (!p) throw std::bad_alloc();
    madvise(p, bytes, MADV_HUGEPAGE);
    return float_buffer(p, &std::free);
}

// Wall time in seconds of running body(thread, lo, hi) over n_threads slices of n floats, one thread per slice.
template <typename F>
double time_pass(size_t n, int n_threads, F body) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    try {
        for (int t = 0; t < n_threads; ++t) {
            th.emplace_back([&, t] { body(t, n * t / n_threads, n * (t + 1) / n_threads); });
        }
    } catch (...) {   // no thread (ulimit -v, -u): join the started ones, or ~thread calls std::terminate
        for (auto & x : th) x.join();
        throw;
    }
    for (auto & x : th) x.join();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Best of n_rep passes after a warm-up pass (page faults, caches).
template <typename F>
double best_time(size_t n, int n_threads, int n_rep, F body) {
    double best = 1e30;
    for (int rep = 0; rep <= n_rep; ++rep) {
        const double dt = time_pass(n, n_threads, body);
        if (rep > 0) best = std::min(best, dt);
    }
    return best;
}

}  // namespace

bandwidth_result measure_bandwidth(size_t bytes, int n_threads, int n_rep) {
    if (n_threads < 1 || n_rep < 1 || bytes < 4096 * (size_t) n_threads) {
        throw std::invalid_argument("measure_bandwidth: need n_threads >= 1, n_rep >= 1, bytes >= 4096 per thread");
    }
    const size_t n = bytes / sizeof(float);
    float_buffer a = probe_alloc(n), b = probe_alloc(n);
    std::vector<float> sink((size_t) n_threads);
    // first touch by the owning thread, as STREAM does, so pages land near it
    best_time(n, n_threads, 1, [&](int, size_t lo, size_t hi) {
        std::fill(a.get() + lo, a.get() + hi, 1.0f);
        std::fill(b.get() + lo, b.get() + hi, 0.0f);
    });
    bandwidth_result r;
    const double t_read = best_time(n, n_threads, n_rep, [&](int t, size_t lo, size_t hi) { sink[(size_t) t] += read_sum(a.get() + lo, hi - lo); });
    const double t_copy = best_time(n, n_threads, n_rep, [&](int, size_t lo, size_t hi) {
        std::memcpy(b.get() + lo, a.get() + lo, (hi - lo) * sizeof(float));
    });
    r.read_gbs = (double) (n * sizeof(float)) / t_read * 1e-9;
    r.copy_gbs = 2.0 * (double) (n * sizeof(float)) / t_copy * 1e-9;
    if (sink[0] < 0.0f) r.read_gbs = -r.read_gbs;  // never true (sums of ones); keeps the reads observable
    return r;
}

read_probe::read_probe(size_t bytes, int n_threads) : n_(bytes / sizeof(float)), n_threads_(n_threads) {
    if (n_threads < 1 || bytes < 4096 * (size_t) n_threads) {
        throw std::invalid_argument("read_probe: need n_threads >= 1, bytes >= 4096 per thread");
    }
    a_ = probe_alloc(n_);
    sink_.assign((size_t) n_threads, 0.0f);
    float * a = a_.get();
    time_pass(n_, n_threads, [&](int, size_t lo, size_t hi) { std::fill(a + lo, a + hi, 1.0f); });
}

double read_probe::read_gbs() {
    const float * a = a_.get();
    const double t = time_pass(n_, n_threads_, [&](int i, size_t lo, size_t hi) { sink_[(size_t) i] += read_sum(a + lo, hi - lo); });
    const double gbs = (double) (n_ * sizeof(float)) / t * 1e-9;
    return sink_[0] < 0.0f ? -gbs : gbs;  // never negative (sums of ones); keeps the reads observable
}

}  // namespace kvsim
