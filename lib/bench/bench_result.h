// kvbench results: per-point timings, the machine and the measured bandwidth limit of a run, their JSON form, and
// the merge of shard outputs (kvbench merge).
#pragma once

#include "bench/sweep_spec.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kvsim {

// Wall-clock statistics of n timed calls, ns. n == 0: not measured.
struct time_stats {
    double min_ns = 0.0;
    double median_ns = 0.0;
    double max_ns = 0.0;
    int n = 0;
};
// Statistics of samples (ns); empty samples give n == 0.
time_stats summarize(std::vector<double> samples);

// One point of a sweep. status "ok", "skipped" (note says why) or "failed" (the kernel's output differed from the
// reference or Eigen by more than the backend's tolerance: no timing of it is kept, note says by how much); a
// skipped baseline leaves its stats at n == 0 with the reason in note.
struct point_result {
    bench_point point;
    std::string status = "ok";
    std::string note;
    size_t kv_bytes = 0;        // K+V bytes one flash-attention call reads (kernels/bytes.h fa_kv_bytes)
    size_t mask_bytes = 0;      // bytes of the f16 KQ mask written by a full build
    size_t kshift_bytes = 0;    // bytes moved by one K-shift (kernels/bytes.h kshift_bytes)
    int copies = 1;             // K/V copies rotated between calls (so >= rotate_bytes cycle through the LLC)
    double limit_read_gbs = 0;  // measured read bandwidth of the run this point came from, GB/s
    time_stats fa, mask_full, mask_update, kshift, eigen, ref;
    // the probe read right after each timed call (CPU backend): median of those passes' GB/s, and median over the
    // calls of (call's GB/s / its pass's GB/s); 0 = not measured (CUDA, or a run written before these existed)
    double adj_read_gbs = 0;
    double adj_frac = 0;
    // compute roof (CPU backend), measured right after each timed call's probe pass: the GB/s one thread reaches
    // on this point's type and head shape with K/V resident in its L2 (the cells from 64 to roof_ctx of one
    // sequence: bytes over the difference of the two call times, so per-call work cancels), times the thread
    // count: the rate the kernel could reach on a long context if memory cost nothing. roof_gbs = median over the
    // timed calls; roof_frac = median over the calls of roof GB/s / that call's probe pass GB/s (< 1: the point is
    // compute-bound here and %adj cannot reach 100). 0 = not measured (CUDA, or a run written before they existed)
    double roof_gbs = 0;
    double roof_frac = 0;
    int64_t roof_ctx = 0;
    double err_vs_eigen = -1;   // max abs difference of the outputs, -1 = not compared
    double err_vs_ref = -1;
    // the first (warm-up) call's output vs the naive reference on stream 0, checked before anything is timed
    // (status "failed" when above the backend's tolerance or NaN; -1 = not checked, a run written before it existed)
    double err_check = -1;

    // Derived from the median time: GB/s = kv_bytes / median_ns; fraction of limit_read_gbs;
    // tokens/s = batch / median seconds (one layer's attention only); baseline time / kernel time (0 = none).
    double gbs() const;
    double gbs_best() const;  // from the min time
    double frac_limit() const;
    double tokens_per_s() const;
    double eigen_ratio() const;
    double ref_ratio() const;
};

// Where and how a run happened (written into kvbench.json).
struct machine_info {
    std::string cpu_model;
    int cores = 0;
    std::string gpu;         // "" = none found
    std::string build_type;
    std::string git_commit;
    std::string date;        // ISO 8601, UTC
    std::string host;
    std::string kernel_path;  // the CPU kernels' instruction set and loops (cpu_backend::path_name), "" = unknown
};
// Read /proc/cpuinfo, std::thread::hardware_concurrency, /proc/driver/nvidia, `git rev-parse --short HEAD`
// (run in the current directory; "unknown" when it fails), the clock and the host name. Never throws.
machine_info collect_machine_info(const std::string & build_type);

// Size of the largest (last-level) CPU cache in bytes from /sys/devices/system/cpu/cpu0/cache (sizes like
// "32768K" or "300M"); 0 when unknown. A VM may report the whole socket's cache.
size_t last_level_cache_bytes();
// Size in bytes of cpu0's largest data or unified cache at `level` (2 = L2, per core on current x86); 0 when unknown.
size_t cpu_cache_bytes(int level);

// The measured limit of one run (kernels/bandwidth.h), GB/s.
struct run_limit {
    int shard = 0;
    std::string host;
    double read_gbs = 0;
    double copy_gbs = 0;
    // CPU probe only, with more than one thread: the same read probe on one thread. read_gbs close to
    // threads x this means the probe is bound by each core's own miss handling, not by the memory system
    // (probe_core_bound). 0 = not measured (CUDA, one thread, or a run written before it existed)
    double read_gbs_one_thread = 0;
};
// True when the run's read probe scaled with its threads (read_gbs >= 0.75 x threads x read_gbs_one_thread): the
// cores, not DRAM, set the limit, so a kernel that also computes on those cores cannot reach it.
bool probe_core_bound(const run_limit & l, int threads);

struct sweep_output {
    sweep_config config;
    machine_info machine;
    std::vector<run_limit> limits;  // one per shard run (one for an unsharded run)
    std::vector<point_result> results;
    std::vector<std::string> notes;
    bool interrupted = false;
};

nlohmann::json to_json(const sweep_output & o);
// Throws std::runtime_error naming the missing/invalid field.
sweep_output sweep_output_from_json(const nlohmann::json & j);

// Join shard outputs into one run (shard 0/1, points sorted by plan index). names[i] labels parts[i] in errors
// (its kvbench.json path; "input i+1" when missing). Throws usage_error naming the input and the value when the
// inputs are empty, describe different sweeps (same_sweep), have different shard counts, repeat or miss a shard,
// hold no points, hold a point that is not the sweep plan's point of the file's shard (index out of range, another
// shard's index, other ctx/type/batch), miss points without being flagged interrupted, or contain the same point
// twice. Interrupted shards are merged and flagged interrupted.
sweep_output merge_outputs(const std::vector<sweep_output> & parts, const std::vector<std::string> & names = {});

}  // namespace kvsim
