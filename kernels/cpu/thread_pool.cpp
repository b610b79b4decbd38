#include "cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>
#if defined(__linux__)
#include <sched.h>
#endif
#include <string>
#include <system_error>

namespace kvsim {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

// CPUs this process may run on (its affinity mask; hardware_concurrency where that is unknown).
int usable_cpus() {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
#endif
    return (int) std::max(1u, std::thread::hardware_concurrency());
}

// Polls done() for up to us microseconds; true when it became true. The clock is read every 64 polls.
template <class F>
bool spin_until(int us, F && done) {
    if (us <= 0) return done();
    const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (done()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() >= end) return done();
    }
}

}  // namespace

thread_pool::thread_pool(int n_threads)
    : n_threads_(n_threads < 1 ? 1 : n_threads), spin_us_(n_threads_ <= usable_cpus() ? spin_us : 0) {
    try {
        for (int t = 1; t < n_threads_; ++t) workers_.emplace_back([this, t] { worker(t); });
    } catch (const std::system_error & e) {
        // the system refused a thread (limits reached): stop the ones started, then report
        stop_workers();
        throw std::runtime_error(std::string("cannot start ") + std::to_string(n_threads_) + " kernel threads: " + e.what());
    }
}

void thread_pool::stop_workers() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_start_.notify_all();
    for (auto & w : workers_) w.join();
    workers_.clear();
}

thread_pool::~thread_pool() { stop_workers(); }

void thread_pool::drain(int thread) {
    for (;;) {
        const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= n_tasks_) return;
        try {
            (*fn_)(i, thread);
        } catch (...) {
            std::lock_guard<std::mutex> lk(mu_);
            if (!error_) error_ = std::current_exception();
            next_.store(n_tasks_, std::memory_order_relaxed);
        }
    }
}

void thread_pool::worker(int thread) {
    uint64_t seen = 0;
    for (;;) {
        spin_until(spin_us_, [&] { return stop_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_acquire) != seen; });
        {
            // the call's fields were written under mu_: take it once, whether the spin saw the call or not
            std::unique_lock<std::mutex> lk(mu_);
            cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        drain(thread);
        if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            // under mu_, so the caller is either before its predicate check or asleep in wait, never in between
            std::lock_guard<std::mutex> lk(mu_);
            cv_done_.notify_one();
        }
    }
}

void thread_pool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)> & fn) {
    if (n_tasks <= 0) return;
    if (n_tasks == 1 || workers_.empty()) {
        // nothing to share: the caller runs it (the first exception propagates as from the pool)
        for (int64_t i = 0; i < n_tasks; ++i) fn(i, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        fn_ = &fn;
        n_tasks_ = n_tasks;
        next_.store(0, std::memory_order_relaxed);
        error_ = nullptr;
        busy_.store((int) workers_.size(), std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    cv_start_.notify_all();
    drain(0);
    spin_until(spin_us_, [&] { return busy_.load(std::memory_order_acquire) == 0; });
    std::unique_lock<std::mutex> lk(mu_);
    cv_done_.wait(lk, [&] { return busy_ == 0; });
    fn_ = nullptr;
    if (error_) std::rethrow_exception(error_);
}

}  // namespace kvsim
