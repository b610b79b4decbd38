// kvbench sweep timing loops: build one point's K/V caches, mask and query as replay would (deterministic
// kv_content, kv_tensor layout with n_stream = batch), then time the backend's mask build, incremental mask
// update, flash-attention decode and K-shift, plus the dense Eigen and naive reference baselines.
#pragma once

#include <atomic>
#include <functional>

#include "attention.h"
#include "bench/bench_result.h"
#include "cpu/thread_pool.h"

namespace kvsim {

struct sweep_hooks {
    const std::atomic<bool> * stop = nullptr;                // checked between points; set = stop early
    std::function<void(size_t done, size_t total)> progress;  // after each point
};

// Measure read/copy bandwidth with c.limit_bytes buffers and c.threads threads (kernels/bandwidth.h), best of 5.
run_limit measure_run_limit(const sweep_config & c, const std::string & host);

// Time one point. Host-memory buffers: be must be a CPU backend. A point whose K+V exceed c.max_buffer_bytes is
// returned with status "skipped". The Eigen baseline is skipped above c.eigen_max_bytes of f32 K+V, the reference
// above c.ref_max_cells cells (note says so). Throws std::runtime_error when the incremental mask differs from a
// full build (a kernel bug), std::bad_alloc when memory runs out.
point_result bench_point_run(attn_backend & be, thread_pool & pool, const sweep_config & c, const bench_point & p,
                             double read_gbs);

// The whole sweep: limit first, then every point of c's shard in plan order. Returns what was measured; sets
// interrupted when hooks.stop was raised before the last point.
sweep_output run_sweep(attn_backend & be, const sweep_config & c, const machine_info & m, const sweep_hooks & hooks);

}  // namespace kvsim
