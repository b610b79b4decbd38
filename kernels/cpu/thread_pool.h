// Persistent std::thread pool for the CPU kernels: the calling thread plus n_threads-1 workers pull task indices
// from one atomic counter (dynamic scheduling, so uneven split-KV chunks balance out).
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
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_start_, cv_done_;
    uint64_t generation_ = 0;
    int busy_ = 0;
    bool stop_ = false;
    const std::function<void(int64_t, int)> * fn_ = nullptr;
    int64_t n_tasks_ = 0;
    std::atomic<int64_t> next_{0};
    std::exception_ptr error_;
};

}  // namespace kvsim
