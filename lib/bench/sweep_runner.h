// kvbench sweep timing loops: build one point's K/V caches, mask and query as replay would (deterministic
// kv_content, kv_tensor layout with n_stream = batch), then time the backend's mask build, incremental mask
// update, flash-attention decode and K-shift, plus the dense Eigen and naive reference baselines.
#pragma once

#include <atomic>
#include <functional>
#include <vector>

#include "attention.h"
#include "bench/bench_result.h"
#include "cpu/thread_pool.h"
#include "util/timing_loop.h"

namespace kvsim {

struct sweep_hooks {
    const std::atomic<bool> * stop = nullptr;                // checked between points and between timed calls; set = stop early
    std::function<void(size_t done, size_t total)> progress;  // after each point
    // Backend-specific clock and limit (kvbench --backend cuda: CUDA events with an L2 flush, device-to-device
    // copy bandwidth). Unset: host steady_clock around each call (synchronous backends) and the CPU probe.
    call_clock clock;
    std::function<run_limit(const sweep_config &, const std::string & host)> measure_limit;
};

// Largest |a[i] - b[i]| (in double), NaN when any difference is NaN (a NaN output must fail a check; std::max(m,
// NaN) returns m). Throws std::invalid_argument when the sizes differ.
double max_abs_diff(const std::vector<float> & a, const std::vector<float> & b);
// The attention backends' stated tolerance on the max abs output error against ref_flash_attn (|V| < 1 content,
// Q rounded as the backend's fa_q_dot_type): 2e-5 for f32 K and V, 1e-4 for any f16/q8_0/q4_0 K or V
// (kernels/cpu/cpu_backend.h; tests/test_cuda.cpp holds the CUDA backend to the same).
double fa_tolerance(ggml_type tk, ggml_type tv);
// err within [0, fa_tolerance(tk, tv)]: false for NaN and for -1 (not compared).
bool within_tolerance(double err, ggml_type tk, ggml_type tv);

// kvbench's exit status for a finished sweep: 1 when a point failed its output check (point_status::failed), else 0.
int sweep_exit_code(const sweep_output & o);

// Measure read/copy bandwidth with c.limit_bytes buffers and c.threads threads (kernels/bandwidth.h), best of 5;
// with c.threads > 1 also the read on one thread (read_probe, best of 5), for probe_core_bound.
run_limit measure_run_limit(const sweep_config & c, const std::string & host);

// Time one point: every kernel and baseline through the one timing loop (util/timing_loop.h: one warm-up call, then
// c.repeats timed calls; the naive reference at most 3 calls, no warm-up). K/V, Q, mask, output and shifts live in
// the backend's memory (attn_backend::alloc/upload; the CPU backend uses the host buffers directly); baselines read
// the host copies. clock: the backend's kernel clock, empty = host clock (the baselines always use the host clock). A
// point whose K+V exceed c.max_buffer_bytes is returned as point_status::skipped. The Eigen baseline is skipped
// above c.eigen_max_bytes of f32 K+V, the reference above c.ref_max_cells cells (note says so). Validates before it
// times (llm.c's habit): the first (warm-up) call's output of stream 0 is compared with the naive reference
// (err_check) and, after the timing, the whole output with Eigen where it ran; a point beyond fa_tolerance (or NaN)
// is returned as point_status::failed, its note naming the error, and no flash-attention time. Throws
// std::runtime_error when the incremental mask differs from a full build (a kernel bug), std::bad_alloc when memory
// runs out, loop_interrupted when *stop is raised before a call of any of its timing loops.
point_result run_sweep_point(attn_backend & be, thread_pool & pool, const sweep_config & c, const sweep_point & p,
                             double read_gbs, const call_clock & clock = {}, const std::atomic<bool> * stop = nullptr);

// The whole sweep: limit first, then every point of c's shard in plan order. Returns what was measured; sets
// interrupted when hooks.stop was raised before the last point finished (an unfinished point is dropped). A point
// that runs out of memory (std::bad_alloc) is kept as skipped with a note. Throws option_error for a config
// c.validate() refuses, and when the bandwidth probe's buffers (limit_bytes) cannot be allocated.
sweep_output run_sweep(attn_backend & be, const sweep_config & c, const machine_info & m, const sweep_hooks & hooks);

}  // namespace kvsim
