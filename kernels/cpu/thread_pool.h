// Persistent std::thread pool for the CPU kernels: the calling thread plus n_threads-1 workers pull task indices
// from one atomic counter (dynamic scheduling, so uneven split-KV chunks balance out). Workers and the caller spin
// for spin_us before they sleep on a condition variable: a decode step runs its kernels back to back, and waking a
// sleeping thread cost 25-50 us a call on the 2-vCPU test VMs (a futex wake of a halted vCPU), more than a whole
// 256-cell flash-attention call takes. A single task runs on the caller without waking anyone.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvsim {

class thread_pool {
public:
    // n_threads >= 1 (values < 1 are treated as 1).
    explicit thread_pool(int n_threads);
    // How long an idle thread keeps polling for the next call before it sleeps; 0 when the pool has more threads than
    // the process may run at once (a polling thread would then take a core from one that still works).
    static constexpr int spin_us = 200;
    int spin_limit_us() const { return spin_us_; }
    ~thread_pool();
    thread_pool(const thread_pool &) = delete;
    thread_pool & operator=(const thread_pool &) = delete;

    int size() const { return n_threads_; }
    // Run fn(task, thread) for every task in [0, n_tasks), thread in [0, size()); returns when all are done.
    // The first exception thrown by fn is rethrown here (remaining tasks are skipped). Not reentrant.
    void parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)> & fn);

private:
    void stop_workers();
    void worker(int thread);
    void drain(int thread);

    int n_threads_;
    int spin_us_ = 0;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    std::atomic<uint64_t> generation_{0};  // written under mu_, polled without it
    std::atomic<int> busy_{0};             // workers still draining the current call
    std::atomic<bool> stop_{false};
    const std::function<void(int64_t, int)> * fn_ = nullptr;
    int64_t n_tasks_ = 0;
    std::atomic<int64_t> next_{0};
    std::exception_ptr error_;
};

}  // namespace kvsim
